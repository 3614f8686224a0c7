import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { examplePromotion, type ExampleRepository } from '../../local/example-repository';
import { claimCheckingPublisher, eventBodyName, type EventBodyStore } from '../../shared/platform/bus/event-bodies';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { EVENT_TYPES, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { appendToOutbox, toCloudEvent, type OutboxTables } from '../../shared/platform/bus/outbox';
import { PROMOTIONS_QUEUE } from '../../shared/platform/bus/queue';
import { poolResizeRejected, promotionRejected } from '../../shared/provisioning/run-events';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import type { Kysely } from 'kysely';
import { createTestDatabase } from '../support/databases';
import { ASYNCAPI_FILE, contractValidators, eventViolation } from '../support/event-contracts';

/** The official AsyncAPI 3.0.0 JSON Schema (draft-07), as @asyncapi/specs publishes it. */
const asyncApiSchema = createRequire(__filename)('@asyncapi/specs/schemas/3.0.0-without-$id.json') as object;

type Json = Record<string, unknown>;
const document = JSON.parse(readFileSync(ASYNCAPI_FILE, 'utf8')) as Json;

/** Every `$ref` string of the document with where it is, for checking that local ones point somewhere. */
function refsOf(node: unknown, path = '#'): { path: string; ref: string }[] {
  if (Array.isArray(node)) return node.flatMap((child, i) => refsOf(child, `${path}/${i}`));
  if (typeof node !== 'object' || node === null) return [];
  return Object.entries(node as Json).flatMap(([key, child]) =>
    key === '$ref' && typeof child === 'string' ? [{ path, ref: child }] : refsOf(child, `${path}/${key}`),
  );
}

function resolvePointer(pointer: string): unknown {
  return pointer
    .replace(/^#\//, '')
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce<unknown>((node, key) => (typeof node === 'object' && node !== null ? (node as Json)[key] : undefined), document);
}

const repository: ExampleRepository = { path: '/tmp/desired-state.git', url: 'file:///tmp/desired-state.git', commit: '3f1c2b7a9d4e5f60718293a4b5c6d7e8f9012345' };

describe('asyncapi.json', () => {
  it('when checked against the AsyncAPI 3.0.0 JSON Schema, then it is a valid AsyncAPI 3 document', () => {
    // Arrange
    const ajv = new Ajv({ allErrors: true, strict: false });
    addFormats(ajv);
    const validate = ajv.compile(asyncApiSchema);

    // Act
    const valid = validate(document);

    // Assert
    expect(validate.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it('when its references are followed, then each local one names a part of the document and the file one exists', () => {
    // Act
    const broken = refsOf(document).filter(({ ref }) => (ref.startsWith('#/') ? resolvePointer(ref) === undefined : !ref.endsWith('.json')));

    // Assert
    expect(broken).toEqual([]);
  });

  it('when its operations are read, then each message of an operation is a message of its channel', () => {
    // Arrange
    const operations = Object.entries(document.operations as Record<string, { channel: { $ref: string }; messages: { $ref: string }[] }>);

    // Act
    const strays = operations.flatMap(([name, op]) => op.messages.filter((m) => !m.$ref.startsWith(`${op.channel.$ref}/messages/`)).map((m) => `${name}: ${m.$ref}`));

    // Assert
    expect(strays).toEqual([]);
  });

  it('when the queue and the topic are looked up, then they have the addresses the app uses', () => {
    // Arrange
    const channels = document.channels as Record<string, { address: string }>;

    // Act
    const addresses = Object.values(channels).map((c) => c.address);

    // Assert
    expect(addresses).toEqual(expect.arrayContaining([PROMOTIONS_QUEUE, EVENTS_TOPIC, `${EVENTS_TOPIC}/Subscriptions/provisioning`, `${EVENTS_TOPIC}/Subscriptions/inventory`]));
  });

  it('when the event types are listed, then each has a message on the topic, a send operation and a compiled validator', () => {
    // Arrange
    const topic = (document.channels as Record<string, { messages: Json }>).events;
    const operations = document.operations as Record<string, { action: string }>;

    // Act
    const missing = EVENT_TYPES.filter((type) => !topic?.messages[type] || operations[`send${type}`]?.action !== 'send' || !contractValidators().event(type));

    // Assert
    expect(missing).toEqual([]);
    // Beside the event types, the envelope any of them is published in when it is claim-checked.
    expect(Object.keys(topic?.messages ?? {}).sort()).toEqual([...EVENT_TYPES, 'ClaimCheckedEvent'].sort());
  });
});

describe('PromotionApproved in asyncapi.json', () => {
  it.each(['development', 'production'] as const)('when the example promotion for %s is validated, then it is valid', (environment) => {
    // Arrange
    const promotion = examplePromotion(environment, repository);

    // Act
    const valid = contractValidators().promotionApproved(promotion);

    // Assert
    expect(contractValidators().promotionApproved.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it('when a promotion has a short commit sha, then it is refused', () => {
    // Arrange
    const promotion = examplePromotion('development', repository);
    const broken = { ...promotion, desiredState: { ...promotion.desiredState, commit: '3f1c2b7' } };

    // Act
    const valid = contractValidators().promotionApproved(broken);

    // Assert
    expect(valid).toBe(false);
  });
});

describe('event messages in asyncapi.json', () => {
  const clock = new ManualClock('2026-11-30T09:00:00Z');
  const ids = randomIds;
  const at = new Date('2026-11-30T09:00:00Z');
  const valid = toCloudEvent(
    promotionRejected({ messageId: 'msg-1', code: 'PROVISIONING.INVALID_PROMOTION', reason: 'not a promotion', problems: [{ field: 'promotionId', message: 'Required' }], at }),
    clock,
    ids,
  );

  const stack = { tenant: 'demo-team', project: 'pools', stack: 'builders' };
  const poolResize = toCloudEvent(
    poolResizeRejected({ messageId: 'msg-2', eventId: 'evt-9', pool: 'builders', stack, code: 'PROVISIONING.UNKNOWN_STACK', reason: 'no run applied demo-team/pools/builders', problems: [], at }),
    clock,
    ids,
  );

  it('when a rejected promotion and a rejected pool resize are validated, then both are the one ProvisioningFailed shape, naming a stack as a run does', () => {
    // Act
    const violations = [eventViolation(valid.id, JSON.stringify(valid)), eventViolation(poolResize.id, JSON.stringify(poolResize))];

    // Assert
    expect(violations).toEqual([undefined, undefined]);
    expect(poolResize).toMatchObject({ tenant: 'demo-team', data: { trigger: 'pool-resize', tenantId: 'demo-team', project: 'pools', stack: 'builders', qualifiedStack: 'demo-team/pools/builders' } });
    expect(valid.data).toMatchObject({ trigger: 'promotion', state: 'rejected', problems: [{ field: 'promotionId' }] });
  });

  it.each<[string, (event: Json) => Json]>([
    ['both a run and a message', (e) => ({ ...e, data: { ...(e.data as Json), runId: 'run-1' } })],
    ['neither a run nor a message', (e) => ({ ...e, data: { ...(e.data as Json), messageId: undefined } })],
    ['a run without the members of every run event', (e) => ({ ...e, data: { ...(e.data as Json), messageId: undefined, runId: 'run-1' } })],
    ['a message that was not rejected', (e) => ({ ...e, data: { ...(e.data as Json), state: 'failed' } })],
    ['without its trigger', (e) => ({ ...e, data: { ...(e.data as Json), trigger: undefined } })],
  ])('when a rejected pool resize names %s, then the contract check reports it', (_name, breakIt) => {
    expect(eventViolation('evt-broken', JSON.stringify(breakIt(poolResize as unknown as Json)))?.errors.length).toBeGreaterThan(0);
  });

  it.each<[string, (event: Json) => Json]>([
    ['without its data member problems', (e) => ({ ...e, data: { ...(e.data as Json), problems: undefined } })],
    ['with a number for data.code', (e) => ({ ...e, data: { ...(e.data as Json), code: 42 } })],
    ['with an unknown state', (e) => ({ ...e, data: { ...(e.data as Json), state: 'exploded' } })],
    ['with a time that is not a date-time', (e) => ({ ...e, time: 'yesterday' })],
    ['with another specversion', (e) => ({ ...e, specversion: '0.3' })],
    ['without a subject', (e) => ({ ...e, subject: undefined })],
  ])('when a ProvisioningFailed event is %s, then the contract check reports it with its id and type', (_name, breakIt) => {
    // Arrange
    const broken = breakIt(valid);

    // Act
    const violation = eventViolation('evt-broken', JSON.stringify(broken));

    // Assert
    expect(violation).toMatchObject({ eventId: 'evt-broken', type: 'ProvisioningFailed' });
    expect(violation?.errors.length).toBeGreaterThan(0);
  });

  it('when an event has a type the document does not know, then the check reports it', () => {
    // Act
    const violation = eventViolation('evt-x', JSON.stringify({ ...valid, type: 'SomethingHappened' }));

    // Assert
    expect(violation).toEqual({ eventId: 'evt-x', type: 'SomethingHappened', errors: ['asyncapi.json has no message for type SomethingHappened'] });
  });
});

describe('the outbox check of test databases', () => {
  it('when a test store holds an event that breaks the contract, then drop() fails naming its id, type and error', async () => {
    // Arrange
    const database = await createTestDatabase('sqlite');
    const [written] = await appendToOutbox(
      database.store.db as Kysely<OutboxTables>,
      [{ type: 'LeaseExpired', subject: 'leases/l1', correlationId: 'l1', tenant: 't1', data: { leaseId: 'l1', tenantId: 't1', kind: 'attempt', pool: 'p1', units: 0, holder: 'h', fencingToken: 1, expiresAt: '2026-11-30T09:00:00.000Z' } }],
      new ManualClock('2026-11-30T09:00:00Z'),
      randomIds,
    );

    // Act
    const dropped = database.drop();

    // Assert
    await expect(dropped).rejects.toThrow(`- LeaseExpired ${written?.id}:\n    /data/units must be >= 1`);
  });
});

describe('claim-checked events in asyncapi.json', () => {
  // The envelope's shape is what is checked here: the data is kept in a map (Blob storage is tests/integration/events-never-wedge.test.ts's).
  const stored = new Map<string, string>();
  const store: EventBodyStore = { put: async (key, data) => void stored.set(eventBodyName(key), data), get: async (key) => stored.get(eventBodyName(key)) };
  const big = toCloudEvent({ type: 'LeaseExpired', subject: 'leases/l1', correlationId: 'l1', tenant: 't1', data: { padding: 'x'.repeat(2048) } }, new ManualClock('2026-12-06T10:00:00Z'), randomIds);
  const envelopeOf = async (): Promise<Json> => {
    let body = '';
    const capture: EventPublisher = { name: 'capture', publishBudgetMs: 0, publish: async (_topic, [message]) => void (body = message?.body ?? ''), close: async () => undefined };
    await claimCheckingPublisher(capture, { store, thresholdBytes: 1024 }).publish(EVENTS_TOPIC, [{ messageId: big.id, body: JSON.stringify(big), contentType: 'application/json' }]);
    return JSON.parse(body) as Json;
  };

  it('when an event over the threshold is published, then its envelope is the documented ClaimCheckedEvent', async () => {
    // Act
    const envelope = await envelopeOf();

    // Assert
    expect(contractValidators().claimCheckEnvelope(envelope), JSON.stringify(contractValidators().claimCheckEnvelope.errors)).toBe(true);
    expect(envelope).toMatchObject({ id: big.id, tenant: 't1', dataref: `tenants/t1/events/${big.id}.json` });
  });

  it.each<[string, (envelope: Json) => Json]>([
    ['with its data as well', (e) => ({ ...e, data: {} })],
    ['without its digest', (e) => ({ ...e, datadigest: undefined })],
    ['with a digest of another algorithm', (e) => ({ ...e, datadigest: `md5:${'0'.repeat(32)}` })],
    ['with a dataref outside the tenants and host prefixes', (e) => ({ ...e, dataref: 'https://elsewhere.example/evt.json' })],
  ])('when an envelope is %s, then the contract check refuses it', async (_name, breakIt) => {
    expect(contractValidators().claimCheckEnvelope(JSON.parse(JSON.stringify(breakIt(await envelopeOf()))))).toBe(false);
  });
});
