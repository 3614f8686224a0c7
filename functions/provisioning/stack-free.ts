import type { InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import { ensureError } from '../../shared/platform/errors/app-error';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import type { ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { logOf } from '../log';

/**
 * The event a run waiting for its stack gets when the stack may be free: it tries to take the stack again at once
 * instead of at the end of its `lockRetryMs` timer. The store decides who gets the stack; the event only wakes.
 */
export const STACK_FREE_EVENT = 'stack-free';

/**
 * Wakes the first run waiting for a stack once nothing holds it: after a step of `runId` that may have released it,
 * or after a cancel or a broken lock of `stack`. A wake-up that cannot be raised only logs: the waiting run's
 * retry timer still fires.
 */
export async function wakeNextOnStack(
  context: InvocationContext,
  provisioning: ProvisioningService,
  of: { readonly runId: string } | { readonly stack: StackRef },
): Promise<void> {
  let next: string | undefined;
  try {
    next = await provisioning.nextWaitingRun(of);
    if (next !== undefined) await raiseStackFree(context, next);
  } catch (thrown) {
    logOf(context).warn('the next run waiting for the stack could not be woken; its retry timer will', next !== undefined ? { runId: next } : {}, thrown);
  }
}

/**
 * Raises the stack-free event on a run's orchestration (instance id = run id). An instance that does not exist yet
 * is fine: intake records a run before it starts its orchestration, whose first step asks for the stack anyway.
 * (The SDK answers a 404 with this error message and nothing more specific; an ended instance, 410, is no error.)
 */
export async function raiseStackFree(context: InvocationContext, runId: string): Promise<void> {
  try {
    await df.getClient(context).raiseEvent(runId, STACK_FREE_EVENT, {});
  } catch (thrown) {
    if (ensureError(thrown).message.startsWith('No instance with ID')) return;
    throw thrown;
  }
}
