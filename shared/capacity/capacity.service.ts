import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { appendToOutbox } from '../platform/bus/outbox';
import type { NewEvent } from '../platform/bus/events';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { SqlStore } from '../platform/sql/database';
import type { Clock, Ids } from '../platform/time/clock';
import type { CapacitySeed } from './capacity.seed';
import {
  capacityDb,
  editionExists,
  expireDueLeases,
  findLeaseByIdempotencyKey,
  getLease,
  getPool,
  grantFromPool,
  insertLease,
  listEditions,
  listLeases,
  listPools,
  poolUse,
  poolsWithRoom,
  releaseActiveLease,
  renewActiveLease,
  reserveTenantUnits,
  returnUnits,
  soonestExpiry,
  tenantLimit,
  tenantUse,
  upsertEdition,
  upsertPool,
  upsertTenant,
  type CapacityExecutor,
  type EndedLease,
  type PoolGrant,
} from './capacity.repository';
import type { CapacityTables } from './capacity.tables';
import { decodeCursor, effectiveState, encodeCursor, retryAfterSeconds, ttlProblem, type Lease, type LeaseRequest, type LeaseState } from './lease';
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
  renew(tenants: TenantFilter, id: string, fencingToken: number, ttlSeconds?: number): Promise<Lease>;
  release(tenants: TenantFilter, id: string): Promise<ReleaseResult>;
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

export interface CapacityServiceOptions {
  readonly store: SqlStore;
  readonly clock: Clock;
  readonly ids: Ids;
}

const DEFAULT_SWEEP_BATCH = 500;

