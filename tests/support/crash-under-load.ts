import * as fs from 'node:fs';
import { expect } from 'vitest';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import type { OutboxTables } from '../../shared/platform/bus/outbox';
import type { LocalCloudTables } from '../../local/cloud/local-cloud.tables';
import { parseConfig } from '../../shared/platform/config/config';
import type { SqlDialect } from '../../shared/platform/sql/database';
import { startChildHost, type RunningChild } from './child-process';
import { mulberry32 } from './capacity-workload';
import { FAST_RECOVERY } from './crash-points';
import { createTestDatabase } from './databases';
import { checkLeaseHistory, historyCounts, LeaseHistory, heldLease, sendJson, type LeaseOperation, type LeaseViolation } from './lease-history';
import { aStackPromotion, provisioningExample, writeExampleReferences } from './provisioning';
import { TERMINAL_EVENT_TYPES } from './topic-events';

/**
 * Random crashes under load (issue 19): a local host in a child process (runner jobs on its two agents, as by
 * default) on a fresh store takes `promotions` promotions and lease traffic of two tenants on one small pool, and is
 * SIGKILLed at random moments `kills` times, each time started again on the same store. The moments come from a
 * seeded generator (the seed is printed), so a failing run can be replayed.
 */
export interface CrashLoad {
  readonly dialect: SqlDialect;
  readonly promotions: number;
  readonly leaseOperations: number;
  readonly kills: number;
  readonly seed: number;
}

export interface CrashLoadReport {
  /** Promotion id → its terminal events. */
  readonly terminal: ReadonlyMap<string, number>;
  readonly outcomes: Readonly<Record<string, number>>;
  /** Event ids on the topic more than once, and outbox events never on it. */
  readonly duplicateIds: readonly string[];
  readonly lostEvents: readonly string[];
  readonly outboxEvents: number;
  /** (stack, plan) pairs the local cloud began more applies of than runs planned it. */
  readonly appliedTwice: readonly string[];
  readonly applies: number;
  readonly leaseOps: readonly LeaseOperation[];
  readonly violations: readonly LeaseViolation[];
  readonly hostStarts: number;
  readonly killedAtMs: readonly number[];
  readonly errorLines: readonly string[];
}

const STACKS = 20;
const POOL = { id: 'crash-sandbox', kind: 'sandbox', capacity: 5, quota: 3 } as const;
const TENANTS = ['crash-a', 'crash-b'] as const;
const HOLDERS_PER_TENANT = 3;

