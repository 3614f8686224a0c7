import { redactUrl } from '../../shared/platform/git/desired-state';
import type { RunDetail } from '../../shared/provisioning/provisioning.repository';
import type { Run } from '../../shared/provisioning/run';

/**
 * A run as the HTTP API shows it (Studio views, operators). Changing this shape is a breaking change for its
 * clients. The repository URL is shown without credentials.
 */
export function runView(run: Run) {
  return {
    runId: run.id,
    promotionId: run.promotionId,
    tenant: run.tenant,
    environment: { ...run.environment },
    release: { ...run.release },
    stack: run.stack,
    desiredState: { ...run.desiredState, repository: redactUrl(run.desiredState.repository) },
    requestedBy: run.requestedBy,
    state: run.state,
    ...(run.waitingFor ? { waitingFor: run.waitingFor } : {}),
    ...(run.planDigest !== undefined ? { planDigest: run.planDigest } : {}),
    ...(run.approvalRequired !== undefined ? { approvalRequired: run.approvalRequired } : {}),
    ...(run.error ? { error: { ...run.error } } : {}),
    ...(run.supersededBy !== undefined ? { supersededBy: run.supersededBy } : {}),
    createdAt: run.createdAt.toISOString(),
    updatedAt: run.updatedAt.toISOString(),
    ...(run.finishedAt ? { finishedAt: run.finishedAt.toISOString() } : {}),
  };
}

/** A run with its receipts and the decision on it: the plan's steps, the apply's per-resource results. */
export function runDetailView(detail: RunDetail) {
  return {
    ...runView(detail.run),
    ...(detail.planReceipt ? { planReceipt: detail.planReceipt } : {}),
    ...(detail.applyReceipt ? { applyReceipt: detail.applyReceipt } : {}),
    ...(detail.decision
      ? {
          decision: {
            decision: detail.decision.decision,
            planDigest: detail.decision.planDigest,
            by: detail.decision.by,
            ...(detail.decision.comment !== undefined ? { comment: detail.decision.comment } : {}),
            at: detail.decision.at.toISOString(),
          },
        }
      : {}),
  };
}
