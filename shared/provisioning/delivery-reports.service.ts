import { createHash } from 'node:crypto';
import { ensureError } from '../platform/errors/app-error';
import { canonicalJson, type JsonValue } from '../platform/iac/iac-values';
import { retryingContention } from '../platform/sql/transaction';
import { backoffDelayMs } from '../platform/time/retry';
import type { OutcomeReport, ReceiptDigest } from './external-services.client';
import { acknowledgeReport, claimReport, dueReports, postponeReport, type PendingReport } from './delivery-reports.repository';
import { nowOf, type ProvisioningContext } from './provisioning.context';
import { findRunDetail } from './receipts.repository';
import type { RunDetail } from './receipt';

/**
 * Promotion reports (design page: DeliveryHost, "release resolution and promotion reports"): every run of a
 * promotion that ends is reported to the DeliveryHost besides its `ProvisioningApplied` / `ProvisioningFailed`.
 *
 * Durable like the outbox, but apart from it: the report is a row written in the transaction of the run's terminal
 * event (`enqueueDeliveryReports` in delivery-reports.repository.ts, called by `appendEvents`, so a run is reported exactly when it ended), keyed by tenant and run (so never
 * twice), and sent by `sendDeliveryReports` until the DeliveryHost acknowledges it, with a back-off while it does not
 * answer. Not an outbox row: the outbox publishes each lane in order, and a DeliveryHost outage would hold every
 * event sharing a lane with a pending report. Two passes (two hosts) never send one report at once (a claim with a
 * lease); a pass that dies after the send leaves the report to be sent again, which the DeliveryHost answers with the
 * same report id (its contract: idempotent per tenant and run).
 */

/** How long a pass holds a report it sends: longer than a call's deadline, so a claim never lapses mid-call. */
const CLAIM_MS = 60_000;
/** The back-off after a failed send: doubling from 5 s, at most 5 minutes. */
const FIRST_RETRY_MS = 5_000;
const MAX_RETRY_MS = 5 * 60_000;

export interface SendResult {
  readonly sent: number;
  readonly failed: number;
}

/** One pass: sends every due report (at most `limit`), acknowledging or postponing each. */
export async function sendDeliveryReports(ctx: ProvisioningContext, limit = 100): Promise<SendResult> {
  const claimToken = ctx.ids.next('reports');
  let sent = 0;
  let failed = 0;
  for (const report of await retryingContention(() => dueReports(ctx.db, ctx.dialect, nowOf(ctx), limit))) {
    const now = nowOf(ctx);
    if (!(await retryingContention(() => claimReport(ctx.db, report, { claimToken, now, until: now + CLAIM_MS })))) continue;
    try {
      const reportId = await ctx.services.delivery.reportOutcome(await outcomeReport(ctx, report));
      await retryingContention(() => acknowledgeReport(ctx.db, report, { claimToken, reportId, at: nowOf(ctx) }));
      sent++;
    } catch (thrown) {
      const error = ensureError(thrown);
      const nextAttemptAt = nowOf(ctx) + backoffDelayMs({ firstMs: FIRST_RETRY_MS, maxMs: MAX_RETRY_MS }, report.attempts + 1);
      await retryingContention(() => postponeReport(ctx.db, report, { claimToken, error: error.message, nextAttemptAt }));
      failed++;
    }
  }
  return { sent, failed };
}

/** The report of an ended run, from what the store holds of it (its terminal state never changes again). */
async function outcomeReport(ctx: ProvisioningContext, pending: PendingReport): Promise<OutcomeReport> {
  const detail = await retryingContention(() => findRunDetail(ctx.db, pending.runId, { kind: 'one', tenant: pending.tenant }));
  if (!detail) throw new Error(`run ${pending.runId} of tenant ${pending.tenant} is not in the store`);
  const { run } = detail;
  return {
    tenant: run.tenant,
    runId: run.id,
    promotionId: run.promotionId,
    release: { ...run.release },
    environmentId: run.environment.id,
    outcome: run.state === 'applied' ? 'applied' : 'failed',
    state: run.state,
    ...(run.error ? { code: run.error.code, reason: run.error.message } : {}),
    receipts: receiptDigests(detail),
    finishedAt: (run.finishedAt ?? run.updatedAt).toISOString(),
  };
}

function receiptDigests(detail: RunDetail): ReceiptDigest[] {
  const digest = (receipt: unknown) => `sha256:${createHash('sha256').update(canonicalJson(receipt as JsonValue)).digest('hex')}`;
  return [
    ...(detail.planReceipt ? [{ kind: 'plan-receipt' as const, digest: digest(detail.planReceipt) }] : []),
    ...(detail.applyReceipt ? [{ kind: 'apply-receipt' as const, digest: digest(detail.applyReceipt) }] : []),
  ];
}
