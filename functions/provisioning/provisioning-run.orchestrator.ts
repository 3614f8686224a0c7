import * as df from 'durable-functions';
import type { OrchestrationContext, OrchestrationHandler, Task, TimerTask } from 'durable-functions';
import type { RunStep, RunTimings } from '../../shared/provisioning/provisioning.service';
import { moduleEnabled } from '../app';
import { at, callActivity, later, ProvisioningActivities } from './provisioning-run.activities';
import { STACK_FREE_EVENT } from './stack-free';

/**
 * One provisioning run as a Durable orchestration, its instance id the run id: plan (once the stack is free; the run
 * that releases it wakes the next with the stack-free event) →
 * wait for the approval, racing a timer, when the plan needs one → apply (once the stack is free again) → done.
 * A plan that goes stale (it expired before its approval, or the stack's state moved before its apply) waits for an
 * operator to replan it (→ plan again, and a fresh approval where one is needed) or to reject it, racing a timer too.
 * The run's state lives in the store; the activities move it and this function only decides what to wait for.
 * Deterministic: time comes from `context.df.currentUtcDateTime`, durations from the input.
 */
export const ProvisioningOrchestrations = { run: 'provisioningRun' } as const;

/**
 * The event the approve, reject and replan endpoints raise on a run's instance; the decision itself is in the
 * store, the event only wakes the run.
 */
export const APPROVAL_EVENT = 'approval';

/**
 * The orchestration's input.
 *
 * BREAKING-CHANGE SHAPE: stored with every instance; running instances replay with it.
 */
export interface RunOrchestrationInput {
  readonly runId: string;
  readonly timings: RunTimings;
}

type PersonStep = Extract<RunStep, { outcome: 'awaiting-approval' | 'stale' }>;

export const provisioningRunOrchestrator: OrchestrationHandler = function* (context: OrchestrationContext) {
  const { runId, timings } = context.df.getInput<RunOrchestrationInput>();
  try {
    let step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.plan, { runId }));
    for (;;) {
      if (step.outcome === 'awaiting-approval' || step.outcome === 'stale') step = yield* waitForPerson(context, runId, timings, step);
      else if (step.outcome === 'planning') step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.plan, { runId }));
      else if (step.outcome === 'applying') step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.apply, { runId }));
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
 * Waits for a person while the run stays where `first` left it (awaiting approval of that plan, or stale): each
 * wake-up (the decision event; the plan's expiry, once) asks the store where the run stands. The deadline is set
 * once per wait, so wake-ups that decide nothing do not push it back; when it fires the run is told it timed out.
 */
function* waitForPerson(context: OrchestrationContext, runId: string, timings: RunTimings, first: PersonStep): Generator<Task, RunStep, unknown> {
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
 * Repeats a step while it answers `waiting` (the stack is busy). Between tries the run sleeps until the run that
 * releases the stack wakes it (the stack-free event), or at the latest for `lockRetryMs` on a durable timer: the
 * fallback for a holder whose lease lapsed, or a wake-up that was lost.
 */
function* untilNotWaiting(context: OrchestrationContext, timings: RunTimings, step: () => Generator<Task, RunStep, unknown>): Generator<Task, RunStep, unknown> {
  for (;;) {
    const result = yield* step();
    if (result.outcome !== 'waiting') return result;
    context.df.setCustomStatus({ waitingFor: result.waitingFor });
    const freed = context.df.waitForExternalEvent(STACK_FREE_EVENT);
    const retry = context.df.createTimer(later(context.df.currentUtcDateTime, timings.lockRetryMs));
    const winner: unknown = yield context.df.Task.any([freed, retry]);
    if (winner !== retry) retry.cancel();
  }
}

if (moduleEnabled('provisioning')) df.app.orchestration(ProvisioningOrchestrations.run, provisioningRunOrchestrator);
