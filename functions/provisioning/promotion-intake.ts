import { crashPoint } from '../../shared/platform/faults/crash-points';
import type { InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import type { DurableClient } from 'durable-functions';
import { exhaustedDeliveries, QUEUE_DEFAULTS } from '../../shared/platform/bus/queue';
import { isTerminal, type Run } from '../../shared/provisioning/run';
import type { RunTimings } from '../../shared/provisioning/provisioning.service';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { ProvisioningOrchestrations, type RunOrchestrationInput } from './provisioning-run.orchestrator';
import { logOf } from '../log';

/** The queue DeliveryHost sends `PromotionApproved` to. */
export const PROMOTIONS_QUEUE = 'runtime-cloud-promotions';

/**
 * Takes a promotion off the queue: the provisioning service records it (a run, or a rejection with its reason) and
 * the run's orchestration is started. An expected outcome (invalid, duplicate) completes the message; a transient
 * failure (the store, a Git remote, the Durable client) throws, so the message is delivered again and, after the
 * max delivery count, dead-lettered. The message body is never logged: its repository URL may carry credentials.
 */
export async function promotionIntake(message: unknown, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const messageId = messageIdOf(context);
  const log = logOf(context, { messageId });
  const result = await deps.provisioning.intake({ messageId, body: message, lastDelivery: isLastDelivery(context) });
  switch (result.outcome) {
    case 'accepted':
      crashPoint('intake:recorded', result.run.id);
      await startRun(df.getClient(context), result.run, deps.provisioning.timings);
      // The run is recorded and started; the message is not yet completed (delivered again after a crash here).
      crashPoint('intake:started', result.run.id);
      log.info('promotion queued as a run', { promotionId: result.run.promotionId, runId: result.run.id, stack: result.run.stack });
      return;
    case 'duplicate':
      // An earlier delivery may have recorded the run and failed before its orchestration started.
      if (!isTerminal(result.run.state)) await startRun(df.getClient(context), result.run, deps.provisioning.timings, { onlyIfAbsent: true });
      log.info('the message repeats a promotion; no second run', { promotionId: result.run.promotionId, runId: result.run.id });
      return;
    case 'rejected':
      log.warn(`message rejected (${result.code}): ${result.reason}`, result.run ? { runId: result.run.id, promotionId: result.run.promotionId } : {});
      return;
    case 'ignored':
      log.warn(`message ignored: ${result.reason}`);
      return;
  }
}

/** The Service Bus messageId; without one (never in Service Bus) the invocation id, which dedupes by promotion only. */
function messageIdOf(context: InvocationContext): string {
  const id = context.triggerMetadata?.messageId;
  if (typeof id === 'string' && id.length > 0) return id;
  logOf(context).warn('the message has no messageId; duplicates are recognised by promotionId only');
  return `invocation:${context.invocationId}`;
}

/**
 * Whether this delivery is the message's last before the queue dead-letters it: its delivery count reached the
 * queue's maximum (QUEUE_DEFAULTS.maxDeliveryCount, as infra creates the queue).
 */
function isLastDelivery(context: InvocationContext): boolean {
  const count = Number(context.triggerMetadata?.deliveryCount);
  return Number.isInteger(count) && exhaustedDeliveries(count, QUEUE_DEFAULTS.maxDeliveryCount);
}

/** Starts the run's orchestration under the run's id, so there is never a second instance of one run. */
export async function startRun(client: DurableClient, run: Run, timings: RunTimings, options: { onlyIfAbsent?: boolean } = {}): Promise<void> {
  const exists = () => client.getStatus(run.id).then(Boolean, () => false);
  if (options.onlyIfAbsent && (await exists())) return;
  const input: RunOrchestrationInput = { runId: run.id, timings };
  try {
    await client.startNew(ProvisioningOrchestrations.run, { instanceId: run.id, input });
  } catch (thrown) {
    // Started meanwhile by another delivery of the same promotion: that instance is the run's.
    if (!(await exists())) throw thrown;
  }
}

moduleApp('provisioning').serviceBusQueue('promotionIntake', {
  queueName: PROMOTIONS_QUEUE,
  connection: 'ServiceBusConnection',
  extraInputs: [df.input.durableClient()],
  handler: promotionIntake,
});
