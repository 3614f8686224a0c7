import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INVENTORY_SUBSCRIPTION } from '../../functions/inventory/inventory-intake';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import type { InventoryService } from '../../shared/inventory/inventory.service';
import { busDb } from '../../shared/platform/bus/bus-db';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { QUEUE_DEFAULTS } from '../../shared/platform/bus/queue';
import { enqueue, listActive, listDeadLettered } from '../../local/bus/queue.repository';
import { subscriptionEntity } from '../../local/bus/topic.repository';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { inventoryOver, specificationApplied, type TestResource } from '../support/inventory';
import { startTestHost, type TestHost } from '../support/local-host';

const RESOURCES: readonly TestResource[] = [{ name: 'api', type: 'local:compute:Service', properties: { size: 'small' } }];
const KNOWN_TENANTS = new Set(['tenant-a', 'tenant-b']);

/** A CloudEvent of the topic as the outbox relay publishes it. */
function anEvent(type: string, data: unknown, overrides: Record<string, unknown> = {}) {
  return { specversion: '1.0', id: `event-${Math.random().toString(36).slice(2)}`, source: '/runtime-cloud', type, time: '2026-06-01T00:00:00.000Z', datacontenttype: 'application/json', data, ...overrides };
}

/**
 * What inventory does with each message of its subscription: takes it in (its inbox entry says what came of it), or
 * records it as a rejection with its code and reason, by messageId; never only a log line. A redelivery records
 * nothing twice; a rejected message changes no environment, of its tenant or of another with the same names.
 */
