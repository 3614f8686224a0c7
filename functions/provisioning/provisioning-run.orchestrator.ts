import * as df from 'durable-functions';
import type { OrchestrationContext, OrchestrationHandler, Task, TimerTask } from 'durable-functions';
import type { RunStep, RunTimings } from '../../shared/provisioning/provisioning.service';
import { DEFAULT_POLICY_POLL_MS, DEFAULT_POLICY_TIMEOUT_MS } from '../../shared/provisioning/run';
import { moduleEnabled } from '../app';
import { at, callActivity, later, ProvisioningActivities } from './provisioning-run.activities';
import { STACK_FREE_EVENT } from './stack-free';

/**
 * One provisioning run as a Durable orchestration, its instance id the run id: plan (once the stack is free; the run
 * that releases it wakes the next with the stack-free event) →
 * wait for the approval, racing a timer, when the plan needs one → apply (once the stack is free again) → done.
 * A plan that goes stale (it expired before its approval, or the stack's state moved before its apply) waits for an
 * operator to replan it (→ plan again, and a fresh approval where one is needed) or to reject it, racing a timer too.
 * A plan the GovernanceHost decides later (a pending policy check) is asked about on a durable timer until the check
 * is decided (→ approval or apply, as after a plan; a deny fails the run), the run is rejected, or the wait times out.
 * The run's state lives in the store; the activities move it and this function only decides what to wait for.
 * Deterministic: time comes from `context.df.currentUtcDateTime`, durations from the input.
 */
export const ProvisioningOrchestrations = { run: 'provisioningRun' } as const;

/**
 * The event the approve, reject and replan endpoints raise on a run's instance; the decision itself is in the
 * store, the event only wakes the run (also a run whose plan waits for its policy check, when it is rejected).
 */
export const APPROVAL_EVENT = 'approval';

/**
 * The orchestration's input.
 *
 * BREAKING-CHANGE SHAPE: stored with every instance; running instances replay with it.
 */
export interface RunOrchestrationInput {
  readonly runId: string;
  readonly timings: OrchestrationTimings;
  /**
   * Set when the orchestration continued as new in a policy wait: the check it waits for and the wait's deadline
   * (ISO-8601), so the deadline stays where it was.
   */
  readonly policyWait?: PolicyWait;
}

/** The policy wait's timings are absent in the input of instances started before it was built. */
type OrchestrationTimings = Omit<RunTimings, 'policyPollMs' | 'policyTimeoutMs'> & Partial<Pick<RunTimings, 'policyPollMs' | 'policyTimeoutMs'>>;

interface PolicyWait {
  readonly checkId: string;
  readonly deadline: string;
}

/**
 * Polls of a policy check in one execution; then the orchestration continues as new, so the history it replays
 * stays short over a long review (a day of polls every 5 s would be 17 280 activities and timers).
 */
export const POLICY_POLLS_PER_EXECUTION = 100;

type PersonStep = Extract<RunStep, { outcome: 'awaiting-approval' | 'stale' }>;
type PolicyStep = Extract<RunStep, { outcome: 'awaiting-policy' }>;
type RunningStep = Extract<RunStep, { outcome: 'running' }>;

/** The event the host raises on a run's instance when it accepted its runner job's outcome. */
export const RUNNER_RESULT_EVENT = 'runner-result';

/**
 * The result event's payload: the job. The result endpoint no longer collects the job itself, so it sends no `step`;
 * events in the history of instances started before carry the step that endpoint collected, and are taken as they are.
 *
 * BREAKING-CHANGE SHAPE: stored in the history of running instances.
 */
export interface RunnerResultEvent {
  readonly jobId: string;
  readonly step?: RunStep;
}

