import { metrics } from '@opentelemetry/api';
import { AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBlobServer, type RunningBlobServer } from '../../local/azurite/blob-server';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { outboxDeadLetterCheck } from '../../shared/platform/bus/bus.health';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { blobEventBodies, claimCheckingPublisher, DEFAULT_CLAIM_CHECK_BYTES, DEFAULT_STORE_BUDGET_MS, EventBodyErrors, openEvent, type EventBodyStore } from '../../shared/platform/bus/event-bodies';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { EVENTS_TOPIC, type CloudEvent, type NewEvent } from '../../shared/platform/bus/events';
import { appendToOutbox, type OutboxTables } from '../../shared/platform/bus/outbox';
import { pendingSummary } from '../../shared/platform/bus/outbox-relay.repository';
import { relayOutbox } from '../../shared/platform/bus/outbox-relay.service';
import { serviceBusPublisher } from '../../shared/platform/bus/service-bus-publisher';
import { METRICS } from '../../shared/platform/telemetry/metrics';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { STANDARD_MAX_MESSAGE_BYTES, startAmqpPeer, type AmqpPeer, type PeerMessage } from '../support/amqp-peer';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { contractValidators } from '../support/event-contracts';
import { inventoryOver, specificationApplied } from '../support/inventory';

/**
 * Issue 32, part 4: events never wedge. An event larger than Service Bus Standard takes (256 KiB a message, 256 KiB a
 * batch: the AMQP peer enforces both) goes out as a claim check, its data in Azurite's Blob server; one the bus still
 * refuses is dead-lettered in the outbox with its reason, a metric and a degraded health check, and the events after
 * it in its lane flow on, each published once. Real @azure/service-bus against the peer, real Blob storage, the
 * outbox on SQLite, PostgreSQL and the T-SQL shadow (Azure SQL's statements, checked against its grammar).
 */

class TestReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

type Db = Kysely<OutboxTables & BusTables>;

/** A SpecificationApplied whose data is about `bytes` long: every resource's inputs, as an apply of a big stack. */
function aSpecification(runId: string, bytes: number, tenant = 'tenant-a'): NewEvent {
  const data = specificationApplied({ id: `env-${runId}`, stack: 'dev', tenant, runId }, [{ name: 'api', type: 'local:compute:Service', properties: { manifest: 'x'.repeat(bytes) } }]);
  return { type: 'SpecificationApplied', subject: `runs/${runId}`, correlationId: runId, tenant, data: { ...data, qualifiedStack: `${tenant}/demo/dev` } };
}

/** A small event of the same stream (correlation id) as the run's, so of the same lane. */
function aLeaseExpired(runId: string, n: number, tenant = 'tenant-a'): NewEvent {
  const data = { leaseId: `lease-${n}`, tenantId: tenant, kind: 'attempt', pool: 'p1', units: 1, holder: 'h', fencingToken: n, expiresAt: '2026-12-06T10:00:00.000Z' };
  return { type: 'LeaseExpired', subject: `leases/lease-${n}`, correlationId: runId, tenant, data };
}

