import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { listActive } from '../../local/bus/queue.repository';
import { appendToTopic, ensureSubscription, subscriptionEntity } from '../../local/bus/topic.repository';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

/** Subscriptions of the embedded topic: each is a queue of its own that gets a copy of every message published after it exists. */
for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`embedded topic subscriptions on ${dialect}`, () => {
    let database: TestDatabase;
    let db: Kysely<BusTables>;
    const clock = new ManualClock('2026-12-01T08:00:00Z');
    const now = () => clock.now().getTime();
    const message = (id: string) => ({ messageId: id, body: JSON.stringify({ id }), contentType: 'application/json', applicationProperties: { type: 'PoolResizeRequested' } });
    const bodiesIn = async (entity: string) => (await listActive(db, dialect, entity, { limit: 100 })).map((m) => m.messageId);

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = database.store.db as Kysely<BusTables>;
    });
    afterAll(async () => {
      await database?.drop();
    });

    it('when messages are published, then every subscription of the topic gets each new one once, from its creation on', async () => {
      // Arrange
      await appendToTopic(db, dialect, 'events', [message('before')], now());
      await ensureSubscription(db, dialect, 'events', 'provisioning', now());
      await ensureSubscription(db, dialect, 'events', 'provisioning', now());
      await ensureSubscription(db, dialect, 'events', 'audit', now());
      await ensureSubscription(db, dialect, 'other-topic', 'provisioning', now());

      // Act
      const added = await appendToTopic(db, dialect, 'events', [message('m1'), message('m2')], now());
      const republished = await appendToTopic(db, dialect, 'events', [message('m2')], now());

      // Assert
      expect(added).toBe(2);
      expect(republished).toBe(0);
      expect(await bodiesIn(subscriptionEntity('events', 'provisioning'))).toEqual(['m1', 'm2']);
      expect(await bodiesIn(subscriptionEntity('events', 'audit'))).toEqual(['m1', 'm2']);
      expect(await bodiesIn(subscriptionEntity('other-topic', 'provisioning'))).toEqual([]);
      expect(subscriptionEntity('events', 'provisioning')).toBe('events/Subscriptions/provisioning');
    });

    it("when events are published to the events topic, then each of the host's subscriptions gets only the types its filter passes, as in Azure", async () => {
      // Arrange
      for (const subscription of ['inventory', 'provisioning', 'audit']) await ensureSubscription(db, dialect, EVENTS_TOPIC, subscription, now());
      const event = (id: string, type: string) => ({ ...message(id), applicationProperties: { type } });

      // Act
      await appendToTopic(db, dialect, EVENTS_TOPIC, [event('e1', 'SpecificationApplied'), event('e2', 'RunnerJobDispatched'), event('e3', 'PoolResizeRequested'), { ...message('e4'), applicationProperties: {} }], now());

      // Assert
      expect(await bodiesIn(subscriptionEntity(EVENTS_TOPIC, 'inventory'))).toEqual(['e1']);
      expect(await bodiesIn(subscriptionEntity(EVENTS_TOPIC, 'provisioning'))).toEqual(['e3']);
      // A subscription with no filter of the host's passes everything ($Default).
      expect(await bodiesIn(subscriptionEntity(EVENTS_TOPIC, 'audit'))).toEqual(['e1', 'e2', 'e3', 'e4']);
    });
  });
}
