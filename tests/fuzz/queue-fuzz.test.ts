import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { INVENTORY_SUBSCRIPTION } from '../../functions/inventory/inventory-intake';
import { PROMOTIONS_QUEUE } from '../../functions/provisioning/promotion-intake';
import { PROVISIONING_SUBSCRIPTION } from '../../functions/provisioning/pool-resize-intake';
import { localDurable } from '../../local/durable/durable-component';
import { capacitySeedComponent } from '../../local/capacity-seed';
import { exampleDesiredStateComponent } from '../../local/example-repository';
import { jsonLineLog } from '../../local/host';
import { ServiceBusBinding } from '../../local/service-bus/service-bus-binding';
import { busDb } from '../../shared/platform/bus/bus-db';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { QUEUE_DEFAULTS, type OutgoingMessage } from '../../shared/platform/bus/queue';
import { enqueue, listActive, listDeadLettered } from '../../shared/platform/bus/queue.repository';
import { subscriptionEntity } from '../../shared/platform/bus/topic.repository';
import { aPromotion } from '../support/builders';
import { eventually } from '../support/eventually';
import { startTestHost, type TestHost } from '../support/local-host';
import { mutated } from './arbitraries';
import { fuzzSettings } from './settings';

/** The entities the host consumes: the promotions queue and its two subscriptions of the events topic. */
const ENTITIES = {
  promotions: PROMOTIONS_QUEUE,
  provisioning: subscriptionEntity(EVENTS_TOPIC, PROVISIONING_SUBSCRIPTION),
  inventory: subscriptionEntity(EVENTS_TOPIC, INVENTORY_SUBSCRIPTION),
} as const;
type Entity = keyof typeof ENTITIES;

interface FuzzMessage {
  readonly entity: Entity;
  readonly message: OutgoingMessage;
}

const promotion = fc.record({
  promotionId: fc.oneof(fc.uuid(), fc.constantFrom('prom_1', 'prom_2', '', 'x'.repeat(300))),
  tenantId: fc.constantFrom('contoso', 'fabrikam', 'tenant-a', '', '../etc', 'Ünïcode'),
  environmentId: fc.constantFrom('env-dev', 'env-dev-1', 'prod', ''),
  repository: fc.constantFrom('https://git.example.com/tenant-a/desired-state.git', 'file:///etc', 'ssh://x', 'http://127.0.0.1:1/x.git', 'not a url'),
}).map((p) => aPromotion({ promotionId: p.promotionId, tenantId: p.tenantId, environment: { id: p.environmentId, name: 'development', tier: 'development' }, desiredState: { ...aPromotion().desiredState, repository: p.repository } }));

/** A CloudEvent of the topic, of any of its types, with `data` of the given shape. */
function cloudEvent(type: fc.Arbitrary<string>, data: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return fc.record({ specversion: fc.constant('1.0'), id: fc.uuid(), source: fc.constant('/runtime-cloud'), type, time: fc.constant('2026-03-01T09:30:00.000Z'), datacontenttype: fc.constant('application/json'), data });
}

const poolResize = fc.record({
  pool: fc.constantFrom('local-runner', 'local-attempt', 'nope', ''),
  kind: fc.constantFrom('runner', 'attempt', 'bogus'),
  target: fc.constant('local'),
  iacStack: fc.constantFrom('contoso/pools/local-runner', 'fabrikam/pools/local-runner', 'bare', '//', 'a/b/c/d'),
  fromCapacity: fc.integer({ min: -1, max: 100 }),
  toCapacity: fc.integer({ min: -1, max: 100 }),
  used: fc.nat(10),
});

const eventBody = cloudEvent(
  fc.constantFrom('PoolResizeRequested', 'SpecificationApplied', 'ProvisioningApplied', 'ProvisioningFailed', 'LeaseExpired', 'Unknown'),
  fc.oneof(poolResize, fc.jsonValue({ maxDepth: 3 }), fc.record({ runId: fc.string(), tenant: fc.constantFrom('contoso', 'fabrikam'), environment: fc.record({ id: fc.string() }) })),
);

/** A body as the wire carries it: valid-ish and mutated, any JSON, broken JSON, huge, deep. */
function wireBody(valid: fc.Arbitrary<unknown>): fc.Arbitrary<{ body: string; contentType: string }> {
  const json = (v: unknown) => ({ body: JSON.stringify(v) ?? 'null', contentType: 'application/json' });
  return fc.oneof(
    { weight: 6, arbitrary: mutated(valid).map(json) },
    { weight: 2, arbitrary: valid.map(json) },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }).map(json) },
    { weight: 1, arbitrary: fc.constantFrom('{', '{"promotionId":', '', 'null', '\u0000', '[[[[').map((body) => ({ body, contentType: 'application/json' })) },
    { weight: 1, arbitrary: fc.string({ maxLength: 80 }).map((body) => ({ body, contentType: 'text/plain' })) },
    { weight: 1, arbitrary: fc.integer({ min: 1000, max: 20_000 }).map((d) => ({ body: `${'['.repeat(d)}${']'.repeat(d)}`, contentType: 'application/json' })) },
    { weight: 1, arbitrary: fc.integer({ min: 10_000, max: 250_000 }).map((n) => json({ ...aPromotion({ promotionId: randomUUID() }), requestedBy: 'x'.repeat(n) })) },
  );
}

