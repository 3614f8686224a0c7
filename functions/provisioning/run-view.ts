import { redactUrl } from '../../shared/platform/git/repository-url';
import type { Decision, RunDetail } from '../../shared/provisioning/receipt';
import { qualifiedStackName } from '../../shared/platform/iac/stack-ref';
import { RUN_REASONS, RUN_STATES, stackOf, type Run } from '../../shared/provisioning/run';
import { lazySchema, type Z } from '../../shared/platform/validation/lazy-schema';

/**
 * A run as the HTTP API shows it (Studio views, operators). Changing this shape is a breaking change for its
 * clients. The repository URL is shown without credentials.
 */
export function runView(run: Run) {
  return {
    runId: run.id,
    reason: run.reason,
    // Only a promotion's run has a promotionId: `poolResize` names the event a pool-resize run came from,
    // `reconciliation` the proposal (and its ignore rules) a reconciliation run carries out.
    ...(run.reason === 'promotion' ? { promotionId: run.promotionId } : {}),
    ...(run.poolResize ? { poolResize: { ...run.poolResize } } : {}),
    ...(run.reconciliation ? { reconciliation: { proposalId: run.reconciliation.proposalId, ignore: run.reconciliation.ignore.map((r) => ({ scope: { ...r.scope }, path: r.path })) } } : {}),
    tenant: run.tenant,
    environment: { ...run.environment },
    release: { ...run.release },
    // The stack's identity is `tenant/project/stack` (`qualifiedStack`); `stack` is its own name. A run refused
    // before its project could be read has no project.
    ...(run.project !== '' ? { project: run.project, qualifiedStack: qualifiedStackName(stackOf(run)) } : {}),
    stack: run.stack,
    desiredState: { ...run.desiredState, repository: redactUrl(run.desiredState.repository) },
    requestedBy: run.requestedBy,
    ...(run.config ? { config: { ...run.config } } : {}),
    state: run.state,
    ...(run.waitingFor ? { waitingFor: run.waitingFor } : {}),
    ...(run.planDigest !== undefined ? { planDigest: run.planDigest } : {}),
    ...(run.planExpiresAt ? { planExpiresAt: run.planExpiresAt.toISOString() } : {}),
    ...(run.approvalRequired !== undefined ? { approvalRequired: run.approvalRequired } : {}),
    ...(run.error ? { error: { ...run.error } } : {}),
    ...(run.supersededBy !== undefined ? { supersededBy: run.supersededBy } : {}),
    createdAt: run.createdAt.toISOString(),
    updatedAt: run.updatedAt.toISOString(),
    ...(run.finishedAt ? { finishedAt: run.finishedAt.toISOString() } : {}),
  };
}

function decisionView(decision: Decision) {
  return {
    decision: decision.decision,
    planDigest: decision.planDigest,
    by: decision.by,
    ...(decision.comment !== undefined ? { comment: decision.comment } : {}),
    at: decision.at.toISOString(),
  };
}

/**
 * A run with its receipts and the decision on it: the plan's steps, the apply's per-resource results; for a
 * replanned run, its earlier (stale) plans with why they went stale, oldest first.
 */
export function runDetailView(detail: RunDetail) {
  return {
    ...runView(detail.run),
    ...(detail.planReceipt ? { planReceipt: detail.planReceipt } : {}),
    ...(detail.applyReceipt ? { applyReceipt: detail.applyReceipt } : {}),
    ...(detail.decision ? { decision: decisionView(detail.decision) } : {}),
    // Approvals refused because their approver had asked for the run where a second person must approve.
    ...(detail.refusedApprovals.length > 0
      ? { refusedApprovals: detail.refusedApprovals.map((r) => ({ by: r.by, planDigest: r.planDigest, code: r.code, reason: r.reason, at: r.at.toISOString() })) }
      : {}),
    // Ids at the KnowledgeHost (receipts) and the GovernanceHost (the apply's audit evidence).
    artifacts: detail.artifacts.map((a) => ({ kind: a.kind, id: a.id, recordedAt: a.recordedAt.toISOString() })),
    ...(detail.replacedPlans.length > 0
      ? {
          replacedPlans: detail.replacedPlans.map((p) => ({
            planDigest: p.planDigest,
            stale: { ...p.stale },
            replannedBy: p.replannedBy,
            replannedAt: p.replannedAt.toISOString(),
            ...(p.decision ? { decision: decisionView(p.decision) } : {}),
            planReceipt: p.planReceipt,
          })),
        }
      : {}),
  };
}

/**
 * The schemas of these views for the OpenAPI document (`endpoint({ response })`): what a client may rely on. A
 * field the views send that is not here, or one here they do not send, fails tests/integration/openapi-responses.test.ts.
 * Receipts are described to the depth clients read them; the rest of a receipt is open (its own schemas are the
 * engine's, shared/platform/iac/plan.ts).
 */
/** plan.ts `STEP_OPS`, written out: that module loads zod, which registering the functions must not. */
const STEP_OPS = ['create', 'update', 'replace', 'delete', 'same'] as const;

