import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { CloudEvent } from '../../shared/platform/bus/events';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { systemClock } from '../../shared/platform/time/clock';
import { createLocalExternalServices, type LocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import { transitionRun } from '../../shared/provisioning/provisioning.repository';
import { createProvisioningService, type ProvisioningService, type RunStep } from '../../shared/provisioning/provisioning.service';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { stackOf, type Run } from '../../shared/provisioning/run';
import { getStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { startTestHost, type TestHost } from '../support/local-host';
import { expectProblem } from '../support/problems';
import { refusal } from '../support/refusal';
import { aStackPromotion, EXAMPLE_PROJECT, exampleStack, outboxEvents, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample, testServiceOptions } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

/**
 * Policy checks the GovernanceHost decides later: a plan a `review: true` policy applies to waits (without its
 * stack) for the local GovernanceHost's check, which a reviewer decides with `reviewCheck`. The service's steps are
 * driven by hand on SQLite and PostgreSQL (the orchestration's timers are the unit test's); one local host runs the
 * whole orchestration with a short poll.
 */

const ALL = { kind: 'all' } as const;
/** The name of the environments whose plans are reviewed (a policy matches an environment by id or by name). */
const REVIEWED = 'reviewed';
/** Sends plans of the environments named `REVIEWED` (on any stack) to review. */
const REVIEW_POLICY = { policies: [{ id: 'change-review', environments: [REVIEWED], review: true, reason: 'changes of this environment are reviewed' }] };

/** A promotion onto `stack`, of an environment of its own (an environment is bound to one stack) named `REVIEWED`. */
function reviewedPromotion(repository: ProvisioningExample['repository'], tier: 'development' | 'production', stack: string): PromotionApproved {
  const promotion = aStackPromotion(repository, tier, { stack, environmentId: `env-reviewed-${stack}` });
  return { ...promotion, environment: { ...promotion.environment, name: REVIEWED } };
}

type PolicyStep = Extract<RunStep, { outcome: 'awaiting-policy' }>;

function policyStep(step: RunStep): PolicyStep {
  if (step.outcome !== 'awaiting-policy') throw new Error(`expected a policy wait, got ${JSON.stringify(step)}`);
  return step;
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`provisioning runs waiting for a policy check on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-policy-wait-', stackCopies: 20, stateDirName: 'example-state' });
    const { clock, freshStack } = fixture;
    let database: TestDatabase;
    let example: ProvisioningExample;
    let cloud: LocalCloud;
    let root: string;
    let dirs = 0;
    let messages = 0;

    beforeAll(() => {
      ({ database, example, cloud, root } = fixture);
    });

    let current: LocalExternalServices | undefined;
    afterEach(async () => {
      await current?.setReachable('governance', true);
    });

    /** A provisioning service whose local GovernanceHost reads `governance` from a state dir of its own. */
    function host(governance: unknown = REVIEW_POLICY) {
      const stateDir = join(root, `state-${++dirs}`);
      writeExampleReferences(stateDir);
      fs.writeFileSync(join(stateDir, 'governance.json'), JSON.stringify(governance));
      const { store } = database;
      const services = createLocalExternalServices({ store, clock, stateDir });
      current = services;
      const service: ProvisioningService = createProvisioningService({ ...testServiceOptions(store, clock, cloud, root), services, knowsTenant: () => Promise.resolve(true) });
      return { service, services };
    }

    async function accepted(service: ProvisioningService, tier: 'development' | 'production', options: { stack?: string; environmentId?: string } = {}): Promise<Run> {
      const stack = options.stack ?? freshStack(tier);
      const body = options.environmentId === undefined ? reviewedPromotion(example.repository, tier, stack) : aStackPromotion(example.repository, tier, { stack, environmentId: options.environmentId });
      const result = await service.intake({ messageId: `msg-${dialect}-${++messages}`, body });
      if (result.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(result)}`);
      return result.run;
    }
    const eventsOf = (runId: string): Promise<CloudEvent[]> => outboxEvents(database.store, runId);
    const types = (events: readonly CloudEvent[]) => events.map((e) => e.type);
    const resourcesOf = async (stack: string) => (await cloud.list('local')).filter((r) => r.urn.startsWith(`urn:pulumi:${stack}::`));
    const db = () => provisioningDb(database.store.db);
    const waitingPlans = async (runId: string) => (await db().selectFrom('provisioning_policy_checks').select('run_id').where('run_id', '=', runId).execute()).length;

    it('when a review policy applies, then the run waits for the policy check without its stack and says so, and another run of the stack plans and applies meanwhile', async () => {
      // Arrange: two runs of one stack; only the first is of the reviewed environment.
      const { service } = host();
      const stack = freshStack('development');
      const reviewed = await accepted(service, 'development', { stack });
      const other = await accepted(service, 'development', { stack, environmentId: 'env-not-reviewed' });

      // Act
      const step = policyStep(await service.plan(reviewed.id));
      const waiting = await service.getRun(ALL, reviewed.id);
      const lock = await getStackLock(db(), exampleStack(stack));
      const next = await service.nextWaitingRun({ stack: exampleStack(stack) });
      clock.advance(1000);
      const replanned = await service.plan(reviewed.id);
      const polled = await service.checkPolicy(reviewed.id, false);
      const otherPlanned = await service.plan(other.id);
      const otherApplied = await service.apply(other.id);

      // Assert
      expect(step).toEqual({ outcome: 'awaiting-policy', checkId: expect.stringMatching(/^chk-/), planDigest: expect.stringMatching(/^sha256:/), since: waiting.run.updatedAt.toISOString() });
      expect(waiting.run).toMatchObject({ state: 'planning', waitingFor: { kind: 'policy', checkId: step.checkId, planDigest: step.planDigest, since: step.since } });
      // Nothing of the plan is recorded or announced until the check allows it.
      expect(waiting.planReceipt).toBeUndefined();
      expect(waiting.run.planDigest).toBeUndefined();
      expect(await eventsOf(reviewed.id)).toEqual([]);
      expect(lock).toBeUndefined();
      expect(next).toBe(other.id);
      // Asked again (a retried step, a new execution), the run goes on waiting for the same check, unplanned again.
      expect(replanned).toEqual(step);
      expect(polled).toEqual(step);
      expect(otherPlanned).toEqual({ outcome: 'applying' });
      expect(otherApplied).toEqual({ outcome: 'ended', state: 'applied' });
    });

    it('when the reviewer allows the check, then the plan is recorded with the decision and its check, SpecificationDeclared is published, and the run applies', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));
      const plannedAt = clock.now().toISOString();
      clock.advance(60_000);
      await services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-1' });

      // Act
      const allowed = await service.checkPolicy(run.id, false);
      const applied = await service.apply(run.id);

      // Assert
      expect(allowed).toEqual({ outcome: 'applying' });
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run).toMatchObject({ state: 'applied', planDigest: step.planDigest });
      expect(detail.run.waitingFor).toBeUndefined();
      expect(detail.planReceipt).toMatchObject({
        finishedAt: plannedAt,
        policy: { decision: 'allow', policies: ['change-review'] },
        policyCheck: { checkId: step.checkId, requestedAt: plannedAt, decidedAt: clock.now().toISOString() },
      });
      expect(types(await eventsOf(run.id))).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      expect(await waitingPlans(run.id)).toBe(0);
    });

    it('when the reviewer allows a production plan, then it goes on to wait for its approval, its expiry counted from the plan', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'production');
      const step = policyStep(await service.plan(run.id));
      const plannedAt = clock.now().getTime();
      clock.advance(3_600_000);
      await services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-1' });

      // Act
      const allowed = await service.checkPolicy(run.id, false);

      // Assert
      expect(allowed).toEqual({ outcome: 'awaiting-approval', planDigest: step.planDigest, planExpiresAt: new Date(plannedAt + 24 * 3_600_000).toISOString() });
      const waiting = (await service.getRun(ALL, run.id)).run;
      expect(waiting).toMatchObject({ state: 'awaiting-approval', waitingFor: { kind: 'approval', planDigest: step.planDigest } });
      expect(await getStackLock(db(), stackOf(run))).toBeUndefined();
    });

    it('when the reviewer denies the check, then the run fails with POLICY_DENIED and the reason, one ProvisioningFailed, and nothing is applied', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));
      await services.reviewCheck(step.checkId, { decision: 'deny', by: 'reviewer-2', reason: 'not during the freeze' });

      // Act
      const denied = await service.checkPolicy(run.id, false);
      const again = await service.checkPolicy(run.id, true);

      // Assert
      expect(denied).toEqual({ outcome: 'ended', state: 'failed' });
      expect(again).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error).toEqual({ code: 'PROVISIONING.POLICY_DENIED', message: expect.stringContaining('not during the freeze') });
      expect(detail.run.waitingFor).toBeUndefined();
      expect(detail.planReceipt).toBeUndefined();
      expect(types(await eventsOf(run.id))).toEqual(['ProvisioningFailed']);
      expect(await resourcesOf(run.stack)).toEqual([]);
      expect(await waitingPlans(run.id)).toBe(0);
    });

    it('when the check is still pending at the deadline, then the run fails with POLICY_TIMEOUT and one ProvisioningFailed; a decision that comes later changes nothing', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));

      // Act
      const timedOut = await service.checkPolicy(run.id, true);
      await services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-late' });
      const later = await service.checkPolicy(run.id, false);

      // Assert
      expect(timedOut).toEqual({ outcome: 'ended', state: 'failed' });
      expect(later).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error).toEqual({ code: 'PROVISIONING.POLICY_TIMEOUT', message: expect.stringContaining(step.checkId) });
      expect(detail.planReceipt).toBeUndefined();
      expect(types(await eventsOf(run.id))).toEqual(['ProvisioningFailed']);
    });

    it('when the check was decided by the time of the last ask, then the decision counts and the run does not time out', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));
      await services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-1' });

      // Act
      const allowed = await service.checkPolicy(run.id, true);

      // Assert
      expect(allowed).toEqual({ outcome: 'applying' });
    });

    it('when an operator rejects a run waiting for its policy check, then it ends rejected with one ProvisioningFailed, and an allow that comes later records nothing', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));

      // Act
      const canceled = await refusal(service.cancel(ALL, run.id, 'operator-1'));
      const approved = await refusal(service.approve(ALL, run.id, { planDigest: step.planDigest, by: 'operator-1' }));
      const rejected = await service.reject(ALL, run.id, { reason: 'not this week', by: 'operator-1' });
      await services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-1' });
      const after = await service.checkPolicy(run.id, false);
      const replayed = await service.plan(run.id);

      // Assert
      expect(canceled).toMatchObject({ code: 'PROVISIONING.RUN_NOT_CANCELABLE' });
      expect(approved).toMatchObject({ code: 'PROVISIONING.RUN_NOT_AWAITING_APPROVAL' });
      expect(rejected).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.REJECTED' } });
      expect(rejected.waitingFor).toBeUndefined();
      expect(after).toEqual({ outcome: 'ended', state: 'rejected' });
      expect(replayed).toEqual({ outcome: 'ended', state: 'rejected' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.decision).toMatchObject({ decision: 'rejected', planDigest: step.planDigest, by: 'operator-1', comment: 'not this week' });
      expect(detail.planReceipt).toBeUndefined();
      expect(types(await eventsOf(run.id))).toEqual(['ProvisioningFailed']);
      expect(await waitingPlans(run.id)).toBe(0);
    });

    it('when a run is planning for another reason, then it cannot be rejected, not even by a rejection that read it waiting for its check a moment before', async () => {
      // Arrange: a run of an environment no review applies to, stopped between taking its stack and deciding.
      const { service } = host();
      const run = await accepted(service, 'development', { environmentId: 'env-not-reviewed-planning' });
      await db().updateTable('provisioning_runs').set({ state: 'planning' }).where('id', '=', run.id).execute();

      // Act
      const refused = await refusal(service.reject(ALL, run.id, { reason: 'no', by: 'operator-1' }));
      // The update of a rejection that found the run waiting for its policy check (the race the guard closes).
      const raced = await transitionRun(db(), run.id, 'rejected', clock.now().getTime(), { waitingFor: null, finished: true }, { from: ['planning'], waitingKind: 'policy' });

      // Assert
      expect(refused).toMatchObject({ code: 'PROVISIONING.RUN_NOT_AWAITING_APPROVAL', kind: 'conflict' });
      expect(raced).toBe(false);
      expect((await service.getRun(ALL, run.id)).run.state).toBe('planning');
    });

    it('when the GovernanceHost does not answer an ask, then the step throws GOVERNANCE_UNAVAILABLE and the run waits on; once it answers, the decision counts', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));
      await services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-1' });
      await services.setReachable('governance', false);

      // Act
      const thrown = await refusal(service.checkPolicy(run.id, false));
      const between = (await service.getRun(ALL, run.id)).run;
      await services.setReachable('governance', true);
      const allowed = await service.checkPolicy(run.id, false);

      // Assert
      expect(thrown).toMatchObject({ code: 'PROVISIONING.GOVERNANCE_UNAVAILABLE', kind: 'unavailable' });
      expect(between).toMatchObject({ state: 'planning', waitingFor: { kind: 'policy', checkId: step.checkId } });
      expect(allowed).toEqual({ outcome: 'applying' });
    });

    it('when the GovernanceHost lost the check, then the run fails with POLICY_CHECK_UNKNOWN at once instead of waiting out its timeout', async () => {
      // Arrange
      const { service } = host();
      const run = await accepted(service, 'development');
      const step = policyStep(await service.plan(run.id));
      await (database.store.db as unknown as Kysely<{ local_governance_checks: { id: string } }>).deleteFrom('local_governance_checks').where('id', '=', step.checkId).execute();

      // Act
      const ended = await service.checkPolicy(run.id, false);

      // Assert
      expect(ended).toEqual({ outcome: 'ended', state: 'failed' });
      expect((await service.getRun(ALL, run.id)).run.error?.code).toBe('PROVISIONING.POLICY_CHECK_UNKNOWN');
      expect(types(await eventsOf(run.id))).toEqual(['ProvisioningFailed']);
    });

    it('when a policy denies the plan outright, then no review is asked for; a review limited to other stacks does not apply; a check is decided once', async () => {
      // Arrange
      const stack = freshStack('development');
      const { service, services } = host({
        policies: [
          { id: 'strict-review', environments: ['env-strict'], review: true, reason: 'reviewed' },
          { id: 'no-services', environments: ['env-strict'], denyTypes: ['local:compute:Service'], reason: 'no services here' },
          { id: 'stack-review', stacks: [stack], review: true, reason: 'this stack is reviewed' },
        ],
      });
      const strict = await accepted(service, 'development', { environmentId: 'env-strict' });
      const elsewhere = await accepted(service, 'development', { environmentId: 'env-free' });
      const onStack = await accepted(service, 'development', { stack, environmentId: 'env-free-on-stack' });

      // Act
      const denied = await service.plan(strict.id);
      const free = await service.plan(elsewhere.id);
      const step = policyStep(await service.plan(onStack.id));
      await services.reviewCheck(step.checkId, { decision: 'deny', by: 'reviewer-1', reason: 'no' });
      const twice = await refusal(services.reviewCheck(step.checkId, { decision: 'allow', by: 'reviewer-2' }));
      const unknown = await refusal(services.reviewCheck('chk-none', { decision: 'allow', by: 'reviewer-2' }));

      // Assert
      expect(denied).toEqual({ outcome: 'ended', state: 'failed' });
      expect((await service.getRun(ALL, strict.id)).run.error?.message).toContain('no services here');
      expect(free).toEqual({ outcome: 'applying' });
      expect(twice).toMatchObject({ code: 'PROVISIONING.POLICY_CHECK_DECIDED', kind: 'conflict' });
      expect(unknown).toMatchObject({ code: 'PROVISIONING.POLICY_CHECK_UNKNOWN', kind: 'not-found' });
      expect(await service.checkPolicy(onStack.id, false)).toEqual({ outcome: 'ended', state: 'failed' });
    });
  });
}