describe.each(REPOSITORY_DIALECTS)('inventory intake on %s', (dialect) => {
  let server: RunningTableServer;
  let database: TestDatabase;
  let inventory: InventoryService;
  let messages = 0;

  beforeAll(async () => {
    if (skipDialect(dialect)) return;
    server = await startTableServer();
    database = await createTestDatabase(dialect);
    ({ inventory } = inventoryOver(database.store, server.connectionString, new ManualClock('2026-06-01T00:00:00Z'), { knowsTenant: async (tenant) => KNOWN_TENANTS.has(tenant) }));
  });
  afterAll(async () => {
    await database?.drop();
    await server?.close();
  });

  const take = async (body: unknown) => {
    const messageId = `message-${dialect}-${++messages}`;
    return { messageId, result: await inventory.intake({ messageId, body }) };
  };
  const inboxOf = async (messageId: string) =>
    (await busDb(database.store.db).selectFrom('inbox').select(['outcome', 'processed_at']).where('module', '=', 'inventory').where('message_id', '=', messageId).executeTakeFirst()) ?? null;
  const expectRejected = async (body: unknown, code: string, reason: string | RegExp) => {
    const { messageId, result } = await take(body);
    expect(result).toMatchObject({ outcome: 'rejected', code });
    const rejection = await inventory.getRejection(messageId);
    expect(rejection).toMatchObject({ messageId, code });
    expect(rejection!.reason).toMatch(reason);
    expect(await inboxOf(messageId)).toMatchObject({ outcome: 'rejected', processed_at: expect.anything() });
    return { messageId, rejection: rejection! };
  };
  const spec = (id: string, tenant: string) => specificationApplied({ id, stack: `stack-${id}`, tenant }, RESOURCES);

  it.skipIf(skipDialect(dialect))('when a message is not JSON or not a CloudEvent, then it is recorded as a rejection with its reason', async () => {
    await expectRejected('{"specversion":', 'INVENTORY.INVALID_EVENT', 'the message is not JSON');
    await expectRejected(new TextEncoder().encode('\u0000not json'), 'INVENTORY.INVALID_EVENT', 'the message is not JSON');
    const { rejection } = await expectRejected({ ...anEvent('SpecificationApplied', {}), id: undefined }, 'INVENTORY.INVALID_EVENT', /^the message is not a CloudEvent 1\.0: id: /);
    expect(rejection.problems).toEqual([expect.objectContaining({ field: 'id' })]);
    await expectRejected([1, 2, 3], 'INVENTORY.INVALID_EVENT', /not a CloudEvent/);
  });

  it.skipIf(skipDialect(dialect))('when an event is of another CloudEvents version, then it is rejected naming the version', async () => {
    await expectRejected(anEvent('SpecificationApplied', spec('env-v', 'tenant-a'), { specversion: '0.3' }), 'INVENTORY.UNSUPPORTED_EVENT_VERSION', 'CloudEvents specversion "0.3" is not read here; events are CloudEvents 1.0');
    await expectRejected(anEvent('ProvisioningApplied', {}, { specversion: 2 }), 'INVENTORY.UNSUPPORTED_EVENT_VERSION', /specversion 2 /);
    await expect(inventory.getEnvironment({ kind: 'all' }, 'env-v')).rejects.toMatchObject({ code: 'INVENTORY.ENVIRONMENT_NOT_FOUND' });
  });

  it.skipIf(skipDialect(dialect))("when a SpecificationApplied names a tenant this host does not know, then it is rejected and no environment is made, and another tenant's of the same id is untouched", async () => {
    const known = await take(anEvent('SpecificationApplied', spec('env-shared', 'tenant-a')));
    expect(known.result).toMatchObject({ outcome: 'specification', recorded: 'recorded', environment: { tenant: 'tenant-a', id: 'env-shared' } });
    expect(await inboxOf(known.messageId)).toMatchObject({ outcome: 'specification-recorded' });

    const { rejection } = await expectRejected(anEvent('SpecificationApplied', spec('env-shared', 'tenant-zz')), 'INVENTORY.UNKNOWN_TENANT', 'the tenant tenant-zz is not known to this host');
    expect(rejection).toMatchObject({ tenantId: 'tenant-zz', eventType: 'SpecificationApplied' });
    // tenant-b is known but sent a broken desired state for the same environment id: refused, tenant-a's unchanged.
    await expectRejected(anEvent('SpecificationApplied', { ...spec('env-shared', 'tenant-b'), resources: 'none' }), 'INVENTORY.INVALID_SPECIFICATION', /^the SpecificationApplied has no readable desired state: resources: /);

    const environments = (await inventory.listEnvironments({ kind: 'all' }, { limit: 100 })).items.filter((e) => e.id === 'env-shared');
    expect(environments.map((e) => [e.tenantId, e.desiredRelease.runId])).toEqual([['tenant-a', 'run-env-shared']]);
  });

  it.skipIf(skipDialect(dialect))("when a run's terminal event names no run's end, then it is rejected; a rejected message's or another type's event is taken in without one", async () => {
    await expectRejected(anEvent('ProvisioningApplied', { runId: 'run-1', tenantId: 'tenant-a' }), 'INVENTORY.INVALID_RUN_OUTCOME', /^the ProvisioningApplied names no run's end: environment: /);
    await expectRejected(anEvent('ProvisioningFailed', { runId: 'run-1', tenantId: 'tenant-a', environment: { id: 'e' }, state: 'failed', finishedAt: 'yesterday' }), 'INVENTORY.INVALID_RUN_OUTCOME', /finishedAt/);

    const noted = await take(anEvent('ProvisioningFailed', { runId: 'run-2', tenantId: 'tenant-a', environment: { id: 'env-shared' }, state: 'failed', finishedAt: '2026-06-01T00:01:00.000Z' }));
    expect(noted.result).toEqual({ outcome: 'run', noted: true });
    expect(await inboxOf(noted.messageId)).toMatchObject({ outcome: 'run-noted' });
    expect((await inventory.getEnvironment({ kind: 'one', tenant: 'tenant-a' }, 'env-shared')).lastRun).toMatchObject({ id: 'run-2', state: 'failed' });

    const refused = await take(anEvent('ProvisioningFailed', { messageId: 'm-1', trigger: 'promotion', state: 'rejected', code: 'PROVISIONING.INVALID_PROMOTION', reason: 'x', problems: [], finishedAt: '2026-06-01T00:00:00.000Z' }));
    expect(refused.result).toEqual({ outcome: 'no-run' });
    expect(await inboxOf(refused.messageId)).toMatchObject({ outcome: 'no-run' });

    const other = await take(anEvent('LeaseExpired', { leaseId: 'l-1' }));
    expect(other.result).toEqual({ outcome: 'not-for-inventory', type: 'LeaseExpired' });
    expect(await inventory.getRejection(other.messageId)).toBeUndefined();
  });

  it.skipIf(skipDialect(dialect))('when a rejected message is delivered again, then its first rejection stands and nothing is recorded twice', async () => {
    const body = anEvent('SpecificationApplied', spec('env-again', 'tenant-unknown'));
    const first = await expectRejected(body, 'INVENTORY.UNKNOWN_TENANT', /tenant-unknown/);
    expect(await inventory.intake({ messageId: first.messageId, body })).toMatchObject({ outcome: 'rejected', code: 'INVENTORY.UNKNOWN_TENANT' });
    const rows = await busDb(database.store.db).selectFrom('inbox').select('message_id').where('module', '=', 'inventory').where('message_id', '=', first.messageId).execute();
    expect(rows).toHaveLength(1);
    expect(await inventory.getRejection(first.messageId)).toEqual(first.rejection);
  });
});

/** The same through the local host's embedded bus and the `inventoryIntake` function: completed, never dead-lettered, each recorded. */
describe('inventory intake on the local host', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when a malformed event, an unknown tenant and a wrong version reach the subscription, then each is completed and recorded as a rejection with its reason', async () => {
    const { deps } = host.host;
    const db = busDb(deps.sql.db);
    const entity = subscriptionEntity(EVENTS_TOPIC, INVENTORY_SUBSCRIPTION);
    const sent = {
      malformed: { body: '{"specversion":"1.0","type":', code: 'INVENTORY.INVALID_EVENT' },
      unknownTenant: { body: JSON.stringify(anEvent('SpecificationApplied', specificationApplied({ id: 'env-x', stack: 'stack-x', tenant: 'nobody' }, RESOURCES))), code: 'INVENTORY.UNKNOWN_TENANT' },
      wrongVersion: { body: JSON.stringify(anEvent('ProvisioningApplied', {}, { specversion: '0.3' })), code: 'INVENTORY.UNSUPPORTED_EVENT_VERSION' },
    };
    for (const [name, { body }] of Object.entries(sent)) {
      await enqueue(db, deps.sql.dialect, entity, { messageId: `host-${name}`, body, contentType: 'application/json' }, { now: deps.clock.now().getTime(), duplicateDetectionWindowMs: QUEUE_DEFAULTS.duplicateDetectionWindowMs });
    }
    await eventually(async () => ((await listActive(db, deps.sql.dialect, entity, { limit: 1 })).length === 0 ? true : undefined));

    expect(await listDeadLettered(db, deps.sql.dialect, entity, { limit: 10 })).toEqual([]);
    for (const [name, { code }] of Object.entries(sent)) {
      const rejection = await deps.inventory.getRejection(`host-${name}`);
      expect(rejection, name).toMatchObject({ code, reason: expect.stringMatching(/\S/) });
    }
  });
});
