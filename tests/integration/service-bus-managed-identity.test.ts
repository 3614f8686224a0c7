import type { Kysely } from 'kysely';
import rhea, { type Connection, type EventContext } from 'rhea';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_TOPIC, type NewEvent } from '../../shared/platform/bus/events';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { appendToOutbox, type OutboxTables } from '../../shared/platform/bus/outbox';
import { pendingSummary } from '../../shared/platform/bus/outbox-relay.repository';
import { relayOutbox } from '../../shared/platform/bus/outbox-relay.service';
import { PROMOTIONS_QUEUE } from '../../shared/platform/bus/queue';
import { serviceBusPublisher, type ServiceBusPublisherOptions } from '../../shared/platform/bus/service-bus-publisher';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { SERVICE_BUS_AUDIENCE, startAmqpPeer, type AmqpPeer } from '../support/amqp-peer';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { startIdentityEndpoint, startTestEntra, type TestEntra } from '../support/test-entra';

/**
 * The managed-identity path the infra deploys (`ServiceBusConnection__fullyQualifiedNamespace`): the real
 * @azure/service-bus SDK with a namespace name and an Entra credential, against an AMQP peer that checks each `$cbs`
 * put-token as Service Bus does (type jwt, audience https://servicebus.azure.net, expiry, the entity it names) and
 * refuses links it did not authorize.
 *
 * The SDK speaks TLS to a namespace given by name; `customEndpointAddress` sends the connection to the peer's port
 * while the namespace stays the AMQP host name and the token names. The SDK takes no CA for its TLS socket and Node
 * 20 reads NODE_EXTRA_CA_CERTS only at start, so this file does not verify the peer's (self-signed) certificate.
 */
const NAMESPACE = 'rc-bus.servicebus.windows.net';
const SCOPE = 'https://servicebus.azure.net//.default';

