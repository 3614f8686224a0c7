import type { NewEvent } from '../platform/bus/events';
import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import { stackOf, type PlanCounts, type Run } from './run';

/**
 * The events a run publishes on `runtime-cloud-events` (CloudEvents 1.0, written to the outbox in the transaction of
 * the state change). Pure: builds the `data` of each event from a run.
 *
 * BREAKING-CHANGE SHAPES: consumers (DeliveryHost, Studio, inventory) read these `data` members; removing or
 * renaming one, or changing its meaning, is a breaking change. Adding a member is not. Values are references and
 * ids only: never a secret, never a resolved configuration value. The repository URL is given without credentials.
 *
 * Additions (non-breaking): `SpecificationApplied` resources carry `properties`; runs of trigger `reconciliation`
 * carry `proposalId` (a trigger value consumers may not know yet: they must read an unknown one as "other").
 */

/** A resource as a plan or an apply names it. */
export interface EventResource {
  readonly urn: string;
  readonly type: string;
  readonly name: string;
  readonly op: string;
  /** The id in the target after the apply (SpecificationApplied only; absent once deleted). */
  readonly id?: string;
  /**
   * SpecificationApplied only, for every resource the apply left in the target (absent for a deleted one): its
   * inputs as the stack state records them, what inventory takes as the resource's desired properties.
   * References stay references (`{ "secretRef": … }`, `{ "configRef": … }`), never the value; a value computed
   * during the apply is the known output, or the `{ "fn::computed": … }` marker where the runner cannot say it.
   * The `pulumi` runner gives a secret-valued input as `"[secret]"` instead (pulumi-mapping.ts), which inventory
   * holds as opaque like a reference (iac-values.ts `isOpaque`).
   */
  readonly properties?: Readonly<Record<string, unknown>>;
  /** SpecificationApplied only: the project's `ignoreChanges` paths of the resource, when it has any. */
  readonly ignoreChanges?: readonly string[];
}

/** What made the run, beside `trigger`: a promotion's id, a pool resize's event, a reconciliation's proposal. */
function origin(run: Run) {
  switch (run.reason) {
    case 'promotion':
      return { promotionId: run.promotionId };
    case 'pool-resize':
      return { poolResize: run.poolResize };
    case 'reconciliation':
      return { proposalId: run.reconciliation?.proposalId };
  }
}

function runSummary(run: Run, repository: string) {
  return {
    runId: run.id,
    // What made the run (`promotion`, `pool-resize`, `reconciliation`); named `trigger` since `reason` says why a
    // run failed.
    trigger: run.reason,
    // Only a promotion's run has a promotionId: the others name what they came from instead.
    ...origin(run),
    tenantId: run.tenant,
    environment: { ...run.environment },
    release: { ...run.release },
    // The stack's own name; with `project`, `tenantId` and `qualifiedStack` (`tenant/project/stack`) its identity.
    // A run refused before its project could be read has no project.
    stack: run.stack,
    ...(run.project !== '' ? { project: run.project, qualifiedStack: qualifiedStackName(stackOf(run)) } : {}),
    desiredState: { repository, commit: run.desiredState.commit, path: run.desiredState.path },
  };
}

function envelope(run: Run, type: NewEvent['type'], data: Record<string, unknown>): NewEvent {
  return { type, subject: `runs/${run.id}`, correlationId: run.id, tenant: run.tenant, data };
}

/** The plan's resource set, when the plan is recorded (for inventory: what the environment should hold). */
export function specificationDeclared(run: Run, repository: string, plan: { digest: string; counts: PlanCounts; resources: readonly EventResource[] }): NewEvent {
  return envelope(run, 'SpecificationDeclared', { ...runSummary(run, repository), planDigest: plan.digest, counts: { ...plan.counts }, resources: plan.resources });
}

/** What the apply left in the target (for inventory). */
export function specificationApplied(
  run: Run,
  repository: string,
  applied: { planDigest: string; resources: readonly EventResource[]; outputs: Readonly<Record<string, unknown>> },
): NewEvent {
  return envelope(run, 'SpecificationApplied', {
    ...runSummary(run, repository),
    planDigest: applied.planDigest,
    resources: applied.resources,
    outputs: applied.outputs,
  });
}

/**
 * A resource of an apply result as `SpecificationApplied` reads it: plan.ts `ResourceResult` (spelled out here,
 * since a model file does not import the IaC platform).
 */
export interface AppliedResource {
  readonly urn: string;
  readonly type: string;
  readonly name: string;
  readonly op: string;
  readonly id?: string;
  readonly inputs?: Readonly<Record<string, unknown>>;
  readonly ignoreChanges?: readonly string[];
  /** A resource the stack only reads (a `get:`): another's, so not part of what the environment must hold. */
  readonly read?: boolean;
}

