import { AppError } from '../platform/errors/app-error';
import { inTransaction } from '../platform/sql/transaction';
import type { CapacityContext } from './capacity.context';
import { getPool, listPools, tenantLimit } from './capacity.repository';
import type { ScopeOwner } from './capacity-ledger.repository';
import { soonestExpiry } from './lease.repository';
import { retryAfterSeconds, ttlProblem, type LeaseRequest } from './lease';
import type { CapacityKind } from './pool';
import { quotaScope } from './slots';
import { problemError } from '../platform/errors/catalogue';
import { CapacityErrors } from './errors';
import type { WaitReason } from './lease-queue';
import { waitingCount } from './lease-requests.repository';

/**
 * Why a grant was refused, explained from what the rows say (read without locks, on the slow path only): the
 * tenant's quota, an unfit pool, or no pool with the units free.
 */

/** A refusal to answer unless a look again finds room: `inFlight` when free rows were held by other grants. */
export interface Refusal {
  readonly refusal: AppError;
  readonly inFlight: boolean;
}

/**
 * Whether a scope that could not grant `units` has them free after all (held only by grants in flight). A scope
 * with retiring rows is laid out again first: rows that retired since came free and are dropped.
 */
export async function freeAfterRelaying(ctx: CapacityContext, scope: string, owner: ScopeOwner, units: number): Promise<boolean> {
  let use = await ctx.ledger.use(ctx.db, scope);
  if (use.retiring) {
    await inTransaction(ctx.db, (trx) => ctx.ledger.relay(trx, owner));
    use = await ctx.ledger.use(ctx.db, scope);
  }
  return !use.retiring && use.free >= units;
}

/** Why the tenant's quota refused. */
export async function quotaRefusal(ctx: CapacityContext, request: LeaseRequest, now: number): Promise<Refusal> {
  const view = await tenantLimit(ctx.db, ctx.ledger, request.tenant, request.kind);
  if (!view) throw problemError(CapacityErrors.tenantUnknown, `tenant ${request.tenant} has no capacity edition`);
  const problem = ttlProblem(request.ttlSeconds, view.limit);
  if (!view.limit) {
    throw problemError(CapacityErrors.kindNotInEdition, problem ?? 'the edition grants no capacity of this kind', {
      edition: view.edition,
      kind: request.kind,
    });
  }
  if (problem) {
    throw problemError(CapacityErrors.ttlTooLong, problem, {
      edition: view.edition,
      kind: request.kind,
      maxTtlSeconds: view.limit.maxTtlSeconds,
    });
  }
  const inFlight = await freeAfterRelaying(ctx, quotaScope(request.tenant, request.kind), { tenant: request.tenant, kind: request.kind }, request.units);
  const soonest = await soonestExpiry(ctx.db, ctx.dialect, { tenant: request.tenant, kind: request.kind });
  const refusal = problemError(CapacityErrors.quotaExceeded, `the ${view.edition} edition allows ${view.limit.maxUnits} ${request.kind} units at once`, {
    kind: request.kind,
    edition: view.edition,
    used: view.used,
    limit: view.limit.maxUnits,
    requested: request.units,
    retryAfterSeconds: inFlight ? 1 : retryAfterSeconds(soonest === undefined ? undefined : new Date(soonest), new Date(now)),
    reason: { code: 'TENANT_QUOTA', used: view.used, quota: view.limit.maxUnits } satisfies WaitReason,
  });
  return { refusal, inFlight };
}

/** Refuses a named pool that does not exist or holds another kind of units. */
export async function refuseUnfitPool(ctx: CapacityContext, id: string, kind: CapacityKind): Promise<void> {
  const pool = await getPool(ctx.db, ctx.ledger, id);
  if (!pool) throw problemError(CapacityErrors.poolNotFound, `pool ${id} does not exist`);
  if (pool.kind !== kind) throw problemError(CapacityErrors.poolKindMismatch, `pool ${pool.id} holds ${pool.kind} units, not ${kind}`);
}

/** No pool the request may use has its units free. */
export async function exhaustedRefusal(ctx: CapacityContext, request: LeaseRequest, now: number, inFlight: boolean): Promise<AppError> {
  const pools = (await listPools(ctx.db, ctx.ledger, request.kind)).filter((p) => request.pool === undefined || p.id === request.pool);
  const soonest = await soonestExpiry(ctx.db, ctx.dialect, { kind: request.kind, ...(request.pool !== undefined ? { pool: request.pool } : {}) });
  const used = pools.reduce((sum, p) => sum + p.used, 0);
  const capacity = pools.reduce((sum, p) => sum + p.capacity, 0);
  const resizing = pools.length > 0 && pools.every((p) => p.used > p.capacity);
  return problemError(CapacityErrors.exhausted, `no ${request.kind} pool has ${request.units} free units`, {
    kind: request.kind,
    ...(request.pool !== undefined ? { pool: request.pool } : {}),
    ...(request.labels !== undefined ? { labels: request.labels } : {}),
    used,
    limit: capacity,
    requested: request.units,
    retryAfterSeconds: inFlight ? 1 : retryAfterSeconds(soonest === undefined ? undefined : new Date(soonest), new Date(now)),
    reason: { code: resizing ? 'POOL_RESIZING' : 'POOL_FULL', used, capacity } satisfies WaitReason,
  });
}

/**
 * Every pool the request may use has tickets waiting: the units they free are theirs first. Send the request with
 * `wait` to join the queue.
 */
export async function queuedRefusal(ctx: CapacityContext, request: LeaseRequest): Promise<AppError> {
  const pools = (await listPools(ctx.db, ctx.ledger, request.kind)).filter((p) => request.pool === undefined || p.id === request.pool);
  const waiting = await waitingCount(ctx.db, pools.map((p) => p.id));
  return problemError(CapacityErrors.exhausted, `requests wait in the queue of every ${request.kind} pool this request may use: send it with wait to join`, {
    kind: request.kind,
    ...(request.pool !== undefined ? { pool: request.pool } : {}),
    used: pools.reduce((sum, p) => sum + p.used, 0),
    limit: pools.reduce((sum, p) => sum + p.capacity, 0),
    requested: request.units,
    retryAfterSeconds: 1,
    reason: { code: 'QUEUED_BEHIND', position: waiting + 1 } satisfies WaitReason,
  });
}
