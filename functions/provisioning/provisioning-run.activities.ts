import * as df from 'durable-functions';
import type { InvocationContext } from '@azure/functions';
import type { OrchestrationContext, Task } from 'durable-functions';
import type { RunStep } from '../../shared/provisioning/provisioning.service';
import { getDeps } from '../runtime';
import { moduleEnabled } from '../app';
import { wakeNextOnStack } from './stack-free';

/**
 * The activities of the provisioning run orchestration (provisioning-run.orchestrator.ts). Each is one use case of
 * the provisioning service; the service reads the run from the store every time, so a retried or replayed activity
 * finds the run where the last one left it and does not repeat what is done.
 */
export const ProvisioningActivities = {
  plan: 'provisioningRunPlan',
  afterApproval: 'provisioningRunAfterApproval',
  checkPolicy: 'provisioningRunCheckPolicy',
  apply: 'provisioningRunApply',
  fail: 'provisioningRunFail',
  collectJob: 'provisioningRunCollectJob',
} as const;

/**
 * Inputs and results of the activities.
 *
 * BREAKING-CHANGE SHAPES: they are stored in Durable history and replayed by running instances.
 */
export interface RunRef {
  readonly runId: string;
}

interface ActivitySignatures {
  [ProvisioningActivities.plan]: { input: RunRef; output: RunStep };
  [ProvisioningActivities.afterApproval]: { input: RunRef & { readonly timedOut: boolean }; output: RunStep };
  [ProvisioningActivities.checkPolicy]: { input: RunRef & { readonly timedOut: boolean }; output: RunStep };
  [ProvisioningActivities.apply]: { input: RunRef; output: RunStep };
  [ProvisioningActivities.fail]: { input: RunRef & { readonly reason: string }; output: RunStep };
  [ProvisioningActivities.collectJob]: { input: RunRef & { readonly jobId: string }; output: RunStep };
}
type ActivityName = keyof ActivitySignatures;

/**
 * Transient faults (the store busy, a Git remote not answering) are retried a few times, a few seconds apart; after
 * that the orchestrator fails the run rather than leave it hanging.
 */
const RETRY = Object.assign(new df.RetryOptions(2000, 4), { backoffCoefficient: 2 });

/** Calls an activity by its constant name with its typed input, and yields its typed result: `yield* callActivity(…)`. */
export function* callActivity<K extends ActivityName>(
  context: OrchestrationContext,
  name: K,
  input: ActivitySignatures[K]['input'],
): Generator<Task, ActivitySignatures[K]['output'], unknown> {
  return (yield context.df.callActivityWithRetry(name, RETRY, input)) as ActivitySignatures[K]['output'];
}

/**
 * `ms` after `from`: the fire time of a durable timer. Here rather than in the orchestrator, whose lint rule keeps
 * the `Date` global out of it; `from` is always `context.df.currentUtcDateTime`, so replays get the same time.
 */
export function later(from: Date, ms: number): Date {
  return new Date(from.getTime() + ms);
}

/** The time an ISO-8601 text names (an activity's answer, so replays read the same text and get the same time). */
export function at(iso: string): Date {
  return new Date(iso);
}

export async function planActivity(input: RunRef, context: InvocationContext): Promise<RunStep> {
  const { provisioning } = await getDeps();
  return handOver(context, input.runId, await provisioning.plan(input.runId));
}

export async function afterApprovalActivity(input: RunRef & { timedOut: boolean }): Promise<RunStep> {
  return (await getDeps()).provisioning.afterApproval(input.runId, input.timedOut);
}

/** A run waiting for a policy check holds no stack, so its answer releases none: nobody is woken. */
export async function checkPolicyActivity(input: RunRef & { timedOut: boolean }): Promise<RunStep> {
  return (await getDeps()).provisioning.checkPolicy(input.runId, input.timedOut);
}

export async function applyActivity(input: RunRef, context: InvocationContext): Promise<RunStep> {
  const { provisioning } = await getDeps();
  return handOver(context, input.runId, await provisioning.apply(input.runId));
}

export async function failActivity(input: RunRef & { reason: string }, context: InvocationContext): Promise<RunStep> {
  const { provisioning } = await getDeps();
  return handOver(context, input.runId, await provisioning.failRun(input.runId, input.reason));
}

/** Collects the run's runner job: the step it finished may have released the stack (an apply that ended, a plan now awaiting approval). */
export async function collectJobActivity(input: RunRef & { jobId: string }, context: InvocationContext): Promise<RunStep> {
  const { provisioning } = await getDeps();
  return handOver(context, input.runId, await provisioning.collectJob(input.runId, input.jobId));
}

/**
 * After a step that may have released the run's stack (a plan that now waits for approval, an apply or a run that
 * ended, a plan gone stale), wakes the next run waiting for that stack. A run that is still waiting released nothing.
 */
export async function handOver(context: InvocationContext, runId: string, step: RunStep): Promise<RunStep> {
  if (step.outcome !== 'waiting' && step.outcome !== 'running') await wakeNextOnStack(context, (await getDeps()).provisioning, { runId });
  return step;
}

if (moduleEnabled('provisioning')) {
  // The activities that can release a stack wake the next run waiting for it through the durable client.
  const durableClient = [df.input.durableClient()];
  df.app.activity(ProvisioningActivities.plan, { handler: planActivity, extraInputs: durableClient });
  df.app.activity(ProvisioningActivities.afterApproval, { handler: afterApprovalActivity });
  df.app.activity(ProvisioningActivities.checkPolicy, { handler: checkPolicyActivity });
  df.app.activity(ProvisioningActivities.apply, { handler: applyActivity, extraInputs: durableClient });
  df.app.activity(ProvisioningActivities.fail, { handler: failActivity, extraInputs: durableClient });
  df.app.activity(ProvisioningActivities.collectJob, { handler: collectJobActivity, extraInputs: durableClient });
}