/**
 * The `SpecificationApplied` of a run from its apply result (plan.ts `ApplyResult`), whichever runner applied it:
 * each resource with its id and, unless deleted, the inputs the runner reports as its `properties` (what inventory
 * takes as desired: references, computed markers and `"[secret]"` masks as the runner wrote them, never a value)
 * and the project's `ignoreChanges`; the stack outputs as the runner masked them.
 */
export function specificationAppliedOf(
  run: Run,
  repository: string,
  result: { readonly planDigest: string; readonly resources: readonly AppliedResource[]; readonly outputs: Readonly<Record<string, unknown>> },
): NewEvent {
  return specificationApplied(run, repository, {
    planDigest: result.planDigest,
    resources: result.resources.filter((r) => r.read !== true).map((r) => ({
      urn: r.urn,
      type: r.type,
      name: r.name,
      op: r.op,
      ...(r.id ? { id: r.id } : {}),
      // What the resource should hold, for inventory: the inputs the state records (references unresolved).
      ...(r.inputs && r.op !== 'delete' ? { properties: r.inputs } : {}),
      // Paths the project itself leaves alone: inventory lists drift there as ignored, never as a finding.
      ...(r.ignoreChanges && r.op !== 'delete' ? { ignoreChanges: r.ignoreChanges } : {}),
    })),
    outputs: result.outputs,
  });
}

/** The run ended applied: the one terminal event of a successful run. */
export function provisioningApplied(run: Run, repository: string, applied: { planDigest: string; counts: PlanCounts; finishedAt: Date }): NewEvent {
  return envelope(run, 'ProvisioningApplied', {
    ...runSummary(run, repository),
    state: 'applied',
    planDigest: applied.planDigest,
    counts: { ...applied.counts },
    finishedAt: applied.finishedAt.toISOString(),
  });
}

/** The run ended in any other final state: the one terminal event of a run that did not apply. */
export function provisioningFailed(run: Run, repository: string, failure: { code: string; reason: string; finishedAt: Date }): NewEvent {
  return envelope(run, 'ProvisioningFailed', {
    ...runSummary(run, repository),
    state: run.state,
    code: failure.code,
    reason: failure.reason,
    problems: [],
    ...(run.planDigest !== undefined ? { planDigest: run.planDigest } : {}),
    ...(run.supersededBy !== undefined ? { supersededBy: run.supersededBy } : {}),
    finishedAt: failure.finishedAt.toISOString(),
  });
}

/**
 * A message that is not a `PromotionApproved` at all: no run exists, so the event names the message and whatever
 * of the promotion could be read.
 */
export function promotionRejected(message: {
  messageId: string;
  promotionId?: string;
  tenantId?: string;
  code: string;
  reason: string;
  problems: readonly { field: string; message: string }[];
  at: Date;
}): NewEvent {
  return {
    type: 'ProvisioningFailed',
    subject: `messages/${message.messageId}`,
    correlationId: message.promotionId ?? message.messageId,
    ...(message.tenantId !== undefined ? { tenant: message.tenantId } : {}),
    data: {
      messageId: message.messageId,
      trigger: 'promotion',
      ...(message.promotionId !== undefined ? { promotionId: message.promotionId } : {}),
      ...(message.tenantId !== undefined ? { tenantId: message.tenantId } : {}),
      ...rejection(message),
    },
  };
}

/** The members every rejected message's `ProvisioningFailed` ends with. */
function rejection(message: { code: string; reason: string; problems: readonly { field: string; message: string }[]; at: Date }) {
  return { state: 'rejected', code: message.code, reason: message.reason, problems: message.problems.map((p) => ({ ...p })), finishedAt: message.at.toISOString() };
}

/**
 * A `PoolResizeRequested` that cannot become a run (malformed, or naming a stack no run has applied): no run
 * exists, so the event names the message, the pool and the stack.
 */
export function poolResizeRejected(message: {
  messageId: string;
  eventId?: string;
  pool?: string;
  stack?: StackRef;
  code: string;
  reason: string;
  problems: readonly { field: string; message: string }[];
  at: Date;
}): NewEvent {
  const { stack } = message;
  return {
    type: 'ProvisioningFailed',
    subject: message.pool !== undefined ? `pools/${message.pool}` : `messages/${message.messageId}`,
    correlationId: message.eventId ?? message.messageId,
    ...(stack ? { tenant: stack.tenant } : {}),
    data: {
      messageId: message.messageId,
      trigger: 'pool-resize',
      ...(message.eventId !== undefined ? { eventId: message.eventId } : {}),
      ...(message.pool !== undefined ? { pool: message.pool } : {}),
      // The members a run's events name its stack with, so a consumer reads one shape of ProvisioningFailed.
      ...(stack ? { tenantId: stack.tenant, project: stack.project, stack: stack.stack, qualifiedStack: qualifiedStackName(stack) } : {}),
      ...rejection(message),
    },
  };
}
