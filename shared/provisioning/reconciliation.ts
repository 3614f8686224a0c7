import { z } from 'zod';
import { fieldProblems, type FieldProblem } from '../platform/validation/validation';
import { STACK_NAME_PATTERN } from './promotion';

/**
 * Reconciliation runs (pure model): an operator accepted an inventory reconciliation proposal for a stack, and
 * provisioning applies the stack's desired state again against what the target really holds (a refresh), leaving
 * alone what the operator's ignore rules hold.
 */

/** The business key prefix of reconciliation runs; the rest is the proposal id (see `reconciliationKey`). */
const KEY_PREFIX = 'reconciliation:';

/**
 * An ignore rule that holds on apply, as a reconciliation run carries it: inventory's `IgnoreRule` (drift.ts) as
 * far as planning needs it. The same shape as the IaC engine's `HeldIgnoreRule` (plan.ts), spelled out here
 * because a model file imports no engine code.
 *
 * BREAKING-CHANGE SHAPE: stored with the run and shown by the HTTP API.
 *
 * @example { scope: { urn: 'urn:pulumi:dev::app::local:compute:Service::api' }, path: 'tags.*' }
 */
export interface ReconciliationIgnoreRule {
  readonly scope: { readonly type: string } | { readonly urn: string };
  /** Inventory's dot path: `sku.capacity`, `tags.*`, `*`. */
  readonly path: string;
}

/**
 * The proposal a reconciliation run carries out.
 *
 * BREAKING-CHANGE SHAPE: stored with the run (JSON) and shown by the HTTP API; `proposalId` is in the run's events.
 */
export interface Reconciliation {
  readonly proposalId: string;
  /** The rules the run plans and applies with; the apply re-plans with exactly these, so digests agree. */
  readonly ignore: readonly ReconciliationIgnoreRule[];
}

/**
 * What inventory asks for when an operator accepts a proposal. The stack (`tenant/project/stack`) must be one a run
 * has applied for that environment: that run's desired state is what is applied again.
 *
 * @example { proposalId: 'prop_01J…', tenant: 'demo-team', environmentId: 'env-dev', project: 'demo-app',
 *   stack: 'development', requestedBy: 'operator-1', ignore: [{ scope: { type: 'local:compute:Service' }, path: 'replicas' }] }
 */
export interface ReconcileRequest {
  /** One run per proposal: asking again with the same id answers the run made the first time. */
  readonly proposalId: string;
  readonly tenant: string;
  readonly environmentId: string;
  readonly project: string;
  readonly stack: string;
  /** Who accepted the proposal; recorded as the run's `requestedBy`. */
  readonly requestedBy: string;
  readonly ignore: readonly ReconciliationIgnoreRule[];
}

const text = (maxLength: number) => z.string().min(1).max(maxLength);

const ignoreRuleSchema = z.object({
  scope: z.union([z.object({ type: text(200) }).strict(), z.object({ urn: text(1000) }).strict()]),
  path: text(1000),
});

/** The proposal id fits the run's key column (200) with its prefix. */
const reconcileRequestSchema = z.object({
  proposalId: text(200 - KEY_PREFIX.length),
  tenant: text(200),
  environmentId: text(200),
  project: text(200).regex(STACK_NAME_PATTERN),
  stack: text(200).regex(STACK_NAME_PATTERN),
  requestedBy: text(200),
  ignore: z.array(ignoreRuleSchema).max(1000),
});

export type ReconcileRequestParse =
  | { readonly outcome: 'valid'; readonly request: ReconcileRequest }
  | { readonly outcome: 'invalid'; readonly problems: readonly FieldProblem[] };

/** Checks a reconcile request's shape (the paths of its rules are the engine's to check). Never throws. */
export function parseReconcileRequest(value: unknown): ReconcileRequestParse {
  const parsed = reconcileRequestSchema.safeParse(value);
  if (!parsed.success) return { outcome: 'invalid', problems: fieldProblems(parsed.error, '(request)') };
  return { outcome: 'valid', request: parsed.data };
}

/** The business key of a reconciliation run, stored where a promotion's run keeps its promotionId. */
export function reconciliationKey(proposalId: string): string {
  return `${KEY_PREFIX}${proposalId}`;
}
