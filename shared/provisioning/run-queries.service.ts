import type { WaitReason } from '../capacity/lease-queue';
import { runnerPools } from './runner-pools.service';
import type { TenantFilter } from '../platform/auth/auth';
import { AppError } from '../platform/errors/app-error';
import { decodeCursor, encodeCursor } from '../platform/http/cursor';
import { retryingContention } from '../platform/sql/transaction';
import type { ProvisioningContext } from './provisioning.context';
import { findRejection, type Rejection } from './rejections.repository';
import { findRunDetail } from './receipts.repository';
import { listRuns as listRunRows } from './runs.repository';
import type { RunDetail } from './receipt';
import type { Run, RunState } from './run';
import { findJob, queuePosition } from './runner-jobs.repository';
import { findRun } from './runs.repository';
import { busDb } from '../platform/bus/bus-db';
import { eventsCorrelatedWith, type CorrelatedEvent } from '../platform/bus/outbox';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/** What operators and services read of runs: one run with its receipts, a page of runs, a rejected message. */

export interface RunPage {
  readonly items: readonly Run[];
  readonly nextCursor?: string;
}

export async function getRun(ctx: ProvisioningContext, tenants: TenantFilter, runId: string): Promise<RunDetail> {
  const detail = await retryingContention(() => findRunDetail(ctx.db, runId, tenants));
  if (!detail) throw problemError(ProvisioningErrors.runNotFound, `there is no run ${runId}`, { runId });
  return { ...detail, run: await withQueuePosition(ctx, detail.run) };
}

/** The most events a run's list answers: a run publishes a handful (declared, runner jobs, applied or failed). */
const RUN_EVENTS_LIMIT = 200;

/** The events written for a run of the caller's tenants, in the order they were written (404 as for the run itself). */
export async function runEvents(ctx: ProvisioningContext, tenants: TenantFilter, runId: string): Promise<CorrelatedEvent[]> {
  const run = await retryingContention(() => findRun(ctx.db, runId, tenants));
  if (!run) throw problemError(ProvisioningErrors.runNotFound, `there is no run ${runId}`, { runId });
  return retryingContention(() => eventsCorrelatedWith(busDb(ctx.db), ctx.dialect, run.id, RUN_EVENTS_LIMIT));
}

/**
 * A run waiting for a runner says where its job stands in its pool's queue (1: next) and why it waits, in the
 * capacity queue's words: behind other jobs, or, next in line, on a pool whose agents are all busy.
 */
async function withQueuePosition(ctx: ProvisioningContext, run: Run): Promise<Run> {
  const waiting = run.waitingFor;
  if (waiting?.kind !== 'runner') return run;
  const job = await retryingContention(() => findJob(ctx.db, ctx.dialect, waiting.jobId));
  if (job?.state !== 'queued') return run;
  const position = await retryingContention(() => queuePosition(ctx.db, job));
  const pool = position === 1 ? (await runnerPools(ctx, run.tenant)).find((p) => p.pool === job.pool) : undefined;
  const reason: WaitReason | undefined =
    position > 1 ? { code: 'QUEUED_BEHIND', position } : pool ? { code: 'POOL_FULL', used: pool.jobsRunning, capacity: pool.agentsOnline } : undefined;
  return { ...run, waitingFor: { ...waiting, position, ...(reason ? { reason } : {}) } };
}

export async function listRuns(ctx: ProvisioningContext, tenants: TenantFilter, query: { environment?: string; state?: RunState; limit: number; cursor?: string; order?: 'oldest' | 'newest' }): Promise<RunPage> {
  const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
  if (query.cursor !== undefined && after === undefined) throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API gave out');
  const items = await retryingContention(() =>
    listRunRows(ctx.db, ctx.dialect, tenants, {
      limit: query.limit,
      ...(query.environment !== undefined ? { environment: query.environment } : {}),
      ...(query.state !== undefined ? { state: query.state } : {}),
      ...(after !== undefined ? { after } : {}),
      ...(query.order !== undefined ? { order: query.order } : {}),
    }),
  );
  const last = items[items.length - 1];
  return { items: await Promise.all(items.map((run) => withQueuePosition(ctx, run))), ...(items.length === query.limit && last ? { nextCursor: encodeCursor(last.id) } : {}) };
}

/** A rejected message, by its messageId. */
export function getRejection(ctx: ProvisioningContext, messageId: string): Promise<Rejection | undefined> {
  return retryingContention(() => findRejection(ctx.db, messageId));
}
