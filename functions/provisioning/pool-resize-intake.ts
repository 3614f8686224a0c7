import { crashPoint } from '../../shared/platform/faults/crash-points';
import type { InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { isTerminal } from '../../shared/provisioning/run';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { startRun } from './promotion-intake';
import { logOf } from '../log';

/**
 * Provisioning's subscription to the events topic. In Azure it carries a rule that lets only `PoolResizeRequested`
 * through (infra/index.ts); the local host's embedded subscription takes every event, so the service reads the type
 * and ignores the others.
 */
export const PROVISIONING_SUBSCRIPTION = 'provisioning';

/**
 * Takes a `PoolResizeRequested` of the capacity module off the events topic: the provisioning service records it as
 * a run on the pool's stack (or a rejection with its reason) and the run's orchestration is started, exactly as
 * promotionIntake does for a promotion. A claim-checked resize whose data cannot be read back is a recorded rejection
 * with its reason (redelivery cannot change it). A transient failure throws: the message is delivered again.
 */
export async function poolResizeIntake(message: unknown, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const messageId = typeof context.triggerMetadata?.messageId === 'string' ? context.triggerMetadata.messageId : `invocation:${context.invocationId}`;
  // Read as every consumer of the topic reads it: a claim-checked event with its data back (event-bodies.ts, loaded
  // with the composition root rather than when the functions register: docs/benchmarks.md, "Cold start").
  const { openEvent } = await import('../../shared/platform/bus/event-bodies.js');
  const opened = await openEvent(message, deps.eventBodies);
  const result = await deps.provisioning.poolResize('refused' in opened ? { messageId, body: message, unreadable: opened.refused } : { messageId, body: opened.event });
  switch (result.outcome) {
    case 'accepted':
      crashPoint('pool-resize:recorded', result.run.id);
      await startRun(df.getClient(context), result.run, deps.provisioning.timings);
      crashPoint('pool-resize:started', result.run.id);
      logOf(context, { messageId }).info(`pool resize of ${result.run.poolResize?.pool ?? ''} queued as a run`, { runId: result.run.id, stack: result.run.stack });
      return;
    case 'duplicate':
      if (!isTerminal(result.run.state)) await startRun(df.getClient(context), result.run, deps.provisioning.timings, { onlyIfAbsent: true });
      return;
    case 'rejected':
      logOf(context, { messageId }).warn(`message rejected (${result.code}): ${result.reason}`);
      return;
    case 'ignored':
      return;
  }
}

moduleApp('provisioning').serviceBusTopic('poolResizeIntake', {
  topicName: EVENTS_TOPIC,
  subscriptionName: PROVISIONING_SUBSCRIPTION,
  connection: 'ServiceBusConnection',
  extraInputs: [df.input.durableClient()],
  handler: poolResizeIntake,
});
