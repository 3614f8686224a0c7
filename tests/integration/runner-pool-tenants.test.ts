import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runJob } from '../../runner/agent';
import type { ClaimedJob } from '../../shared/platform/iac/runner-job';
import type { CapacityTables } from '../../shared/capacity/capacity.tables';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { aStackPromotion, EXAMPLE_SECRETS, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { ownPool, testAgent, type TestAgent } from '../support/runner-agents';
import { localEngineFor } from '../../local/runner-agent';

/**
 * Runner pools serve tenants, not only targets: a run's jobs go to its tenant's agent pool on its target (its own,
 * `<runnerPool>.<tenant>`, or the group the installation put it in). An agent claims only its pool's tenants' jobs
 * (the claim's SQL decides, whatever a row's pool says), a job's calls from an agent of another pool are refused
 * (403) and change nothing, and an apply job's resolved secrets reach only its tenant's agent. Two tenants use the same
 * environment, project and stack names throughout; the test is every agent, speaking the protocol over HTTP.
 */
const A = 'tenant-a';
const B = 'tenant-b';
/** Tenants the installation groups in one agent pool. */
const C = 'team-c';
const D = 'team-d';
const SHARED = 'shared-pool';
const TARGETS = [{ id: 'local', kind: 'local-cloud', name: 'Local cloud', location: 'local', runnerPools: [{ id: SHARED, tenants: [C, D] }] }];
const operatorOf = (tenant: string) => ({ tenant, roles: ['Operator'], subject: `operator-${tenant}` });

interface RunBody {
  runId: string;
  promotionId: string;
  state: string;
  error?: { code: string; message: string };
  waitingFor?: { kind: string; pool?: string; jobId?: string };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner pools by tenant (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    let agentA: TestAgent;
    let agentB: TestAgent;
    let promotions = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-pool-tenants-'));
      host = await startTestHost({
        settings: { ...database.settings, ...RUNNER_JOBS, RuntimeCloud__Local__Runners: '0', RuntimeCloud__Targets: JSON.stringify(TARGETS) },
        depsOverrides: database.overrides,
      });
      example = await provisioningExample(root, host.stateDir, 5);
      writeExampleReferences(host.stateDir);
      for (const tenant of [A, B, C, D, 'odd..tenant']) {
        const created = await host.fetch(`/runtime-cloud/tenants/${tenant}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ edition: 'team' }), claims: { roles: ['PlatformAdmin'] } });
        expect(created.status).toBeLessThan(300);
      }
      agentA = await testAgent(host, ownPool(A));
      agentB = await testAgent(host, ownPool(B));
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    const db = () => provisioningDb(host.host.deps.sql.db);
    /** The tenant's development promotion of the example onto `stack` in `environmentId`; answers its run once it waits for a runner or was refused. */
    async function promote(tenant: string, environmentId: string, stack: string): Promise<RunBody> {
      const promotion = aStackPromotion(example.repository, 'development', { stack, environmentId, overrides: { tenantId: tenant } });
      await sendToPromotions(host, promotion, `pool-tenants-${++promotions}`);
      return eventually(async () => {
        const runs = (await (await host.fetch(`/runtime-cloud/runs?environment=${environmentId}`, { claims: operatorOf(tenant) })).json()) as { items: RunBody[] };
        const run = runs.items.find((r) => r.promotionId === promotion.promotionId);
        return run && (run.waitingFor?.kind === 'runner' || run.state === 'rejected') ? run : undefined;
      });
    }
    const runOf = async (tenant: string, runId: string) => (await (await host.fetch(`/runtime-cloud/runs/${runId}`, { claims: operatorOf(tenant) })).json()) as RunBody;
    /** Runs a claimed job, then each next job of its run as the agent claims it, until the run ends; answers the run. */
    async function runToEnd(agent: TestAgent, tenant: string, claimed: ClaimedJob): Promise<RunBody> {
      let job = claimed;
      for (;;) {
        await runJob({ client: agent.client, engineFor: localEngineFor, agent: `${agent.pool}-agent`, workRoot: join(root, 'work') }, job, () => undefined);
        const next = await eventually(async (): Promise<{ run: RunBody } | { job: ClaimedJob } | undefined> => {
          const run = await runOf(tenant, claimed.job.runId);
          if (['applied', 'failed', 'rejected', 'canceled'].includes(run.state)) return { run };
          const more = await agent.client.claim(`${agent.pool}-agent`, 0);
          return more ? { job: more } : undefined;
        }, 20_000);
        if ('run' in next) return next.run;
        expect(next.job.job.runId).toBe(claimed.job.runId);
        job = next.job;
      }
    }

    it("when two tenants' runs of the same environment and stack wait, then each tenant's agent claims its own tenant's job only, even when the other's row names its pool", async () => {
      // Arrange
      const runA = await promote(A, 'env-same', 'development-1');
      const runB = await promote(B, 'env-same', 'development-1');

      // Act
      const claimedA = await eventually(() => agentA.client.claim('a-agent', 0));
      const nothingMore = await agentA.client.claim('a-agent', 0);
      // A row of B's job naming A's pool (a bug, or a write to the store): the claim's SQL still takes A's tenants only.
      await db().updateTable('provisioning_runner_jobs').set({ pool: agentA.pool }).where('run_id', '=', runB.runId).where('state', '=', 'queued').execute();
      const forged = await agentA.client.claim('a-agent', 0);
      await db().updateTable('provisioning_runner_jobs').set({ pool: agentB.pool }).where('run_id', '=', runB.runId).where('state', '=', 'queued').execute();
      const otherPool = await fetch(new URL(`/runtime-cloud/runner-pools/${agentB.pool}/claim`, host.url), { method: 'POST', headers: { authorization: `Bearer ${agentA.credential}`, 'content-type': 'application/json' }, body: '{"agent":"a-agent"}' });
      const claimedB = await agentB.client.claim('b-agent', 0);

      // Assert
      expect(runA.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool(A) });
      expect(runB.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool(B) });
      expect([claimedA.job.runId, claimedA.job.stack.tenant]).toEqual([runA.runId, A]);
      expect(nothingMore).toBeUndefined();
      expect(forged).toBeUndefined();
      expect(otherPool.status).toBe(403);
      expect(((await otherPool.json()) as { code: string }).code).toBe('RUNNER.POOL_MISMATCH');
      expect([claimedB?.job.runId, claimedB?.job.stack.tenant]).toEqual([runB.runId, B]);
      expect((await runToEnd(agentA, A, claimedA)).state).toBe('applied');
      expect((await runToEnd(agentB, B, claimedB!)).state).toBe('applied');
    }, 60_000);

    it("when an agent of tenant A's pool calls for tenant B's job with B's job token, then each call is refused 403 and nothing of the job, its lease, its state or the target changes", async () => {
      // Arrange: B's apply job, claimed by B's agent, its apply not begun.
      const runB = await promote(B, 'env-calls', 'development-2');
      const planB = await eventually(() => agentB.client.claim('b-agent', 0));
      await runJob({ client: agentB.client, engineFor: localEngineFor, agent: 'b-agent', workRoot: join(root, 'work') }, planB, () => undefined);
      const applyB = await eventually(() => agentB.client.claim('b-agent', 0), 20_000);
      const jobRow = () => db().selectFrom('provisioning_runner_jobs').select(['state', 'log', 'lease_expires_at', 'apply_began_at', 'outcome', 'lease_id']).where('id', '=', applyB.job.id).executeTakeFirstOrThrow();
      const before = await jobRow();
      const capacity = host.host.deps.sql.db as unknown as Kysely<CapacityTables>;
      const leaseRow = () => capacity.selectFrom('capacity_leases').select(['expires_at', 'renewed_at', 'state']).where('id', '=', before.lease_id!).executeTakeFirstOrThrow();
      const leaseBefore = await leaseRow();
      const resources = () => host.host.deps.sql.db.selectFrom('local_cloud_resources' as never).select('id' as never).execute();
      const resourcesBefore = await resources();
      const urn = `urn:pulumi:${applyB.job.stack.stack}::${applyB.job.stack.project}::local:storage:Bucket::forged`;
      const state = { stack: applyB.job.stack.stack, project: applyB.job.stack.project, serial: 1, resources: [] };

      // Act
      const calls = {
        heartbeat: await agentA.jobCall(applyB.job.id, applyB.token, 'heartbeat', { body: { log: ['forged line'], applyBegins: true } }),
        stateGet: await agentA.jobCall(applyB.job.id, applyB.token, 'state'),
        statePut: await agentA.jobCall(applyB.job.id, applyB.token, 'state', { method: 'PUT', body: state }),
        targetGet: await agentA.jobCall(applyB.job.id, applyB.token, 'target', { body: { op: 'get', id: 'anything' } }),
        targetCreate: await agentA.jobCall(applyB.job.id, applyB.token, 'target', { body: { op: 'create', urn, type: 'local:storage:Bucket', properties: {} } }),
        result: await agentA.jobCall(applyB.job.id, applyB.token, 'result', { body: { kind: 'apply', runner: { name: 'local', version: 'x', agent: 'a-agent' }, error: { code: 'IAC.X', message: 'forged' } } }),
      };
      // The job token alone, in its header or as the bearer token (the old wire form), opens nothing either.
      const url = new URL(`/runtime-cloud/runner-jobs/${applyB.job.id}/heartbeat`, host.url);
      const tokenAlone = await fetch(url, { method: 'POST', headers: { 'x-runner-job-token': applyB.token, 'content-type': 'application/json' }, body: '{"log":["forged"]}' });
      const tokenAsBearer = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${applyB.token}`, 'content-type': 'application/json' }, body: '{"log":["forged"]}' });
      const answers = Object.fromEntries(await Promise.all(Object.entries(calls).map(async ([name, response]) => [name, [response.status, ((await response.json()) as { code?: string }).code]])));

      // Assert
      for (const name of Object.keys(calls)) expect(answers[name], name).toEqual([403, 'RUNNER.POOL_MISMATCH']);
      expect([tokenAlone.status, tokenAsBearer.status]).toEqual([401, 401]);
      expect(await jobRow()).toEqual(before);
      expect(await leaseRow()).toEqual(leaseBefore);
      expect(await resources()).toEqual(resourcesBefore);
      expect(((await (await agentB.jobCall(applyB.job.id, applyB.token, 'state')).json()) as { state: unknown }).state).toBeNull();
      // The same calls with B's own pool credential are B's: the token was good all along.
      expect((await agentB.jobCall(applyB.job.id, applyB.token, 'heartbeat', { body: { log: [] } })).status).toBe(200);
      expect((await runToEnd(agentB, B, applyB)).state).toBe('applied');
      expect(runB.waitingFor).toMatchObject({ pool: ownPool(B) });
    }, 60_000);

    it("when tenant B's apply job waits with its resolved references, then only B's agent receives their values", async () => {
      // Arrange: B's plan made; its apply job queued with the development stack's secret reference.
      await promote(B, 'env-secrets', 'development-3');
      const planB = await eventually(() => agentB.client.claim('b-agent', 0));
      await runJob({ client: agentB.client, engineFor: localEngineFor, agent: 'b-agent', workRoot: join(root, 'work') }, planB, () => undefined);
      await eventually(async () => ((await db().selectFrom('provisioning_runner_jobs').select('id').where('run_id', '=', planB.job.runId).where('kind', '=', 'apply').where('state', '=', 'queued').executeTakeFirst()) ? true : undefined));

      // Act
      const byA = await agentA.client.claim('a-agent', 0);
      const byB = await agentB.client.claim('b-agent', 0);

      // Assert
      expect(byA).toBeUndefined();
      expect(byB?.job).toMatchObject({ kind: 'apply', runId: planB.job.runId });
      expect(JSON.stringify(byB?.references)).toContain(EXAMPLE_SECRETS.development);
      expect((await runToEnd(agentB, B, byB!)).state).toBe('applied');
    }, 60_000);

    it('when the installation groups two tenants in one pool, then that pool serves both, their own pools do not exist, and each tenant sees only its pools', async () => {
      // Arrange
      const shared = await testAgent(host, SHARED);
      const ownOfC = await testAgent(host, ownPool(C));
      const runC = await promote(C, 'env-same', 'development-1');
      const runD = await promote(D, 'env-same', 'development-1');

      // Act
      const first = await eventually(() => shared.client.claim('shared-agent', 0));
      const second = await eventually(() => shared.client.claim('shared-agent', 0));
      const byOwn = await ownOfC.client.claim('c-agent', 0).catch((e: unknown) => e);
      const byA = await agentA.client.claim('a-agent', 0);
      const pools = async (tenant: string) => ((await (await host.fetch('/runtime-cloud/runner-pools', { claims: operatorOf(tenant) })).json()) as { items: { pool: string; tenants: string[] }[] }).items;
      const seenByC = await pools(C);
      const seenByA = await pools(A);
      const agentsOfBForA = await host.fetch(`/runtime-cloud/runner-pools/${ownPool(B)}/agents`, { claims: operatorOf(A) });

      // Assert
      expect(runC.waitingFor).toMatchObject({ kind: 'runner', pool: SHARED });
      expect(runD.waitingFor).toMatchObject({ kind: 'runner', pool: SHARED });
      expect(new Set([first.job.stack.tenant, second.job.stack.tenant])).toEqual(new Set([C, D]));
      expect(byOwn).toMatchObject({ code: 'RUNNER.POOL_NOT_FOUND' });
      expect(byA).toBeUndefined();
      expect(seenByC).toEqual([expect.objectContaining({ pool: SHARED, tenants: [C, D] })]);
      expect(seenByA.map((p) => p.pool)).toEqual([ownPool(A)]);
      expect(agentsOfBForA.status).toBe(404);
      const [tenantOfFirst, tenantOfSecond] = [first.job.stack.tenant, second.job.stack.tenant];
      expect((await runToEnd(shared, tenantOfFirst, first)).state).toBe('applied');
      expect((await runToEnd(shared, tenantOfSecond, second)).state).toBe('applied');
    }, 60_000);

    it('when a tenant in no group has an id that cannot be a segment of a pool id, then its promotion is refused with why, before any job', async () => {
      // Act
      const run = await promote('odd..tenant', 'env-odd', 'development-4');

      // Assert
      expect(run).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.TENANT_NOT_ADDRESSABLE' } });
      expect(await db().selectFrom('provisioning_runner_jobs').select('id').where('tenant_id', '=', 'odd..tenant').execute()).toEqual([]);
    });
  });
}