export async function crashUnderLoad(load: CrashLoad): Promise<CrashLoadReport> {
  const random = mulberry32(load.seed);
  const database = await createTestDatabase(load.dialect);
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-crash-load-'));
  const stateDir = join(root, 'state');
  const example = await provisioningExample(root, stateDir, STACKS);
  writeExampleReferences(stateDir);
  const keys = await ensureLocalKeys(stateDir);
  const config = parseConfig({});
  const token = (claims: object) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
  const admin = await token({ roles: ['PlatformAdmin'] });
  const env = { ...FAST_RECOVERY, ...database.settings };
  const outputs: string[] = [];
  let host: RunningChild = await startChildHost(stateDir, env);
  let hostStarts = 1;
  // The host of the moment: a restarted host listens on a new port.
  const send = (method: string, path: string, bearer: string, body?: unknown) => sendJson(host.url, method, path, bearer, body);
  const ok = async (method: string, path: string, body?: unknown): Promise<unknown> => {
    const answer = await send(method, path, admin, body);
    if (answer.status >= 300) throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.json)}`);
    return answer.json;
  };

  try {
    await ok('PUT', '/runtime-cloud/editions/crash-edition', { limits: { [POOL.kind]: { maxUnits: POOL.quota, maxTtlSeconds: 60 } } });
    for (const tenant of TENANTS) await ok('PUT', `/runtime-cloud/tenants/${tenant}`, { edition: 'crash-edition' });
    await ok('PUT', `/runtime-cloud/pools/${POOL.id}`, { kind: POOL.kind, target: 'local', capacity: POOL.capacity, min: 0, max: POOL.capacity, labels: {} });

    // Arrange: the promotions queued, and the lease holders at work until they made their operations.
    const promotions = Array.from({ length: load.promotions }, (_, i) => aStackPromotion(example.repository, 'development', { stack: `development-${(i % STACKS) + 1}`, environmentId: `env-load-${i}` }));
    for (const p of promotions) await ok('POST', '/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { body: p, messageId: p.promotionId });
    const histories = await Promise.all(
      TENANTS.map(async (tenant) => {
        const bearer = await token({ tenant, scopes: ['factory.capacity.lease', 'factory.runtime.read'] });
        return new LeaseHistory(tenant, (method, path, body) => send(method, path, bearer, body));
      }),
    );
    // Operations the host answered (those sent while it was down are recorded too, as indeterminate, but not counted).
    const operations = () => histories.reduce((n, h) => n + h.operations.filter((o) => o.status !== undefined).length, 0);
    const holders = histories.flatMap((history) => Array.from({ length: HOLDERS_PER_TENANT }, (_, i) => holdLeases(history, `holder-${i}`, () => operations() < load.leaseOperations, random)));

    // Act: SIGKILL the host at random moments, starting it again each time.
    const started = Date.now();
    const killedAtMs: number[] = [];
    for (let k = 0; k < load.kills; k++) {
      await sleep(300 + random() * 1500);
      killedAtMs.push(Date.now() - started);
      host.child.kill('SIGKILL');
      await host.stop('SIGKILL').catch(() => undefined);
      outputs.push(host.output());
      host = await startChildHost(stateDir, env);
      hostStarts++;
    }
    await Promise.all(holders);
    const events = await untilEnded(() => topicEvents(send, admin), promotions.map((p) => p.promotionId), 180_000).catch(async (error: unknown) => {
      // Where the runs that did not end stand, for whoever reads the failure.
      const runs = ((await ok('GET', '/runtime-cloud/runs?limit=1000')) as { items: { promotionId?: string; id: string; state: string; waitingFor?: unknown; error?: unknown }[] }).items;
      const ended = new Set((await topicEvents(send, admin)).filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type)).map((m) => m.body.data.promotionId));
      const open = runs.filter((r) => r.promotionId && !ended.has(r.promotionId));
      const missing = promotions.filter((p) => !runs.some((r) => r.promotionId === p.promotionId)).map((p) => p.promotionId);
      throw new Error(`${String(error)}\nopen runs: ${JSON.stringify(open, null, 1)}\nno run for: ${missing.join(', ')}\nhost output:\n${host.output().slice(-6000)}`);
    });
    outputs.push(host.output());

    // What the store holds: the outbox, the topic, the local cloud's applies.
    const db = database.store.db as Kysely<OutboxTables & BusTables & LocalCloudTables>;
    const outbox = await db.selectFrom('outbox').select(['event_id']).where('topic', '=', 'runtime-cloud-events').execute();
    const topic = await db.selectFrom('topic_messages').select(['message_id']).where('topic', '=', 'runtime-cloud-events').execute();
    const onTopic = countBy(topic.map((m) => m.message_id));
    const appliesRows = await db.selectFrom('local_cloud_applies').select(['stack', 'plan_digest']).execute();
    // A run's terminal event names its stack and the plan it applied or failed: the applies the local cloud began
    // of one stack and plan are at most the runs that ended with it.
    const stackPlan = (stack: string, digest: string) => `${stack} ${digest}`;
    const planned = countBy(events.filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type) && m.body.data.planDigest).map((m) => stackPlan(m.body.data.stack ?? '', m.body.data.planDigest ?? '')));
    const began = countBy(appliesRows.map((a) => stackPlan(a.stack.split('/').pop() ?? '', a.plan_digest)));
    const terminal = new Map(promotions.map((p) => [p.promotionId, events.filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type) && m.body.data.promotionId === p.promotionId).length]));
    const outcomes: Record<string, number> = {};
    for (const m of events.filter((e) => TERMINAL_EVENT_TYPES.includes(e.body.type))) {
      const key = m.body.data.code ? `${m.body.type} ${m.body.data.code}` : m.body.type;
      outcomes[key] = (outcomes[key] ?? 0) + 1;
    }
    const leaseOps = histories.flatMap((h) => h.operations);
    return {
      terminal,
      outcomes,
      duplicateIds: [...onTopic].filter(([, n]) => n > 1).map(([id]) => id),
      lostEvents: outbox.map((o) => o.event_id).filter((id) => !onTopic.has(id)),
      outboxEvents: outbox.length,
      appliedTwice: [...began].filter(([key, n]) => n > (planned.get(key) ?? 0)).map(([key]) => key),
      applies: appliesRows.length,
      leaseOps,
      violations: checkLeaseHistory(leaseOps, { poolCapacity: { [POOL.id]: POOL.capacity }, quota: Object.fromEntries(TENANTS.map((t) => [t, { [POOL.kind]: POOL.quota }])) }, 50),
      hostStarts,
      killedAtMs,
      errorLines: outputs.flatMap((o) => o.split('\n')).filter((line) => line.includes('"level":"error"')),
    };
  } finally {
    await host.stop().catch(() => undefined);
    await database.drop();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/**
 * Every invariant of the issue: one terminal event per promotion; no outbox event lost or on the topic twice; no
 * stack and plan applied more often than runs ended with it; no lease-history violation; the load as asked; no
 * error line in any host's log.
 */
export function expectInvariantsHeld(report: CrashLoadReport, load: Pick<CrashLoad, 'leaseOperations' | 'kills'>): void {
  expect([...report.terminal].filter(([, n]) => n !== 1)).toEqual([]);
  expect(report.lostEvents).toEqual([]);
  expect(report.duplicateIds).toEqual([]);
  expect(report.appliedTwice).toEqual([]);
  expect(report.violations).toEqual([]);
  expect(report.leaseOps.filter((o) => o.status !== undefined).length).toBeGreaterThanOrEqual(load.leaseOperations);
  expect(report.killedAtMs).toHaveLength(load.kills);
  expect(report.errorLines).toEqual([]);
}

/** The counts a report prints. */
export function describeReport(report: CrashLoadReport): string {
  return [
    `${report.terminal.size} promotions: ${JSON.stringify(report.outcomes)}`,
    `${report.killedAtMs.length} kills at ${report.killedAtMs.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(', ')}; ${report.hostStarts} host starts`,
    `${report.outboxEvents} outbox events, ${report.lostEvents.length} lost, ${report.duplicateIds.length} published twice; ${report.applies} applies, ${report.appliedTwice.length} twice`,
    `leases: ${historyCounts(report.leaseOps)}; refusals ${JSON.stringify(Object.fromEntries(countBy(report.leaseOps.filter((o) => o.outcome === 'refused').map((o) => `${o.op} ${o.code ?? o.status ?? ''}`))))}; ${report.violations.length} violations`,
  ].join('\n');
}

/**
 * One holder: acquires a unit with a short TTL, then renews it, releases it, or lets it expire and tries a renew
 * with its old token afterwards, while `more()` says so. A host that does not answer (killed) is tried again soon.
 */
async function holdLeases(history: LeaseHistory, holder: string, more: () => boolean, random: () => number): Promise<void> {
  for (let i = 0; more(); i++) {
    const grant = await history.acquire({ kind: POOL.kind, pool: POOL.id, holder, ttlSeconds: 2, idempotencyKey: `${holder}-${i}` });
    if (grant.outcome !== 'ok') {
      await sleep(grant.outcome === 'indeterminate' ? 500 : 50);
      continue;
    }
    const lease = heldLease(grant);
    const choice = random();
    if (choice < 0.45) {
      await history.renew(lease, 2);
      await history.release(lease);
    } else if (choice < 0.9) {
      await sleep(random() * 300);
      await history.release(lease);
    } else {
      // Let it lapse; the old token must then be refused.
      await sleep(2300);
      await history.renew(lease, 2);
    }
  }
}

interface TopicEventRow {
  readonly sequenceNumber: number;
  readonly messageId: string;
  readonly body: { readonly type: string; readonly data: { readonly promotionId?: string; readonly code?: string; readonly stack?: string; readonly planDigest?: string } };
}

async function topicEvents(send: (method: string, path: string, bearer: string) => Promise<{ status: number; json: unknown }>, admin: string): Promise<TopicEventRow[]> {
  const all: TopicEventRow[] = [];
  for (let after = 0; ; ) {
    const page = await send('GET', `/runtime-cloud/local/topics/runtime-cloud-events/messages?after=${after}&limit=1000`, admin);
    const items = (page.json as { items?: TopicEventRow[] } | undefined)?.items ?? [];
    all.push(...items);
    if (items.length < 1000) return all;
    after = items[items.length - 1]?.sequenceNumber ?? after;
  }
}

async function untilEnded(read: () => Promise<TopicEventRow[]>, promotionIds: readonly string[], timeoutMs: number): Promise<TopicEventRow[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const events = await read().catch(() => [] as TopicEventRow[]);
    const ended = new Set(events.filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type)).map((m) => m.body.data.promotionId));
    const open = promotionIds.filter((id) => !ended.has(id));
    if (open.length === 0) return events;
    if (Date.now() > deadline) throw new Error(`${open.length} of ${promotionIds.length} promotions did not end in ${timeoutMs} ms`);
    await sleep(250);
  }
}

function countBy(keys: readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const key of keys) counts.set(key, (counts.get(key) ?? 0) + 1);
  return counts;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
