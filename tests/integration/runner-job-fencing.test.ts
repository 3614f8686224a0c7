import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProvisioningActivities } from '../../functions/provisioning/provisioning-run.activities';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import { examplePromotion } from '../../local/example-repository';
import { runJob } from '../../runner/agent';
import type { ClaimedJob, RunnerJobOutcome } from '../../shared/platform/iac/runner-job';
import type { StackState } from '../../shared/platform/iac/plan';
import { MAX_UNBEGUN_APPLY_LOSSES } from '../../shared/provisioning/apply.service';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { ownPool, testAgent } from '../support/runner-agents';
import { aStackPromotion, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { localEngineFor } from '../../local/runner-agent';
import { SkippingClock } from '../support/skipping-clock';

/**
 * Runner job tokens and fencing (issue 17), with the test as the agent speaking the protocol over HTTP: a job's calls
 * are accepted only with its token while it runs under its stack lock; a plan whose runner went silent is made again.
 * The host's clock is the real one, skipped ahead where a test waits for a job's lease to lapse (SkippingClock).
 */
const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator' };
/** The agent pool of the tenant's jobs on the local target. */
const POOL = ownPool('demo-team');

interface RunBody {
  runId: string;
  state: string;
  waitingFor?: { kind: string; pool?: string; position?: number; reason?: { code: string } };
  planReceipt?: { runner: { agent?: string; jobId?: string } };
}

async function startHost(database: TestDatabase, settings: Record<string, string>, clock: SkippingClock): Promise<TestHost> {
  return startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS, ...settings }, depsOverrides: { ...database.overrides, clock } });
}

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner job tokens and fencing (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    const clock = new SkippingClock();

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-fencing-'));
      // No agents of its own: the test is the agent, speaking the protocol over HTTP.
      host = await startHost(database, { RuntimeCloud__Local__Runners: '0', RuntimeCloud__Runners__LeaseSeconds: '5' }, clock);
      example = await provisioningExample(root, host.stateDir, 1);
      writeExampleReferences(host.stateDir);
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    it("when a plan job's lease lapses, then its late result is refused and recorded, its token opens no other job, and the plan is made again by the next agent", async () => {
      // Arrange
      const { client, jobCall } = await testAgent(host, POOL);
      await sendToPromotions(host, examplePromotion('development', example.repository), 'fencing-1');
      const first = await eventually(() => client.claim('slow-agent', 0));
      const waiting = await eventually(async () => {
        const runs = (await (await host.fetch('/runtime-cloud/runs', { claims: operator })).json()) as { items: RunBody[] };
        return runs.items[0];
      });

      // Act: the agent goes silent past its lease (the clock skips the wait); the host dispatches the plan again.
      clock.skipPast(first.job.leaseExpiresAt);
      const second = await eventually(() => client.claim('fast-agent', 0), 30_000);
      const late = await jobCall(first.job.id, first.token, 'result', { body: { kind: 'plan', runner: { name: 'local', version: 'x', agent: 'slow-agent' }, error: { code: 'IAC.X', message: 'late' } } });
      const borrowed = await jobCall(second.job.id, first.token, 'state');
      const stateOf = async (claimed: ClaimedJob) => ((await (await jobCall(claimed.job.id, claimed.token, 'state')).json()) as { state: StackState | null }).state;
      const firstState = await stateOf(second);
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, second, () => undefined);
      const apply = await eventually(() => client.claim('fast-agent', 0), 30_000);
      const applyState = await stateOf(apply);
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, apply, () => undefined);

      // Assert: the job got its own stack's files and the state it starts from (none yet), the apply the plan's state.
      expect(Object.keys(first.job.files).sort()).toEqual(['Pulumi.development.yaml', 'Pulumi.yaml']);
      expect(firstState).toBeNull();
      expect(applyState).toBeNull();
      expect(waiting.runId).toBe(first.job.runId);
      expect(second.job.id).not.toBe(first.job.id);
      expect(second.job.fencingToken).toBeGreaterThan(first.job.fencingToken);
      expect(late.status).toBe(409);
      expect(((await late.json()) as { code: string }).code).toBe('RUNNER.JOB_SUPERSEDED');
      expect(borrowed.status).toBe(401);
      const db = provisioningDb(host.host.deps.sql.db);
      const firstRow = await db.selectFrom('provisioning_runner_jobs').select(['state', 'log']).where('id', '=', first.job.id).executeTakeFirstOrThrow();
      expect(firstRow.state).toBe('lost');
      expect(firstRow.log).toContain('host refused the plan outcome');
      const run = await eventually(async () => {
        const body = (await (await host.fetch(`/runtime-cloud/runs/${first.job.runId}`, { claims: operator })).json()) as RunBody;
        return body.state === 'applied' ? body : undefined;
      });
      expect(run.planReceipt?.runner).toMatchObject({ agent: 'fast-agent', jobId: second.job.id });
      // The next job of the stack starts from the state the apply wrote.
      await sendToPromotions(host, examplePromotion('development', example.repository), 'fencing-2');
      const next = await eventually(() => client.claim('fast-agent', 0), 30_000);
      const nextState = await stateOf(next);
      expect(nextState?.resources).toHaveLength(3);
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, next, () => undefined);
      const nextApply = await eventually(() => client.claim('fast-agent', 0), 30_000);
      expect(await stateOf(nextApply)).toEqual(nextState);
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, nextApply, () => undefined);
      // The result endpoint only accepts each outcome and wakes the run: the orchestration's collect activity takes
      // each job's outcome (a plan that needs no approval goes on to its apply job there), once per job.
      await eventually(async () => {
        const body = (await (await host.fetch(`/runtime-cloud/runs/${next.job.runId}`, { claims: operator })).json()) as RunBody;
        return body.state === 'applied' ? body : undefined;
      });
      const history = await host.host.deps.sql.db
        .selectFrom('durable_history' as never)
        .select('event' as never)
        .where('instance_id' as never, '=', next.job.runId as never)
        .orderBy('position' as never)
        .execute();
      const activities = (history as { event: string }[]).map((row) => JSON.parse(row.event) as HistoryEvent).filter((e) => e.EventType === HistoryEventType.TaskScheduled);
      expect(activities.map((e) => e.Name)).toEqual([ProvisioningActivities.plan, ProvisioningActivities.collectJob, ProvisioningActivities.collectJob]);
      expect(activities.slice(1).map((e) => JSON.parse(e.Input ?? 'null') as unknown)).toEqual([
        { runId: next.job.runId, jobId: next.job.id },
        { runId: next.job.runId, jobId: nextApply.job.id },
      ]);
    }, 60_000);

    it("when an apply job's lease lapses before its agent began to apply, then nothing of it is taken, the apply is dispatched again and applied once", async () => {
      // Arrange: the plan done; the apply job claimed by an agent that goes silent before its first change.
      const { client, jobCall } = await testAgent(host, POOL);
      await sendToPromotions(host, aStackPromotion(example.repository, 'development', { stack: 'development-1', environmentId: 'env-apply-unbegun' }), 'unbegun-1');
      const plan = await eventually(() => client.claim('fast-agent', 0), 30_000);
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, plan, () => undefined);
      const silent = await eventually(() => client.claim('silent-agent', 0), 30_000);
      const silentJob = client.job(silent);
      const write = await jobCall(silent.job.id, silent.token, 'target', { body: { op: 'recordApply', planDigest: silent.job.approvedPlan?.digest } });

      // Act: its lease lapses (the clock skips the wait); the run's deadline finds the job lost and dispatches the apply again.
      clock.skipPast(silent.job.leaseExpiresAt);
      const again = await eventually(() => client.claim('fast-agent', 0), 30_000);
      const lateBegin = await silentJob.heartbeat({ log: [], applyBegins: true }).then(
        () => 'accepted',
        (thrown: unknown) => (thrown as { code?: string }).code,
      );
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, again, () => undefined);

      // Assert
      expect(silent.job.kind).toBe('apply');
      expect(write.status).toBe(403);
      expect(((await write.json()) as { title: string }).title).toContain('the apply has not begun');
      expect(again.job).toMatchObject({ kind: 'apply', runId: silent.job.runId });
      expect(again.job.id).not.toBe(silent.job.id);
      expect(lateBegin).toBe('RUNNER.JOB_SUPERSEDED');
      const run = await eventually(async () => {
        const body = (await (await host.fetch(`/runtime-cloud/runs/${silent.job.runId}`, { claims: operator })).json()) as RunBody & { applyReceipt?: { runner: { jobId?: string } } };
        return body.state === 'applied' ? body : undefined;
      });
      expect(run.applyReceipt?.runner.jobId).toBe(again.job.id);
      const jobs = await provisioningDb(host.host.deps.sql.db).selectFrom('provisioning_runner_jobs').select(['id', 'state', 'apply_began_at']).where('run_id', '=', silent.job.runId).where('kind', '=', 'apply').orderBy('created_at').execute();
      expect(jobs.map((j) => [j.id, j.state, j.apply_began_at === null ? 'not begun' : 'begun'])).toEqual([
        [silent.job.id, 'lost', 'not begun'],
        [again.job.id, 'done', 'begun'],
      ]);
      const applies = await host.host.deps.sql.db.selectFrom('local_cloud_applies' as never).select('plan_digest' as never).where('stack' as never, 'like', '%/development-1' as never).execute();
      expect(applies).toHaveLength(1);
    }, 60_000);

    it(`when ${MAX_UNBEGUN_APPLY_LOSSES} apply jobs of a run are lost before their agent began to apply, then the run fails RUNNER_LOST saying nothing was applied`, async () => {
      // Arrange: the plan done; each apply job claimed and its lease made to lapse (its agent silent before its first change).
      const { client } = await testAgent(host, POOL);
      await sendToPromotions(host, aStackPromotion(example.repository, 'development', { stack: 'development-1', environmentId: 'env-apply-lost-often' }), 'lost-often-1');
      const plan = await eventually(() => client.claim('fast-agent', 0), 30_000);
      await runJob({ client, engineFor: localEngineFor, agent: 'fast-agent', workRoot: join(root, 'work') }, plan, () => undefined);
      const db = provisioningDb(host.host.deps.sql.db);
      const { provisioning } = host.host.deps;

      // Act
      const steps = [];
      for (let loss = 1; loss <= MAX_UNBEGUN_APPLY_LOSSES; loss++) {
        const claimed = await eventually(() => client.claim('silent-agent', 0), 30_000);
        await db.updateTable('provisioning_runner_jobs').set({ lease_expires_at: Date.now() - 1 }).where('id', '=', claimed.job.id).execute();
        steps.push(await provisioning.collectJob(claimed.job.runId, claimed.job.id));
      }

      // Assert
      for (const step of steps.slice(0, -1)) expect(step).toMatchObject({ outcome: 'running', kind: 'apply' });
      expect(steps).toHaveLength(MAX_UNBEGUN_APPLY_LOSSES);
      expect(steps.at(-1)).toEqual({ outcome: 'ended', state: 'failed' });
      const run = (await (await host.fetch(`/runtime-cloud/runs/${plan.job.runId}`, { claims: operator })).json()) as RunBody & { error?: { code: string; message: string } };
      expect(run.state).toBe('failed');
      expect(run.error?.code).toBe('PROVISIONING.RUNNER_LOST');
      expect(run.error?.message).toContain('nothing was applied');
    }, 60_000);

    it('when a finished plan job is collected by several at once (its collect activity, the run\'s deadline, a retry), then its apply is dispatched once, every collect answers with that job, and the apply\'s result ends the run that waited for the plan job', async () => {
      // Arrange: the agent's outcome is taken in by the service, not the endpoint, so the run is not woken: its
      // orchestration still waits for the plan job when the apply job's result event comes.
      const { client } = await testAgent(host, POOL);
      await sendToPromotions(host, examplePromotion('development', example.repository), 'collect-1');
      const plan = await eventually(() => client.claim('collect-agent', 0), 30_000);
      let outcome: RunnerJobOutcome | undefined;
      const capturing: typeof client = { ...client, job: (claimed) => ({ ...client.job(claimed), result: (o) => Promise.resolve(void (outcome = o)) }) };
      await runJob({ client: capturing, engineFor: localEngineFor, agent: 'collect-agent', workRoot: join(root, 'work') }, plan, () => undefined);
      const { provisioning } = host.host.deps;
      await provisioning.runners.accept({ jobId: plan.job.id, token: plan.token, pool: POOL }, JSON.stringify(outcome));

      // Act
      const steps = await Promise.all(Array.from({ length: 4 }, () => provisioning.collectJob(plan.job.runId, plan.job.id)));
      const again = await provisioning.collectJob(plan.job.runId, plan.job.id);

      // Assert
      const jobs = await provisioningDb(host.host.deps.sql.db).selectFrom('provisioning_runner_jobs').select(['id', 'kind', 'state']).where('run_id', '=', plan.job.runId).execute();
      const applies = jobs.filter((j) => j.kind === 'apply');
      expect(applies).toHaveLength(1);
      for (const step of [...steps, again]) expect(step).toMatchObject({ outcome: 'running', jobId: expect.stringMatching(/^job_/) });
      // Each answers with the apply job, or (while another collects) with the plan job until that collect's claim ends.
      for (const step of steps) expect([applies[0]?.id, plan.job.id]).toContain((step as { jobId: string }).jobId);
      expect(steps.filter((step) => (step as { jobId: string }).jobId === applies[0]?.id).length).toBeGreaterThanOrEqual(1);
      expect(again).toMatchObject({ jobId: applies[0]?.id, kind: 'apply' });
      const apply = await eventually(() => client.claim('collect-agent', 0), 30_000);
      await runJob({ client, engineFor: localEngineFor, agent: 'collect-agent', workRoot: join(root, 'work') }, apply, () => undefined);
      await eventually(async () => {
        const body = (await (await host.fetch(`/runtime-cloud/runs/${plan.job.runId}`, { claims: operator })).json()) as RunBody;
        return body.state === 'applied' ? body : undefined;
      });
    }, 60_000);

    it('when a job waits for an agent, then its run says so with its pool and position, and the capacity lease of kind runner is held while it runs', async () => {
      // Arrange
      const { client } = await testAgent(host, POOL);
      await sendToPromotions(host, examplePromotion('production', example.repository), 'waiting-1');

      // Act
      const waiting = await eventually(async () => {
        const runs = (await (await host.fetch('/runtime-cloud/runs?environment=env-demo-production', { claims: operator })).json()) as { items: RunBody[] };
        return runs.items.find((r) => r.waitingFor?.kind === 'runner');
      });
      const claimed = await client.claim('agent-x', 0);
      const leases = (await (await host.fetch('/runtime-cloud/leases?state=active', { claims: operator })).json()) as { items: { kind: string; pool: string; holder: string }[] };

      // Assert
      // The job waits in the tenant's own agent pool; its lease is of the target's capacity pool.
      // Next in line, it waits on the pool's agents, in the capacity queue's words: jobs running against agents online.
      expect(waiting.waitingFor).toEqual({
        kind: 'runner',
        pool: POOL,
        jobId: expect.stringMatching(/^job_/),
        position: 1,
        reason: { code: 'POOL_FULL', used: expect.any(Number), capacity: expect.any(Number) },
      });
      expect(claimed?.job.runId).toBe(waiting.runId);
      expect(leases.items).toContainEqual(expect.objectContaining({ kind: 'runner', pool: 'local-runner', holder: 'agent-x' }));
      // The agent gives its job up (the run fails): its runner lease, of the tenant's runner quota, ends with it
      // instead of lapsing in the next test.
      await client.job(claimed!).result({ kind: 'plan', runner: { name: 'local', version: 'x', agent: 'agent-x' }, error: { code: 'IAC.X', message: 'given up' } });
    });

    it("when a claim took a job's runner lease and died before recording the claim, then another agent claims the job", async () => {
      // Arrange: the job queued, and its runner lease taken by a claim of an agent that died right after (found by
      // the crash-under-load test: the job's lease was keyed by the job, so no other agent could ever claim it).
      const { client } = await testAgent(host, POOL);
      await sendToPromotions(host, aStackPromotion(example.repository, 'development', { stack: 'development-1', environmentId: 'env-claim-died' }), 'claim-died-1');
      const waiting = await eventually(async () => {
        const runs = (await (await host.fetch('/runtime-cloud/runs?environment=env-claim-died', { claims: operator })).json()) as { items: RunBody[] };
        return runs.items.find((r) => r.waitingFor?.kind === 'runner');
      });
      const jobId = String((waiting.waitingFor as { jobId?: string }).jobId);
      await host.host.deps.capacity.acquire({ tenant: 'demo-team', kind: 'runner', units: 1, ttlSeconds: 5, holder: 'dead-agent', pool: 'local-runner', idempotencyKey: `runner-job:${jobId}` });

      // Act
      const claimed = await eventually(() => client.claim('live-agent', 0), 10_000);

      // Assert
      expect(claimed?.job.id).toBe(jobId);
    });
  });
}
