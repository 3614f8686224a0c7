import type { Kysely, Transaction } from 'kysely';
import type { NewEvent } from '../platform/bus/events';
import { firstRows, type SqlDialect } from '../platform/sql/dialect';
import type { ProvisioningTables } from './provisioning.tables';

type Executor = Kysely<ProvisioningTables> | Transaction<ProvisioningTables>;

/** Records the report of each run of a promotion whose terminal event is among `events`: what the DeliveryHost is told of. */
export async function enqueueDeliveryReports(trx: Transaction<ProvisioningTables>, events: readonly NewEvent[], at: number): Promise<void> {
  for (const event of events) {
    if (event.type !== 'ProvisioningApplied' && event.type !== 'ProvisioningFailed') continue;
    const { runId, trigger } = event.data as { runId?: unknown; trigger?: unknown };
    if (trigger !== 'promotion' || typeof runId !== 'string' || event.tenant === undefined) continue;
    await insertReport(trx, { tenant: event.tenant, runId, at });
  }
}

/** A report still to be sent: whose run it is, and how often sending it failed. */
export interface PendingReport {
  readonly tenant: string;
  readonly runId: string;
  readonly attempts: number;
}

/** The report of a tenant's run, to be sent from `at` on; a run that has one already keeps it (one report per run). */
export async function insertReport(trx: Executor, report: { readonly tenant: string; readonly runId: string; readonly at: number }): Promise<void> {
  const known = await trx.selectFrom('provisioning_delivery_reports').select('run_id').where('tenant_id', '=', report.tenant).where('run_id', '=', report.runId).executeTakeFirst();
  if (known) return;
  await trx
    .insertInto('provisioning_delivery_reports')
    .values({ tenant_id: report.tenant, run_id: report.runId, created_at: report.at, next_attempt_at: report.at, attempts: 0, claimed_by: null, claimed_until: null, acknowledged_at: null, report_id: null, last_error: null })
    .execute();
}

/** Reports due at `now` that no other pass holds, oldest first. */
export async function dueReports(db: Executor, dialect: SqlDialect, now: number, limit: number): Promise<PendingReport[]> {
  const due = db
    .selectFrom('provisioning_delivery_reports')
    .select(['tenant_id', 'run_id', 'attempts'])
    .where('acknowledged_at', 'is', null)
    .where('next_attempt_at', '<=', now)
    .where((eb) => eb.or([eb('claimed_until', 'is', null), eb('claimed_until', '<', now)]))
    .orderBy('created_at')
    .orderBy('run_id');
  const rows = await firstRows(due, dialect, limit).execute();
  return rows.map((r) => ({ tenant: r.tenant_id, runId: r.run_id, attempts: Number(r.attempts) }));
}

/**
 * Takes a due report for the pass `claimToken` until `until`: true only for the one pass whose conditional update
 * found it unclaimed (or its claim lapsed), so two hosts never send one report at once.
 */
export async function claimReport(db: Executor, report: PendingReport, claim: { readonly claimToken: string; readonly now: number; readonly until: number }): Promise<boolean> {
  const result = await db
    .updateTable('provisioning_delivery_reports')
    .set({ claimed_by: claim.claimToken, claimed_until: claim.until })
    .where('tenant_id', '=', report.tenant)
    .where('run_id', '=', report.runId)
    .where('acknowledged_at', 'is', null)
    .where((eb) => eb.or([eb('claimed_until', 'is', null), eb('claimed_until', '<', claim.now)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** The DeliveryHost acknowledged the report: it is never sent again. */
export async function acknowledgeReport(db: Executor, report: PendingReport, ack: { readonly claimToken: string; readonly reportId: string; readonly at: number }): Promise<void> {
  await db
    .updateTable('provisioning_delivery_reports')
    .set({ acknowledged_at: ack.at, report_id: ack.reportId, claimed_by: null, claimed_until: null, attempts: report.attempts + 1, last_error: null })
    .where('tenant_id', '=', report.tenant)
    .where('run_id', '=', report.runId)
    .where('claimed_by', '=', ack.claimToken)
    .execute();
}

/** Sending failed: the report waits until `nextAttemptAt`, with the error kept for operators. */
export async function postponeReport(db: Executor, report: PendingReport, failure: { readonly claimToken: string; readonly error: string; readonly nextAttemptAt: number }): Promise<void> {
  await db
    .updateTable('provisioning_delivery_reports')
    .set({ next_attempt_at: failure.nextAttemptAt, attempts: report.attempts + 1, last_error: failure.error.slice(0, 2000), claimed_by: null, claimed_until: null })
    .where('tenant_id', '=', report.tenant)
    .where('run_id', '=', report.runId)
    .where('claimed_by', '=', failure.claimToken)
    .execute();
}

/** Where a run's report stands (tests and operators). */
export async function findReport(db: Executor, tenant: string, runId: string) {
  const row = await db.selectFrom('provisioning_delivery_reports').selectAll().where('tenant_id', '=', tenant).where('run_id', '=', runId).executeTakeFirst();
  return row
    ? {
        attempts: Number(row.attempts),
        nextAttemptAt: Number(row.next_attempt_at),
        acknowledgedAt: row.acknowledged_at === null ? undefined : Number(row.acknowledged_at),
        reportId: row.report_id ?? undefined,
        lastError: row.last_error ?? undefined,
      }
    : undefined;
}
