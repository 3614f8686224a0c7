import { redactUrl } from '../../shared/platform/git/repository-url';
import type { Decision, RunDetail } from '../../shared/provisioning/receipt';
import { qualifiedStackName } from '../../shared/platform/iac/stack-ref';
import { stackOf, type Run } from '../../shared/provisioning/run';

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
