import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startAfterCommitPublish } from '../../shared/platform/bus/after-commit-publish';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { embeddedTopicPublisher } from '../../local/bus/embedded-bus';
import { EVENTS_TOPIC, type NewEvent } from '../../shared/platform/bus/events';
import { appendToOutbox, laneOf, streamOf, toCloudEvent, type OutboxTables } from '../../shared/platform/bus/outbox';
import { pendingSummary } from '../../shared/platform/bus/outbox-relay.repository';
import { CLAIM_MARGIN_MS, relayOutbox } from '../../shared/platform/bus/outbox-relay.service';
import { sendBudgetMs, serviceBusPublisher } from '../../shared/platform/bus/service-bus-publisher';
import { readTopic } from '../../local/bus/topic.repository';
import { inTransaction } from '../../shared/platform/sql/transaction';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createDeps } from '../../shared/deps';
import { parseConfig } from '../../shared/platform/config/config';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { localTwin } from '../../local/twin';

/**
 * Issue 19's outbox holes: publish order per stream true across concurrent writers, a relay's claim that outlasts a
 * send's retry budget, and events published right after their commit without losing any when that fails.
 */
type Db = Kysely<OutboxTables & BusTables>;

/** Table storage the deps below never reach: it is opened on first use, and nothing here uses it. */
const NEVER_CONTACTED_TABLES = 'DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/devstoreaccount1;';

/** The `n`th event of the stream of lease `lease` (its fencing token carries `n`). */
function runEvent(lease: string, n: number, tenant = 't1'): NewEvent {
  return {
    type: 'LeaseExpired',
    subject: `leases/${lease}`,
    correlationId: lease,
    tenant,
    data: { leaseId: lease, tenantId: tenant, kind: 'sandbox', pool: 'pool-1', units: 1, holder: 'h', fencingToken: n, expiresAt: '2026-12-03T09:00:00.000Z' },
  };
}

/** A promise and the function that settles it: the gates that drive the interleavings below. */
function gate<T = void>(): { promise: Promise<T>; open: (value: T) => void } {
  let open!: (value: T) => void;
  const promise = new Promise<T>((resolve) => (open = resolve));
  return { promise, open };
}

/** A publisher that records every message handed to it before passing it on (a double publish stays visible). */
function recording(inner: EventPublisher, handed: string[]): EventPublisher {
  return {
    ...inner,
    async publish(topic, messages) {
      handed.push(...messages.map((m) => m.messageId));
      await inner.publish(topic, messages);
    },
  };
}

describe('streams and lanes', () => {
  it('when two tenants use one correlation id, then their events are two streams', () => {
    const clock = new ManualClock();
    const a = toCloudEvent(runEvent('run-1', 1, 'tenant-a'), clock, randomIds);
    const b = toCloudEvent(runEvent('run-1', 1, 'tenant-b'), clock, randomIds);
    expect(streamOf(a)).toBe('tenant-a/run-1');
    expect(streamOf(b)).toBe('tenant-b/run-1');
    expect(laneOf(streamOf(a))).toBe(laneOf('tenant-a/run-1'));
  });
});

