import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { appendToOutbox } from '../platform/bus/outbox';
import type { NewEvent } from '../platform/bus/events';
import { decodeCursor, encodeCursor } from '../platform/http/cursor';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { SqlStore } from '../platform/sql/database';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { recordLeaseGrant, recordLeaseRefusal, recordSweep } from '../platform/telemetry/metrics';
import type { Clock, Ids } from '../platform/time/clock';
import type { CapacitySeed } from './capacity.seed';
import { EPOCH_SPAN } from '../platform/sql/store-epoch';
import { recoveryWindow } from './recovery-window.service';
import {
  capacityDb,
  editionExists,
  expireDueLeases,
  getPool,
  ledgerFor,
  listEditions,
  listPools,
  poolsOfKind,
  tenantLimit,
  tenantUse,
  upsertEdition,
  upsertPool,
  upsertTenant,
} from './capacity.repository';
import type { GrantOutcome, ScopeOwner } from './capacity-ledger.repository';
import { findLeaseByIdempotencyKey, getLease, leaseTenant, listLeases, renewActiveLease, soonestExpiry, type EndedLease } from './lease.repository';
import type { CapacityTables } from './capacity.tables';
import {
  effectiveState,
  fencingMatches,
  leaseRequestDigest,
  retryAfterSeconds,
  ttlProblem,
  type Lease,
  type LeaseRequest,
  type LeaseState,
} from './lease';
import {
  CAPACITY_KINDS,
  freeUnits,
  needsResizeRequest,
  poolMatchesLabels,
  poolSpecProblems,
  type CapacityKind,
  type Edition,
  type Pool,
  type PoolSpec,
  type Tenant,
} from './pool';
import { poolScope, quotaScope } from './slots';
import { isUniqueViolation } from '../platform/sql/dialect';
import { retry } from '../platform/time/retry';

export type AcquireResult = { readonly outcome: 'granted' | 'existing'; readonly lease: Lease };
export type ReleaseResult = { readonly outcome: 'released' | 'already-released' };

export interface LeasePage {
  readonly items: readonly Lease[];
  readonly nextCursor?: string;
}

export interface CapacitySummary {
  readonly kinds: readonly { kind: CapacityKind; capacity: number; used: number; free: number }[];
  readonly pools: readonly (Pool & { free: number })[];
  readonly tenants: readonly {
    tenant: string;
    edition: string;
    usage: readonly { kind: string; used: number; limit: number | null }[];
  }[];
}

export interface SweepResult {
  readonly expired: number;
  readonly batches: number;
}

/** The capacity use cases; built once per host by `createDeps`. */
export interface CapacityService {
  acquire(request: LeaseRequest): Promise<AcquireResult>;
  /**
   * Extends a lease. In the recovery window after a restore, a lease the store does not know is re-registered from
   * `holding` (what its holder says it holds) with its fencing token, if it was granted before the restore and
   * the capacity allows; `ttlSeconds` is then required.
   */
  renew(tenants: TenantFilter, id: string, fencingToken: number, ttlSeconds?: number, holding?: LeaseHolding): Promise<Lease>;
  /** Releases a lease whose holder proves itself with the lease's fencing token. */
  release(tenants: TenantFilter, id: string, fencingToken: number): Promise<ReleaseResult>;
  getLease(tenants: TenantFilter, id: string): Promise<Lease>;
  listLeases(tenants: TenantFilter, query: { holder?: string; state?: LeaseState; limit: number; cursor?: string }): Promise<LeasePage>;
  summary(tenants: TenantFilter): Promise<CapacitySummary>;
  putPool(id: string, spec: PoolSpec): Promise<{ created: boolean; pool: Pool; resizeRequested: boolean }>;
  putEdition(edition: Edition): Promise<{ created: boolean }>;
  putTenant(tenant: Tenant): Promise<{ created: boolean }>;
  listEditions(): Promise<Edition[]>;
  /** Expires every active lease past its expiry, in batches; frees their units and records `LeaseExpired`. */
  sweepExpired(options?: { batchSize?: number }): Promise<SweepResult>;
  /** Upserts the editions, then the tenants and pools of a seed file; running it again changes nothing. */
  applySeed(seed: CapacitySeed): Promise<void>;
}

