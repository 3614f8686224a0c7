import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { examplePromotion } from '../../local/example-repository';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { listActive } from '../../local/bus/queue.repository';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { randomIds } from '../../shared/platform/time/clock';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { acquireStackLock, provisioningDb, releaseStackLock } from '../../shared/provisioning/stack-lock.repository';
import { startTestHost, type TestHost } from '../support/local-host';
import {
  addPoolProject,
  aPoolPromotion,
  aStackPromotion,
  EXAMPLE_PROJECT,
  EXAMPLE_SECRETS,
  EXAMPLE_TENANT,
  exampleStack,
  POOL_PROJECT,
  provisioningExample,
  qualifiedExampleStack,
  writeExampleReferences,
  sendToPromotions,
  type ProvisioningExample,
} from '../support/provisioning';

/**
 * Provisioning end to end on a local host started in this process with its full set of components: a promotion
 * posted to the embedded queue runs through the intake function, the Durable orchestration and its activities, the
 * local IaC engine and the local cloud; events reach the embedded topic through the outbox relay timer.
 */

const QUEUE = 'runtime-cloud-promotions';
const admin = { roles: ['PlatformAdmin'] };
const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator-1' };

interface RunBody {
  runId: string;
  stack?: string;
  project?: string;
  qualifiedStack?: string;
  promotionId: string;
  state: string;
  planDigest?: string;
  waitingFor?: { kind: string; planDigest?: string };
  error?: { code: string; message: string };
  planReceipt?: { plan: { digest: string; counts: Record<string, number> } };
  applyReceipt?: { result: { status: string; error?: { code: string }; resources: { status: string }[] } };
}
interface TopicMessage {
  correlationId: string | null;
  subject: string | null;
  body: { type: string; subject?: string; data: Record<string, unknown> };
}

