import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { AnyDb, SqlStore } from '../platform/sql/database';
import { LOCK_ALIAS, lockingRows, upsertRow, type SqlDialect } from '../platform/sql/dialect';
import { CAPACITY_KINDS, DEFAULT_MAX_WAIT_SECONDS, isCapacityKind, type CapacityKind, type Edition, type KindLimit, type Pool, type PoolSpec, type Tenant } from './pool';
import { poolScope, quotaScope } from './slots';
import type { CapacityEditionTable, CapacityPoolTable, CapacityTables, CapacityTenantTable } from './capacity.tables';
import type { CapacityLedger } from './capacity-ledger.repository';
import { counterLedger } from './capacity-counters.repository';
import { slotLedger } from './capacity-slots.repository';
import { byTenant, expireDue, lockTenants, type CapacityDb, type CapacityExecutor, type EndedLease } from './lease.repository';

/**
 * Pools, editions and tenants in SQL, and the ledger that counts their units: a row per unit on the server
 * databases, where many hosts grant at once, and a counter per scope on SQLite (see capacity-ledger.repository.ts).
 * Locks follow the order written in platform/sql/transaction.ts.
 */
export function capacityDb(db: AnyDb): CapacityDb {
  return db as CapacityDb;
}

export function ledgerFor(store: SqlStore): CapacityLedger {
  if (store.dialect !== 'sqlite') return slotLedger(store.dialect);
  if (!store.sqlite) throw new Error('a SQLite store made by createSqlStore comes with its synchronous transactions');
  return counterLedger(store.sqlite);
}

function poolRowToPool(row: CapacityPoolTable, used: number): Pool {
  return {
    id: row.id,
    kind: row.kind as CapacityKind,
    target: row.target,
    capacity: Number(row.capacity),
    min: Number(row.min_units),
    max: Number(row.max_units),
    labels: JSON.parse(row.labels) as Record<string, string>,
    ...(row.iac_stack !== null ? { iacStack: row.iac_stack } : {}),
    used,
  };
}

/** Pools of a kind in id order: the candidates of a grant that names no pool. */
export async function poolsOfKind(db: CapacityExecutor, kind: CapacityKind): Promise<Pick<Pool, 'id' | 'labels'>[]> {
  const rows = await db.selectFrom('capacity_pools').select(['id', 'labels']).where('kind', '=', kind).orderBy('id').execute();
  return rows.map((r) => ({ id: r.id, labels: JSON.parse(r.labels) as Record<string, string> }));
}

/** What a scope's rows say, read without locks: for telling a full scope from one whose free rows are in flight. */
export interface TenantLimitView {
  readonly tenant: string;
  readonly edition: string;
  /** The edition's weight in a pool queue's fair share. */
  readonly weight: number;
  readonly kind: CapacityKind;
  readonly used: number;
  readonly limit?: KindLimit;
}

/** A tenant's use and limit for one kind; undefined when the tenant is unknown. */
export async function tenantLimit(db: CapacityExecutor, ledger: CapacityLedger, tenant: string, kind: CapacityKind): Promise<TenantLimitView | undefined> {
  const row = await db
    .selectFrom('capacity_tenants as t')
    .leftJoin('capacity_edition_limits as l', (join) => join.onRef('l.edition', '=', 't.edition').on('l.kind', '=', kind))
    .innerJoin('capacity_editions as e', 'e.name', 't.edition')
    .select(['t.id', 't.edition', 'e.weight', 'l.max_units', 'l.max_ttl_seconds', 'l.max_wait_seconds'])
    .where('t.id', '=', tenant)
    .executeTakeFirst();
  if (!row) return undefined;
  return {
    tenant: row.id,
    edition: row.edition,
    weight: Number(row.weight),
    kind,
    used: (await ledger.use(db, quotaScope(tenant, kind))).held,
    ...(row.max_units !== null && row.max_ttl_seconds !== null
      ? { limit: { maxUnits: Number(row.max_units), maxTtlSeconds: Number(row.max_ttl_seconds), maxWaitSeconds: Number(row.max_wait_seconds) } }
      : {}),
  };
}

export async function listPools(db: CapacityExecutor, ledger: CapacityLedger, kind?: CapacityKind): Promise<Pool[]> {
  let query = db.selectFrom('capacity_pools').selectAll().orderBy('id');
  if (kind !== undefined) query = query.where('kind', '=', kind);
  const rows = await query.execute();
  const held = await ledger.held(db, kind === undefined ? undefined : rows.map((r) => poolScope(r.id)));
  return rows.map((row) => poolRowToPool(row, held.get(poolScope(row.id)) ?? 0));
}