const reader = new TestReader({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
/** Events dead-lettered so far as too large, by the metric. */
async function deadLettersCounted(): Promise<number> {
  const { resourceMetrics } = await reader.collect();
  const metric = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === METRICS.outboxDeadLetters);
  const point = metric?.dataPoints.find((p) => p.attributes.topic === EVENTS_TOPIC && p.attributes.code === 'BUS.MESSAGE_TOO_LARGE');
  return Number(point?.value ?? 0);
}

let blobs: RunningBlobServer;
let tables: RunningTableServer;
let peer: AmqpPeer;
let bus: EventPublisher;
let bodies: EventBodyStore;
let claimChecking: EventPublisher;

beforeAll(async () => {
  // This file runs in its own process: the global provider is this test's.
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  [blobs, tables, peer] = await Promise.all([startBlobServer(), startTableServer(), startAmqpPeer()]);
  bus = serviceBusPublisher({ connection: peer.connectionString, retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
  bodies = blobEventBodies(blobs.connectionString);
  claimChecking = claimCheckingPublisher(bus, { store: bodies, thresholdBytes: DEFAULT_CLAIM_CHECK_BYTES });
});
afterAll(async () => {
  await bus?.close();
  await Promise.all([peer?.close(), blobs?.close(), tables?.close()]);
});

/** What the peer received for these event ids, in arrival order. */
const receivedOf = (ids: readonly string[]): PeerMessage[] => peer.received.filter((m) => m.messageId !== undefined && ids.includes(m.messageId));

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`events never wedge, outbox on ${dialect}`, () => {
    let database: TestDatabase;
    let db: Db;
    const clock = new ManualClock('2026-12-06T10:00:00Z');
    const relay = (publisher: EventPublisher) => relayOutbox(db, publisher, { dialect, clock, ids: randomIds, retryAfterMs: 1000 });

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = database.store.db as Db;
    });
    afterAll(async () => {
      await database?.drop();
    });

    it('when a SpecificationApplied larger than Service Bus Standard takes is written before more events of its run, then it goes out as a claim check and they follow, each once, in order', async () => {
      // Arrange: 300 KB of inputs, more than the 256 KiB the peer takes.
      const written = await appendToOutbox(db, [aSpecification(`run-big-${dialect}`, 300_000), aLeaseExpired(`run-big-${dialect}`, 1)], clock, randomIds);
      const ids = written.map((e) => e.id);

      // Act
      const result = await relay(claimChecking);

      // Assert: both went out, in order, once, and nothing waits.
      expect(result).toEqual({ published: 2 });
      const received = receivedOf(ids);
      expect(received.map((m) => m.messageId)).toEqual(ids);
      expect((await pendingSummary(db)).count).toBe(0);
      // The envelope is the documented one, well under the limit, with the event's own message properties.
      const envelope = received[0]!;
      expect(Buffer.byteLength(JSON.stringify(envelope.body))).toBeLessThan(4096);
      expect(envelope).toMatchObject({ correlationId: `run-big-${dialect}`, applicationProperties: { type: 'SpecificationApplied', tenant: 'tenant-a' } });
      expect(contractValidators().claimCheckEnvelope(envelope.body), JSON.stringify(contractValidators().claimCheckEnvelope.errors)).toBe(true);
      // Read back through the consumers' helper, it is the event the outbox holds.
      expect(await openEvent(envelope.body, bodies)).toEqual({ event: written[0] });
      // The small one went as it was.
      expect(received[1]?.body).toEqual(written[1]);
    });

    it('when the bus still refuses an event for good, then it is dead-lettered in the outbox with its reason, counted, the health check degrades, and the rest of its lane is published once', async () => {
      // Arrange: published without a claim check, the big event is more than the bus takes.
      const run = `run-refused-${dialect}`;
      const written = await appendToOutbox(db, [aLeaseExpired(run, 1), aSpecification(run, 300_000), aLeaseExpired(run, 2)], clock, randomIds);
      const [first, refused, last] = written.map((e) => e.id);
      const countedBefore = await deadLettersCounted();

      // Act
      const result = await relay(bus);
      const again = await relay(bus);

      // Assert: the lane flowed on past it; nothing was sent twice, the refused one never.
      expect(result).toEqual({ published: 2, deadLettered: [{ eventId: refused, code: 'BUS.MESSAGE_TOO_LARGE', reason: expect.stringContaining(`${STANDARD_MAX_MESSAGE_BYTES} bytes`) }] });
      expect(again).toEqual({ published: 0 });
      expect(receivedOf(written.map((e) => e.id)).map((m) => m.messageId)).toEqual([first, last]);
      const row = await db.selectFrom('outbox').select(['published_at', 'dead_lettered_at', 'dead_letter_reason']).where('event_id', '=', refused!).executeTakeFirstOrThrow();
      expect(row).toMatchObject({ published_at: null, dead_lettered_at: expect.anything(), dead_letter_reason: expect.stringMatching(/^BUS\.MESSAGE_TOO_LARGE: /) });
      expect((await pendingSummary(db)).count).toBe(0);
      // Counted by topic and code.
      expect(await deadLettersCounted()).toBe(countedBefore + 1);
      // Degraded, naming it, for a day; then healthy again.
      const check = outboxDeadLetterCheck(db, clock);
      expect(await check.run()).toMatchObject({ status: 'degraded', details: { count: 1, latest: { eventId: refused } } });
      clock.advance(24 * 3_600_000 + 1);
      expect(await check.run()).toEqual({ details: expect.objectContaining({ count: 0 }) });
    });

    it('when two relays run at once over lanes that hold refused events, then each refused one is dead-lettered once and every other event published once, each stream in order', async () => {
      // Arrange: six streams, each a small event, one the bus refuses, and another small one.
      const streams = Array.from({ length: 6 }, (_, i) => `run-race-${dialect}-${i}`);
      const written = await appendToOutbox(db, streams.flatMap((run) => [aLeaseExpired(run, 1), aSpecification(run, 270_000), aLeaseExpired(run, 2)]), clock, randomIds);
      const refused = written.filter((e) => e.type === 'SpecificationApplied').map((e) => e.id);
      const others = written.filter((e) => e.type !== 'SpecificationApplied').map((e) => e.id);
      // On SQLite both share the one connection a process has (outbox-relay.test.ts says why).
      const other = dialect === 'sqlite' ? { db: database.store.db, close: () => Promise.resolve() } : database.connectAgain();
      const runs = async (store: Db) => {
        for (let i = 0; i < 4; i++) await relayOutbox(store, bus, { dialect, clock, ids: randomIds, batchSize: 4 });
      };

      // Act
      try {
        await Promise.all([runs(db), runs(other.db as Db)]);
      } finally {
        await other.close();
      }

      // Assert
      const received = receivedOf(others).map((m) => m.messageId ?? '');
      expect([...received].sort()).toEqual([...others].sort());
      for (const run of streams) {
        const ofRun = written.filter((e) => e.correlationid === run && e.type !== 'SpecificationApplied').map((e) => e.id);
        expect(received.filter((id) => ofRun.includes(id))).toEqual(ofRun);
      }
      expect(receivedOf(refused)).toEqual([]);
      const rows = await db.selectFrom('outbox').select(['event_id', 'attempts', 'dead_lettered_at']).where('event_id', 'in', refused).execute();
      expect(rows.map((r) => [Number(r.attempts), r.dead_lettered_at !== null])).toEqual(refused.map(() => [1, true]));
      expect((await pendingSummary(db)).count).toBe(0);
    });

    it('when the namespace refuses a batch the SDK measured as fitting, then its events are sent one by one and only the one refused alone is dead-lettered', async () => {
      // Arrange: a namespace that advertises 1 MiB on the link but takes 256 KiB (it counts what the SDK does not).
      const lax = await startAmqpPeer({ advertisedMaxMessageBytes: 1024 * 1024 });
      const laxBus = serviceBusPublisher({ connection: lax.connectionString, retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
      const run = `run-batch-${dialect}`;
      const written = await appendToOutbox(db, [aLeaseExpired(run, 1), aSpecification(run, 300_000), aLeaseExpired(run, 2)], clock, randomIds);
      const [first, refused, last] = written.map((e) => e.id);

      // Act
      let result;
      try {
        result = await relay(laxBus);
      } finally {
        await laxBus.close();
        await lax.close();
      }

      // Assert: the batch, then the big one alone, were refused; the others arrived once each, in order.
      expect(result).toMatchObject({ published: 2, deadLettered: [{ eventId: refused, code: 'BUS.MESSAGE_TOO_LARGE' }] });
      expect(lax.refusedTooLarge).toHaveLength(2);
      expect(lax.received.map((m) => m.messageId)).toEqual([first, last]);
    });

    it('when a publish dies after the body was stored, then the next run stores the same bytes under the same name and the event is published once', async () => {
      // Arrange
      const run = `run-crash-${dialect}`;
      const [written] = await appendToOutbox(db, [aSpecification(run, 250_000)], clock, randomIds);
      peer.rejectSends = true;
      const failed = await relay(claimChecking);
      peer.rejectSends = false;
      // The body is stored; the event is not published and waits.
      expect(failed).toMatchObject({ published: 0, failed: { events: 1 } });
      expect(await bodies.get({ tenant: 'tenant-a', eventId: written!.id })).toBeDefined();
      expect((await pendingSummary(db)).count).toBe(1);

      // Act
      clock.advance(1001);
      const retried = await relay(claimChecking);

      // Assert
      expect(retried).toEqual({ published: 1 });
      const received = receivedOf([written!.id]);
      expect(received).toHaveLength(1);
      expect(await openEvent(received[0]!.body, bodies)).toEqual({ event: written });
    });

    it('when inventory takes a claim-checked SpecificationApplied, then it records the desired state; when its data is gone, then it records a rejection naming why', async () => {
      // Arrange
      const { inventory } = inventoryOver(database.store, tables.connectionString, clock, { eventBodies: bodies });
      const run = `run-inventory-${dialect}`;
      const [written] = await appendToOutbox(db, [aSpecification(run, 250_000)], clock, randomIds);
      await relay(claimChecking);
      const envelope = receivedOf([written!.id])[0]!.body as Record<string, unknown>;
      const orphan = { ...envelope, id: `evt-never-stored-${dialect}`, dataref: `tenants/tenant-a/events/evt-never-stored-${dialect}.json` };

      // Act
      const taken = await inventory.intake({ messageId: written!.id, body: JSON.stringify(envelope) });
      const refused = await inventory.intake({ messageId: `orphan-${dialect}`, body: orphan });

      // Assert: what inventory took was the envelope (its data only in Blob storage).
      expect(envelope).toMatchObject({ dataref: expect.any(String) });
      expect(envelope).not.toHaveProperty('data');
      expect(taken).toMatchObject({ outcome: 'specification', recorded: 'recorded', environment: { tenant: 'tenant-a', id: `env-${run}` } });
      expect(refused).toMatchObject({ outcome: 'rejected', code: EventBodyErrors.missing });
      expect(await inventory.getRejection(`orphan-${dialect}`)).toMatchObject({ code: EventBodyErrors.missing, reason: expect.stringContaining('is not stored at tenants/tenant-a/events/') });
    });
  });
}

describe('claim-checked event bodies in Blob storage (Azurite)', () => {
  /** The bus's side, for what the claim check hands it: the messages as they would be sent. */
  const sent: { body: string; messageId: string }[] = [];
  const capture: EventPublisher = {
    name: 'capture',
    publishBudgetMs: 1000,
    publish: async (_topic, messages) => void sent.push(...messages),
    close: async () => undefined,
  };
  /** The same event id in two tenants, each with its own data, both over the threshold. */
  const eventOf = (tenant: string): CloudEvent => ({
    specversion: '1.0',
    id: 'evt-same-id',
    source: '/runtime-cloud',
    type: 'SpecificationApplied',
    time: '2026-12-06T10:00:00.000Z',
    datacontenttype: 'application/json',
    tenant,
    data: { owner: tenant, inputs: tenant.repeat(60_000) },
  });
  const asMessage = (event: CloudEvent) => ({ messageId: event.id, body: JSON.stringify(event), contentType: 'application/json' });

  it('when two tenants publish claim-checked events with the same ids, then each is stored apart and each reads back its own', async () => {
    // Arrange
    const publisher = claimCheckingPublisher(capture, { store: bodies, thresholdBytes: 1024 });
    sent.length = 0;

    // Act
    await publisher.publish(EVENTS_TOPIC, [asMessage(eventOf('tenant-a')), asMessage(eventOf('tenant-b'))]);

    // Assert
    const [a, b] = sent.map((m) => JSON.parse(m.body) as Record<string, unknown>);
    expect(a).toMatchObject({ dataref: 'tenants/tenant-a/events/evt-same-id.json' });
    expect(b).toMatchObject({ dataref: 'tenants/tenant-b/events/evt-same-id.json' });
    expect(await openEvent(a, bodies)).toEqual({ event: eventOf('tenant-a') });
    expect(await openEvent(sent[1]!.body, bodies)).toEqual({ event: eventOf('tenant-b') });
  });

  it("when an envelope names another tenant's data, or its data was changed, then it is refused naming why", async () => {
    // Arrange
    const publisher = claimCheckingPublisher(capture, { store: bodies, thresholdBytes: 1024 });
    sent.length = 0;
    await publisher.publish(EVENTS_TOPIC, [asMessage({ ...eventOf('tenant-c'), id: 'evt-c' }), asMessage({ ...eventOf('tenant-d'), id: 'evt-d' })]);
    const [c, d] = sent.map((m) => JSON.parse(m.body) as Record<string, unknown>);

    // Act: tenant c's envelope pointed at tenant d's data; then tenant d's data overwritten.
    const foreign = await openEvent({ ...c, dataref: d!.dataref }, bodies);
    const forged = await openEvent({ ...c, tenant: 'tenant-d', id: 'evt-d', dataref: d!.dataref }, bodies);
    await bodies.put({ tenant: 'tenant-d', eventId: 'evt-d' }, JSON.stringify({ owner: 'someone else' }));
    const changed = await openEvent(d, bodies);

    // Assert
    expect(foreign).toMatchObject({ refused: { code: EventBodyErrors.foreignRef } });
    expect(forged).toMatchObject({ refused: { code: EventBodyErrors.digestMismatch } });
    expect(changed).toMatchObject({ refused: { code: EventBodyErrors.digestMismatch } });
  });

  it('when an event is at most the threshold, then it goes as it is, and a host without a body store refuses a claim-checked one', async () => {
    // Arrange
    const publisher = claimCheckingPublisher(capture, { store: bodies, thresholdBytes: DEFAULT_CLAIM_CHECK_BYTES });
    sent.length = 0;
    const small = asMessage({ ...eventOf('tenant-e'), data: { owner: 'tenant-e' } });

    // Act
    await publisher.publish(EVENTS_TOPIC, [small]);

    // Assert
    expect(sent).toEqual([small]);
    // The relay's claim outlasts the stores and the send together.
    expect(publisher.publishBudgetMs).toBe(DEFAULT_STORE_BUDGET_MS + capture.publishBudgetMs);
    expect(await openEvent({ ...eventOf('tenant-e'), data: undefined, dataref: 'tenants/tenant-e/events/evt-same-id.json', datadigest: 'sha256:0' }, undefined)).toMatchObject({ refused: { code: EventBodyErrors.noStore } });
  });
});