/** Message ids: mostly fresh, some from a small pool (duplicates, and ids reused for another body). */
const messageId = fc.oneof({ weight: 9, arbitrary: fc.uuid() }, { weight: 1, arbitrary: fc.constantFrom('dup-1', 'dup-2', 'dup-3') });

const fuzzMessage: fc.Arbitrary<FuzzMessage> = fc.constantFrom<Entity>('promotions', 'promotions', 'provisioning', 'inventory').chain((entity) =>
  fc.record({ messageId, wire: wireBody(entity === 'promotions' ? promotion : eventBody) }).map(({ messageId: id, wire }) => ({ entity, message: { messageId: id, ...wire } })),
);

describe('queue message fuzzing', () => {
  let host: TestHost;
  beforeAll(async () => {
    // Rejections are logged as warnings, thousands of them here: only errors are shown.
    host = await startTestHost({ log: jsonLineLog('error'), components: [localDurable(), capacitySeedComponent(), exampleDesiredStateComponent(), new ServiceBusBinding({ pollIntervalMs: 20 })] });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when 10,000 generated messages reach every queue and subscription, then each is taken in, recorded as a rejection with its reason, or dead-lettered with one', async () => {
    const { seed, numRuns } = fuzzSettings('queue-fuzz', 10_000);
    const { deps } = host.host;
    const db = busDb(deps.sql.db);
    const messages = fc.sample(fuzzMessage, { seed, numRuns });
    const enqueued: FuzzMessage[] = [];
    for (const m of messages) {
      const result = await enqueue(db, deps.sql.dialect, ENTITIES[m.entity], m.message, { now: deps.clock.now().getTime(), duplicateDetectionWindowMs: QUEUE_DEFAULTS.duplicateDetectionWindowMs });
      if (result.kind !== 'duplicate') enqueued.push(m);
    }

    // Every entity drained: nothing active (locked or waiting) is left.
    await eventually(async () => {
      for (const entity of Object.values(ENTITIES)) if ((await listActive(db, deps.sql.dialect, entity, { limit: 1 })).length > 0) return undefined;
      return true;
    }, 240_000);

    const deadLettered = new Map<string, string>();
    for (const entity of Object.values(ENTITIES)) {
      for (const m of await listDeadLettered(db, deps.sql.dialect, entity, { limit: 100_000 })) deadLettered.set(`${entity}:${m.messageId}`, m.deadLetter?.reason ?? '');
    }
    const inbox = new Map((await db.selectFrom('inbox').select(['message_id', 'outcome']).where('module', '=', 'provisioning').execute()).map((r) => [r.message_id, r.outcome]));

    const defects: string[] = [];
    const outcomes = new Map<string, number>();
    for (const { entity, message } of enqueued) {
      const outcome = await fateOf(entity, message.messageId);
      outcomes.set(`${entity}:${outcome.kind}`, (outcomes.get(`${entity}:${outcome.kind}`) ?? 0) + 1);
      if (outcome.defect) defects.push(`${entity} ${message.messageId}: ${outcome.defect} (body ${message.body.slice(0, 200)})`);
    }
    console.log(`queue-fuzz: ${messages.length} generated, ${enqueued.length} enqueued (the rest duplicates the bus dropped); outcomes ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`);
    expect(defects.slice(0, 20)).toEqual([]);

    /** What became of one message: taken in, rejected with a reason, dead-lettered with a reason; or a defect. */
    async function fateOf(entity: Entity, id: string): Promise<{ kind: string; defect?: string }> {
      const reason = deadLettered.get(`${ENTITIES[entity]}:${id}`);
      if (reason !== undefined) return reason ? { kind: 'dead-lettered' } : { kind: 'dead-lettered', defect: 'dead-lettered without a reason' };
      // The inventory subscription reads every event of the topic; what it cannot use it logs and completes.
      if (entity === 'inventory') return { kind: 'completed' };
      const rejection = await deps.provisioning.getRejection(id);
      if (rejection) return rejection.reason ? { kind: 'rejected' } : { kind: 'rejected', defect: 'a rejection without a reason' };
      const recorded = inbox.get(id);
      if (recorded !== undefined) return { kind: `inbox-${String(recorded)}` };
      // Events of other types are not for provisioning (Azure's subscription rule filters them out).
      if (entity === 'provisioning') return { kind: 'not-for-provisioning' };
      return { kind: 'lost', defect: 'completed with nothing recorded' };
    }
  }, 300_000);
});