/** The capacity of each kind, all pools of it together. */
export async function capacityByKind(db: CapacityExecutor): Promise<Map<string, number>> {
  const rows = await db.selectFrom('capacity_pools').select(['kind', (eb) => eb.fn.sum<number | string>('capacity').as('capacity')]).groupBy('kind').execute();
  return new Map(rows.map((r) => [r.kind, Number(r.capacity)]));
}

export async function getPool(db: CapacityExecutor, ledger: CapacityLedger, id: string): Promise<Pool | undefined> {
  const row = await db.selectFrom('capacity_pools').selectAll().where('id', '=', id).executeTakeFirst();
  return row ? poolRowToPool(row, (await ledger.use(db, poolScope(id))).held) : undefined;
}

export interface TenantUseRow {
  readonly tenant: string;
  readonly edition: string;
  readonly kind: string;
  readonly used: number;
  readonly maxUnits: number | null;
}

/** Each visible tenant's use of every kind its edition grants or it still holds. */
export async function tenantUse(db: CapacityExecutor, ledger: CapacityLedger, tenants: TenantFilter): Promise<TenantUseRow[]> {
  const rows = await byTenant(
    db
      .selectFrom('capacity_tenants as t')
      .leftJoin('capacity_edition_limits as l', 'l.edition', 't.edition')
      .select(['t.id', 't.edition', 'l.kind', 'l.max_units']),
    't.id',
    tenants,
  )
    .orderBy('t.id')
    .execute();
  const held = await ledger.held(db);
  const byTenantKind = new Map<string, TenantUseRow>();
  for (const r of rows) {
    if (r.kind !== null) {
      const used = held.get(quotaScope(r.id, r.kind)) ?? 0;
      byTenantKind.set(quotaScope(r.id, r.kind), { tenant: r.id, edition: r.edition, kind: r.kind, used, maxUnits: Number(r.max_units) });
    }
  }
  // Units still held of a kind the edition no longer grants (until those leases end).
  const editions = new Map(rows.map((r) => [r.id, r.edition]));
  for (const [tenant, edition] of editions) {
    for (const kind of CAPACITY_KINDS) {
      const scope = quotaScope(tenant, kind);
      const used = held.get(scope);
      if (used !== undefined && !byTenantKind.has(scope)) byTenantKind.set(scope, { tenant, edition, kind, used, maxUnits: null });
    }
  }
  return [...byTenantKind.values()].sort((a, b) => (a.tenant === b.tenant ? (a.kind < b.kind ? -1 : 1) : a.tenant < b.tenant ? -1 : 1));
}

// ---- administration: pools, editions, tenants -----------------------------------------------------------------

/**
 * Creates a pool or changes its definition, then lays out its rows for the new capacity; leased units are never
 * revoked. Returns the pool as it was before (undefined when created). The pool row is locked first (lock order
 * step 1), so two concurrent changes of one pool are ordered.
 */
export async function upsertPool(
  trx: Transaction<CapacityTables>,
  dialect: SqlDialect,
  ledger: CapacityLedger,
  id: string,
  spec: PoolSpec,
  now: number,
): Promise<Pool | undefined> {
  const values = {
    kind: spec.kind,
    target: spec.target,
    capacity: spec.capacity,
    min_units: spec.min ?? 0,
    max_units: spec.max ?? spec.capacity,
    labels: JSON.stringify(spec.labels ?? {}),
    iac_stack: spec.iacStack ?? null,
    updated_at: now,
  };
  const lockPool = () =>
    lockingRows(
      trx.selectFrom(`capacity_pools as ${LOCK_ALIAS.wait}`).selectAll(LOCK_ALIAS.wait).where(`${LOCK_ALIAS.wait}.id`, '=', id),
      dialect,
      'wait',
    ).executeTakeFirst();
  let before = await lockPool();
  if (!before) {
    const inserted = await upsertRow<CapacityPoolTable>(trx, dialect, 'capacity_pools', { values: { id, ...values }, key: ['id'] });
    // Created meanwhile by a concurrent upsert (another host seeding): change it as an update would.
    if (inserted === 0) before = await lockPool();
  }
  const usedBefore = (await ledger.use(trx, poolScope(id))).held;
  if (before) await trx.updateTable('capacity_pools').set(values).where('id', '=', id).execute();
  await ledger.resize(trx, poolScope(id), spec.capacity);
  return before ? poolRowToPool(before, usedBefore) : undefined;
}