describe('Service Bus with managed identity (real @azure/service-bus, Entra tokens checked by the AMQP peer)', () => {
  let entra: TestEntra;
  let peer: AmqpPeer;
  let database: TestDatabase;
  const publishers: EventPublisher[] = [];
  const savedTls = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
  const publisherWith = (options: Partial<ServiceBusPublisherOptions>): EventPublisher => {
    const publisher = serviceBusPublisher({
      connection: NAMESPACE,
      customEndpointAddress: peer.endpoint,
      retryOptions: { maxRetries: 0, timeoutInMs: 10_000 },
      ...options,
    });
    publishers.push(publisher);
    return publisher;
  };
  const anEvent = (n: number) => ({
    messageId: `evt_mi_${n}`,
    body: JSON.stringify({ id: `evt_mi_${n}`, type: 'LeaseExpired', data: { n } }),
    contentType: 'application/json',
    applicationProperties: { type: 'LeaseExpired' },
  });

  beforeAll(async () => {
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
    entra = await startTestEntra();
    peer = await startAmqpPeer({ entra: { namespace: NAMESPACE, issuer: entra.issuer, key: entra.publicKey } });
    database = await createTestDatabase('sqlite');
  });
  afterAll(async () => {
    for (const publisher of publishers) await publisher.close().catch(() => undefined);
    await peer?.close();
    await database?.drop();
    if (savedTls === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
    else process.env.NODE_TLS_REJECT_UNAUTHORIZED = savedTls;
  });

  it('when the token has the Service Bus audience, then the events reach the topic, authorized by a jwt put-token naming it', async () => {
    // Arrange
    const credential = entra.credential();
    const publisher = publisherWith({ credential });
    const already = peer.received.length;

    // Act
    await publisher.publish(EVENTS_TOPIC, [anEvent(1), anEvent(2)]);

    // Assert
    const received = await peer.waitFor(already + 2);
    expect(received.slice(already).map((m) => [m.address, m.messageId])).toEqual([
      [EVENTS_TOPIC, 'evt_mi_1'],
      [EVENTS_TOPIC, 'evt_mi_2'],
    ]);
    expect(credential.scopes).toContain(SCOPE);
    expect(peer.putTokens.at(-1)).toEqual({ name: `sb://${NAMESPACE}/${EVENTS_TOPIC}`, type: 'jwt', statusCode: 200, statusDescription: 'OK' });
  });

  it('when the token is for another audience, then the put-token is refused with 401 and the relay keeps the events pending', async () => {
    // Arrange
    const db = database.store.db as Kysely<OutboxTables>;
    const clock = new ManualClock('2026-11-30T10:00:00Z');
    const publisher = publisherWith({ credential: entra.credential({ audience: 'https://storage.azure.com/' }) });
    await appendToOutbox(db, [aLeaseExpired()], clock, randomIds);
    const already = peer.received.length;

    // Act
    const relayed = await relayOutbox(db, publisher, { dialect: 'sqlite', clock, ids: randomIds, retryAfterMs: 1000 });

    // Assert
    expect(relayed.published).toBe(0);
    expect(relayed.failed?.events).toBe(1);
    expect(relayed.failed?.error).toMatch(/InvalidAudience/);
    expect(peer.putTokens.at(-1)).toMatchObject({ name: `sb://${NAMESPACE}/${EVENTS_TOPIC}`, type: 'jwt', statusCode: 401 });
    expect(peer.putTokens.at(-1)?.statusDescription).toContain("invalid audience 'https://storage.azure.com/'");
    expect((await pendingSummary(db)).count).toBe(1);
    expect(peer.received).toHaveLength(already);

    // And with a token of the right audience the same rows go out on the next run.
    clock.advance(1001);
    const retried = await relayOutbox(db, publisherWith({ credential: entra.credential() }), { dialect: 'sqlite', clock, ids: randomIds });
    expect(retried).toEqual({ published: 1 });
    expect((await pendingSummary(db)).count).toBe(0);
  });

  it('when the token has expired, then the put-token is refused with 401 ExpiredToken and the send fails', async () => {
    // Arrange
    const publisher = publisherWith({ credential: entra.credential({ lifetimeSeconds: -120 }) });
    const already = peer.received.length;

    // Act
    const sent = publisher.publish(EVENTS_TOPIC, [anEvent(3)]);

    // Assert
    await expect(sent).rejects.toThrow(/ExpiredToken/);
    expect(peer.putTokens.at(-1)).toMatchObject({ name: `sb://${NAMESPACE}/${EVENTS_TOPIC}`, statusCode: 401, statusDescription: 'ExpiredToken: The token is expired.' });
    expect(peer.received).toHaveLength(already);
  });

  it("when no credential is given, then the host's managed identity (DefaultAzureCredential, App Service identity endpoint) is asked for Service Bus and the send succeeds", async () => {
    // Arrange
    const endpoint = await startIdentityEndpoint(entra);
    const saved = { IDENTITY_ENDPOINT: process.env.IDENTITY_ENDPOINT, IDENTITY_HEADER: process.env.IDENTITY_HEADER };
    Object.assign(process.env, endpoint.env);
    const already = peer.received.length;
    try {
      // Act
      await publisherWith({}).publish(EVENTS_TOPIC, [anEvent(4)]);

      // Assert
      const received = await peer.waitFor(already + 1);
      expect(received[already]?.messageId).toBe('evt_mi_4');
      // The system-assigned identity (no client id), for the resource the SDK's scope names.
      expect(endpoint.asked).toEqual([{ resource: `${SERVICE_BUS_AUDIENCE}/`, clientId: null }]);
      expect(peer.putTokens.at(-1)).toMatchObject({ type: 'jwt', statusCode: 200 });
    } finally {
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
      await endpoint.close();
    }
  });

  it('when a link is attached for an entity no put-token authorized, then the peer refuses it as Service Bus does', async () => {
    // Arrange: a plain AMQP client with a valid token for the events topic only.
    const { token } = await entra.issue(`${SERVICE_BUS_AUDIENCE}/`);
    const client = await amqpClient(peer.port);
    try {
      await client.putToken(`sb://${NAMESPACE}/${EVENTS_TOPIC}`, token);

      // Act
      const toQueue = await client.attachSender(PROMOTIONS_QUEUE);
      const toTopic = await client.attachSender(EVENTS_TOPIC);

      // Assert
      expect(toQueue).toEqual({ condition: 'amqp:unauthorized-access', description: expect.stringContaining("'Send' claim(s) are required") as unknown });
      expect(toTopic).toBe('open');
    } finally {
      client.close();
    }
  });
});

/** A LeaseExpired as the capacity module writes it (the outbox is checked against asyncapi.json when the database is dropped). */
function aLeaseExpired(): NewEvent {
  const data = { leaseId: 'lease_mi', tenantId: 'contoso', kind: 'attempt', pool: 'default', units: 1, holder: 'attempt-mi', fencingToken: 1, expiresAt: '2026-11-30T09:59:00.000Z' };
  return { type: 'LeaseExpired', subject: 'leases/lease_mi', correlationId: 'lease_mi', tenant: 'contoso', data };
}

/** A bare rhea client over TLS: `$cbs` put-token and sender attaches, each awaited. */
async function amqpClient(port: number) {
  const container = rhea.create_container({ id: 'bare-client' });
  const connection: Connection = container.connect({ host: '127.0.0.1', port, transport: 'tls', rejectUnauthorized: false, hostname: NAMESPACE });
  await new Promise<void>((resolve) => connection.once('connection_open', () => resolve()));
  const cbs = connection.open_sender('$cbs');
  const replies = connection.open_receiver({ name: 'cbs-replies', source: { address: '$cbs' } });
  return {
    async putToken(name: string, token: string): Promise<void> {
      const answer = new Promise<unknown>((resolve) => replies.once('message', (context: EventContext) => resolve(context.message?.application_properties?.['status-code'])));
      await new Promise<void>((resolve) => (cbs.sendable() ? resolve() : cbs.once('sendable', () => resolve())));
      cbs.send({ message_id: 'put-1', reply_to: 'cbs-replies', application_properties: { operation: 'put-token', type: 'jwt', name }, body: token });
      expect(await answer).toBe(200);
    },
    attachSender(address: string): Promise<'open' | { condition: unknown; description: unknown }> {
      const sender = connection.open_sender(address);
      return new Promise((resolve) => {
        // Refused: attached and at once detached with the error, so the close comes before the first credit.
        sender.once('sender_close', (context: EventContext) => {
          const error = context.sender?.error as { condition?: unknown; description?: unknown } | undefined;
          resolve({ condition: error?.condition, description: error?.description });
        });
        sender.once('sendable', () => resolve('open'));
      });
    },
    close: () => connection.close(),
  };
}
