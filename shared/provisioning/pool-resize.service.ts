import type { Transaction } from 'kysely';
import type { EventRefusal } from '../platform/bus/event-bodies';
import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { describeFieldProblems, type FieldProblem } from '../platform/validation/validation';
import { MessageIdReused, recordRejectedInbound, recordResend, recordRunInbound } from './intake.service';
import { parsePoolResize, POOL_RESIZE_REQUESTED, poolResizeKey, type PoolResizeRequested } from './pool-resize';
import { appendEvents, nowOf, type ProvisioningContext } from './provisioning.context';
import { findRunByPromotion, insertRun, latestAppliedRun } from './runs.repository';
import { insertRejection } from './rejections.repository';
import type { ProvisioningTables } from './provisioning.tables';
import { poolResizeRejected } from './run-events';
import { POOL_SIZE_CONFIG_KEY, RunErrors, type Run } from './run';
import { onStackOf, supersedeQueued } from './stack-queue.service';
import { isUniqueViolation } from '../platform/sql/dialect';

export type PoolResizeResult =
  /** A new pool-resize run, queued: start its orchestration. */
  | { readonly outcome: 'accepted'; readonly run: Run }
  /** The event has a run already (a redelivery): start its orchestration if it is not running. */
  | { readonly outcome: 'duplicate'; readonly run: Run }
  /** Not a resize provisioning can carry out (malformed, or a stack it never applied): recorded with the reason. */
  | { readonly outcome: 'rejected'; readonly code: string; readonly reason: string }
  /** Another event of the topic, not for provisioning. */
  | { readonly outcome: 'ignored'; readonly reason: string };

/**
 * A `PoolResizeRequested` of the capacity module becomes a run on the pool's stack (`iacStack`), with the new size
 * as the config `poolSize`. Where the stack's project lives, and whose it is, says the stack's latest applied run:
 * the resize plans that desired state (repository, commit, path; tenant and environment) with only the size
 * changed. A stack no run has applied is refused: nothing says where its project is.
 */
export async function poolResize(ctx: ProvisioningContext, message: PoolResizeMessage): Promise<PoolResizeResult> {
  const { unreadable } = message;
  if (unreadable) {
    // A claim-checked message whose data cannot be read back: recorded as refused when it is a resize, as any other.
    if (unreadable.type !== POOL_RESIZE_REQUESTED) return { outcome: 'ignored', reason: `${unreadable.type ?? 'an event without a type'} is not for provisioning` };
    return rejectResize(ctx, message.messageId, { code: unreadable.code, reason: unreadable.reason, problems: [] });
  }
  const parsed = parsePoolResize(message.body);
  if (parsed.outcome === 'other') return { outcome: 'ignored', reason: `${parsed.type} is not for provisioning` };
  if (parsed.outcome === 'invalid') {
    const reason = `the message is not a valid PoolResizeRequested: ${describeFieldProblems(parsed.problems)}`;
    return rejectResize(ctx, message.messageId, { ...(parsed.pool !== undefined ? { pool: parsed.pool } : {}), code: RunErrors.invalidPoolResize, reason, problems: parsed.problems });
  }
  const resize = parsed.resize;
  const known = await retryingContention(() => findRunByPromotion(ctx.db, resize.iacStack.tenant, poolResizeKey(resize.eventId)));
  if (known) return duplicate(ctx, known, message.messageId);
  const base = await retryingContention(() => latestAppliedRun(ctx.db, ctx.dialect, resize.iacStack));
  if (!base) {
    const stack = qualifiedStackName(resize.iacStack);
    const reason = `pool ${resize.pool} names stack ${stack}, which no run has applied: where its project lives is not known`;
    return rejectResize(ctx, message.messageId, { pool: resize.pool, stack: resize.iacStack, eventId: resize.eventId, code: RunErrors.unknownStack, reason, problems: [] });
  }
  try {
    return await inTransaction(ctx.db, (trx) => recordResize(ctx, trx, resize, base, message.messageId));
  } catch (thrown) {
    if (thrown instanceof MessageIdReused) return { outcome: 'ignored', reason: `messageId ${message.messageId} was used before for another message` };
    // Another host took the same event in at the same moment: its run is the one.
    if (isUniqueViolation(thrown)) {
      const winner = await retryingContention(() => findRunByPromotion(ctx.db, resize.iacStack.tenant, poolResizeKey(resize.eventId)));
      if (winner) return duplicate(ctx, winner, message.messageId);
    }
    throw thrown;
  }
}

/** A message of provisioning's subscription: its body, or why a claim-checked one could not be read back (event-bodies.ts). */
export interface PoolResizeMessage {
  readonly messageId: string;
  readonly body: unknown;
  readonly unreadable?: EventRefusal;
}

/** One transaction in the lock order (run rows, then inbox and outbox): the run, the older resizes it replaces. */
async function recordResize(ctx: ProvisioningContext, trx: Transaction<ProvisioningTables>, resize: PoolResizeRequested, base: Run, messageId: string): Promise<PoolResizeResult> {
  const at = nowOf(ctx);
  const run = await insertRun(trx, {
    id: ctx.ids.next('run'),
    key: poolResizeKey(resize.eventId),
    ...onStackOf(base),
    requestedBy: `pool ${resize.pool}`,
    reason: 'pool-resize',
    poolResize: { pool: resize.pool, eventId: resize.eventId, fromCapacity: resize.fromCapacity, toCapacity: resize.toCapacity },
    config: { ...base.config, [POOL_SIZE_CONFIG_KEY]: resize.toCapacity },
    state: 'queued',
    now: at,
  });
  // A newer size of the pool replaces a resize still queued: only the latest size is worth applying.
  const events = await supersedeQueued(trx, run, `pool ${resize.pool} resized to ${resize.toCapacity}`, at);
  await recordRunInbound(ctx, trx, { messageId, run, outcome: 'queued' });
  await appendEvents(ctx, trx, events);
  return { outcome: 'accepted', run };
}

async function duplicate(ctx: ProvisioningContext, run: Run, messageId: string): Promise<PoolResizeResult> {
  await recordResend(ctx, run, messageId);
  return { outcome: 'duplicate', run };
}

/** Records a resize that cannot become a run, once per message, with its one `ProvisioningFailed`. */
async function rejectResize(
  ctx: ProvisioningContext,
  messageId: string,
  refusal: { pool?: string; stack?: StackRef; eventId?: string; code: string; reason: string; problems: readonly FieldProblem[] },
): Promise<PoolResizeResult> {
  await inTransaction(ctx.db, async (trx) => {
    const at = ctx.clock.now();
    if (!(await insertRejection(trx, { messageId, code: refusal.code, reason: refusal.reason, problems: refusal.problems, receivedAt: at }))) return;
    await recordRejectedInbound(ctx, trx, messageId);
    await appendEvents(ctx, trx, [poolResizeRejected({ messageId, ...refusal, at })]);
  });
  return { outcome: 'rejected', code: refusal.code, reason: refusal.reason };
}
