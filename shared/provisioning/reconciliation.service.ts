import type { Transaction } from 'kysely';
import { heldIgnoreProblem } from '../platform/iac/plan';
import { qualifiedStackName } from '../platform/iac/stack-ref';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { describeFieldProblems } from '../platform/validation/validation';
import { appendEvents, nowOf, type ProvisioningContext } from './provisioning.context';
import { findRunByPromotion, insertRun, latestAppliedRun } from './runs.repository';
import type { ProvisioningTables } from './provisioning.tables';
import { parseReconcileRequest, reconciliationKey, type ReconcileRequest } from './reconciliation';
import type { Run } from './run';
import { onStackOf, supersedeQueued } from './stack-queue.service';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';
import { isUniqueViolation } from '../platform/sql/dialect';

export type ReconcileResult =
  /** A new reconciliation run, queued: start its orchestration (`startRun`, functions/provisioning). */
  | { readonly outcome: 'accepted'; readonly run: Run }
  /** The proposal has a run already (asked again): start its orchestration if it has not ended and is not running. */
  | { readonly outcome: 'duplicate'; readonly run: Run };

/**
 * An operator accepted an inventory reconciliation proposal: a run that applies the stack's latest applied desired
 * state (repository, commit, path, release, config; tenant and environment) again, planned against what the
 * target holds. Like a pool resize, a stack no run has applied is refused: nothing says where its project is.
 */
export async function reconcile(ctx: ProvisioningContext, request: ReconcileRequest): Promise<ReconcileResult> {
  const parsed = parseReconcileRequest(request);
  const problems =
    parsed.outcome === 'invalid'
      ? parsed.problems
      : parsed.request.ignore.flatMap((rule, i) => {
          const problem = heldIgnoreProblem(rule.path);
          return problem ? [{ field: `ignore.${i}.path`, message: problem }] : [];
        });
  if (parsed.outcome === 'invalid' || problems.length > 0) {
    throw problemError(ProvisioningErrors.invalidReconciliation, `the reconciliation request is not valid: ${describeFieldProblems(problems)}`, { errors: problems });
  }
  const valid = parsed.request;
  const key = reconciliationKey(valid.proposalId);
  const known = await retryingContention(() => findRunByPromotion(ctx.db, valid.tenant, key));
  if (known) return { outcome: 'duplicate', run: known };
  const stack = { tenant: valid.tenant, project: valid.project, stack: valid.stack };
  // The stack is the requesting tenant's by its identity: another tenant's stack of the same names is not even read.
  const base = await retryingContention(() => latestAppliedRun(ctx.db, ctx.dialect, stack));
  if (!base || base.environment.id !== valid.environmentId) {
    throw problemError(ProvisioningErrors.unknownStack, `no run has applied stack ${qualifiedStackName(stack)} for environment ${valid.environmentId}: there is no desired state to reconcile it to`,
      { stack: qualifiedStackName(stack), environmentId: valid.environmentId, proposalId: valid.proposalId },
    );
  }
  try {
    return await inTransaction(ctx.db, (trx) => recordReconciliation(ctx, trx, valid, base));
  } catch (thrown) {
    // The same proposal accepted twice at the same moment: the run that got in is the one.
    if (isUniqueViolation(thrown)) {
      const winner = await retryingContention(() => findRunByPromotion(ctx.db, valid.tenant, key));
      if (winner) return { outcome: 'duplicate', run: winner };
    }
    throw thrown;
  }
}

/** One transaction in the lock order (run rows, then the outbox): the run, the older reconciliations it replaces. */
async function recordReconciliation(ctx: ProvisioningContext, trx: Transaction<ProvisioningTables>, request: ReconcileRequest, base: Run): Promise<ReconcileResult> {
  const at = nowOf(ctx);
  const run = await insertRun(trx, {
    id: ctx.ids.next('run'),
    key: reconciliationKey(request.proposalId),
    ...onStackOf(base),
    requestedBy: request.requestedBy,
    reason: 'reconciliation',
    reconciliation: { proposalId: request.proposalId, ignore: request.ignore.map((r) => ({ scope: { ...r.scope }, path: r.path })) },
    ...(base.config ? { config: base.config } : {}),
    state: 'queued',
    now: at,
  });
  // See queuedRunsBefore: only an older reconciliation of the stack still queued is replaced.
  const events = await supersedeQueued(trx, run, `reconciliation proposal ${request.proposalId}`, at);
  await appendEvents(ctx, trx, events);
  return { outcome: 'accepted', run };
}