describe('provisioning on the local host', () => {
  let host: TestHost;
  let example: ProvisioningExample;
  let cloud: LocalCloud;
  let root: string;
  const logged: string[] = [];

  beforeAll(async () => {
    root = fs.mkdtempSync(join(tmpdir(), 'rch-provisioning-host-'));
    host = await startTestHost({
      log: (level, category, ...args) => {
        logged.push(`${level} ${category} ${args.map((a) => (a instanceof Error ? `${a.message} ${a.stack ?? ''}` : typeof a === 'string' ? a : JSON.stringify(a))).join(' ')}`);
      },
    });
    example = await provisioningExample(root, host.stateDir, 5);
    writeExampleReferences(host.stateDir);
    cloud = createLocalCloud({ store: host.host.deps.sql, clock: host.host.deps.clock, ids: randomIds });
  });
  afterAll(async () => {
    await host?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const send = (body: unknown, messageId: string) => sendToPromotions(host, body, messageId);
  const getJson = async <T>(path: string, claims: object = operator): Promise<T> => {
    const response = await host.fetch(path, { claims });
    expect(response.status, path).toBe(200);
    return (await response.json()) as T;
  };
  /** Polls until `probe` answers something (not undefined); short intervals, one overall timeout. */
  const eventually = <T>(probe: () => Promise<T | undefined>, timeout = 20_000): Promise<T> =>
    vi.waitFor(
      async () => {
        const value = await probe();
        if (value === undefined) throw new Error('not yet');
        return value;
      },
      { timeout, interval: 50 },
    );
  const runOf = (promotion: PromotionApproved) =>
    eventually(async () => {
      const page = await getJson<{ items: RunBody[] }>(`/runtime-cloud/runs?environment=${promotion.environment.id}&limit=1000`);
      return page.items.find((r) => r.promotionId === promotion.promotionId);
    });
  const runIn = (runId: string, states: readonly string[]) =>
    eventually(async () => {
      const run = await getJson<RunBody>(`/runtime-cloud/runs/${runId}`);
      return states.includes(run.state) ? run : undefined;
    });
  const topic = async (): Promise<TopicMessage[]> =>
    (await getJson<{ items: TopicMessage[] }>('/runtime-cloud/local/topics/runtime-cloud-events/messages?limit=1000', admin)).items;
  /** The run's events on the topic once its terminal event is there (the relay publishes every two seconds). */
  const publishedFor = (correlationId: string) =>
    eventually(async () => {
      const events = (await topic()).filter((m) => m.correlationId === correlationId);
      return events.some((m) => m.body.type === 'ProvisioningApplied' || m.body.type === 'ProvisioningFailed') ? events : undefined;
    });
  const queueDrained = () =>
    eventually(async () => ((await listActive(host.host.deps.sql.db as Kysely<BusTables>, host.host.deps.sql.dialect, QUEUE, { limit: 10 })).length === 0 ? true : undefined));

  it('when a development promotion is sent, then its run ends applied, one ProvisioningApplied is published and the resources are in the local cloud', async () => {
    // Arrange
    const promotion = examplePromotion('development', example.repository);

    // Act
    await send(promotion, `dev-${promotion.promotionId}`);

    // Assert
    const queued = await runOf(promotion);
    const run = await runIn(queued.runId, ['applied', 'failed']);
    expect(run).toMatchObject({ state: 'applied', planReceipt: { plan: { counts: { create: 3 } } }, applyReceipt: { result: { status: 'applied' } } });
    const events = await publishedFor(run.runId);
    expect(events.map((e) => e.body.type)).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
    expect(events[2]?.body.data).toMatchObject({
      runId: run.runId,
      promotionId: promotion.promotionId,
      stack: 'development',
      project: EXAMPLE_PROJECT,
      qualifiedStack: qualifiedExampleStack('development'),
      planDigest: run.planDigest,
    });
    expect(run).toMatchObject({ stack: 'development', project: EXAMPLE_PROJECT, qualifiedStack: qualifiedExampleStack('development') });
    const resources = (await cloud.list('local')).filter((r) => r.urn.startsWith('urn:pulumi:development::'));
    expect(resources.map((r) => r.scope)).toEqual([EXAMPLE_TENANT, EXAMPLE_TENANT, EXAMPLE_TENANT]);
    expect(resources.map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service', 'local:network:Endpoint']);
    expect(resources[1]?.properties).toMatchObject({ environment: { DB_PASSWORD: EXAMPLE_SECRETS.development } });
  });

  it('when a production promotion is sent, then it waits for approval; its requester (by oid, under another sub) is refused, the wrong digest is refused with 409, the right one applies it', async () => {
    // Arrange: asked for by a person as Entra names them (tid/oid); their token for this API has another, pairwise sub.
    const requester = { oid: '690222be-ff1a-4d56-abd1-7e4f7d38e474', tid: '72f988bf-86f1-41af-91ab-2d7cd011db47' };
    const promotion = { ...examplePromotion('production', example.repository), requestedBy: `${requester.tid}/${requester.oid}` };
    await send(promotion, `prod-${promotion.promotionId}`);
    const queued = await runOf(promotion);
    const waiting = await runIn(queued.runId, ['awaiting-approval', 'failed']);
    const approve = (planDigest: string, claims: object = operator) =>
      host.fetch(`/runtime-cloud/runs/${queued.runId}/approve`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ planDigest, comment: 'checked the plan' }),
        claims,
      });

    // Act
    const observer = await approve(waiting.planDigest ?? '', { tenant: 'demo-team', roles: ['Observer'] });
    const byRequester = await approve(waiting.planDigest ?? '', { tenant: 'demo-team', roles: ['Operator'], subject: 'HKZpfaHyWadeOouYlitjrI-KffTm222X5rrV3xDqfKQ', user: requester });
    const wrong = await approve(`sha256:${'a'.repeat(64)}`);
    const right = await approve(waiting.planDigest ?? '');

    // Assert
    expect(waiting).toMatchObject({ state: 'awaiting-approval', waitingFor: { kind: 'approval', planDigest: waiting.planDigest } });
    expect(observer.status).toBe(403);
    expect(byRequester.status).toBe(403);
    expect(await byRequester.json()).toMatchObject({ code: 'PROVISIONING.SELF_APPROVAL', by: promotion.requestedBy });
    expect(wrong.status).toBe(409);
    expect(wrong.headers.get('content-type')).toBe('application/problem+json');
    expect(await wrong.json()).toMatchObject({ code: 'PROVISIONING.PLAN_DIGEST_MISMATCH', planDigest: waiting.planDigest });
    expect(right.status).toBe(200);
    expect(await right.json()).toMatchObject({ runId: queued.runId, state: 'applying' });
    const run = await runIn(queued.runId, ['applied', 'failed']);
    expect(run.state).toBe('applied');
    const events = await publishedFor(run.runId);
    expect(events.filter((e) => e.body.type === 'ProvisioningApplied')).toHaveLength(1);
    expect(events.filter((e) => e.body.type === 'ProvisioningFailed')).toHaveLength(0);
  });

  it('when a promotion is delivered twice, under its messageId and under a new one, then there is one run and one terminal event', async () => {
    // Arrange
    const promotion = aStackPromotion(example.repository, 'development', { stack: 'development-1' });

    // Act
    await send(promotion, `once-${promotion.promotionId}`);
    await send(promotion, `once-${promotion.promotionId}`);
    await send(promotion, `again-${promotion.promotionId}`);

    // Assert
    const queued = await runOf(promotion);
    const run = await runIn(queued.runId, ['applied', 'failed']);
    expect(run.state).toBe('applied');
    await queueDrained();
    const runs = (await getJson<{ items: RunBody[] }>(`/runtime-cloud/runs?environment=${promotion.environment.id}`)).items;
    expect(runs.filter((r) => r.promotionId === promotion.promotionId)).toHaveLength(1);
    const events = await publishedFor(run.runId);
    expect(events.filter((e) => /^Provisioning/.test(e.body.type)).map((e) => e.body.type)).toEqual(['ProvisioningApplied']);
  });

  it('when a malformed message is sent, then a rejection is recorded with its reason and ProvisioningFailed published, without retries or dead-lettering', async () => {
    // Arrange
    const messageId = 'malformed-1';

    // Act
    await send({ promotionId: 'prom-malformed-1', hello: 'world' }, messageId);

    // Assert
    const events = await publishedFor('prom-malformed-1');
    expect(events).toHaveLength(1);
    expect(events[0]?.body).toMatchObject({ type: 'ProvisioningFailed', subject: `messages/${messageId}`, data: { state: 'rejected', code: 'PROVISIONING.INVALID_PROMOTION' } });
    expect(String(events[0]?.body.data.reason)).toContain('tenantId');
    const rejection = await host.host.deps.provisioning.getRejection(messageId);
    expect(rejection).toMatchObject({ promotionId: 'prom-malformed-1', code: 'PROVISIONING.INVALID_PROMOTION' });
    await queueDrained();
    const deadLetters = await getJson<{ items: unknown[] }>(`/runtime-cloud/local/queues/${QUEUE}/deadletter`, admin);
    expect(deadLetters.items).toEqual([]);
    const inbox = await (host.host.deps.sql.db as Kysely<BusTables>).selectFrom('inbox').select(['outcome']).where('message_id', '=', messageId).execute();
    expect(inbox).toEqual([{ outcome: 'rejected' }]);
  });

  it('when the target is unreachable, then the run fails with an apply receipt and PROVISIONING.TARGET_UNREACHABLE', async () => {
    // Arrange
    const promotion = aStackPromotion(example.repository, 'development', { stack: 'development-2' });
    await cloud.setReachable('local', false);

    // Act
    let run: RunBody;
    try {
      await send(promotion, `unreachable-${promotion.promotionId}`);
      run = await runIn((await runOf(promotion)).runId, ['applied', 'failed']);
    } finally {
      await cloud.setReachable('local', true);
    }

    // Assert
    expect(run).toMatchObject({
      state: 'failed',
      error: { code: 'PROVISIONING.TARGET_UNREACHABLE' },
      applyReceipt: { result: { status: 'failed', error: { code: 'PROVISIONING.TARGET_UNREACHABLE' } } },
    });
    expect(run.applyReceipt?.result.resources.every((r) => r.status === 'skipped')).toBe(true);
    const events = await publishedFor(run.runId);
    expect(events.filter((e) => /^Provisioning/.test(e.body.type)).map((e) => [e.body.type, e.body.data.code])).toEqual([['ProvisioningFailed', 'PROVISIONING.TARGET_UNREACHABLE']]);
    expect((await cloud.list('local')).filter((r) => r.urn.startsWith('urn:pulumi:development-2::'))).toEqual([]);
  });

  it('when an operator rejects a plan and cancels a queued run, then both end with ProvisioningFailed; another tenant sees neither', async () => {
    // Arrange: a production run awaiting approval, and a development run queued behind a stack held elsewhere.
    const toReject = aStackPromotion(example.repository, 'production', { stack: 'production-1' });
    const toCancel = aStackPromotion(example.repository, 'development', { stack: 'development-3' });
    await acquireStackLock(provisioningDb(host.host.deps.sql.db), host.host.deps.sql.dialect, { stack: exampleStack('development-3'), run: 'run-elsewhere', host: 'other', now: Date.now(), ttlMs: 60_000 });
    await send(toReject, `reject-${toReject.promotionId}`);
    await send(toCancel, `cancel-${toCancel.promotionId}`);
    const awaiting = await runIn((await runOf(toReject)).runId, ['awaiting-approval']);
    const queued = await eventually(async () => {
      const run = await runOf(toCancel);
      return run.waitingFor?.kind === 'stack-lock' ? run : undefined;
    });
    const post = (path: string, body?: unknown, claims: object = operator) =>
      host.fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}), claims });

    // Act
    const strangerReject = await post(`/runtime-cloud/runs/${awaiting.runId}/reject`, { reason: 'no' }, { tenant: 'demo-free', roles: ['Operator'] });
    const rejected = await post(`/runtime-cloud/runs/${awaiting.runId}/reject`, { reason: 'not during the freeze' });
    const canceled = await post(`/runtime-cloud/runs/${queued.runId}/cancel`);
    const cancelAgain = await post(`/runtime-cloud/runs/${queued.runId}/cancel`);

    // Assert
    expect(strangerReject.status).toBe(404);
    expect(rejected.status).toBe(200);
    expect(await rejected.json()).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.REJECTED' } });
    expect(canceled.status).toBe(200);
    expect(await canceled.json()).toMatchObject({ state: 'canceled', error: { code: 'PROVISIONING.CANCELED' } });
    expect(cancelAgain.status).toBe(409);
    for (const runId of [awaiting.runId, queued.runId]) {
      const events = await publishedFor(runId);
      expect(events.filter((e) => /^Provisioning/.test(e.body.type)).map((e) => e.body.type)).toEqual(['ProvisioningFailed']);
    }
    // Both orchestrations end: the rejected one woken by the event, the canceled one when it next asks for the stack.
    const instances = host.host.deps.sql.db as Kysely<{ durable_instances: { instance_id: string; status: string; output: string | null } }>;
    for (const [runId, state] of [[awaiting.runId, 'rejected'], [queued.runId, 'canceled']] as const) {
      const instance = await eventually(async () => {
        const row = await instances.selectFrom('durable_instances').select(['status', 'output']).where('instance_id', '=', runId).executeTakeFirst();
        return row?.status === 'Completed' ? row : undefined;
      });
      expect(JSON.parse(instance.output ?? 'null')).toEqual({ outcome: 'ended', state });
    }
    await releaseStackLock(provisioningDb(host.host.deps.sql.db), exampleStack('development-3'), 'run-elsewhere');
  });

  it('when another run applies the stack after an approval, then the approved run goes stale; a replan needs its own approval, by another than who replanned, then applies', async () => {
    // Arrange: a production run awaits approval on production-2; a development run of the same stack applies meanwhile.
    const production = aStackPromotion(example.repository, 'production', { stack: 'production-2' });
    await send(production, `stale-${production.promotionId}`);
    const awaiting = await runIn((await runOf(production)).runId, ['awaiting-approval']);
    const development = aStackPromotion(example.repository, 'development', { stack: 'production-2', environmentId: 'env-dev-on-production-2' });
    await send(development, `stale-${development.promotionId}`);
    expect((await runIn((await runOf(development)).runId, ['applied', 'failed'])).state).toBe('applied');
    const post = (path: string, body: unknown = {}, claims: object = operator) => host.fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), claims });
    const secondOperator = { ...operator, subject: 'operator-2' };

    // Act
    const approved = await post(`/runtime-cloud/runs/${awaiting.runId}/approve`, { planDigest: awaiting.planDigest });
    const stale = await runIn(awaiting.runId, ['stale', 'applied', 'failed']);
    const approveStale = await post(`/runtime-cloud/runs/${awaiting.runId}/approve`, { planDigest: awaiting.planDigest });
    const replanned = await post(`/runtime-cloud/runs/${awaiting.runId}/replan`);
    const fresh = await runIn(awaiting.runId, ['awaiting-approval', 'failed']);
    // operator-1 asked for the fresh plan: in production a second person approves it.
    const selfApproved = await post(`/runtime-cloud/runs/${awaiting.runId}/approve`, { planDigest: fresh.planDigest });
    const approvedFresh = await post(`/runtime-cloud/runs/${awaiting.runId}/approve`, { planDigest: fresh.planDigest }, secondOperator);

    // Assert
    expect(approved.status).toBe(200);
    expect(stale).toMatchObject({ state: 'stale', error: { code: 'PROVISIONING.PLAN_STALE' }, waitingFor: { kind: 'replan', planDigest: awaiting.planDigest } });
    expect(approveStale.status).toBe(409);
    expect(await approveStale.json()).toMatchObject({ code: 'PROVISIONING.PLAN_STALE' });
    expect(replanned.status).toBe(200);
    expect(await replanned.json()).toMatchObject({ state: 'planning' });
    // The fresh plan starts from what the development run applied: all same, and production still needs approval.
    expect(fresh).toMatchObject({ state: 'awaiting-approval', planReceipt: { plan: { counts: { create: 0, same: 3 } } } });
    expect(fresh.planDigest).not.toBe(awaiting.planDigest);
    expect(selfApproved.status).toBe(403);
    expect(await selfApproved.json()).toMatchObject({ code: 'PROVISIONING.SELF_APPROVAL' });
    expect(approvedFresh.status).toBe(200);
    const run = await runIn(awaiting.runId, ['applied', 'failed']);
    expect(run).toMatchObject({ state: 'applied', replacedPlans: [{ planDigest: awaiting.planDigest, stale: { code: 'PROVISIONING.PLAN_STALE' } }] });
    const events = await publishedFor(run.runId);
    expect(events.filter((e) => /^Provisioning/.test(e.body.type)).map((e) => e.body.type)).toEqual(['ProvisioningApplied']);
  });

  it("when an operator looks at and breaks a stack lock, then the holder is shown to its tenant and administrators, the break is recorded, and only platform administrators may break it", async () => {
    // Arrange
    const path = `/runtime-cloud/tenants/${EXAMPLE_TENANT}/stacks/${EXAMPLE_PROJECT}/development-4`;
    /** The stack of the same project and stack names of another tenant. */
    const othersPath = `/runtime-cloud/tenants/demo-free/stacks/${EXAMPLE_PROJECT}/development-4`;
    const before = await host.fetch(`${path}/lock`, { claims: admin });
    await acquireStackLock(provisioningDb(host.host.deps.sql.db), host.host.deps.sql.dialect, { stack: exampleStack('development-4'), run: 'run-elsewhere', host: 'other', now: Date.now(), ttlMs: 60_000 });
    const unlock = (body: unknown, claims: object, at = path) => host.fetch(`${at}/unlock`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), claims });

    // Act
    const shown = await host.fetch(`${path}/lock`, { claims: admin });
    const shownToTenant = await host.fetch(`${path}/lock`, { claims: operator });
    const hiddenFromOtherTenant = await host.fetch(`${path}/lock`, { claims: { tenant: 'demo-free', roles: ['Operator'] } });
    const othersNotLocked = await host.fetch(`${othersPath}/lock`, { claims: admin });
    const othersUnlock = await unlock({ reason: 'wrong tenant' }, admin, othersPath);
    const byOperator = await unlock({ reason: 'stuck' }, operator);
    const byTenantAdmin = await unlock({ reason: 'stuck' }, { tenant: 'demo-team', roles: ['PlatformAdmin'] });
    const wrongVersion = await unlock({ reason: 'host other hung', version: 2 }, { ...admin, subject: 'admin-1' });
    const broken = await unlock({ reason: 'host other hung', version: 1 }, { ...admin, subject: 'admin-1' });
    const after = await host.fetch(`${path}/lock`, { claims: admin });
    const again = await unlock({ reason: 'host other hung' }, admin);

    // Assert
    expect(before.status).toBe(404);
    expect(await before.json()).toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED' });
    expect(shown.status).toBe(200);
    const view = { stack: qualifiedExampleStack('development-4'), tenant: EXAMPLE_TENANT, project: EXAMPLE_PROJECT, holderRun: 'run-elsewhere', holderHost: 'other', version: 1, expired: false, expiresAt: expect.any(String) };
    expect(await shown.json()).toMatchObject(view);
    expect(shownToTenant.status).toBe(200);
    expect(await shownToTenant.json()).toMatchObject(view);
    expect(hiddenFromOtherTenant.status).toBe(403);
    expect(await hiddenFromOtherTenant.json()).toMatchObject({ code: 'AUTH.TENANT_MISMATCH' });
    expect(othersNotLocked.status).toBe(404);
    expect(await othersNotLocked.json()).toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED' });
    expect(othersUnlock.status).toBe(404);
    expect(byOperator.status).toBe(403);
    expect(byTenantAdmin.status).toBe(403);
    expect(await byTenantAdmin.json()).toMatchObject({ code: 'AUTH.PLATFORM_ONLY' });
    expect(wrongVersion.status).toBe(409);
    expect(await wrongVersion.json()).toMatchObject({ code: 'PROVISIONING.STACK_LOCK_VERSION_MISMATCH' });
    expect(broken.status).toBe(200);
    expect(await broken.json()).toMatchObject({ broken: { holderRun: 'run-elsewhere', version: 1 }, by: 'admin-1', reason: 'host other hung' });
    expect(after.status).toBe(404);
    expect(again.status).toBe(404);
    const breaks = await provisioningDb(host.host.deps.sql.db).selectFrom('provisioning_lock_breaks').select(['tenant_id', 'project', 'holder_run', 'broken_by', 'reason']).where('stack', '=', 'development-4').execute();
    expect(breaks).toEqual([{ tenant_id: EXAMPLE_TENANT, project: EXAMPLE_PROJECT, holder_run: 'run-elsewhere', broken_by: 'admin-1', reason: 'host other hung' }]);
  });

  it('when a pool sized by a stack is resized, then PoolResizeRequested reaches provisioning through the topic and a pool-resize run applies the new size', async () => {
    // Arrange: the worker-pool project applied on its stack, and a pool that names the stack.
    const repository = await addPoolProject(example);
    const promotion = aPoolPromotion(repository, 'pool-workers');
    await send(promotion, `pool-${promotion.promotionId}`);
    expect((await runIn((await runOf(promotion)).runId, ['applied', 'failed'])).state).toBe('applied');
    const putPool = (capacity: number) =>
      host.fetch('/runtime-cloud/pools/resize-pool', {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'build', target: 'local', capacity, max: 20, iacStack: qualifiedExampleStack('pool-workers', POOL_PROJECT) }),
        claims: admin,
      });
    expect((await putPool(2)).status).toBe(201);

    // Act
    const resized = await putPool(7);

    // Assert
    expect(await resized.json()).toMatchObject({ capacity: 7, resizeRequested: true });
    const queued = await eventually(async () => {
      const page = await getJson<{ items: (RunBody & { reason: string })[] }>(`/runtime-cloud/runs?environment=${promotion.environment.id}`);
      return page.items.find((r) => r.reason === 'pool-resize');
    });
    const run = await runIn(queued.runId, ['applied', 'failed']);
    expect(run).toMatchObject({ state: 'applied', stack: 'pool-workers', qualifiedStack: qualifiedExampleStack('pool-workers', POOL_PROJECT), poolResize: { pool: 'resize-pool', fromCapacity: 2, toCapacity: 7 }, config: { poolSize: 7 } });
    const workers = (await cloud.list('local')).filter((r) => r.urn.startsWith('urn:pulumi:pool-workers::'));
    expect(workers.map((r) => r.properties)).toEqual([{ kind: 'build', size: 7 }]);
    const events = await publishedFor(run.runId);
    expect(events.at(-1)?.body).toMatchObject({ type: 'ProvisioningApplied', data: { trigger: 'pool-resize', poolResize: { pool: 'resize-pool' } } });
  });

  it('when runs have applied with secret references, then no stored, published or logged byte holds a secret value', async () => {
    // The runs above resolved both database passwords and the production feature flags.
    const db = host.host.deps.sql.db;
    const tables = ['provisioning_runs', 'provisioning_approvals', 'provisioning_rejections', 'outbox', 'inbox', 'topic_messages', 'queue_messages', 'durable_instances', 'durable_history', 'durable_activities', 'local_iac_stacks'];
    const stored: string[] = [];
    for (const table of tables) stored.push(JSON.stringify((await sql`select * from ${sql.table(table)}`.execute(db)).rows));
    const everything = [...stored, ...logged].join('\n');

    expect(stored[0]).toContain('broker://runtime-cloud/app-db-password');
    for (const value of [EXAMPLE_SECRETS.development, EXAMPLE_SECRETS.production, 'flag-token-91c2aa']) expect(everything).not.toContain(value);
  });
});