const runViewShape = (z: Z) => {
  const iso = z.string().describe('ISO-8601 UTC');
  const digest = z.string().regex(/^sha256:[0-9a-f]{64}$/);
  const waitingFor = z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('stack-lock'), stack: z.string(), heldBy: z.string().optional(), queuedBehind: z.string().optional() }),
    z.object({ kind: z.literal('approval'), planDigest: digest }),
    z.object({ kind: z.literal('replan'), planDigest: digest }),
    z.object({ kind: z.literal('policy'), checkId: z.string(), planDigest: digest, since: iso }),
    z.object({
      kind: z.literal('runner'),
      pool: z.string(),
      jobId: z.string(),
      position: z.number().int().optional(),
      reason: z.looseObject({ code: z.string() }).optional().describe("why the job waits, in the capacity queue's vocabulary: QUEUED_BEHIND, POOL_FULL, …, with its figures"),
      collectingUntil: iso.optional(),
    }),
  ]);
  return {
    runId: z.string(),
    reason: z.enum(RUN_REASONS),
    promotionId: z.string().optional(),
    poolResize: z.object({ pool: z.string(), eventId: z.string(), fromCapacity: z.number(), toCapacity: z.number() }).optional(),
    reconciliation: z.object({ proposalId: z.string(), ignore: z.array(z.object({ scope: z.union([z.object({ type: z.string() }), z.object({ urn: z.string() })]), path: z.string() })) }).optional(),
    tenant: z.string(),
    environment: z.object({ id: z.string(), name: z.string(), tier: z.string() }),
    release: z.object({ name: z.string(), version: z.string() }),
    project: z.string().optional(),
    qualifiedStack: z.string().optional(),
    stack: z.string(),
    desiredState: z.object({ repository: z.string(), commit: z.string(), path: z.string() }),
    requestedBy: z.string(),
    config: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional(),
    state: z.enum(RUN_STATES),
    waitingFor: waitingFor.optional(),
    planDigest: digest.optional(),
    planExpiresAt: iso.optional(),
    approvalRequired: z.boolean().optional(),
    error: z.object({ code: z.string(), message: z.string() }).optional(),
    supersededBy: z.string().optional(),
    createdAt: iso,
    updatedAt: iso,
    finishedAt: iso.optional(),
  };
};

/** A run (`runView`). */
export const runViewSchema = lazySchema((z) => z.object(runViewShape(z)));

/** A page of runs. */
export const runPageSchema = lazySchema((z) => z.object({ items: z.array(runViewSchema()), nextCursor: z.string().optional() }));

const receiptSchemas = (z: Z) => {
  const engine = z.looseObject({ name: z.string(), version: z.string(), agent: z.string().optional(), jobId: z.string().optional(), engineMs: z.number().optional() });
  const step = z.looseObject({
    urn: z.string(),
    name: z.string(),
    type: z.string(),
    op: z.enum(STEP_OPS),
    id: z.string().optional(),
    changedPaths: z.array(z.string()),
    oldValues: z.record(z.string(), z.unknown()).optional().describe("update, replace: what the stack state held at each changed path, masked as `inputs` are; a path it held nothing at is left out"),
    inputs: z.record(z.string(), z.unknown()).optional(),
    protect: z.boolean(),
  });
  const plan = z.looseObject({
    schemaVersion: z.literal(1),
    project: z.string(),
    stack: z.string(),
    baseSerial: z.number().int(),
    steps: z.array(step),
    counts: z.object({ create: z.number(), update: z.number(), replace: z.number(), delete: z.number(), same: z.number() }),
    outputs: z.record(z.string(), z.unknown()),
    digest: z.string(),
  });
  const policy = z.union([z.object({ decision: z.literal('allow'), policies: z.array(z.string()) }), z.object({ decision: z.literal('deny'), policy: z.string(), reason: z.string() })]);
  const planReceipt = z.looseObject({
    runId: z.string(),
    stack: z.string(),
    runner: engine,
    approvalRequired: z.boolean(),
    approvalReasons: z.array(z.string()),
    plan,
    startedAt: z.string(),
    finishedAt: z.string(),
    expiresAt: z.string().optional(),
    policy: policy.optional(),
  });
  const resource = z.looseObject({ urn: z.string(), name: z.string(), type: z.string(), op: z.enum(STEP_OPS), status: z.enum(['succeeded', 'unchanged', 'failed', 'skipped', 'unknown']), id: z.string().optional() });
  const applyReceipt = z.looseObject({
    runId: z.string(),
    stack: z.string(),
    commit: z.string(),
    runner: engine,
    result: z.looseObject({ status: z.enum(['applied', 'failed']), planDigest: z.string(), serial: z.number().int(), resources: z.array(resource), outputs: z.record(z.string(), z.unknown()), startedAt: z.string(), finishedAt: z.string() }),
  });
  const decision = z.object({ decision: z.enum(['approved', 'rejected']), planDigest: z.string(), by: z.string(), comment: z.string().optional(), at: z.string() });
  return { planReceipt, applyReceipt, decision };
};

/** A run with its receipts (`runDetailView`). */
export const runDetailSchema = lazySchema((z) => {
  const { planReceipt, applyReceipt, decision } = receiptSchemas(z);
  return z.object({
    ...runViewShape(z),
    planReceipt: planReceipt.optional(),
    applyReceipt: applyReceipt.optional(),
    decision: decision.optional(),
    refusedApprovals: z.array(z.object({ by: z.string(), planDigest: z.string(), code: z.string(), reason: z.string(), at: z.string() })).optional(),
    artifacts: z.array(z.object({ kind: z.enum(['plan-receipt', 'apply-receipt', 'audit-evidence']), id: z.string(), recordedAt: z.string() })),
    replacedPlans: z
      .array(z.object({ planDigest: z.string(), stale: z.object({ code: z.string(), message: z.string() }), replannedBy: z.string(), replannedAt: z.string(), decision: decision.optional(), planReceipt }))
      .optional(),
  });
});

/** The events written for a run, oldest first. */
export const runEventsSchema = lazySchema((z) =>
  z.object({ items: z.array(z.object({ eventId: z.string(), type: z.string(), time: z.string(), publishedAt: z.string().optional(), deadLetteredAt: z.string().optional() })) }),
);