export function createCapacityService({ store, clock, ids }: CapacityServiceOptions): CapacityService {
  const db = capacityDb(store.db);
  const dialect = store.dialect;
  const outbox = (trx: Transaction<CapacityTables>, events: readonly NewEvent[]) =>
    appendToOutbox(trx, events, clock, ids);

  /** One transaction: idempotency lookup, the tenant's quota, a pool's room, the lease row. */
  async function acquireOnce(request: LeaseRequest, now: number): Promise<AcquireResult> {
    return db.transaction().execute(async (trx) => {
      if (request.idempotencyKey !== undefined) {
        const existing = await findLeaseByIdempotencyKey(trx, dialect, request.tenant, request.idempotencyKey);
        if (existing) return { outcome: 'existing', lease: existing };
      }
      if (!(await reserveTenantUnits(trx, dialect, request.tenant, request.kind, request.units, request.ttlSeconds))) {
        throw await quotaRefusal(trx, request, now);
      }
      const grant = await grantSomewhere(trx, request);
      if (!grant) throw await exhaustedRefusal(trx, request, now);
      const lease: Lease = {
        id: ids.next('lease'),
        tenant: request.tenant,
        kind: request.kind,
        pool: grant.pool,
        units: request.units,
        holder: request.holder,
        fencingToken: grant.fencingToken,
        grantedAt: new Date(now),
        expiresAt: new Date(now + request.ttlSeconds * 1000),
        state: 'active',
        ...(request.idempotencyKey !== undefined ? { idempotencyKey: request.idempotencyKey } : {}),
      };
      await insertLease(trx, dialect, lease, request.ttlSeconds);
      return { outcome: 'granted', lease };
    });
  }

  async function grantSomewhere(trx: CapacityExecutor, request: LeaseRequest): Promise<PoolGrant | undefined> {
    if (request.pool !== undefined) return grantFromPool(trx, dialect, request.kind, request.units, request.pool);
    if (request.labels === undefined) {
      const first = await grantFromPool(trx, dialect, request.kind, request.units, undefined);
      if (first) return first;
    }
    // Labels, or the first pick was filled by a concurrent grant: try each pool that had room, in turn.
    for (const pool of await poolsWithRoom(trx, request.kind, request.units)) {
      if (!poolMatchesLabels(pool, request.labels)) continue;
      const grant = await grantFromPool(trx, dialect, request.kind, request.units, pool.id);
      if (grant) return grant;
    }
    return undefined;
  }

  /** Why the tenant's reservation failed; read only on this (slow) path. */
  async function quotaRefusal(trx: CapacityExecutor, request: LeaseRequest, now: number): Promise<AppError> {
    const view = await tenantLimit(trx, request.tenant, request.kind);
    if (!view) return new AppError('CAPACITY.TENANT_UNKNOWN', 'not-found', `tenant ${request.tenant} has no capacity edition`);
    const problem = ttlProblem(request.ttlSeconds, view.limit);
    if (!view.limit) {
      return new AppError('CAPACITY.KIND_NOT_IN_EDITION', 'forbidden', problem ?? 'the edition grants no capacity of this kind', {
        edition: view.edition,
        kind: request.kind,
      });
    }
    if (problem) {
      return new AppError('CAPACITY.TTL_TOO_LONG', 'validation', problem, {
        edition: view.edition,
        kind: request.kind,
        maxTtlSeconds: view.limit.maxTtlSeconds,
      });
    }
    const soonest = await soonestExpiry(trx, dialect, { tenant: request.tenant, kind: request.kind });
    return new AppError('CAPACITY.QUOTA_EXCEEDED', 'limit', `the ${view.edition} edition allows ${view.limit.maxUnits} ${request.kind} units at once`, {
      kind: request.kind,
      edition: view.edition,
      used: view.used,
      limit: view.limit.maxUnits,
      requested: request.units,
      retryAfterSeconds: retryAfterSeconds(soonest === undefined ? undefined : new Date(soonest), new Date(now)),
    });
  }

  async function exhaustedRefusal(trx: CapacityExecutor, request: LeaseRequest, now: number): Promise<AppError> {
    if (request.pool !== undefined) {
      const pool = await getPool(trx, request.pool);
      if (!pool) return new AppError('CAPACITY.POOL_NOT_FOUND', 'not-found', `pool ${request.pool} does not exist`);
      if (pool.kind !== request.kind) {
        return new AppError('CAPACITY.POOL_KIND_MISMATCH', 'validation', `pool ${pool.id} holds ${pool.kind} units, not ${request.kind}`);
      }
    }
    const use = await poolUse(trx, request.kind, request.pool);
    const soonest = await soonestExpiry(trx, dialect, { kind: request.kind, ...(request.pool !== undefined ? { pool: request.pool } : {}) });
    return new AppError('CAPACITY.EXHAUSTED', 'limit', `no ${request.kind} pool has ${request.units} free units`, {
      kind: request.kind,
      ...(request.pool !== undefined ? { pool: request.pool } : {}),
      ...(request.labels !== undefined ? { labels: request.labels } : {}),
      used: use.used,
      limit: use.capacity,
      requested: request.units,
      retryAfterSeconds: retryAfterSeconds(soonest === undefined ? undefined : new Date(soonest), new Date(now)),
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
        tenant: lease.tenant,
        kind: lease.kind,
        pool: lease.pool,
        units: lease.units,
        holder: lease.holder,
        fencingToken: lease.fencingToken,
        expiresAt: new Date(lease.expiresAt).toISOString(),
      },
    };
  }

  async function notFoundOrGone(tenants: TenantFilter, id: string): Promise<{ lease: Lease; state: LeaseState }> {
    const lease = await getLease(db, id, tenants);
    // Another tenant's lease is indistinguishable from a missing one.
    if (!lease) throw new AppError('CAPACITY.LEASE_NOT_FOUND', 'not-found', `lease ${id} does not exist`);
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
      const now = clock.now().getTime();
      try {
        return await acquireOnce(request, now);
      } catch (thrown) {
        const error = ensureError(thrown);
        // Two concurrent requests with one idempotency key: the loser's insert hits the unique index and rolls back
        // whole (its reservation included); it answers with the winner's lease.
        if (request.idempotencyKey !== undefined && isUniqueViolation(error)) {
          const existing = await findLeaseByIdempotencyKey(db, dialect, request.tenant, request.idempotencyKey);
          if (existing) return { outcome: 'existing', lease: existing };
        }
        throw error;
      }
    },

    async renew(tenants, id, fencingToken, ttlSeconds) {
      const now = clock.now().getTime();
      if (ttlSeconds !== undefined) {
        const { lease } = await notFoundOrGone(tenants, id);
        const view = await tenantLimit(db, lease.tenant, lease.kind);
        const problem = ttlProblem(ttlSeconds, view?.limit);
        if (problem) {
          throw new AppError('CAPACITY.TTL_TOO_LONG', 'validation', problem, {
            kind: lease.kind,
            ...(view?.limit ? { maxTtlSeconds: view.limit.maxTtlSeconds } : {}),
          });
        }
      }
      const expiresAt = await db.transaction().execute((trx) => renewActiveLease(trx, id, tenants, fencingToken, now, ttlSeconds));
      const { lease, state } = await notFoundOrGone(tenants, id);
      if (expiresAt !== undefined) return lease;
      if (state !== 'active') {
        throw new AppError('CAPACITY.LEASE_GONE', 'gone', `lease ${id} is ${state}`, { state });
      }
      throw new AppError('CAPACITY.FENCING_MISMATCH', 'conflict', 'the fencing token is not the one this lease was granted with', {
        presented: fencingToken,
      });
    },

    async release(tenants, id) {
      const now = clock.now().getTime();
      const released = await db.transaction().execute(async (trx) => {
        const ended = await releaseActiveLease(trx, dialect, id, tenants, now);
        if (ended) await returnUnits(trx, dialect, [ended]);
        return ended !== undefined;
      });
      if (released) return { outcome: 'released' };
      const { state } = await notFoundOrGone(tenants, id);
      if (state === 'released') return { outcome: 'already-released' };
      throw new AppError('CAPACITY.LEASE_GONE', 'gone', `lease ${id} is ${state}`, { state });
    },

    async getLease(tenants, id) {
      return (await notFoundOrGone(tenants, id)).lease;
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
      const pools = await listPools(db);
      const kinds = CAPACITY_KINDS.map((kind) => {
        const ofKind = pools.filter((p) => p.kind === kind);
        const capacity = ofKind.reduce((sum, p) => sum + p.capacity, 0);
        const used = ofKind.reduce((sum, p) => sum + p.used, 0);
        return { kind, capacity, used, free: ofKind.reduce((sum, p) => sum + freeUnits(p), 0) };
      });
      const byTenant = new Map<string, { tenant: string; edition: string; usage: { kind: string; used: number; limit: number | null }[] }>();
      for (const row of await tenantUse(db, tenants)) {
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
      return db.transaction().execute(async (trx) => {
        const before = await upsertPool(trx, dialect, id, spec, now);
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
        const pool = await getPool(trx, id);
        if (!pool) throw new Error(`pool ${id} vanished inside its own transaction`);
        return { created: before === undefined, pool, resizeRequested };
      });
    },

    async putEdition(edition) {
      const now = clock.now().getTime();
      return db.transaction().execute(async (trx) => {
        const existed = await editionExists(trx, edition.name);
        await upsertEdition(trx, edition, now);
        return { created: !existed };
      });
    },

    async putTenant(tenant) {
      const now = clock.now().getTime();
      return db.transaction().execute(async (trx) => {
        if (!(await editionExists(trx, tenant.edition))) {
          throw new AppError('CAPACITY.EDITION_NOT_FOUND', 'validation', `edition ${tenant.edition} does not exist`);
        }
        const existed = (await trx.selectFrom('capacity_tenants').select('id').where('id', '=', tenant.id).executeTakeFirst()) !== undefined;
        await upsertTenant(trx, tenant, CAPACITY_KINDS, now);
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
        const ended = await db.transaction().execute(async (trx) => {
          const rows = await expireDueLeases(trx, dialect, now, batchSize);
          if (rows.length === 0) return rows;
          await returnUnits(trx, dialect, rows);
          await outbox(trx, rows.map(leaseExpiredEvent));
          return rows;
        });
        if (ended.length > 0) batches++;
        expired += ended.length;
        if (ended.length < batchSize) return { expired, batches };
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

/** A unique-index violation on any of the three dialects. */
function isUniqueViolation(error: Error): boolean {
  const { code, number } = error as { code?: unknown; number?: unknown };
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || number === 2601 || number === 2627;
}
