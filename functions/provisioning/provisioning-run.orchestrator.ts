import * as df from 'durable-functions';
import type { OrchestrationContext, OrchestrationHandler, Task } from 'durable-functions';
import type { RunStep, RunTimings } from '../../shared/provisioning/provisioning.service';
import { moduleEnabled } from '../app';
import { callActivity, later, ProvisioningActivities } from './provisioning-run.activities';

/**
 * One provisioning run as a Durable orchestration, its instance id the run id: plan (once the stack is free) →
 * wait for the approval, racing a timer, when the plan needs one → apply (once the stack is free again) → done.
 * The run's state lives in the store; the activities move it and this function only decides what to wait for.
 * Deterministic: time comes from `context.df.currentUtcDateTime`, durations from the input.
 */
export const ProvisioningOrchestrations = { run: 'provisioningRun' } as const;

/** The event the approve and reject endpoints raise on a run's instance; the decision itself is in the store. */
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

export const provisioningRunOrchestrator: OrchestrationHandler = function* (context: OrchestrationContext) {
  const { runId, timings } = context.df.getInput<RunOrchestrationInput>();
  try {
    let step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.plan, { runId }));
    while (step.outcome === 'awaiting-approval') {
      context.df.setCustomStatus({ runId, waitingFor: 'approval', planDigest: step.planDigest });
      const approval = context.df.waitForExternalEvent(APPROVAL_EVENT);
      const timeout = context.df.createTimer(later(context.df.currentUtcDateTime, timings.approvalTimeoutMs));
      const winner: unknown = yield context.df.Task.any([approval, timeout]);
      if (winner === approval) timeout.cancel();
      // The event only wakes the run: the store says whether it was approved, rejected or not decided at all.
      step = yield* callActivity(context, ProvisioningActivities.afterApproval, { runId, timedOut: winner !== approval });
    }
    if (step.outcome === 'applying') {
      step = yield* untilNotWaiting(context, timings, () => callActivity(context, ProvisioningActivities.apply, { runId }));
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

/** Repeats a step while it answers `waiting` (the stack is busy), sleeping on a durable timer between tries. */
function* untilNotWaiting(context: OrchestrationContext, timings: RunTimings, step: () => Generator<Task, RunStep, unknown>): Generator<Task, RunStep, unknown> {
  for (;;) {
    const result = yield* step();
    if (result.outcome !== 'waiting') return result;
    context.df.setCustomStatus({ waitingFor: result.waitingFor });
    yield context.df.createTimer(later(context.df.currentUtcDateTime, timings.lockRetryMs));
  }
}

if (moduleEnabled('provisioning')) df.app.orchestration(ProvisioningOrchestrations.run, provisioningRunOrchestrator);
