import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { embeddedTopicPublisher } from '../../local/bus/embedded-bus';
import { EVENTS_TOPIC, type NewEvent } from '../../shared/platform/bus/events';
import { appendToOutbox, type OutboxTables } from '../../shared/platform/bus/outbox';
import { claimPending, pendingSummary } from '../../shared/platform/bus/outbox-relay.repository';
import { relayOutbox } from '../../shared/platform/bus/outbox-relay.service';
import { readTopic } from '../../local/bus/topic.repository';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

type Db = Kysely<OutboxTables & BusTables>;

function leaseExpired(n: number): NewEvent {
  return { type: 'LeaseExpired', subject: `leases/${n}`, correlationId: `lease-${n}`, tenant: 't1', data: { n } };
}

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`outbox relay on ${dialect}`, () => {
    let database: TestDatabase;
    let db: Db;
    const clock = new ManualClock('2026-11-30T09:00:00Z');

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = database.store.db as Db;
    });
    afterAll(async () => {
      await database?.drop();
    });

    async function topicEvents(): Promise<{ messageId: string; n: unknown }[]> {
      const messages = await readTopic(db, dialect, EVENTS_TOPIC, { limit: 1000 });
      return messages.map((m) => ({ messageId: m.messageId, n: (JSON.parse(m.body) as { data: { n: unknown } }).data.n }));
    }

    it('when the relay runs, then each pending event is published once, in outbox order, with its message properties', async () => {
      const before = (await topicEvents()).length;
      const written = await appendToOutbox(db, [1, 2, 3].map(leaseExpired), clock, randomIds);
      const publisher = embeddedTopicPublisher(db, dialect, clock);

      const first = await relayOutbox(db, publisher, { dialect, clock, ids: randomIds, batchSize: 2 });
      const second = await relayOutbox(db, publisher, { dialect, clock, ids: randomIds });

      expect(first).toEqual({ published: 3 });
      expect(second).toEqual({ published: 0 });
      const published = (await readTopic(db, dialect, EVENTS_TOPIC, { limit: 1000 })).slice(before);
      expect(published.map((m) => m.messageId)).toEqual(written.map((e) => e.id));
      expect(published[0]).toMatchObject({
        correlationId: 'lease-1',
        contentType: 'application/json',
        subject: 'leases/1',
        applicationProperties: { type: 'LeaseExpired', tenant: 't1' },
      });
      expect(JSON.parse(published[0]?.body ?? '{}')).toEqual(written[0]);
      expect((await pendingSummary(db)).count).toBe(0);
    });

    it('when two relays run at once (on separate connections where the store has them), then every event is published exactly once and each stream in order', async () => {
      const before = (await topicEvents()).length;
      // Six streams (leases), interleaved in the outbox: the order claimed is per stream (outbox.ts, PUBLISH ORDER).
      const inStream = (n: number): NewEvent => ({ ...leaseExpired(n), correlationId: `lease-stream-${n % 6}` });
      for (let batch = 0; batch < 6; batch++) {
        await appendToOutbox(db, Array.from({ length: 20 }, (_, i) => inStream(batch * 20 + i)), clock, randomIds);
      }
      // On SQLite both share the one connection a process has: a second one would wait for the first's write lock
      // synchronously, blocking the event loop the first needs to finish (hosts in other processes wait, then go on).
      const other = dialect === 'sqlite' ? { db: database.store.db, close: () => Promise.resolve() } : database.connectAgain();
      const published: string[] = [];
      // A publisher that records every message handed to the bus, so a double publish cannot hide behind dedupe.
      const recording = (inner: EventPublisher): EventPublisher => ({
        ...inner,
        name: 'recording',
        async publish(topic, messages) {
          published.push(...messages.map((m) => m.messageId));
          await inner.publish(topic, messages);
        },
      });
      try {
        const relayA = recording(embeddedTopicPublisher(db, dialect, clock));
        const relayB = recording(embeddedTopicPublisher(other.db as Db, dialect, clock));
        const runs = async (publisher: EventPublisher, store: Db) => {
          for (let i = 0; i < 8; i++) await relayOutbox(store, publisher, { dialect, clock, ids: randomIds, batchSize: 15 });
        };

        await Promise.all([runs(relayA, db), runs(relayB, other.db as Db)]);

        const events = (await topicEvents()).slice(before).map((e) => Number(e.n));
        expect([...events].sort((a, b) => a - b)).toEqual(Array.from({ length: 120 }, (_, i) => i));
        for (let stream = 0; stream < 6; stream++) {
          const ofStream = events.filter((n) => n % 6 === stream);
          expect(ofStream).toEqual([...ofStream].sort((a, b) => a - b));
        }
        expect(published).toHaveLength(120);
        expect(new Set(published).size).toBe(120);
      } finally {
        await other.close();
      }
    });

    it('when a relay dies holding a claim, then another takes the events over after the lease and the topic keeps each once', async () => {
      const before = (await topicEvents()).length;
      const written = await appendToOutbox(db, [leaseExpired(900), leaseExpired(901)], clock, randomIds);
      const publisher = embeddedTopicPublisher(db, dialect, clock);
      // The dead relay claimed both and got the first onto the bus before it died.
      const claimed = await claimPending(db, { dialect, claimToken: 'dead-relay', now: clock.now().getTime(), leaseMs: 30_000, batchSize: 10 });
      expect(claimed.map((e) => e.eventId)).toEqual(written.map((e) => e.id));
      await publisher.publish(EVENTS_TOPIC, [{ messageId: written[0]?.id ?? '', body: JSON.stringify(written[0]), contentType: 'application/json' }]);

      const during = await relayOutbox(db, publisher, { dialect, clock, ids: randomIds });
      clock.advance(30_001);
      const after = await relayOutbox(db, publisher, { dialect, clock, ids: randomIds });

      expect(during).toEqual({ published: 0 });
      expect(after).toEqual({ published: 2 });
      expect((await topicEvents()).slice(before).map((e) => e.messageId)).toEqual(written.map((e) => e.id));
    });
  });
}