export const provisioningRunOrchestrator: OrchestrationHandler = function* (context: OrchestrationContext) {
  const input = context.df.getInput<RunOrchestrationInput>();
  const { runId, timings } = input;
  try {
    let step: RunStep | typeof CONTINUE_AS_NEW = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.plan, { runId }));
    for (;;) {
      if (step === CONTINUE_AS_NEW) {
        // The new execution's first step (plan) finds the run where it stands (queued, or applying) and waits on.
        context.df.continueAsNew(input);
        return undefined;
      }
      if (step.outcome === 'awaiting-approval' || step.outcome === 'stale') step = yield* waitForPerson(context, runId, timings, step);
      else if (step.outcome === 'awaiting-policy') {
        const waited = yield* waitForPolicy(context, input, step);
        if ('continueAsNew' in waited) {
          // The new execution's first step (plan) finds the run still waiting for the check and waits on.
          context.df.continueAsNew({ ...input, policyWait: waited.continueAsNew } satisfies RunOrchestrationInput);
          return step;
        }
        step = waited.step;
      } else if (step.outcome === 'planning') step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.plan, { runId }));
      else if (step.outcome === 'applying') step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.apply, { runId }));
      else if (step.outcome === 'running') step = yield* waitForRunner(context, runId, step);
      else break;
    }
    context.df.setCustomStatus({ runId, step: step.outcome });
    return step;
  } catch (thrown) {
    // A step failed after its retries: end the run as failed (releasing its stack) instead of leaving it hanging.
    const reason = thrown instanceof Error ? thrown.message : 'a step of the run failed';
    const step = yield* callActivity(context, ProvisioningActivities.fail, { runId, reason: reason.slice(0, 2000) });
    context.df.setCustomStatus({ runId, step: step.outcome });
    return step;
  }
};

/**
 * Waits for the runner job of a plan or an apply: its result event, raced against the job's deadline (its claim
 * deadline while it waits for an agent, its lease while it runs). Either way the collect activity then takes the
 * job's outcome (and dispatches the apply job after a plan that needs no approval: a new job, waited for by the
 * caller's loop); a result event from before the endpoint stopped collecting carries its step already. How long
 * an apply takes is the runner's, not this host's function timeout.
 */
function* waitForRunner(context: OrchestrationContext, runId: string, first: RunningStep): Generator<Task, RunStep, unknown> {
  let step: RunStep = first;
  while (step.outcome === 'running' && step.jobId === first.jobId) {
    context.df.setCustomStatus({ runId, waitingFor: 'runner', jobId: step.jobId, kind: step.kind });
    const result = context.df.waitForExternalEvent(RUNNER_RESULT_EVENT);
    const deadline = context.df.createTimer(at(step.until));
    const winner: unknown = yield context.df.Task.any([result, deadline]);
    if (winner !== deadline) deadline.cancel();
    // An event of an earlier job (delivered after its run collected that job at a deadline) carries nothing for this one.
    const sent = winner === result ? (result.result as RunnerResultEvent | undefined) : undefined;
    step = sent?.jobId === first.jobId && sent.step ? sent.step : yield* callActivity(context, ProvisioningActivities.collectJob, { runId, jobId: first.jobId });
  }
  return step;
}

/**
 * Waits for a person while the run stays where `first` left it (awaiting approval of that plan, or stale): each
 * wake-up (the decision event; the plan's expiry, once) asks the store where the run stands. The deadline is set
 * once per wait, so wake-ups that decide nothing do not push it back; when it fires the run is told it timed out.
 */
function* waitForPerson(context: OrchestrationContext, runId: string, timings: OrchestrationTimings, first: PersonStep): Generator<Task, RunStep, unknown> {
  const deadline = later(context.df.currentUtcDateTime, timings.approvalTimeoutMs);
  let expiryFired = false;
  let step: RunStep = first;
  while (samePersonWait(first, step)) {
    context.df.setCustomStatus(step.outcome === 'stale' ? { runId, waitingFor: 'replan', reason: step.reason } : { runId, waitingFor: 'approval', planDigest: step.planDigest });
    const decision = context.df.waitForExternalEvent(APPROVAL_EVENT);
    const timeout = context.df.createTimer(deadline);
    // The plan's expiry wakes the run once, so it shows stale without anyone having to try an approval first.
    const expiresAt: Date | undefined = step.outcome === 'awaiting-approval' && !expiryFired ? expiryOf(step, deadline) : undefined;
    const expiry: TimerTask | undefined = expiresAt ? context.df.createTimer(expiresAt) : undefined;
    const winner: unknown = yield context.df.Task.any(expiry ? [decision, timeout, expiry] : [decision, timeout]);
    if (winner !== timeout) timeout.cancel();
    if (expiry && winner !== expiry) expiry.cancel();
    if (winner === expiry) expiryFired = true;
    step = yield* callActivity(context, ProvisioningActivities.afterApproval, { runId, timedOut: winner === timeout });
  }
  return step;
}

