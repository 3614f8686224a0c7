import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
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
import { cloudEventSchema, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { QUEUE_DEFAULTS, type OutgoingMessage } from '../../shared/platform/bus/queue';
import { enqueue, listActive, listDeadLettered } from '../../local/bus/queue.repository';
import { subscriptionEntity } from '../../local/bus/topic.repository';
import { aPromotion } from '../support/builders';
import { specificationApplied } from '../support/inventory';
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

/** A SpecificationApplied's data, of a seeded tenant or of one the host does not know. */
const specification = fc
  .record({ id: fc.constantFrom('env-dev', 'env-fuzz', ''), tenant: fc.constantFrom('demo-team', 'demo-free', 'contoso', 'Ünïcode') })
  .map(({ id, tenant }) => specificationApplied({ id, stack: 'fuzz', tenant }, [{ name: 'api', type: 'local:compute:Service', properties: { size: 'small' } }]));

/** A run's terminal event's data. */
const runOutcome = fc.record({
  runId: fc.constantFrom('run-1', 'run-2', ''),
  tenantId: fc.constantFrom('demo-team', 'contoso'),
  environment: fc.record({ id: fc.constantFrom('env-dev', 'env-fuzz') }),
  state: fc.constantFrom('applied', 'failed', 'rejected'),
  finishedAt: fc.constantFrom('2026-03-01T09:30:00.000Z', 'soon'),
});

const eventBody = cloudEvent(
  fc.constantFrom('PoolResizeRequested', 'SpecificationApplied', 'ProvisioningApplied', 'ProvisioningFailed', 'LeaseExpired', 'Unknown'),
  fc.oneof(poolResize, specification, runOutcome, fc.jsonValue({ maxDepth: 3 }), fc.record({ runId: fc.string(), tenant: fc.constantFrom('contoso', 'fabrikam'), environment: fc.record({ id: fc.string() }) })),
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

/** The event types inventory takes in; a CloudEvent 1.0 of any other type is not for it. */
const INVENTORY_TYPES = ['SpecificationApplied', 'ProvisioningApplied', 'ProvisioningFailed'];
const otherEvent = cloudEventSchema().extend({ type: z.string().min(1) });
const parseOrUndefined = (text: string): unknown => {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
};

/** Message ids: mostly fresh, some from a small pool (duplicates, and ids reused for another body). */
const messageId = fc.oneof({ weight: 9, arbitrary: fc.uuid() }, { weight: 1, arbitrary: fc.constantFrom('dup-1', 'dup-2', 'dup-3') });

const fuzzMessage: fc.Arbitrary<FuzzMessage> = fc.constantFrom<Entity>('promotions', 'promotions', 'provisioning', 'inventory').chain((entity) =>
  fc.record({ messageId, wire: wireBody(entity === 'promotions' ? promotion : eventBody) }).map(({ messageId: id, wire }) => ({ entity, message: { messageId: id, ...wire } })),
);

describe('queue message fuzzing', () => {
  let host: TestHost;
  beforeAll(async () => {
    // Rejections are logged as warnings, thousands of them here: only errors are shown. Dynamic concurrency (on in
    // host.json) is off: it holds the event loop below 80 % busy by fetching nothing while it is busier, which for
    // 10,000 messages on one loop meant a third of the test idle and the receivers starved (one message a second)
    // while the test enqueues. Off, every subscription runs up to 16 handlers at once, as many as the binding ever
    // allows, so the fuzz meets more interleavings, not fewer; the governor is tested in
    // tests/unit/dynamic-concurrency.test.ts.
    const bus = new ServiceBusBinding({ pollIntervalMs: 20, dynamicConcurrency: false });
    host = await startTestHost({ log: jsonLineLog('error'), components: [localDurable(), capacitySeedComponent(), exampleDesiredStateComponent(), bus] });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when 10,000 generated messages reach every queue and subscription, then each is taken in, recorded as a rejection with its reason, or dead-lettered with one (the inventory subscription: taken in or rejected, or of a type not its own)', async () => {
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
    // What each module recorded of the messages it took in, by module and messageId.
    const inbox = new Map((await db.selectFrom('inbox').select(['module', 'message_id', 'outcome', 'processed_at']).execute()).map((r) => [`${r.module}:${r.message_id}`, r]));

    const defects: string[] = [];
    const outcomes = new Map<string, number>();
    for (const { entity, message } of enqueued) {
      const outcome = await fateOf(entity, message.messageId, message.body);
      outcomes.set(`${entity}:${outcome.kind}`, (outcomes.get(`${entity}:${outcome.kind}`) ?? 0) + 1);
      if (outcome.defect) defects.push(`${entity} ${message.messageId}: ${outcome.defect} (body ${message.body.slice(0, 200)})`);
    }
    console.log(`queue-fuzz: ${messages.length} generated, ${enqueued.length} enqueued (the rest duplicates the bus dropped); outcomes ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`);
    expect(defects.slice(0, 20)).toEqual([]);

    /** What became of one message: taken in, rejected with a reason, dead-lettered with a reason; or a defect. */
    async function fateOf(entity: Entity, id: string, body: string): Promise<{ kind: string; defect?: string }> {
      const reason = deadLettered.get(`${ENTITIES[entity]}:${id}`);
      if (reason !== undefined) return reason ? { kind: 'dead-lettered' } : { kind: 'dead-lettered', defect: 'dead-lettered without a reason' };
      if (entity === 'inventory') return inventoryFate(id, body);
      const rejection = await deps.provisioning.getRejection(id);
      if (rejection) return rejection.reason ? { kind: 'rejected' } : { kind: 'rejected', defect: 'a rejection without a reason' };
      const recorded = inbox.get(`provisioning:${id}`);
      if (recorded !== undefined) return { kind: `inbox-${String(recorded.outcome)}` };
      // Events of other types are not for provisioning (Azure's subscription rule filters them out).
      if (entity === 'provisioning') return { kind: 'not-for-provisioning' };
      return { kind: 'lost', defect: 'completed with nothing recorded' };
    }

    /**
     * The inventory subscription reads every event of the topic: each message is recorded as a rejection with its
     * code and reason, or taken in (its inbox entry processed, with what came of it), or is a CloudEvent 1.0 of a
     * type that is not inventory's (Azure's subscription rule filters those out). Nothing else, and no log line
     * alone.
     */
    async function inventoryFate(id: string, body: string): Promise<{ kind: string; defect?: string }> {
      const rejection = await deps.inventory.getRejection(id);
      const recorded = inbox.get(`inventory:${id}`);
      if (rejection) {
        if (!rejection.reason || !rejection.code) return { kind: 'rejected', defect: 'a rejection without its code and reason' };
        return recorded?.outcome === 'rejected' ? { kind: `rejected-${rejection.code}` } : { kind: 'rejected', defect: "a rejection the inbox does not say 'rejected' of" };
      }
      if (recorded !== undefined) return recorded.processed_at !== null && recorded.outcome ? { kind: `inbox-${recorded.outcome}` } : { kind: 'inbox', defect: 'an inbox entry never processed' };
      const event = otherEvent.safeParse(parseOrUndefined(body));
      if (event.success && !INVENTORY_TYPES.includes(event.data.type)) return { kind: 'not-for-inventory' };
      return { kind: 'lost', defect: 'completed with nothing recorded' };
    }
  }, 300_000);
});
