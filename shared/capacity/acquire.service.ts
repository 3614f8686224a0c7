import { AppError, ensureError } from '../platform/errors/app-error';
import { retryingContention } from '../platform/sql/transaction';
import { recordLeaseGrant, recordLeaseRefusal } from '../platform/telemetry/metrics';
import type { AcquireResult, CapacityContext } from './capacity.context';
import { isUniqueViolation } from '../platform/sql/dialect';
import { retry } from '../platform/time/retry';
import { poolsOfKind } from './capacity.repository';
import { findLeaseByIdempotencyKey } from './lease.repository';
import { leaseRequestDigest, type Lease, type LeaseRequest } from './lease';
import { poolMatchesLabels } from './pool';
import { exhaustedRefusal, freeAfterRelaying, queuedRefusal, quotaRefusal, refuseUnfitPool, type Refusal } from './refusals.service';
import { hasWaiting } from './lease-requests.repository';
import { poolScope } from './slots';
import { problemError } from '../platform/errors/catalogue';
import { CapacityErrors } from './errors';

/** Looks a refused grant takes again when the rows it needed were held by grants in flight. */
const IN_FLIGHT_ROUNDS = 10;

/** A refusal whose free rows were held by grants in flight: worth a look again. */
class GrantsInFlight extends Error {
  constructor(readonly refusal: AppError) {
    super(refusal.message);
  }
}

/**
 * Grants a lease: from the named pool or the first pool of the kind whose labels match, within the tenant's quota.
 * A repeated Idempotency-Key answers with the earlier lease; a refusal says why, with when to try again.
 */
export async function acquire(ctx: CapacityContext, request: LeaseRequest): Promise<AcquireResult> {
  if (!Number.isInteger(request.units) || request.units <= 0) {
    throw problemError(CapacityErrors.invalidUnits, 'units must be a positive integer');
  }
  if (!Number.isInteger(request.ttlSeconds) || request.ttlSeconds <= 0) {
    throw problemError(CapacityErrors.invalidTtl, 'ttlSeconds must be a positive integer');
  }
  const key = request.idempotencyKey;
  // What the key is bound to; a request without a key is never compared, so it records none.
  const digest = key === undefined ? null : leaseRequestDigest(request);
  if (key !== undefined && digest !== null) {
    const earlier = await findLeaseByIdempotencyKey(ctx.db, ctx.dialect, request.tenant, key);
    if (earlier) return repeated(earlier, digest);
  }
  await ctx.recovery.refuseGrants(request.kind);
  try {
    // Free rows were there but held by grants in flight, which may yet roll back: look again shortly. A scope
    // that stays saturated (every free row taken by another grant each time) is refused as full.
    const result = await retry(
      async () => {
        const result = await retryingContention(() => grantOnce(ctx, request, digest));
        if ('lease' in result) return result;
        throw result.inFlight ? new GrantsInFlight(result.refusal) : result.refusal;
      },
      { attempts: IN_FLIGHT_ROUNDS, backoff: { kind: 'linear', firstMs: 2, jitter: 'full' }, retryIf: (e) => e instanceof GrantsInFlight },
    ).catch((thrown: unknown) => {
      throw thrown instanceof GrantsInFlight ? thrown.refusal : thrown;
    });
    recordLeaseGrant(result.lease.kind, result.lease.pool);
    return result;
  } catch (thrown) {
    const error = ensureError(thrown);
    // Two concurrent requests with one idempotency key: the loser's insert hits the unique index and rolls back
    // whole (its claimed rows included); it answers as a repeat of the winner's request.
    if (key !== undefined && digest !== null && isUniqueViolation(error)) {
      const earlier = await findLeaseByIdempotencyKey(ctx.db, ctx.dialect, request.tenant, key);
      if (earlier) return repeated(earlier, digest);
    }
    if (error instanceof AppError) recordLeaseRefusal(error.code, request.kind);
    throw error;
  }
}

/** The answer to a request that repeats an idempotency key: the earlier lease, if it asked for the same. */
function repeated(earlier: { lease: Lease; requestDigest: string | null }, digest: string): AcquireResult {
  // Leases granted before digests were recorded carry none; they are taken to match.
  if (earlier.requestDigest !== null && earlier.requestDigest !== digest) {
    throw new AppError('REQUEST.IDEMPOTENCY_KEY_REUSED', 'unprocessable', 'this Idempotency-Key was used for a different request');
  }
  return { outcome: 'existing', lease: earlier.lease };
}

/**
 * One attempt at a grant: each candidate pool in turn (`grant` claims the tenant's quota rows and the pool's and
 * inserts the lease, all or nothing). Free rows that were only held by grants in flight make the refusal worth a
 * second look.
 */
async function grantOnce(ctx: CapacityContext, request: LeaseRequest, digest: string | null): Promise<AcquireResult | Refusal> {
  const now = ctx.clock.now().getTime();
  const id = ctx.ids.next('lease');
  const candidates =
    request.pool !== undefined
      ? [request.pool]
      : (await poolsOfKind(ctx.db, request.kind)).filter((pool) => poolMatchesLabels(pool, request.labels)).map((pool) => pool.id);
  let inFlight = false;
  let queued = 0;
  for (const pool of candidates) {
    // Units a pool frees go to its queue first: a new request does not overtake a waiting one.
    if (await ctx.waiters.hasWaiting(pool, now, () => hasWaiting(ctx.db, ctx.dialect, pool))) {
      queued++;
      continue;
    }
    const lease: Omit<Lease, 'fencingToken'> = {
      id,
      tenant: request.tenant,
      kind: request.kind,
      pool,
      units: request.units,
      holder: request.holder,
      grantedAt: new Date(now),
      expiresAt: new Date(now + request.ttlSeconds * 1000),
      state: 'active',
      ...(request.idempotencyKey !== undefined ? { idempotencyKey: request.idempotencyKey } : {}),
    };
    const outcome = await ctx.ledger.grant(ctx.db, lease, request.ttlSeconds, digest);
    if ('fencingToken' in outcome) return { outcome: 'granted', lease: { ...lease, fencingToken: outcome.fencingToken } };
    if (outcome.shortOf === 'quota') return quotaRefusal(ctx, request, now);
    if (request.pool !== undefined) await refuseUnfitPool(ctx, request.pool, request.kind);
    if (await freeAfterRelaying(ctx, poolScope(pool), { pool }, request.units)) inFlight = true;
  }
  if (queued > 0 && queued === candidates.length) return { refusal: await queuedRefusal(ctx, request), inFlight: false };
  return { refusal: await exhaustedRefusal(ctx, request, now, inFlight), inFlight };
}
