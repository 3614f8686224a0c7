import type { Transaction } from 'kysely';
import type { NewEvent } from '../platform/bus/events';
import { AppError } from '../platform/errors/app-error';
import { retryingContention } from '../platform/sql/transaction';
import { existingRun, nowOf, readRun, repositoryOf, type ProvisioningContext } from './provisioning.context';
import { earlierWaitingRun, firstWaitingRun, queuedRunsBefore } from './run-queue.repository';
import { findRun, setWaiting, transitionRun } from './runs.repository';
import type { ProvisioningTables } from './provisioning.tables';
import { provisioningFailed } from './run-events';
import { RunErrors, stackOf, stepOf, type Run, type RunStep, type WaitingFor } from './run';
import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import { acquireStackLock, getStackLock, renewStackLock, type StackLock } from './stack-lock.repository';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * One run at a time acts on a stack: the stack lock (a lease in SQL), taken first in first out among the stack's
 * runs; newer runs replacing queued older ones; and the hint of which waiting run to wake when a stack may be free.
 */

export type TakenStack = { readonly taken: true; readonly lock: StackLock } | { readonly taken: false; readonly step: RunStep };

/**
 * Takes the run's stack lock, first in first out: a run that does not hold the lock yet lets an earlier run of the
 * stack that waits for it go first. When it cannot, records what it waits for.
 */
export async function takeStack(ctx: ProvisioningContext, run: Run): Promise<TakenStack> {
  const at = nowOf(ctx);
  const stack = stackOf(run);
  const name = qualifiedStackName(stack);
  const current = await retryingContention(() => getStackLock(ctx.db, stack));
  const holdsIt = current?.holderRun === run.id && current.expiresAt.getTime() > at;
  if (!holdsIt) {
    const ahead = await retryingContention(() => earlierWaitingRun(ctx.db, ctx.dialect, run));
    if (ahead) return wait(ctx, run, { kind: 'stack-lock', stack: name, queuedBehind: ahead, ...(current ? { heldBy: current.holderRun } : {}) });
  }
  const { ttlMs, hostId } = ctx.stackLock;
  const outcome = await retryingContention(() => acquireStackLock(ctx.db, ctx.dialect, { stack, run: run.id, host: hostId, now: at, ttlMs }));
  if (!outcome.acquired) return wait(ctx, run, { kind: 'stack-lock', stack: name, heldBy: outcome.heldBy.holderRun });
  return { taken: true, lock: outcome.lock };
}

async function wait(ctx: ProvisioningContext, run: Run, waitingFor: WaitingFor): Promise<TakenStack> {
  if (await retryingContention(() => setWaiting(ctx.db, run.id, run.state, waitingFor, nowOf(ctx)))) return { taken: false, step: { outcome: 'waiting', waitingFor } };
  // Moved on meanwhile (canceled, superseded): say where it is.
  return { taken: false, step: stepOf(await existingRun(ctx, run.id)) };
}

/**
 * Keeps the stack lock of an applying run: renews it every `renewEveryMs` and before every step, so a long apply
 * keeps its lease. Once a renewal finds the lock gone (its lease lapsed while the host stalled, or an operator
 * broke it) another run may hold the stack: `beforeStep` then throws and the engine stops before its next step.
 */
export function keepStackLock(ctx: ProvisioningContext, run: Run, lock: StackLock) {
  let lost: AppError | undefined;
  let renewing: Promise<void> = Promise.resolve();
  const renew = (): Promise<void> =>
    (renewing = renewing.then(async () => {
      if (lost) return;
      try {
        if (await retryingContention(() => renewStackLock(ctx.db, lock, nowOf(ctx), ctx.stackLock.ttlMs))) return;
      } catch {
        // The store did not answer: the lease holds until it lapses, and the next renewal asks again.
        return;
      }
      const stack = qualifiedStackName(lock.stack);
      lost = problemError(ProvisioningErrors.stackLockLost, `run ${run.id} lost the lock of stack ${stack} during its apply (its lease lapsed or an operator broke it); the apply stopped`, {
        runId: run.id,
        stack,
        version: lock.version,
      });
    }));
  const timer = setInterval(() => void renew(), ctx.stackLock.renewEveryMs);
  timer.unref();
  const beforeStep = async (): Promise<void> => {
    await renew();
    if (lost) throw lost;
  };
  const stop = async (): Promise<void> => {
    clearInterval(timer);
    await renewing;
  };
  return { beforeStep, stop };
}

/**
 * What a run made on a stack that `base` applied (a pool resize, a reconciliation) takes from it: the stack, its
 * tenant and environment, and the release and desired state it runs now.
 */
export function onStackOf(base: Run): Pick<Run, 'tenant' | 'environment' | 'release' | 'project' | 'stack' | 'desiredState'> {
  return { tenant: base.tenant, environment: base.environment, release: base.release, project: base.project, stack: base.stack, desiredState: base.desiredState };
}

/** Supersedes the queued runs `run` replaces (see queuedRunsBefore); answers their `ProvisioningFailed` events. */
export async function supersedeQueued(trx: Transaction<ProvisioningTables>, run: Run, what: string, at: number): Promise<NewEvent[]> {
  const events: NewEvent[] = [];
  for (const older of await queuedRunsBefore(trx, run)) {
    const error = { code: RunErrors.superseded, message: `superseded by run ${run.id} (${what})` };
    if (!(await transitionRun(trx, older, 'superseded', at, { supersededBy: run.id, error, waitingFor: null, finished: true }))) continue;
    const superseded = await findRun(trx, older);
    if (superseded) events.push(provisioningFailed(superseded, repositoryOf(superseded), { code: error.code, reason: error.message, finishedAt: new Date(at) }));
  }
  return events;
}

/**
 * The run to wake after a stack may have been released (by `run`'s step, by a cancel, by an operator): the first
 * run waiting for the stack, FIFO, while nothing holds its lock (or its lease lapsed); undefined while a run holds
 * it or none waits. Only a hint: the woken run takes the stack through the store like any other try.
 */
export async function nextWaitingRun(ctx: ProvisioningContext, of: { readonly runId: string } | { readonly stack: StackRef }): Promise<string | undefined> {
  const run = 'stack' in of ? undefined : await readRun(ctx, of.runId);
  const stack = 'stack' in of ? of.stack : run && stackOf(run);
  if (stack === undefined) return undefined;
  const lock = await retryingContention(() => getStackLock(ctx.db, stack));
  if (lock && lock.expiresAt.getTime() > nowOf(ctx)) return undefined;
  return retryingContention(() => firstWaitingRun(ctx.db, ctx.dialect, stack));
}