/**
 * Waits while the plan's policy check is pending: asks the GovernanceHost every `policyPollMs` on a durable timer,
 * or at once when the approval event comes (a rejection ends the run meanwhile). The deadline is set once per wait
 * (and carried over a continue-as-new); the ask at the deadline is told it timed out.
 */
function* waitForPolicy(
  context: OrchestrationContext,
  input: RunOrchestrationInput,
  first: PolicyStep,
): Generator<Task, { readonly step: RunStep } | { readonly continueAsNew: PolicyWait }, unknown> {
  const { runId, timings } = input;
  const pollMs = timings.policyPollMs ?? DEFAULT_POLICY_POLL_MS;
  const carried = input.policyWait?.checkId === first.checkId ? input.policyWait : undefined;
  const deadline = carried ? at(carried.deadline) : later(context.df.currentUtcDateTime, timings.policyTimeoutMs ?? DEFAULT_POLICY_TIMEOUT_MS);
  let step: RunStep = first;
  for (let polls = 0; step.outcome === 'awaiting-policy' && step.checkId === first.checkId; polls++) {
    if (polls === POLICY_POLLS_PER_EXECUTION) return { continueAsNew: { checkId: first.checkId, deadline: deadline.toISOString() } };
    context.df.setCustomStatus({ runId, waitingFor: 'policy', checkId: first.checkId, planDigest: first.planDigest });
    const next = later(context.df.currentUtcDateTime, pollMs);
    const last = next.getTime() >= deadline.getTime();
    const woken = context.df.waitForExternalEvent(APPROVAL_EVENT);
    const poll = context.df.createTimer(last ? deadline : next);
    const winner: unknown = yield context.df.Task.any([woken, poll]);
    if (winner !== poll) poll.cancel();
    step = yield* callActivity(context, ProvisioningActivities.checkPolicy, { runId, timedOut: winner === poll && last });
  }
  return { step };
}

/** Whether `step` is still the wait `first` began: the same plan awaiting approval, or still stale. */
function samePersonWait(first: PersonStep, step: RunStep): step is PersonStep {
  if (first.outcome === 'stale') return step.outcome === 'stale';
  return step.outcome === 'awaiting-approval' && step.planDigest === first.planDigest;
}

/** The plan's expiry when it comes before the deadline (else the deadline decides first). */
function expiryOf(step: Extract<RunStep, { outcome: 'awaiting-approval' }>, deadline: Date): Date | undefined {
  if (step.planExpiresAt === undefined) return undefined;
  const expiresAt = at(step.planExpiresAt);
  return expiresAt < deadline ? expiresAt : undefined;
}

/**
 * Waits for the stack in one execution; then the orchestration continues as new, so a run waiting behind a long
 * apply keeps a short history (a 10-minute apply at a 1 s retry would be about 600 activities and timers).
 */
export const STACK_WAITS_PER_EXECUTION = 50;

/** What `untilNotWaiting` answers when the run should go on waiting in a new execution. */
const CONTINUE_AS_NEW = Symbol('continue-as-new');

/**
 * Repeats a step while it answers `waiting` (the stack is busy). Between tries the run sleeps until the run that
 * releases the stack wakes it (the stack-free event), or at the latest for `lockRetryMs` on a durable timer: the
 * fallback for a holder whose lease lapsed, or a wake-up that was lost. After `STACK_WAITS_PER_EXECUTION` tries
 * it answers `CONTINUE_AS_NEW`.
 */
function* untilNotWaiting(
  context: OrchestrationContext,
  timings: OrchestrationTimings,
  step: () => Generator<Task, RunStep, unknown>,
): Generator<Task, RunStep | typeof CONTINUE_AS_NEW, unknown> {
  for (let waits = 0; ; waits++) {
    const result = yield* step();
    if (result.outcome !== 'waiting') return result;
    if (waits === STACK_WAITS_PER_EXECUTION) return CONTINUE_AS_NEW;
    context.df.setCustomStatus({ waitingFor: result.waitingFor });
    const freed = context.df.waitForExternalEvent(STACK_FREE_EVENT);
    const retry = context.df.createTimer(later(context.df.currentUtcDateTime, timings.lockRetryMs));
    const winner: unknown = yield context.df.Task.any([freed, retry]);
    if (winner !== retry) retry.cancel();
  }
}

if (moduleEnabled('provisioning')) df.app.orchestration(ProvisioningOrchestrations.run, provisioningRunOrchestrator);
