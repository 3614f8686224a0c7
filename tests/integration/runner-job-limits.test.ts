import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BUNDLED_CAPACITY_SEED, readCapacitySeed } from '../../local/capacity-seed';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { runnerLeases } from '../../shared/deps';
import { settings } from '../../shared/platform/config/config';
import { runnerTargetOf } from '../../shared/platform/config/targets';
import { localIacRunner } from '../../local/engine/local-engine';
import type { ClaimedJob } from '../../shared/platform/iac/runner-job';
import type { SqlStore } from '../../shared/platform/sql/database';
import { randomIds, type Clock } from '../../shared/platform/time/clock';
import { MAX_PLAN_REDISPATCHES } from '../../shared/provisioning/plan.service';
import { createProvisioningService, type ProvisioningService, type RunStep } from '../../shared/provisioning/provisioning.service';
import { getStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { REPOSITORY_DIALECTS, skipDialect } from '../support/databases';
import { aStackPromotion, outboxEvents, testServiceOptions } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';
import { ownPool } from '../support/runner-agents';

/**
 * Runner job limits (issue 32, part 3): a job may run for its target's maximum duration for its kind (here plan 10
 * minutes as the target sets it, apply the default 2 hours), counted by the host's clock from its claim. Its lease is
 * never renewed past that deadline, so a job still running then is lost however its agent beats: a plan is
 * dispatched again at most MAX_PLAN_REDISPATCHES times, then the run fails PROVISIONING.RUNNER_TIMEOUT; an apply
 * follows the rules of a lost apply (before it began: dispatched again; after: RUNNER_LOST with a receipt, never
 * applied again). The test is the agent and the run's sweep (collectJob at its deadline), on an injected clock.
 */
const ALL = { kind: 'all' } as const;
const TENANTS = ['demo-team', 'demo-free'] as const;
const LEASE_MS = 60_000;
/** A beat every this long keeps a job's lease. */
const BEAT_MS = 50_000;
const PLAN_LIMIT_MS = 10 * 60_000;
const APPLY_LIMIT_MS = 120 * 60_000;
const TARGETS = JSON.stringify([{ id: 'local', kind: 'local-cloud', name: 'Local cloud', jobMaxMinutes: { plan: 10 } }]);

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner job limits on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-job-limits-', stackCopies: 10, references: true });
    const { clock, freshStack } = fixture;
    /** Two hosts on one database (on PostgreSQL each with its own connection pool), sharing the clock. */
    const hosts: ProvisioningService[] = [];
    /** A third host whose clock is one millisecond behind the others'. */
    let lagging: ProvisioningService;
    const stores: SqlStore[] = [];

    function hostOn(store: SqlStore, hostClock: Clock): ProvisioningService {
      const { cloud, root } = fixture;
      const capacity = createCapacityService({ store, clock: hostClock, ids: randomIds });
      return createProvisioningService({
        ...testServiceOptions(store, hostClock, cloud, root),
        engine: undefined,
        knowsTenant: (tenant) => Promise.resolve((TENANTS as readonly string[]).includes(tenant)),
        runners: { targets: settings.RuntimeCloud__Targets.parse(TARGETS).map(runnerTargetOf), leases: runnerLeases(capacity), leaseTtlMs: LEASE_MS, claimTimeoutMs: 3_600_000 },
      });
    }

    beforeAll(async () => {
      const { database } = fixture;
      await createCapacityService({ store: database.store, clock, ids: randomIds }).applySeed(readCapacitySeed(BUNDLED_CAPACITY_SEED));
      stores.push(database.connectAgain(), database.connectAgain());
      hosts.push(hostOn(database.store, clock), hostOn(stores[0]!, clock));
      lagging = hostOn(stores[1]!, { now: () => new Date(clock.now().getTime() - 1) });
    });
    afterAll(async () => {
      for (const store of stores) await store.close();
    });

    const first = () => hosts[0]!;
    const db = () => provisioningDb(fixture.database.store.db);
    let promotions = 0;

    /** A run of the tenant on `stack`, in an environment `env-<stack>`: the same names for every tenant. */
    async function promote(tenant: string, stack: string, promotionId = `prom-limits-${++promotions}`): Promise<string> {
      const body = { ...aStackPromotion(fixture.example.repository, 'development', { stack, environmentId: `env-${stack}` }), tenantId: tenant, promotionId };
      const taken = await first().intake({ messageId: `msg-${dialect}-${promotionId}-${tenant}`, body });
      if (!('run' in taken) || !taken.run) throw new Error(`the promotion was not taken in: ${JSON.stringify(taken)}`);
      runs.push(taken.run.id);
      return taken.run.id;
    }
    /** The next job of the tenant's pool, which must be of `runId` (each test ends the runs it leaves open). */
    const claim = async (tenant: string, agent: string, runId: string): Promise<ClaimedJob> => {
      const claimed = await first().runners.claim(ownPool(tenant), agent, 0);
      if (claimed?.job.runId !== runId) throw new Error(`${agent} of ${tenant} claimed ${claimed ? `a job of run ${claimed.job.runId}` : 'no job'}, not one of run ${runId}`);
      return claimed;
    };
    /** The runs of the test: ended after it (those it left open fail), so their jobs and stacks are no later test's. */
    const runs: string[] = [];
    afterEach(async () => {
      for (const runId of runs.splice(0)) await first().failRun(runId, 'the test is over');
    });
    const callerOf = (claimed: ClaimedJob) => ({ jobId: claimed.job.id, token: claimed.token, pool: claimed.job.pool });
    const beat = (claimed: ClaimedJob, applyBegins = false, host = first()) => host.runners.heartbeat(callerOf(claimed), JSON.stringify({ log: [], ...(applyBegins ? { applyBegins } : {}) }));
    const refusal = (call: Promise<unknown>) => call.then(
      () => 'accepted',
      (thrown: unknown) => (thrown as { code?: string }).code,
    );
    /** Its agent beats every BEAT_MS (each beat answered) until just before `until`; the clock is then at `until`. */
    async function beatUntil(claimed: readonly ClaimedJob[], until: number): Promise<string[]> {
      const leases: string[] = [];
      while (clock.now().getTime() + BEAT_MS < until) {
        clock.advance(BEAT_MS);
        for (const job of claimed) leases.push((await beat(job)).leaseExpiresAt);
      }
      clock.set(new Date(until));
      return leases;
    }
    const jobsOf = (runId: string) => db().selectFrom('provisioning_runner_jobs').select(['id', 'kind', 'state', 'fencing_token', 'deadline_at', 'apply_began_at']).where('run_id', '=', runId).orderBy('created_at').orderBy('id').execute();
    const failures = async (runId: string) => (await outboxEvents(fixture.database.store, runId)).filter((e) => e.type === 'ProvisioningFailed');
    /** The plan of the run's plan job, made with the local engine as an agent would, and its acceptance. */
    async function reportPlan(claimed: ClaimedJob, host = first()): Promise<void> {
      const { store } = fixture.database;
      const engine = localIacRunner({ store, clock, ids: randomIds, cloud: fixture.cloud });
      const plan = await engine.preview(claimed.job.stack, claimed.job.files, claimed.job.config, claimed.job.options);
      await host.runners.accept(callerOf(claimed), JSON.stringify({ kind: 'plan', runner: { name: 'local', version: 'test', agent: 'planner' }, plan }));
    }

    it('when a plan job runs past its maximum duration while its agent beats, then its lease stops at its deadline, the beat at it is refused, and the sweep finds it lost and dispatches the plan again', async () => {
      // Arrange
      const runId = await promote(TENANTS[0], freshStack('development'));
      await first().plan(runId);
      const claimedAt = clock.now().getTime();
      const claimed = await claim(TENANTS[0], 'busy-agent', runId);

      // Act
      const leases = await beatUntil([claimed], claimedAt + PLAN_LIMIT_MS);
      const atDeadline = await refusal(beat(claimed));
      const step = await first().collectJob(runId, claimed.job.id);

      // Assert: every lease ran one lease length from its beat, the last ones only up to the deadline.
      const deadline = new Date(claimedAt + PLAN_LIMIT_MS).toISOString();
      expect(claimed.job.leaseExpiresAt).toBe(new Date(claimedAt + LEASE_MS).toISOString());
      expect(leases.at(-1)).toBe(deadline);
      expect(leases.filter((l) => l === deadline).length).toBeGreaterThan(0);
      expect(leases.slice(0, 5)).toEqual([1, 2, 3, 4, 5].map((n) => new Date(claimedAt + n * BEAT_MS + LEASE_MS).toISOString()));
      expect(atDeadline).toBe('RUNNER.JOB_SUPERSEDED');
      expect(step).toMatchObject({ outcome: 'running', kind: 'plan' });
      const jobs = await jobsOf(runId);
      expect(jobs.map((j) => [j.id, j.kind, j.state])).toEqual([
        [claimed.job.id, 'plan', 'lost'],
        [step.outcome === 'running' ? step.jobId : '', 'plan', 'queued'],
      ]);
      expect(Number(jobs[0]?.deadline_at)).toBe(claimedAt + PLAN_LIMIT_MS);
      expect((await first().getRun(ALL, runId)).run.state).toBe('planning');
    });

    it(`when a run's plan jobs are lost ${MAX_PLAN_REDISPATCHES + 1} times (silent, or past their maximum duration), then the plan was dispatched again ${MAX_PLAN_REDISPATCHES} times and the run fails RUNNER_TIMEOUT with its reason and one ProvisioningFailed`, async () => {
      // Arrange
      const runId = await promote(TENANTS[0], freshStack('development'));
      await first().plan(runId);

      // Act: the first plan job's agent goes silent; each later one beats until its deadline; the sweep collects each.
      const steps: RunStep[] = [];
      for (let loss = 1; loss <= MAX_PLAN_REDISPATCHES + 1; loss++) {
        const claimed = await claim(TENANTS[0], `agent-${loss}`, runId);
        if (loss === 1) clock.advance(LEASE_MS);
        else await beatUntil([claimed], clock.now().getTime() + PLAN_LIMIT_MS);
        steps.push(await first().collectJob(runId, claimed.job.id));
      }

      // Assert
      expect(steps.slice(0, -1).map((s) => s.outcome)).toEqual(Array.from({ length: MAX_PLAN_REDISPATCHES }, () => 'running'));
      expect(steps.at(-1)).toEqual({ outcome: 'ended', state: 'failed' });
      const { run } = await first().getRun(ALL, runId);
      expect(run.state).toBe('failed');
      expect(run.error?.code).toBe('PROVISIONING.RUNNER_TIMEOUT');
      expect(run.error?.message).toContain(`${MAX_PLAN_REDISPATCHES + 1} plan jobs of the run were lost`);
      expect(run.error?.message).toContain('ran past its maximum duration of 10 minutes');
      expect((await jobsOf(runId)).map((j) => j.state)).toEqual(Array.from({ length: MAX_PLAN_REDISPATCHES + 1 }, () => 'lost'));
      const failed = await failures(runId);
      expect(failed).toHaveLength(1);
      expect(failed[0]?.data).toMatchObject({ code: 'PROVISIONING.RUNNER_TIMEOUT', reason: run.error?.message });
    });

    it('when an apply job runs past its maximum duration, then one that had not begun is dispatched again, and one that began fails the run RUNNER_LOST with a receipt and is never dispatched again', async () => {
      // Arrange: the plan made and accepted; its apply job dispatched (no approval for development).
      const runId = await promote(TENANTS[0], freshStack('development'));
      await first().plan(runId);
      const planJob = await claim(TENANTS[0], 'planner', runId);
      await reportPlan(planJob);
      expect(await first().collectJob(runId, planJob.job.id)).toMatchObject({ outcome: 'running', kind: 'apply' });

      // Act: the first apply job beats past its deadline before it begins; the second begins and beats past its own.
      const unbegun = await claim(TENANTS[0], 'slow-agent', runId);
      await beatUntil([unbegun], clock.now().getTime() + APPLY_LIMIT_MS);
      const again = await first().collectJob(runId, unbegun.job.id);
      const begun = await claim(TENANTS[0], 'slower-agent', runId);
      const beganAt = clock.now().getTime();
      await beat(begun, true);
      await beatUntil([begun], beganAt + APPLY_LIMIT_MS);
      const ended = await first().collectJob(runId, begun.job.id);
      const later = await first().collectJob(runId, begun.job.id);

      // Assert
      expect(again).toMatchObject({ outcome: 'running', kind: 'apply' });
      expect(ended).toEqual({ outcome: 'ended', state: 'failed' });
      expect(later).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await first().getRun(ALL, runId);
      expect(detail.run.error?.code).toBe('PROVISIONING.RUNNER_LOST');
      expect(detail.run.error?.message).toContain(`apply job ${begun.job.id} ran past its maximum duration of 120 minutes`);
      expect(detail.applyReceipt?.result.status).toBe('failed');
      expect(detail.applyReceipt?.runnerLost).toMatchObject({ agent: 'slower-agent', lastHeardAt: new Date(beganAt + APPLY_LIMIT_MS).toISOString() });
      const jobs = await jobsOf(runId);
      expect(jobs.map((j) => [j.id, j.kind, j.state, j.apply_began_at === null ? 'not begun' : 'begun'])).toEqual([
        [planJob.job.id, 'plan', 'done', 'not begun'],
        [unbegun.job.id, 'apply', 'lost', 'not begun'],
        [begun.job.id, 'apply', 'lost', 'begun'],
      ]);
      expect(await failures(runId)).toHaveLength(1);
    }, 60_000);

    it('when two tenants run the same promotion id, environment and stack names, then each job keeps its own deadline: one tenant\'s job is lost at its deadline while the other\'s runs on, and each run counts only its own losses', async () => {
      // Arrange: the second tenant's job is claimed five minutes after the first's.
      const [stack, promotionId] = [freshStack('development'), `prom-limits-shared-${dialect}`];
      const [runA, runB] = [await promote(TENANTS[0], stack, promotionId), await promote(TENANTS[1], stack, promotionId)];
      await first().plan(runA);
      const claimedA = await claim(TENANTS[0], 'agent', runA);
      const deadlineA = clock.now().getTime() + PLAN_LIMIT_MS;
      await beatUntil([claimedA], clock.now().getTime() + 5 * 60_000);
      await beat(claimedA);
      await first().plan(runB);
      const claimedB = await claim(TENANTS[1], 'agent', runB);

      // Act
      await beatUntil([claimedA, claimedB], deadlineA);
      const beats = [await refusal(beat(claimedA)), await refusal(beat(claimedB))];
      const steps = [await first().collectJob(runA, claimedA.job.id), await first().collectJob(runB, claimedB.job.id)];

      // Assert
      expect(runA).not.toBe(runB);
      expect(claimedA.job.stack).toEqual({ ...claimedB.job.stack, tenant: TENANTS[0] });
      expect(beats).toEqual(['RUNNER.JOB_SUPERSEDED', 'accepted']);
      expect(steps[0]).toMatchObject({ outcome: 'running', kind: 'plan' });
      expect(steps[0]).not.toMatchObject({ jobId: claimedA.job.id });
      expect(steps[1]).toMatchObject({ outcome: 'running', kind: 'plan', jobId: claimedB.job.id });
      expect((await jobsOf(runA)).map((j) => j.state)).toEqual(['lost', 'queued']);
      expect((await jobsOf(runB)).map((j) => j.state)).toEqual(['running']);
      expect(Number((await jobsOf(runB))[0]?.deadline_at)).toBe(deadlineA + 5 * 60_000);
      // The other tenant's agent pool is not handed the first tenant's new job.
      expect(await first().runners.claim(ownPool(TENANTS[1]), 'agent', 0)).toBeUndefined();
    });

    it('when the sweep runs on two hosts while an agent reports its plan at the deadline (by a host whose clock is a millisecond behind), then one outcome wins: the report, or the loss and one plan dispatched again', async () => {
      // The report first, the sweep first, and both at once: whatever the order, the job ends once.
      const orders = ['report first', 'sweep first', 'at once', 'at once', 'at once', 'at once'] as const;
      const outcomes: string[] = [];
      for (const [round, order] of orders.entries()) {
        // Arrange
        const runId = await promote(TENANTS[0], freshStack('development'));
        await first().plan(runId);
        const claimed = await claim(TENANTS[0], `racer-${round}`, runId);
        await beatUntil([claimed], clock.now().getTime() + PLAN_LIMIT_MS);
        const body = JSON.stringify({ kind: 'plan', runner: { name: 'local', version: 'test', agent: `racer-${round}` }, error: { code: 'IAC.PLAN_FAILED', message: 'the program failed' } });
        const report = async () => (await Promise.allSettled([lagging.runners.accept(callerOf(claimed), body)]))[0];
        const sweep = () => Promise.all(hosts.map((host) => host.collectJob(runId, claimed.job.id)));

        // Act
        let accepted: PromiseSettledResult<unknown> | undefined;
        if (order === 'report first') {
          accepted = await report();
          await sweep();
        } else if (order === 'sweep first') {
          await sweep();
          accepted = await report();
        } else {
          [accepted] = await Promise.all([report(), sweep()]);
        }

        // Assert
        const jobs = await jobsOf(runId);
        const { run } = await first().getRun(ALL, runId);
        if (accepted?.status === 'fulfilled') {
          outcomes.push('reported');
          expect(jobs.map((j) => j.state)).toEqual(['done']);
          expect(run).toMatchObject({ state: 'failed', error: { code: 'IAC.PLAN_FAILED' } });
          expect(await failures(runId)).toHaveLength(1);
        } else {
          outcomes.push('lost');
          expect((accepted?.reason as { code?: string }).code).toBe('RUNNER.JOB_SUPERSEDED');
          expect(jobs.filter((j) => j.state === 'lost').map((j) => j.id)).toEqual([claimed.job.id]);
          expect(jobs.filter((j) => j.state === 'queued')).toHaveLength(1);
          expect(run.state).toBe('planning');
          expect(await failures(runId)).toEqual([]);
          // The plan dispatched again runs under the stack lock as it is now.
          const queued = jobs.find((j) => j.state === 'queued');
          expect(await getStackLock(db(), claimed.job.stack)).toMatchObject({ holderRun: runId, version: Number(queued?.fencing_token) });
        }
        // The next round's agent claims the next round's job.
        await first().failRun(runId, 'the round is over');
      }
      expect(outcomes.slice(0, 2)).toEqual(['reported', 'lost']);
    }, 60_000);
  });
}