/** Creates an edition or replaces its limits (kinds left out get none), then resizes its tenants' quotas. */
export async function upsertEdition(trx: Transaction<CapacityTables>, dialect: SqlDialect, ledger: CapacityLedger, edition: Edition, now: number): Promise<void> {
  const weight = edition.weight ?? 1;
  await upsertRow<CapacityEditionTable>(trx, dialect, 'capacity_editions', { values: { name: edition.name, weight, updated_at: now }, key: ['name'], update: { weight, updated_at: now } });
  await trx.deleteFrom('capacity_edition_limits').where('edition', '=', edition.name).execute();
  const limits = Object.entries(edition.limits).filter((e): e is [CapacityKind, KindLimit] => isCapacityKind(e[0]) && e[1] !== undefined);
  const rows = limits.map(([kind, limit]) => ({
    edition: edition.name,
    kind,
    max_units: limit.maxUnits,
    max_ttl_seconds: limit.maxTtlSeconds,
    max_wait_seconds: limit.maxWaitSeconds ?? DEFAULT_MAX_WAIT_SECONDS,
  }));
  if (rows.length > 0) await trx.insertInto('capacity_edition_limits').values(rows).execute();
  const tenants = (await trx.selectFrom('capacity_tenants').select('id').where('edition', '=', edition.name).orderBy('id').execute()).map((t) => t.id);
  await lockTenants(trx, dialect, tenants);
  for (const id of tenants) await resizeQuotas(trx, ledger, id, edition.limits);
}

export async function tenantExists(db: CapacityExecutor, id: string): Promise<boolean> {
  return (await db.selectFrom('capacity_tenants').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;
}

export async function editionExists(db: CapacityExecutor, name: string): Promise<boolean> {
  return (await db.selectFrom('capacity_editions').select('name').where('name', '=', name).executeTakeFirst()) !== undefined;
}

/** Creates a tenant or changes its edition, then sizes its quotas for the edition's limits. */
export async function upsertTenant(trx: Transaction<CapacityTables>, dialect: SqlDialect, ledger: CapacityLedger, tenant: Tenant, now: number): Promise<void> {
  await upsertRow<CapacityTenantTable>(trx, dialect, 'capacity_tenants', {
    values: { id: tenant.id, edition: tenant.edition, updated_at: now },
    key: ['id'],
    update: { edition: tenant.edition, updated_at: now },
  });
  const [edition] = await listEditions(trx, tenant.edition);
  await resizeQuotas(trx, ledger, tenant.id, edition?.limits ?? {});
}

async function resizeQuotas(
  trx: Transaction<CapacityTables>,
  ledger: CapacityLedger,
  tenant: string,
  limits: Readonly<Partial<Record<CapacityKind, KindLimit>>>,
): Promise<void> {
  for (const kind of CAPACITY_KINDS) {
    await ledger.resize(trx, quotaScope(tenant, kind), limits[kind]?.maxUnits ?? 0);
  }
}

export async function listEditions(db: CapacityExecutor, only?: string): Promise<Edition[]> {
  let names = db.selectFrom('capacity_editions').select(['name', 'weight']).orderBy('name');
  let limitRows = db.selectFrom('capacity_edition_limits').selectAll();
  if (only !== undefined) {
    names = names.where('name', '=', only);
    limitRows = limitRows.where('edition', '=', only);
  }
  const limits = await limitRows.execute();
  return (await names.execute()).map(({ name, weight }) => ({
    name,
    weight: Number(weight),
    limits: Object.fromEntries(
      limits
        .filter((l) => l.edition === name)
        .map((l) => [l.kind, { maxUnits: Number(l.max_units), maxTtlSeconds: Number(l.max_ttl_seconds), maxWaitSeconds: Number(l.max_wait_seconds) }]),
    ),
  }));
}

/**
 * Expires up to `limit` active leases past their expiry and gives their units back, in one transaction; returns
 * them for their `LeaseExpired` events.
 */
export async function expireDueLeases(trx: Transaction<CapacityTables>, dialect: SqlDialect, ledger: CapacityLedger, now: number, limit: number): Promise<EndedLease[]> {
  const ended = await expireDue(trx, dialect, now, limit);
  if (ended.length > 0) await ledger.free(trx, ended);
  return ended;
}

/** The longest lease TTL any edition allows (of a kind, or of any), in seconds; 0 when none does. */
export async function longestLeaseTtlSeconds(db: CapacityExecutor, kind?: CapacityKind): Promise<number> {
  let query = db.selectFrom('capacity_edition_limits').select((eb) => eb.fn.max<number>('max_ttl_seconds').as('longest'));
  if (kind !== undefined) query = query.where('kind', '=', kind);
  const row = await query.executeTakeFirst();
  return Number(row?.longest ?? 0);
}