describe('provisioning runs waiting for a policy check on the local host', () => {
  const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator-1' };
  let host: TestHost;
  let example: ProvisioningExample;
  let services: LocalExternalServices;
  let root: string;

  interface RunBody {
    runId: string;
    promotionId: string;
    state: string;
    waitingFor?: { kind: string; checkId?: string; planDigest?: string; since?: string };
    error?: { code: string };
  }

  beforeAll(async () => {
    root = fs.mkdtempSync(join(tmpdir(), 'rch-policy-wait-host-'));
    host = await startTestHost({ depsOverrides: { provisioningTimings: { policyPollMs: 100 } } });
    example = await provisioningExample(root, host.stateDir, 2);
    writeExampleReferences(host.stateDir);
    fs.writeFileSync(join(host.stateDir, 'governance.json'), JSON.stringify(REVIEW_POLICY));
    // The reviewer's side of the same local GovernanceHost: its checks are in the host's store.
    services = createLocalExternalServices({ store: host.host.deps.sql, clock: systemClock, stateDir: host.stateDir });
  });
  afterAll(async () => {
    await host?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const runOf = async (promotionId: string): Promise<RunBody | undefined> => {
    const response = await host.fetch('/runtime-cloud/runs?limit=1000', { claims: operator });
    expect(response.status).toBe(200);
    return ((await response.json()) as { items: RunBody[] }).items.find((r) => r.promotionId === promotionId);
  };
  const eventually = <T>(probe: () => Promise<T | undefined>): Promise<T> =>
    vi.waitFor(
      async () => {
        const value = await probe();
        if (value === undefined) throw new Error('not yet');
        return value;
      },
      { timeout: 20_000, interval: 50 },
    );
  const instanceStatus = async (runId: string) =>
    (
      await (host.host.deps.sql.db as unknown as Kysely<{ durable_instances: { instance_id: string; status: string } }>)
        .selectFrom('durable_instances')
        .select('status')
        .where('instance_id', '=', runId)
        .executeTakeFirst()
    )?.status;
  /** Sends a promotion of the reviewed environment and waits until its run waits for the policy check. */
  async function waitingRun(stack: string): Promise<RunBody> {
    const promotion = reviewedPromotion(example.repository, 'development', stack);
    await sendToPromotions(host, promotion, `policy-${promotion.promotionId}`);
    return eventually(async () => {
      const run = await runOf(promotion.promotionId);
      return run?.waitingFor?.kind === 'policy' ? run : undefined;
    });
  }

  it('when the plan goes to review, then GET /runs/{id} shows the policy wait, the stack is not locked, and the run applies soon after the reviewer allows it', async () => {
    // Arrange
    const run = await waitingRun('development-1');
    const detail = await host.fetch(`/runtime-cloud/runs/${run.runId}`, { claims: operator });
    const lock = await host.fetch(`/runtime-cloud/tenants/demo-team/stacks/${EXAMPLE_PROJECT}/development-1/lock`, { claims: operator });

    // Act
    await services.reviewCheck(run.waitingFor?.checkId ?? '', { decision: 'allow', by: 'reviewer-1' });

    // Assert
    expect(detail.status).toBe(200);
    expect(await detail.json()).toMatchObject({
      state: 'planning',
      waitingFor: { kind: 'policy', checkId: expect.stringMatching(/^chk-/), planDigest: expect.stringMatching(/^sha256:/), since: expect.any(String) },
    });
    await expectProblem(lock, 404, 'PROVISIONING.STACK_NOT_LOCKED');
    const ended = await eventually(async () => {
      const current = await runOf(run.promotionId);
      return current?.state === 'applied' || current?.state === 'failed' ? current : undefined;
    });
    expect(ended.state).toBe('applied');
    await vi.waitFor(async () => expect(await instanceStatus(run.runId)).toBe('Completed'), { timeout: 10_000, interval: 50 });
  });

  it('when an operator rejects the waiting run, then it ends rejected and its orchestration completes', async () => {
    // Arrange
    const run = await waitingRun('development-2');

    // Act
    const rejected = await host.fetch(`/runtime-cloud/runs/${run.runId}/reject`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'not this week' }),
      claims: operator,
    });

    // Assert
    expect(rejected.status).toBe(200);
    expect(await rejected.json()).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.REJECTED' } });
    await vi.waitFor(async () => expect(await instanceStatus(run.runId)).toBe('Completed'), { timeout: 10_000, interval: 50 });
    expect((await outboxEvents(host.host.deps.sql, run.runId)).map((e) => e.type)).toEqual(['ProvisioningFailed']);
  });
});