describe('the budget of one Service Bus send', () => {
  it('when retries are exponential, then it is every try to its timeout and the longest delay @azure/core-amqp may wait between them', () => {
    // 4 tries of 60 s; delays min(0.8 s × 1.2 × (2^n − 1), 60 s) for n = 1..3: 0.96 + 2.88 + 6.72 s.
    expect(sendBudgetMs({ mode: 'exponential', maxRetries: 3, retryDelayInMs: 800, maxRetryDelayInMs: 60_000, timeoutInMs: 60_000 })).toBe(250_560);
    // The cap: 2 s × 1.2 × 31 = 74.4 s is cut to 10 s.
    expect(sendBudgetMs({ mode: 'exponential', maxRetries: 5, retryDelayInMs: 2_000, maxRetryDelayInMs: 10_000, timeoutInMs: 1_000 })).toBe(6 * 1_000 + 2_400 + 7_200 + 10_000 + 10_000 + 10_000);
  });

  it('when options are left out, then the SDK\'s own apply: fixed 30 s delays, 3 retries, 60 s per try', () => {
    expect(sendBudgetMs({})).toBe(4 * 60_000 + 3 * 30_000);
  });
});

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`the outbox on ${dialect}`, () => {
    let database: TestDatabase;
    let db: Db;
    const clock = new ManualClock('2026-12-03T09:00:00Z');

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = database.store.db as Db;
    });
    afterAll(async () => {
      await database?.drop();
    });

    /** The `n` of each event of `run` on the topic, in topic order. */
    async function onTopic(run: string): Promise<number[]> {
      const messages = await readTopic(db, dialect, EVENTS_TOPIC, { limit: 1000 });
      return messages.filter((m) => m.correlationId === run).map((m) => (JSON.parse(m.body) as { data: { fencingToken: number } }).data.fencingToken);
    }

    it.skipIf(dialect !== 'postgres')(
      'when the writer of a stream\'s earlier event commits after a later writer started, then the relay never publishes the later one first',
      async () => {
        const run = 'run-concurrent';
        const other = database.connectAgain();
        const publisher = embeddedTopicPublisher(db, dialect, clock);
        const relay = () => relayOutbox(db, publisher, { dialect, clock, ids: randomIds });
        try {
          const firstAppended = gate();
          const commitFirst = gate();
          // The first writer takes the lower seq and holds its transaction open.
          const first = inTransaction(db, async (trx) => {
            await appendToOutbox(trx, [runEvent(run, 1)], clock, randomIds);
            firstAppended.open();
            await commitFirst.promise;
          });
          await firstAppended.promise;
          // The second writer of the stream starts now; it must wait for the first (its lane), or it commits first.
          const second = inTransaction(other.db as Db, (trx) => appendToOutbox(trx, [runEvent(run, 2)], clock, randomIds));
          const secondBlocked = vi.waitFor(async () => {
            const waiting = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%outbox_lanes%'`.execute(db);
            if ((waiting.rows[0]?.n ?? 0) === 0) throw new Error('the second writer waits for no lock');
          });
          await Promise.race([second, secondBlocked]);

          const whileOpen = await relay();
          commitFirst.open();
          await Promise.all([first, second]);
          await relay();

          expect(whileOpen).toEqual({ published: 0 });
          expect(await onTopic(run)).toEqual([1, 2]);
        } finally {
          await other.close();
        }
      },
    );

    it('when a send takes its whole retry budget, then a second relay does not take its lane over meanwhile', async () => {
      const run = 'run-slow-send';
      await appendToOutbox(db, [runEvent(run, 1), runEvent(run, 2)], clock, randomIds);
      // The Service Bus publisher's budget with the host's retry options (never connected: the SDK connects on send).
      const serviceBus = serviceBusPublisher({ connection: 'Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=k;SharedAccessKey=a2V5;UseDevelopmentEmulator=true' });
      const budget = serviceBus.publishBudgetMs;
      await serviceBus.close();
      expect(budget).toBe(250_560);
      const inSend = gate();
      const sendEnds = gate();
      const embedded = embeddedTopicPublisher(db, dialect, clock);
      // The first relay's send retries for its whole budget: the clock moves on while it is in the send.
      const slow: EventPublisher = {
        ...embedded,
        publishBudgetMs: budget,
        async publish(topic, messages) {
          inSend.open();
          await sendEnds.promise;
          await embedded.publish(topic, messages);
        },
      };
      const handedToSecond: string[] = [];
      const second = recording({ ...embedded, publishBudgetMs: budget }, handedToSecond);

      const firstRelay = relayOutbox(db, slow, { dialect, clock, ids: randomIds });
      await inSend.promise;
      clock.advance(budget);
      const meanwhile = await relayOutbox(db, second, { dialect, clock, ids: randomIds });
      sendEnds.open();
      const firstResult = await firstRelay;
      clock.advance(CLAIM_MARGIN_MS);

      expect(meanwhile).toEqual({ published: 0 });
      expect(handedToSecond).toEqual([]);
      expect(firstResult).toEqual({ published: 2 });
      expect(await onTopic(run)).toEqual([1, 2]);
    });

    it('when a transaction appends events with after-commit publish on, then they are on the topic without the relay running, and a republish by the relay is dropped by messageId', async () => {
      const run = 'run-after-commit';
      const handed: string[] = [];
      const publisher = recording(embeddedTopicPublisher(db, dialect, clock), handed);
      const afterCommit = startAfterCommitPublish(db, publisher, { dialect, clock, ids: randomIds });
      try {
        const written = await inTransaction(db, (trx) => appendToOutbox(trx, [runEvent(run, 1), runEvent(run, 2)], clock, randomIds));
        await afterCommit.settled();

        expect(await onTopic(run)).toEqual([1, 2]);
        expect(handed).toEqual(written.map((e) => e.id));
        expect((await pendingSummary(db)).count).toBe(0);
      } finally {
        await afterCommit.stop();
      }
      // The same messages again (as a relay that took over would send them): the topic keeps each once.
      await embeddedTopicPublisher(db, dialect, clock).publish(EVENTS_TOPIC, (await readTopic(db, dialect, EVENTS_TOPIC, { limit: 1000 })).filter((m) => m.correlationId === run).map((m) => ({ messageId: m.messageId, body: m.body, contentType: 'application/json' })));
      expect(await onTopic(run)).toEqual([1, 2]);
    });

    it('when transactions commit while an after-commit publish is sending, then their events go out together in the next pass, each once and in stream order', async () => {
      const runs = ['run-coalesced-a', 'run-coalesced-b', 'run-coalesced-c'];
      const embedded = embeddedTopicPublisher(db, dialect, clock);
      const inSend = gate();
      const sendEnds = gate();
      const sends: string[][] = [];
      const held: EventPublisher = {
        ...embedded,
        async publish(topic, messages) {
          sends.push(messages.map((m) => m.messageId));
          if (sends.length === 1) {
            inSend.open();
            await sendEnds.promise;
          }
          await embedded.publish(topic, messages);
        },
      };
      const afterCommit = startAfterCommitPublish(db, held, { dialect, clock, ids: randomIds });
      try {
        const first = await inTransaction(db, (trx) => appendToOutbox(trx, [runEvent(runs[0] ?? '', 1)], clock, randomIds));
        await inSend.promise;
        // While the first pass sends: six commits, two per stream, each in its own transaction.
        const later: string[] = [];
        for (const n of [2, 3]) {
          const written = await Promise.all(runs.map((run) => inTransaction(db, (trx) => appendToOutbox(trx, [runEvent(run, n)], clock, randomIds))));
          later.push(...written.flat().map((e) => e.id));
        }
        sendEnds.open();
        await afterCommit.settled();

        expect(sends[0]).toEqual(first.map((e) => e.id));
        // One pass took the six: one send, or one per topic run (all are events here).
        expect(sends.slice(1)).toHaveLength(1);
        expect([...(sends[1] ?? [])].sort()).toEqual([...later].sort());
        expect(await onTopic(runs[0] ?? '')).toEqual([1, 2, 3]);
        expect(await onTopic(runs[1] ?? '')).toEqual([2, 3]);
        expect(await onTopic(runs[2] ?? '')).toEqual([2, 3]);
        expect((await pendingSummary(db)).count).toBe(0);
      } finally {
        sendEnds.open();
        await afterCommit.stop();
      }
    });

    it('when the after-commit publish fails, then the event stays pending and the relay publishes it once, under the same messageId', async () => {
      const run = 'run-after-commit-fails';
      const embedded = embeddedTopicPublisher(db, dialect, clock);
      const handed: string[] = [];
      // The bus takes the message, then the confirmation is lost: the publish fails after the send.
      const lostConfirmation = recording(
        {
          ...embedded,
          async publish(topic, messages) {
            await embedded.publish(topic, messages);
            throw new Error('connection lost before the send was confirmed');
          },
        },
        handed,
      );
      const afterCommit = startAfterCommitPublish(db, lostConfirmation, { dialect, clock, ids: randomIds, retryAfterMs: 5_000 });
      let written: Awaited<ReturnType<typeof appendToOutbox>> = [];
      try {
        written = await inTransaction(db, (trx) => appendToOutbox(trx, [runEvent(run, 1)], clock, randomIds));
        await afterCommit.settled();
      } finally {
        await afterCommit.stop();
      }
      expect((await pendingSummary(db)).count).toBe(1);

      clock.advance(5_000);
      const relayed = await relayOutbox(db, recording(embedded, handed), { dialect, clock, ids: randomIds });

      expect(relayed).toEqual({ published: 1 });
      expect(handed).toEqual([written[0]?.id, written[0]?.id]);
      expect(await onTopic(run)).toEqual([1]);
      expect((await pendingSummary(db)).count).toBe(0);
    });

    it('when the after-commit publish cannot reach the bus at all, then the relay still publishes the event', async () => {
      const run = 'run-bus-down';
      const embedded = embeddedTopicPublisher(db, dialect, clock);
      const down: EventPublisher = { ...embedded, publish: () => Promise.reject(new Error('the bus is unreachable')) };
      const afterCommit = startAfterCommitPublish(db, down, { dialect, clock, ids: randomIds, retryAfterMs: 5_000 });
      try {
        await inTransaction(db, (trx) => appendToOutbox(trx, [runEvent(run, 1)], clock, randomIds));
        await afterCommit.settled();
      } finally {
        await afterCommit.stop();
      }
      expect(await onTopic(run)).toEqual([]);

      clock.advance(5_000);
      expect(await relayOutbox(db, embedded, { dialect, clock, ids: randomIds })).toEqual({ published: 1 });
      expect(await onTopic(run)).toEqual([1]);
    });

    for (const publish of ['after-commit', 'relay'] as const) {
      it(`when the host is built with RuntimeCloud__Outbox__Publish=${publish}, then an event is published ${publish === 'relay' ? 'only by the relay' : 'by the commit'}`, async () => {
        const run = `run-setting-${publish}`;
        // No timer runs here: closing the deps waits for every after-commit publish they started.
        const deps = await createDeps(parseConfig({ ...database.settings, RuntimeCloud__IaC__Runner: 'local', RuntimeCloud__Tables__Connection: NEVER_CONTACTED_TABLES, RuntimeCloud__Outbox__Publish: publish }), {
          ...database.overrides,
          twin: localTwin,
          jwks: { keys: [] },
        });
        try {
          await inTransaction(deps.sql.db as Db, (trx) => appendToOutbox(trx, [runEvent(run, 1)], clock, randomIds));
        } finally {
          await deps.close();
        }
        expect(await onTopic(run)).toEqual(publish === 'relay' ? [] : [1]);
      });
    }

    it('when a transaction that appended events rolls back, then nothing is published after it', async () => {
      const handed: string[] = [];
      const afterCommit = startAfterCommitPublish(db, recording(embeddedTopicPublisher(db, dialect, clock), handed), { dialect, clock, ids: randomIds });
      try {
        await expect(
          inTransaction(db, async (trx) => {
            await appendToOutbox(trx, [runEvent('run-rolled-back', 1)], clock, randomIds);
            throw new Error('the state change failed');
          }),
        ).rejects.toThrow('the state change failed');
        await afterCommit.settled();
      } finally {
        await afterCommit.stop();
      }
      expect(handed).toEqual([]);
      expect(await onTopic('run-rolled-back')).toEqual([]);
    });
  });
}
