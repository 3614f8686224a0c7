import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busDb } from '../../shared/platform/bus/bus-db';
import { inboxLagChecks, INBOX_LAG_METRIC, type InboxLagReader } from '../../shared/platform/bus/bus.health';
import { recordInbound } from '../../shared/platform/bus/inbox.repository';
import { createInboxLagReader } from '../../shared/platform/bus/publishers';
import { localTwin } from '../../local/twin';
import { PROMOTIONS_QUEUE } from '../../shared/platform/bus/queue';
import { serviceBusInboxLag } from '../../shared/platform/bus/service-bus-inbox-lag';
import { runHealthChecks } from '../../shared/platform/health/health';
import { ManualClock } from '../../shared/platform/time/clock';
import { startAmqpPeer, type AmqpPeer } from '../support/amqp-peer';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { startTestEntra, type TestEntra } from '../support/test-entra';

/**
 * inbox_lag on a host whose promotions queue is a Service Bus queue: the real @azure/service-bus SDK peeks the queue
 * (`com.microsoft:peek-message` on `<queue>/$management`) with a managed-identity token, against the AMQP peer
 * holding messages of known enqueued times. TLS to the peer as in service-bus-managed-identity.test.ts, whose note
 * on the certificate applies here too.
 */
const NAMESPACE = 'rc-bus.servicebus.windows.net';
const NOW = '2026-11-30T10:00:00.000Z';
const secondsBefore = (seconds: number) => new Date(new Date(NOW).getTime() - seconds * 1000);

describe('inbox lag from the Service Bus queue (real @azure/service-bus peeking the AMQP peer)', () => {
  let entra: TestEntra;
  let peer: AmqpPeer;
  let database: TestDatabase;
  const readers: InboxLagReader[] = [];
  const clock = new ManualClock(NOW);
  const savedTls = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
  const readerAt = (endpoint: string): InboxLagReader => {
    const reader = serviceBusInboxLag({ connection: NAMESPACE, credential: entra.credential(), customEndpointAddress: endpoint, db: busDb(database.store.db), clock });
    readers.push(reader);
    return reader;
  };
  const check = async (reader: InboxLagReader) => {
    const { checks } = await runHealthChecks(inboxLagChecks(reader, ['provisioning']));
    return checks[0];
  };

  beforeAll(async () => {
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
    entra = await startTestEntra();
    peer = await startAmqpPeer({ entra: { namespace: NAMESPACE, issuer: entra.issuer, key: entra.publicKey } });
    database = await createTestDatabase('sqlite');
  });
  afterAll(async () => {
    for (const reader of readers) await reader.close().catch(() => undefined);
    await peer?.close();
    await database?.drop();
    if (savedTls === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
    else process.env.NODE_TLS_REJECT_UNAUTHORIZED = savedTls;
  });

  it('when the queue holds messages, then the lag is the age of its oldest active one, and follows it as messages are settled', async () => {
    // Arrange: a deferred message ahead of two active ones.
    const reader = readerAt(peer.endpoint);
    peer.enqueue(PROMOTIONS_QUEUE, { messageId: 'promo-deferred', body: { n: 0 }, enqueuedAt: secondsBefore(900), state: 'deferred' });
    peer.enqueue(PROMOTIONS_QUEUE, { messageId: 'promo-1', body: { n: 1 }, enqueuedAt: secondsBefore(400) });
    peer.enqueue(PROMOTIONS_QUEUE, { messageId: 'promo-2', body: { n: 2 }, enqueuedAt: secondsBefore(30) });

    // Act
    const first = await check(reader);
    peer.settleOldest(PROMOTIONS_QUEUE);
    peer.settleOldest(PROMOTIONS_QUEUE);
    const second = await check(reader);
    peer.settleOldest(PROMOTIONS_QUEUE);
    const drained = await check(reader);
    peer.enqueue(PROMOTIONS_QUEUE, { messageId: 'promo-3', body: { n: 3 }, enqueuedAt: secondsBefore(5) });
    const later = await check(reader);

    // Assert
    expect(first).toMatchObject({
      name: 'inbox-lag:provisioning',
      status: 'degraded',
      error: 'oldest unprocessed message is 400 s old',
      details: { metric: INBOX_LAG_METRIC, module: 'provisioning', source: 'service-bus', lagSeconds: 400, unprocessed: 0 },
    });
    // Peek cannot count a queue: no count is made up.
    expect(first?.details).not.toHaveProperty('waitingInQueues');
    expect([second, drained, later].map((c) => [c?.status, c?.details?.lagSeconds])).toEqual([
      ['healthy', 30],
      ['healthy', 0],
      ['healthy', 5],
    ]);
    // Read with a token the peer accepted for the queue's management link.
    expect(peer.putTokens).toContainEqual({ name: `sb://${NAMESPACE}/${PROMOTIONS_QUEUE}/$management`, type: 'jwt', statusCode: 200, statusDescription: 'OK' });
  });

  it('when an inbox entry is older than the queue, then the lag is its age', async () => {
    // Arrange
    const reader = readerAt(peer.endpoint);
    await recordInbound(busDb(database.store.db), { module: 'provisioning', messageId: 'inbox-old', businessKey: 'promo-old' }, new ManualClock(secondsBefore(120)));

    // Act
    const [lag] = await reader.read(['provisioning']);

    // Assert
    expect(lag).toEqual({ module: 'provisioning', lagSeconds: 120, unprocessed: 1 });
  });

  it('when the bus does not answer, then the check fails rather than reporting no lag', async () => {
    // Arrange: a port nothing listens on.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const reader = readerAt(`sb://127.0.0.1:${port}`);

    // Act
    const result = await check(reader);

    // Assert
    expect(result?.status).toBe('unhealthy');
    expect(result?.error).toMatch(/ECONNREFUSED/);
    expect(result).not.toHaveProperty('details');
    await expect(reader.read(['provisioning'])).rejects.toThrow();
  });

  it('when the host is configured for Service Bus, then its lag is read from the bus; else from the SQL store', async () => {
    const db = busDb(database.store.db);
    const onBus = createInboxLagReader(NAMESPACE, db, clock);
    const local = createInboxLagReader('', db, clock, localTwin.bus);
    readers.push(onBus, local);
    expect([onBus.source, local.source]).toEqual(['service-bus', 'sql-store']);
    // The deployed host has no embedded bus: without Service Bus it does not start.
    expect(() => createInboxLagReader('', db, clock)).toThrow(/ServiceBusConnection is required/);
  });
});