/** What a holder re-registering a lease after a restore says it holds. */
export type LeaseHolding = Pick<Lease, 'kind' | 'pool' | 'units' | 'holder'>;

export interface CapacityServiceOptions {
  readonly store: SqlStore;
  readonly clock: Clock;
  readonly ids: Ids;
}

const DEFAULT_SWEEP_BATCH = 500;
/** Looks a refused grant takes again when the rows it needed were held by grants in flight. */
const IN_FLIGHT_ROUNDS = 10;

/** A refusal whose free rows were held by grants in flight: worth a look again (see acquire). */
class GrantsInFlight extends Error {
  constructor(readonly refusal: AppError) {
    super(refusal.message);
  }
}

/** A refusal to answer unless a look again finds room: `inFlight` when free rows were held by other grants. */
interface Refusal {
  readonly refusal: AppError;
  readonly inFlight: boolean;
}

export function createCapacityService({ store, clock, ids }: CapacityServiceOptions): CapacityService {
  const db = capacityDb(store.db);
  const dialect = store.dialect;
  const ledger = ledgerFor(store);
  const outbox = (trx: Transaction<CapacityTables>, events: readonly NewEvent[]) =>
    appendToOutbox(trx, events, clock, ids);

  const recovery = recoveryWindow(store, clock);

  /**
   * Re-registers a lease the restored store does not know, for the caller's own tenant only: in the kind's recovery
   * window, for a token of an earlier epoch (granted before the restore), when the tenant's quota and the pool have
   * the units. Otherwise the lease is unknown, as outside a recovery.
   */
  async function reRegister(tenants: TenantFilter, id: string, fencingToken: number, ttlSeconds: number | undefined, holding: LeaseHolding | undefined): Promise<Lease> {
    const now = clock.now().getTime();
    if (tenants.kind !== 'one' || holding === undefined || (await recovery.until(holding.kind, now)) === undefined) throw leaseNotFound(id);
    if (ttlSeconds === undefined) {
      throw new AppError('CAPACITY.TTL_REQUIRED', 'validation', 're-registering a lease after a restore needs its ttlSeconds');
    }
    if (Math.floor(fencingToken / EPOCH_SPAN) >= (await recovery.epoch())) {
      throw new AppError('CAPACITY.FENCING_MISMATCH', 'conflict', 'only a lease granted before the store was restored can be re-registered', { presented: fencingToken });
    }
    const request: LeaseRequest = { tenant: tenants.tenant, ...holding, ttlSeconds };
    const lease: Omit<Lease, 'fencingToken'> = {
      id,
      tenant: tenants.tenant,
      ...holding,
      grantedAt: new Date(now),
      expiresAt: new Date(now + ttlSeconds * 1000),
      state: 'active',
    };
    let outcome: GrantOutcome;
    try {
      outcome = await retryingContention(() => ledger.grant(db, lease, ttlSeconds, null, fencingToken));
      // The restored store holds the units of leases that expired while it was down until the sweep ends them: a
      // holder re-registering should not wait for the sweep's next round.
      if (!('fencingToken' in outcome) && (await service.sweepExpired()).expired > 0) {
        outcome = await retryingContention(() => ledger.grant(db, lease, ttlSeconds, null, fencingToken));
      }
    } catch (thrown) {
      const error = ensureError(thrown);
      if (!isUniqueViolation(error)) throw error;
      // The same holder re-registered it meanwhile (a retry): renew that. Else the id is another tenant's.
      const renewed = await inTransaction(db, (trx) => renewActiveLease(trx, dialect, tenants.tenant, id, fencingToken, now, ttlSeconds));
      if (renewed) return renewed;
      throw new AppError('CAPACITY.LEASE_CONFLICT', 'conflict', `lease ${id} cannot be re-registered`);
    }
    if ('fencingToken' in outcome) return { ...lease, fencingToken: outcome.fencingToken };
    if (outcome.shortOf === 'quota') throw (await quotaRefusal(request, now)).refusal;
    await refuseUnfitPool(holding.pool, holding.kind);
    throw await exhaustedRefusal(request, now, false);
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
   * One attempt at a grant: each candidate pool in turn (`grantLease` claims the tenant's quota rows and the pool's
   * and inserts the lease, all or nothing). Refusals are explained from what the rows say, read without locks;
   * free rows that were only held by grants in flight make the refusal worth a second look.
   */
  async function grantOnce(request: LeaseRequest, digest: string | null): Promise<AcquireResult | Refusal> {
    const now = clock.now().getTime();
    const id = ids.next('lease');
    const candidates =
      request.pool !== undefined
        ? [request.pool]
        : (await poolsOfKind(db, request.kind)).filter((pool) => poolMatchesLabels(pool, request.labels)).map((pool) => pool.id);
    let inFlight = false;
    for (const pool of candidates) {
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
      const outcome = await ledger.grant(db, lease, request.ttlSeconds, digest);
      if ('fencingToken' in outcome) return { outcome: 'granted', lease: { ...lease, fencingToken: outcome.fencingToken } };
      if (outcome.shortOf === 'quota') return quotaRefusal(request, now);
      if (request.pool !== undefined) await refuseUnfitPool(request.pool, request.kind);
      if (await freeAfterRelaying(poolScope(pool), { pool }, request.units)) inFlight = true;
    }
    return { refusal: await exhaustedRefusal(request, now, inFlight), inFlight };
  }

  /**
   * Whether a scope that could not grant `units` has them free after all (held only by grants in flight). A scope
   * with retiring rows is laid out again first: rows that retired since came free and are dropped.
   */
  async function freeAfterRelaying(scope: string, owner: ScopeOwner, units: number): Promise<boolean> {
    let use = await ledger.use(db, scope);
    if (use.retiring) {
      await inTransaction(db, (trx) => ledger.relay(trx, owner));
      use = await ledger.use(db, scope);
    }
    return !use.retiring && use.free >= units;
  }

  /** Why the tenant's quota refused; read only on this (slow) path. */
  async function quotaRefusal(request: LeaseRequest, now: number): Promise<Refusal> {
    const view = await tenantLimit(db, ledger, request.tenant, request.kind);
    if (!view) throw new AppError('CAPACITY.TENANT_UNKNOWN', 'not-found', `tenant ${request.tenant} has no capacity edition`);
    const problem = ttlProblem(request.ttlSeconds, view.limit);
    if (!view.limit) {
      throw new AppError('CAPACITY.KIND_NOT_IN_EDITION', 'forbidden', problem ?? 'the edition grants no capacity of this kind', {
        edition: view.edition,
        kind: request.kind,
      });
    }
    if (problem) {
      throw new AppError('CAPACITY.TTL_TOO_LONG', 'validation', problem, {
        edition: view.edition,
        kind: request.kind,
        maxTtlSeconds: view.limit.maxTtlSeconds,
      });
    }
    const inFlight = await freeAfterRelaying(quotaScope(request.tenant, request.kind), { tenant: request.tenant, kind: request.kind }, request.units);
    const soonest = await soonestExpiry(db, dialect, { tenant: request.tenant, kind: request.kind });
    const refusal = new AppError('CAPACITY.QUOTA_EXCEEDED', 'limit', `the ${view.edition} edition allows ${view.limit.maxUnits} ${request.kind} units at once`, {
      kind: request.kind,
      edition: view.edition,
      used: view.used,
      limit: view.limit.maxUnits,
      requested: request.units,
      retryAfterSeconds: inFlight ? 1 : retryAfterSeconds(soonest === undefined ? undefined : new Date(soonest), new Date(now)),
    });
    return { refusal, inFlight };
  }

  async function refuseUnfitPool(id: string, kind: CapacityKind): Promise<void> {
    const pool = await getPool(db, ledger, id);
    if (!pool) throw new AppError('CAPACITY.POOL_NOT_FOUND', 'not-found', `pool ${id} does not exist`);
    if (pool.kind !== kind) throw new AppError('CAPACITY.POOL_KIND_MISMATCH', 'validation', `pool ${pool.id} holds ${pool.kind} units, not ${kind}`);
  }

  async function exhaustedRefusal(request: LeaseRequest, now: number, inFlight: boolean): Promise<AppError> {
    const pools = (await listPools(db, ledger, request.kind)).filter((p) => request.pool === undefined || p.id === request.pool);
    const soonest = await soonestExpiry(db, dialect, { kind: request.kind, ...(request.pool !== undefined ? { pool: request.pool } : {}) });
    return new AppError('CAPACITY.EXHAUSTED', 'limit', `no ${request.kind} pool has ${request.units} free units`, {
      kind: request.kind,
      ...(request.pool !== undefined ? { pool: request.pool } : {}),
      ...(request.labels !== undefined ? { labels: request.labels } : {}),
      used: pools.reduce((sum, p) => sum + p.used, 0),
      limit: pools.reduce((sum, p) => sum + p.capacity, 0),
      requested: request.units,
      retryAfterSeconds: inFlight ? 1 : retryAfterSeconds(soonest === undefined ? undefined : new Date(soonest), new Date(now)),
    });
  }

  function leaseExpiredEvent(lease: EndedLease): NewEvent {
    return {
      type: 'LeaseExpired',
      subject: `leases/${lease.id}`,
      correlationId: lease.id,
      tenant: lease.tenant,
      data: {
        leaseId: lease.id,
        tenantId: lease.tenant,
        kind: lease.kind,
        pool: lease.pool,
        units: lease.units,
        holder: lease.holder,
        fencingToken: lease.fencingToken,
        expiresAt: new Date(lease.expiresAt).toISOString(),
      },
    };
  }

  function fencingMismatch(lease: Lease, presented: number): AppError {
    const message = fencingMatches(lease, presented) ? 'the lease changed meanwhile' : 'the fencing token is not the one this lease was granted with';
    return new AppError('CAPACITY.FENCING_MISMATCH', 'conflict', message, { presented });
  }

  function leaseNotFound(id: string): AppError {
    return new AppError('CAPACITY.LEASE_NOT_FOUND', 'not-found', `lease ${id} does not exist`);
  }

  /** The tenant whose lease the caller acts on: its own, or for a caller of all tenants, the lease's. */
  async function tenantOfLease(tenants: TenantFilter, id: string): Promise<string> {
    if (tenants.kind === 'one') return tenants.tenant;
    const tenant = await leaseTenant(db, id);
    if (tenant === undefined) throw leaseNotFound(id);
    return tenant;
  }

  async function notFoundOrGone(tenant: string, id: string): Promise<{ lease: Lease; state: LeaseState }> {
    const lease = await getLease(db, tenant, id);
    // Another tenant's lease is indistinguishable from a missing one.
    if (!lease) throw leaseNotFound(id);
    return { lease, state: effectiveState(lease, clock.now()) };
  }

  const service: CapacityService = {
    async acquire(request) {
      if (!Number.isInteger(request.units) || request.units <= 0) {
        throw new AppError('CAPACITY.INVALID_UNITS', 'validation', 'units must be a positive integer');
      }
      if (!Number.isInteger(request.ttlSeconds) || request.ttlSeconds <= 0) {
        throw new AppError('CAPACITY.INVALID_TTL', 'validation', 'ttlSeconds must be a positive integer');
      }
      const key = request.idempotencyKey;
      // What the key is bound to; a request without a key is never compared, so it records none.
      const digest = key === undefined ? null : leaseRequestDigest(request);
      if (key !== undefined && digest !== null) {
        const earlier = await findLeaseByIdempotencyKey(db, dialect, request.tenant, key);
        if (earlier) return repeated(earlier, digest);
      }
      await recovery.refuseGrants(request.kind);
      try {
        // Free rows were there but held by grants in flight, which may yet roll back: look again shortly. A scope
        // that stays saturated (every free row taken by another grant each time) is refused as full.
        const result = await retry(
          async () => {
            const result = await retryingContention(() => grantOnce(request, digest));
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
          const earlier = await findLeaseByIdempotencyKey(db, dialect, request.tenant, key);
          if (earlier) return repeated(earlier, digest);
        }
        if (error instanceof AppError) recordLeaseRefusal(error.code, request.kind);
        throw error;
      }
    },

    async renew(tenants, id, fencingToken, ttlSeconds, holding) {
      const now = clock.now().getTime();
      const tenant = await tenantOfLease(tenants, id);
      if (ttlSeconds !== undefined) {
        const lease = await getLease(db, tenant, id);
        if (!lease) return reRegister(tenants, id, fencingToken, ttlSeconds, holding);
        const view = await tenantLimit(db, ledger, lease.tenant, lease.kind);
        const problem = ttlProblem(ttlSeconds, view?.limit);
        if (problem) {
          throw new AppError('CAPACITY.TTL_TOO_LONG', 'validation', problem, {
            kind: lease.kind,
            ...(view?.limit ? { maxTtlSeconds: view.limit.maxTtlSeconds } : {}),
          });
        }
      }
      const renewed = await inTransaction(db, (trx) => renewActiveLease(trx, dialect, tenant, id, fencingToken, now, ttlSeconds));
      if (renewed) return renewed;
      const lease = await getLease(db, tenant, id);
      if (!lease) return reRegister(tenants, id, fencingToken, ttlSeconds, holding);
      const state = effectiveState(lease, clock.now());
      if (state !== 'active') {
        throw new AppError('CAPACITY.LEASE_GONE', 'gone', `lease ${id} is ${state}`, { state });
      }
      throw fencingMismatch(lease, fencingToken);
    },

    async release(tenants, id, fencingToken) {
      const now = clock.now().getTime();
      const tenant = await tenantOfLease(tenants, id);
      const ended = await retryingContention(() => ledger.release(db, tenant, id, fencingToken, now));
      if (ended) return { outcome: 'released' };
      const { lease, state } = await notFoundOrGone(tenant, id);
      // Only the holder may learn more: a wrong token is refused whatever state the lease is in.
      if (!fencingMatches(lease, fencingToken)) throw fencingMismatch(lease, fencingToken);
      if (state === 'released') return { outcome: 'already-released' };
      throw new AppError('CAPACITY.LEASE_GONE', 'gone', `lease ${id} is ${state}`, { state });
    },

    async getLease(tenants, id) {
      return (await notFoundOrGone(await tenantOfLease(tenants, id), id)).lease;
    },

    async listLeases(tenants, query) {
      const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
      if (query.cursor !== undefined && after === undefined) {
        throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API returned');
      }
      const rows = await listLeases(db, dialect, tenants, {
        ...(query.holder !== undefined ? { holder: query.holder } : {}),
        ...(query.state !== undefined ? { state: query.state } : {}),
        ...(after !== undefined ? { after } : {}),
        limit: query.limit + 1,
        now: clock.now().getTime(),
      });
      const items = rows.slice(0, query.limit);
      const last = items[items.length - 1];
      return rows.length > query.limit && last ? { items, nextCursor: encodeCursor(last.id) } : { items };
    },

    async summary(tenants) {
      const pools = await listPools(db, ledger);
      const kinds = CAPACITY_KINDS.map((kind) => {
        const ofKind = pools.filter((p) => p.kind === kind);
        const capacity = ofKind.reduce((sum, p) => sum + p.capacity, 0);
        const used = ofKind.reduce((sum, p) => sum + p.used, 0);
        return { kind, capacity, used, free: ofKind.reduce((sum, p) => sum + freeUnits(p), 0) };
      });
      const byTenant = new Map<string, { tenant: string; edition: string; usage: { kind: string; used: number; limit: number | null }[] }>();
      for (const row of await tenantUse(db, ledger, tenants)) {
        const entry = byTenant.get(row.tenant) ?? { tenant: row.tenant, edition: row.edition, usage: [] };
        entry.usage.push({ kind: row.kind, used: row.used, limit: row.maxUnits });
        byTenant.set(row.tenant, entry);
      }
      return { kinds, pools: pools.map((p) => ({ ...p, free: freeUnits(p) })), tenants: [...byTenant.values()] };
    },

    async putPool(id, spec) {
      const problems = poolSpecProblems(spec);
      if (problems.length > 0) {
        throw new AppError('CAPACITY.INVALID_POOL', 'validation', 'the pool is not valid', { errors: problems });
      }
      const now = clock.now().getTime();
      return inTransaction(db, async (trx) => {
        const before = await upsertPool(trx, dialect, ledger, id, spec, now);
        if (before && before.kind !== spec.kind && before.used > 0) {
          throw new AppError('CAPACITY.POOL_IN_USE', 'conflict', `pool ${id} holds ${before.used} leased units; its kind cannot change`);
        }
        const resizeRequested = needsResizeRequest(before, spec);
        if (resizeRequested && before) {
          await outbox(trx, [
            {
              type: 'PoolResizeRequested',
              subject: `pools/${id}`,
              correlationId: id,
              data: {
                pool: id,
                kind: spec.kind,
                target: spec.target,
                iacStack: spec.iacStack,
                fromCapacity: before.capacity,
                toCapacity: spec.capacity,
                used: before.used,
              },
            },
          ]);
        }
        const pool = await getPool(trx, ledger, id);
        if (!pool) throw new Error(`pool ${id} vanished inside its own transaction`);
        return { created: before === undefined, pool, resizeRequested };
      });
    },

    async putEdition(edition) {
      const now = clock.now().getTime();
      return inTransaction(db, async (trx) => {
        const existed = await editionExists(trx, edition.name);
        await upsertEdition(trx, dialect, ledger, edition, now);
        return { created: !existed };
      });
    },

    async putTenant(tenant) {
      const now = clock.now().getTime();
      return inTransaction(db, async (trx) => {
        if (!(await editionExists(trx, tenant.edition))) {
          throw new AppError('CAPACITY.EDITION_NOT_FOUND', 'validation', `edition ${tenant.edition} does not exist`);
        }
        const existed = (await trx.selectFrom('capacity_tenants').select('id').where('id', '=', tenant.id).executeTakeFirst()) !== undefined;
        await upsertTenant(trx, dialect, ledger, tenant, now);
        return { created: !existed };
      });
    },

    listEditions: () => listEditions(db),

    async sweepExpired(options = {}) {
      const batchSize = options.batchSize ?? DEFAULT_SWEEP_BATCH;
      let expired = 0;
      let batches = 0;
      for (;;) {
        const now = clock.now().getTime();
        const ended = await inTransaction(db, async (trx) => {
          const rows = await expireDueLeases(trx, dialect, ledger, now, batchSize);
          if (rows.length === 0) return rows;
          await outbox(trx, rows.map(leaseExpiredEvent));
          return rows;
        });
        if (ended.length > 0) batches++;
        expired += ended.length;
        if (ended.length < batchSize) {
          recordSweep(expired);
          return { expired, batches };
        }
      }
    },

    async applySeed(seed) {
      for (const [name, spec] of Object.entries(seed.editions)) await service.putEdition({ name, limits: spec.limits });
      for (const [id, spec] of Object.entries(seed.tenants)) await service.putTenant({ id, edition: spec.edition });
      for (const [id, spec] of Object.entries(seed.pools)) await service.putPool(id, spec);
    },
  };
  return service;
}

