import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { appendToOutbox, type OutboxTables } from '../../shared/platform/bus/outbox';
import { pendingSummary } from '../../shared/platform/bus/outbox-relay.repository';
import { relayOutbox } from '../../shared/platform/bus/outbox-relay.service';
import { serviceBusPublisher } from '../../shared/platform/bus/service-bus-publisher';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { startAmqpPeer, type AmqpPeer } from '../support/amqp-peer';
import { createTestDatabase, type TestDatabase } from '../support/databases';

describe('Service Bus event publisher (real @azure/service-bus against a local AMQP peer)', () => {
  let peer: AmqpPeer;
  let publisher: EventPublisher;
  let database: TestDatabase;
  beforeAll(async () => {
    peer = await startAmqpPeer();
    publisher = serviceBusPublisher({ connection: peer.connectionString, retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });
    database = await createTestDatabase('sqlite');
  });
  afterAll(async () => {
    await publisher?.close();
    await peer?.close();
    await database?.drop();
  });

  it('when events are published, then the topic receives them in order with messageId, correlationId, content type and type', async () => {
    const events = [1, 2, 3].map((n) => ({
      messageId: `evt_${n}`,
      body: JSON.stringify({ id: `evt_${n}`, type: 'LeaseExpired', data: { n } }),
      contentType: 'application/json',
      correlationId: `run_${n}`,
      subject: `lease/${n}`,
      applicationProperties: { type: 'LeaseExpired' },
    }));

    await publisher.publish(EVENTS_TOPIC, events);

    const received = await peer.waitFor(3);
    expect(received.map((m) => m.messageId)).toEqual(['evt_1', 'evt_2', 'evt_3']);
    expect(received[0]).toMatchObject({
      address: EVENTS_TOPIC,
      correlationId: 'run_1',
      contentType: 'application/json',
      subject: 'lease/1',
      applicationProperties: { type: 'LeaseExpired' },
      body: { id: 'evt_1', type: 'LeaseExpired', data: { n: 1 } },
    });
  });

  it('when the bus refuses a send, then the relay keeps the events pending and publishes them on a later run', async () => {
    const db = database.store.db as Kysely<OutboxTables>;
    const clock = new ManualClock('2026-11-30T10:00:00Z');
    const already = peer.received.length;
    await appendToOutbox(db, [{ type: 'ProvisioningApplied', correlationId: 'run_9', data: { runId: 'run_9' } }], clock, randomIds);

    peer.rejectSends = true;
    const refused = await relayOutbox(db, publisher, { dialect: 'sqlite', clock, ids: randomIds, retryAfterMs: 1000 });
    expect(refused.published).toBe(0);
    expect(refused.failed?.events).toBe(1);
    expect((await pendingSummary(db)).count).toBe(1);

    peer.rejectSends = false;
    clock.advance(1001);
    const retried = await relayOutbox(db, publisher, { dialect: 'sqlite', clock, ids: randomIds });
    expect(retried).toEqual({ published: 1 });
    const received = await peer.waitFor(already + 1);
    expect(received[already]).toMatchObject({
      correlationId: 'run_9',
      contentType: 'application/json',
      applicationProperties: { type: 'ProvisioningApplied' },
      body: { type: 'ProvisioningApplied', specversion: '1.0', data: { runId: 'run_9' } },
    });
    expect((await pendingSummary(db)).count).toBe(0);
  });
});
