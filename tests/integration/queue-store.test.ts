import type { Kysely } from 'kysely';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { inboxLag, markInboundProcessed, recordInbound } from '../../shared/platform/bus/inbox.repository';
import { MAX_DELIVERY_COUNT_EXCEEDED, PROMOTIONS_QUEUE, type OutgoingMessage } from '../../shared/platform/bus/queue';
import {
  abandon,
  complete,
  enqueue,
  listActive,
  listDeadLettered,
  oldestActive,
  receive,
  release,
  renewLock,
} from '../../local/bus/queue.repository';
import type { SqlStore } from '../../shared/platform/sql/database';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

const WINDOW = 10 * 60_000;
const LOCK = 30_000;

function aMessage(overrides: Partial<OutgoingMessage> = {}): OutgoingMessage {
  return {
    messageId: `msg_${randomUUID()}`,
    body: JSON.stringify({ promotionId: 'p1' }),
    contentType: 'application/json',
    correlationId: 'corr-1',
    applicationProperties: { type: 'PromotionApproved', attempt: 1 },
    ...overrides,
  };
}

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`embedded queue store on ${dialect}`, () => {
    let database: TestDatabase;
    let db: Kysely<BusTables>;
    const clock = new ManualClock('2026-11-30T08:00:00Z');
    const now = () => clock.now().getTime();
    const receiveOptions = (max = 10, maxDeliveryCount = 10) => ({
      now: now(),
      max,
      lockDurationMs: LOCK,
      maxDeliveryCount,
      newLockToken: randomUUID,
    });
    let queueCounter = 0;
    const aQueue = () => `q-${dialect}-${++queueCounter}`;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = database.store.db as Kysely<BusTables>;
    });
    afterAll(async () => {
      await database?.drop();
    });

    it('when a message is enqueued and received, then it is locked with delivery count 1 and its properties kept', async () => {
      const queue = aQueue();
      const message = aMessage();
      const enqueued = await enqueue(db, dialect, queue, message, { now: now(), duplicateDetectionWindowMs: WINDOW });
      expect(enqueued.kind).toBe('enqueued');

      const [received, ...more] = await receive(db, dialect, queue, receiveOptions());

      expect(more).toEqual([]);
      expect(received).toMatchObject({
        messageId: message.messageId,
        body: message.body,
        correlationId: 'corr-1',
        applicationProperties: { type: 'PromotionApproved', attempt: 1 },
        deliveryCount: 1,
        enqueuedAt: clock.now(),
        lockedUntil: new Date(now() + LOCK),
      });
      expect(received?.lockToken).toMatch(/^[0-9a-f-]{36}$/);
      expect(await receive(db, dialect, queue, receiveOptions())).toEqual([]);
    });

    it('when a message is completed, then it is gone; completing with a stale lock token fails', async () => {
      const queue = aQueue();
      await enqueue(db, dialect, queue, aMessage(), { now: now(), duplicateDetectionWindowMs: WINDOW });
      const [received] = await receive(db, dialect, queue, receiveOptions());
      if (!received) throw new Error('nothing received');

      expect(await complete(db, { ...received, lockToken: randomUUID() })).toBe(false);
      expect(await complete(db, received)).toBe(true);
      expect(await listActive(db, dialect, queue, { limit: 10 })).toEqual([]);
    });

    it('when the same messageId is sent twice within the window, then the second is dropped; after the window it is accepted', async () => {
      const queue = aQueue();
      const message = aMessage();
      expect((await enqueue(db, dialect, queue, message, { now: now(), duplicateDetectionWindowMs: WINDOW })).kind).toBe('enqueued');
      // Even after the first was completed, the id is remembered for the window.
      const [received] = await receive(db, dialect, queue, receiveOptions());
      if (!received) throw new Error('nothing received');
      await complete(db, received);

      expect(await enqueue(db, dialect, queue, message, { now: now() + 1000, duplicateDetectionWindowMs: WINDOW })).toEqual({ kind: 'duplicate' });
      expect(await listActive(db, dialect, queue, { limit: 10 })).toEqual([]);
      expect((await enqueue(db, dialect, queue, message, { now: now() + WINDOW + 1, duplicateDetectionWindowMs: WINDOW })).kind).toBe('enqueued');
      // The same id on another queue is another message.
      expect((await enqueue(db, dialect, aQueue(), message, { now: now(), duplicateDetectionWindowMs: WINDOW })).kind).toBe('enqueued');
    });

    it('when a message is abandoned, then it is redelivered with a higher delivery count', async () => {
      const queue = aQueue();
      await enqueue(db, dialect, queue, aMessage(), { now: now(), duplicateDetectionWindowMs: WINDOW });
      const [first] = await receive(db, dialect, queue, receiveOptions());
      if (!first) throw new Error('nothing received');

      expect(await abandon(db, first, { now: now(), maxDeliveryCount: 10 })).toBe('released');
      const [second] = await receive(db, dialect, queue, receiveOptions());

      expect(second?.deliveryCount).toBe(2);
      expect(second?.lockToken).not.toBe(first.lockToken);
      expect(await abandon(db, first, { now: now(), maxDeliveryCount: 10 })).toBe('lock-lost');
    });

    it('when the lock lapses, then another receiver gets the message and the first one cannot settle it', async () => {
      const queue = aQueue();
      await enqueue(db, dialect, queue, aMessage(), { now: now(), duplicateDetectionWindowMs: WINDOW });
      const [first] = await receive(db, dialect, queue, receiveOptions());
      if (!first) throw new Error('nothing received');
      expect(await renewLock(db, first, { now: now() + LOCK - 1, lockDurationMs: LOCK })).toBe(true);
      expect(await receive(db, dialect, queue, { ...receiveOptions(), now: now() + LOCK })).toEqual([]);

      const later = now() + 2 * LOCK;
      const [second] = await receive(db, dialect, queue, { ...receiveOptions(), now: later });

      expect(second?.deliveryCount).toBe(2);
      expect(await complete(db, first)).toBe(false);
      expect(await complete(db, second ?? first)).toBe(true);
    });

    it('when a message fails max-delivery-count times, then it is dead-lettered with reason MaxDeliveryCountExceeded', async () => {
      const queue = aQueue();
      const message = aMessage();
      await enqueue(db, dialect, queue, message, { now: now(), duplicateDetectionWindowMs: WINDOW });
      const outcomes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const [received] = await receive(db, dialect, queue, receiveOptions(10, 3));
        if (!received) throw new Error(`delivery ${i + 1} missing`);
        outcomes.push(await abandon(db, received, { now: now(), maxDeliveryCount: 3 }));
      }

      expect(outcomes).toEqual(['released', 'released', 'deadlettered']);
      expect(await receive(db, dialect, queue, receiveOptions(10, 3))).toEqual([]);
      const [dead, ...others] = await listDeadLettered(db, dialect, queue, { limit: 10 });
      expect(others).toEqual([]);
      expect(dead).toMatchObject({
        messageId: message.messageId,
        deliveryCount: 3,
        deadLetter: { reason: MAX_DELIVERY_COUNT_EXCEEDED, description: 'Message could not be consumed after 3 delivery attempts.' },
      });
    });

    it('when the last allowed delivery lapses without settling, then the message is dead-lettered instead of delivered again', async () => {
      const queue = aQueue();
      await enqueue(db, dialect, queue, aMessage(), { now: now(), duplicateDetectionWindowMs: WINDOW });
      expect(await receive(db, dialect, queue, receiveOptions(10, 1))).toHaveLength(1);

      expect(await receive(db, dialect, queue, { ...receiveOptions(10, 1), now: now() + LOCK + 1 })).toEqual([]);
      expect((await listDeadLettered(db, dialect, queue, { limit: 10 }))[0]?.deadLetter?.reason).toBe(MAX_DELIVERY_COUNT_EXCEEDED);
    });

    it('when a received message is released unstarted, then its delivery is not counted', async () => {
      const queue = aQueue();
      await enqueue(db, dialect, queue, aMessage(), { now: now(), duplicateDetectionWindowMs: WINDOW });
      const [first] = await receive(db, dialect, queue, receiveOptions());
      if (!first) throw new Error('nothing received');

      expect(await release(db, first)).toBe(true);
      expect((await receive(db, dialect, queue, receiveOptions()))[0]?.deliveryCount).toBe(1);
    });

    it('when messages are received, then they come in enqueue order, at most max at a time', async () => {
      const queue = aQueue();
      for (let i = 1; i <= 5; i++) await enqueue(db, dialect, queue, aMessage({ messageId: `m${i}` }), { now: now(), duplicateDetectionWindowMs: WINDOW });

      const firstBatch = await receive(db, dialect, queue, receiveOptions(3));
      const secondBatch = await receive(db, dialect, queue, receiveOptions(3));

      expect(firstBatch.map((m) => m.messageId)).toEqual(['m1', 'm2', 'm3']);
      expect(secondBatch.map((m) => m.messageId)).toEqual(['m4', 'm5']);
    });

    it('when two receivers on separate connections compete, then every message is delivered to exactly one of them', async () => {
      const queue = aQueue();
      const count = 60;
      for (let i = 0; i < count; i++) await enqueue(db, dialect, queue, aMessage({ messageId: `c${i}` }), { now: now(), duplicateDetectionWindowMs: WINDOW });
      const other: SqlStore = database.connectAgain();
      try {
        const drain = async (store: Kysely<BusTables>) => {
          const got: string[] = [];
          for (;;) {
            const batch = await receive(store, dialect, queue, receiveOptions(4));
            if (batch.length === 0) {
              // Empty can also mean the other receiver won every candidate: stop only when nothing is left unlocked.
              const left = (await listActive(store, dialect, queue, { limit: 1000 })).filter((m) => m.deliveryCount === 0);
              if (left.length === 0) return got;
              continue;
            }
            got.push(...batch.map((m) => m.messageId));
          }
        };

        const [a, b] = await Promise.all([drain(db), drain(other.db as Kysely<BusTables>)]);

        const all = [...a, ...b];
        expect(all).toHaveLength(count);
        expect(new Set(all).size).toBe(count);
      } finally {
        await other.close();
      }
    });

    it('when an inbound message is recorded twice, then only the first is new; a new messageId with a known business key is a duplicate too', async () => {
      const module = `provisioning-${dialect}`;
      expect(await recordInbound(db, { module, messageId: 'in-1', businessKey: 'promo-1' }, clock)).toEqual({ isNew: true });
      expect(await recordInbound(db, { module, messageId: 'in-1', businessKey: 'promo-1' }, clock)).toEqual({
        isNew: false,
        duplicateOf: 'message-id',
      });
      expect(await recordInbound(db, { module, messageId: 'in-2', businessKey: 'promo-1' }, clock)).toEqual({
        isNew: false,
        duplicateOf: 'business-key',
      });
      expect(await recordInbound(db, { module: `inventory-${dialect}`, messageId: 'in-1', businessKey: 'promo-1' }, clock)).toEqual({
        isNew: true,
      });
    });

    it('when inbound messages wait, then the inbox lag per module is the age of the oldest unprocessed one or queued message', async () => {
      const module = `lagging-${dialect}`;
      const start = now();
      await recordInbound(db, { module, messageId: 'l-1', businessKey: 'k1' }, clock);
      clock.advance(5_000);
      await recordInbound(db, { module, messageId: 'l-2', businessKey: 'k2' }, clock);
      clock.advance(5_000);

      const [before] = await inboxLag(db, [module], {}, now());
      await markInboundProcessed(db, { module, messageId: 'l-1', outcome: 'applied' }, clock);
      const [after] = await inboxLag(db, [module], {}, now());
      await markInboundProcessed(db, { module, messageId: 'l-2', outcome: 'applied' }, clock);
      const [idle] = await inboxLag(db, [module], {}, now());
      const queue = `${PROMOTIONS_QUEUE}-${dialect}`;
      await enqueue(db, dialect, queue, aMessage(), { now: start, duplicateDetectionWindowMs: WINDOW });
      const [queued] = await inboxLag(db, [module], { [module]: [queue] }, now(), (queues) => oldestActive(db, queues));

      expect(before).toEqual({ module, lagSeconds: 10, unprocessed: 2, waitingInQueues: 0 });
      expect(after).toEqual({ module, lagSeconds: 5, unprocessed: 1, waitingInQueues: 0 });
      expect(idle).toEqual({ module, lagSeconds: 0, unprocessed: 0, waitingInQueues: 0 });
      expect(queued).toEqual({ module, lagSeconds: 10, unprocessed: 0, waitingInQueues: 1 });
    });
  });
}
