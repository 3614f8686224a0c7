import { CompiledQuery, sql, type Compilable, type Kysely, type QueryResult, type Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { AnyDb, SqlDialect } from '../platform/sql/database';
import type { Lease, LeaseState } from './lease';
import { isCapacityKind, type CapacityKind, type Edition, type KindLimit, type Pool, type PoolSpec, type Tenant } from './pool';
import type { CapacityLeaseTable, CapacityPoolTable, CapacityTables } from './capacity.tables';

/** The capacity tables over the product's one Kysely instance. */
export type CapacityDb = Kysely<CapacityTables>;
export type CapacityExecutor = CapacityDb | Transaction<CapacityTables>;

export function capacityDb(db: AnyDb): CapacityDb {
  return db as CapacityDb;
}

/**
 * A hot-path statement built and compiled once per dialect with named placeholders; each execution only fills in
 * the values. Kysely otherwise rebuilds and recompiles the same statement on every call, which on SQLite costs
 * about as much as running it.
 */
class Prepared<P extends string, R> {
  readonly #compiled = new Map<SqlDialect, { sql: string; slots: ({ name: P } | { value: unknown })[] }>();
  constructor(private readonly build: (db: CapacityExecutor, dialect: SqlDialect, p: (name: P) => never) => Compilable<R>) {}

  execute(db: CapacityExecutor, dialect: SqlDialect, values: Readonly<Record<P, unknown>>): Promise<QueryResult<R>> {
    let entry = this.#compiled.get(dialect);
    if (!entry) {
      const marker = '\u0000placeholder:';
      const compiled = this.build(db, dialect, (name) => `${marker}${name}` as never).compile();
      entry = {
        sql: compiled.sql,
        slots: compiled.parameters.map((v) =>
          typeof v === 'string' && v.startsWith(marker) ? { name: v.slice(marker.length) as P } : { value: v },
        ),
      };
      this.#compiled.set(dialect, entry);
    }
    const parameters = entry.slots.map((slot) => ('name' in slot ? values[slot.name] : slot.value));
    return db.executeQuery<R>(CompiledQuery.raw(entry.sql, parameters));
  }
}

// ---- mapping -------------------------------------------------------------------------------------------------

export function leaseRowToLease(row: CapacityLeaseTable): Lease {
  return {
    id: row.id,
    tenant: row.tenant_id,
    kind: row.kind as CapacityKind,
    pool: row.pool_id,
    units: Number(row.units),
    holder: row.holder,
    fencingToken: Number(row.fencing_token),
    grantedAt: new Date(Number(row.granted_at)),
    expiresAt: new Date(Number(row.expires_at)),
    ...(row.renewed_at !== null ? { renewedAt: new Date(Number(row.renewed_at)) } : {}),
    state: row.state as LeaseState,
    ...(row.idempotency_key !== null ? { idempotencyKey: row.idempotency_key } : {}),
  };
}

function poolRowToPool(row: CapacityPoolTable): Pool {
  return {
    id: row.id,
    kind: row.kind as CapacityKind,
    target: row.target,
    capacity: Number(row.capacity),
    min: Number(row.min_units),
    max: Number(row.max_units),
    labels: JSON.parse(row.labels) as Record<string, string>,
    ...(row.iac_stack !== null ? { iacStack: row.iac_stack } : {}),
    used: Number(row.used),
  };
}

/** Affected rows of an UPDATE, whichever way the driver reports them. */
function affected(result: { numUpdatedRows: bigint }): number {
  return Number(result.numUpdatedRows);
}

// ---- the grant path: conditional UPDATEs only ----------------------------------------------------------------

/**
 * Takes `units` from the tenant's quota for the kind, only if they fit under the edition's limit and the TTL is
 * within the edition's maximum; one conditional UPDATE, so concurrent grants can never pass the limit together.
 * Returns false when nothing was taken (unknown tenant, no limit for the kind, over quota or TTL too long).
 */
const reserveTenantUnitsQuery = new Prepared<'tenant' | 'kind' | 'units' | 'ttl', never>((db, _dialect, p) =>
  db
    .updateTable('capacity_tenant_usage')
    .set((eb) => ({ used: eb('used', '+', p('units')) }))
    .where('tenant_id', '=', p('tenant'))
    .where('kind', '=', p('kind'))
    .where((eb) =>
      eb.exists(
        eb
          .selectFrom('capacity_tenants as t')
          .innerJoin('capacity_edition_limits as l', 'l.edition', 't.edition')
          .select(sql.lit(1).as('one'))
          .where('t.id', '=', p('tenant'))
          .where('l.kind', '=', p('kind'))
          .where('l.max_ttl_seconds', '>=', p('ttl'))
          .where(sql<boolean>`capacity_tenant_usage.used + ${p('units')} <= l.max_units`),
      ),
    ),
);

export async function reserveTenantUnits(
  trx: CapacityExecutor,
  dialect: SqlDialect,
  tenant: string,
  kind: CapacityKind,
  units: number,
  ttlSeconds: number,
): Promise<boolean> {
  const result = await reserveTenantUnitsQuery.execute(trx, dialect, { tenant, kind, units, ttl: ttlSeconds });
  return Number(result.numAffectedRows ?? 0n) === 1;
}

export interface PoolGrant {
  readonly pool: string;
  readonly fencingToken: number;
}

/**
 * Takes `units` from one pool if they fit under its capacity, bumping its fencing counter in the same UPDATE.
 * `pool` undefined picks the pool of the kind with the most free units; the condition is checked again on the
 * row actually updated, so a pool filled meanwhile by another grant is left alone (the caller tries the next).
 */
const grantFromNamedPoolQuery = new Prepared<'pool' | 'kind' | 'units', { id: string; fencing_counter: number }>((db, dialect, p) => {
  const query = db
    .updateTable('capacity_pools')
    .set((eb) => ({ used: eb('used', '+', p('units')), fencing_counter: eb('fencing_counter', '+', 1) }))
    .where('id', '=', p('pool'))
    .where('kind', '=', p('kind'))
    .where(sql<boolean>`used + ${p('units')} <= capacity`);
  return dialect === 'mssql' ? query.output(['inserted.id', 'inserted.fencing_counter']) : query.returning(['id', 'fencing_counter']);
});

export async function grantFromPool(
  trx: CapacityExecutor,
  dialect: SqlDialect,
  kind: CapacityKind,
  units: number,
  pool: string | undefined,
): Promise<PoolGrant | undefined> {
  if (pool !== undefined) {
    const { rows } = await grantFromNamedPoolQuery.execute(trx, dialect, { pool, kind, units });
    return rows[0] ? { pool: rows[0].id, fencingToken: Number(rows[0].fencing_counter) } : undefined;
  }
  const query = trx
    .updateTable('capacity_pools')
    .set((eb) => ({ used: eb('used', '+', units), fencing_counter: eb('fencing_counter', '+', 1) }))
    .where('kind', '=', kind)
    .where(sql<boolean>`used + ${units} <= capacity`)
    .where('id', '=', (eb) => {
      const pick = eb
        .selectFrom('capacity_pools as p')
        .select('p.id')
        .where('p.kind', '=', kind)
        .where(sql<boolean>`p.used + ${units} <= p.capacity`)
        .orderBy(sql`p.capacity - p.used`, 'desc')
        .orderBy('p.id');
      return dialect === 'mssql' ? pick.top(1) : pick.limit(1);
    });
  const row =
    dialect === 'mssql'
      ? await query.output(['inserted.id', 'inserted.fencing_counter']).executeTakeFirst()
      : await query.returning(['id', 'fencing_counter']).executeTakeFirst();
  return row ? { pool: row.id, fencingToken: Number(row.fencing_counter) } : undefined;
}

/** Pools of a kind that had room when read, most free first (the fallback when the first pick was taken). */
export async function poolsWithRoom(trx: CapacityExecutor, kind: CapacityKind, units: number): Promise<Pool[]> {
  const rows = await trx
    .selectFrom('capacity_pools')
    .selectAll()
    .where('kind', '=', kind)
    .where(sql<boolean>`used + ${units} <= capacity`)
    .orderBy(sql`capacity - used`, 'desc')
    .orderBy('id')
    .execute();
  return rows.map(poolRowToPool);
}

type LeaseColumn = keyof CapacityLeaseTable;
const insertLeaseQuery = new Prepared<LeaseColumn, never>((db, _dialect, p) =>
  db.insertInto('capacity_leases').values({
    id: p('id'),
    tenant_id: p('tenant_id'),
    kind: p('kind'),
    pool_id: p('pool_id'),
    units: p('units'),
    holder: p('holder'),
    fencing_token: p('fencing_token'),
    ttl_seconds: p('ttl_seconds'),
    granted_at: p('granted_at'),
    expires_at: p('expires_at'),
    renewed_at: p('renewed_at'),
    ended_at: p('ended_at'),
    state: p('state'),
    idempotency_key: p('idempotency_key'),
  }),
);

export async function insertLease(trx: CapacityExecutor, dialect: SqlDialect, lease: Lease, ttlSeconds: number): Promise<void> {
  const row: CapacityLeaseTable = {
    id: lease.id,
    tenant_id: lease.tenant,
    kind: lease.kind,
    pool_id: lease.pool,
    units: lease.units,
    holder: lease.holder,
    fencing_token: lease.fencingToken,
    ttl_seconds: ttlSeconds,
    granted_at: lease.grantedAt.getTime(),
    expires_at: lease.expiresAt.getTime(),
    renewed_at: null,
    ended_at: null,
    state: lease.state,
    idempotency_key: lease.idempotencyKey ?? null,
  };
  await insertLeaseQuery.execute(trx, dialect, row);
}

const findByKeyQuery = new Prepared<'tenant' | 'key', CapacityLeaseTable>((db, _dialect, p) =>
  db.selectFrom('capacity_leases').selectAll().where('tenant_id', '=', p('tenant')).where('idempotency_key', '=', p('key')),
);

export async function findLeaseByIdempotencyKey(
  trx: CapacityExecutor,
  dialect: SqlDialect,
  tenant: string,
  key: string,
): Promise<Lease | undefined> {
  const { rows } = await findByKeyQuery.execute(trx, dialect, { tenant, key });
  return rows[0] ? leaseRowToLease(rows[0]) : undefined;
}

// ---- renew, release, sweep ---------------------------------------------------------------------------------

function byTenant<Q extends { where: (...args: never[]) => Q }>(query: Q, column: string, filter: TenantFilter): Q {
  if (filter.kind === 'all') return query;
  return (query.where as unknown as (c: string, op: string, v: string) => Q)(column, '=', filter.tenant);
}

/**
 * Extends an active, unexpired lease presented with its fencing token. Expiry is judged against `now`, so a lease
 * past its expiry cannot be renewed even before the sweep has marked it. Returns the new expiry, or undefined.
 */
export async function renewActiveLease(
  trx: CapacityExecutor,
  id: string,
  tenants: TenantFilter,
  fencingToken: number,
  now: number,
  ttlSeconds: number | undefined,
): Promise<number | undefined> {
  const query = byTenant(
    trx
      .updateTable('capacity_leases')
      .set((eb) => ({
        renewed_at: now,
        expires_at: ttlSeconds !== undefined ? now + ttlSeconds * 1000 : eb(sql.lit(now), '+', eb('ttl_seconds', '*', 1000)),
        ...(ttlSeconds !== undefined ? { ttl_seconds: ttlSeconds } : {}),
      }))
      .where('id', '=', id)
      .where('state', '=', 'active')
      .where('expires_at', '>', now)
      .where('fencing_token', '=', fencingToken),
    'tenant_id',
    tenants,
  );
  const result = await query.executeTakeFirst();
  if (affected(result) !== 1) return undefined;
  if (ttlSeconds !== undefined) return now + ttlSeconds * 1000;
  const row = await trx.selectFrom('capacity_leases').select('expires_at').where('id', '=', id).executeTakeFirstOrThrow();
  return Number(row.expires_at);
}

/** What an ended lease held, for returning its units and for its `LeaseExpired` event. */
export type EndedLease = Pick<Lease, 'id' | 'tenant' | 'kind' | 'pool' | 'units' | 'holder' | 'fencingToken'> & {
  /** Epoch ms. */
  readonly expiresAt: number;
};

/** Marks an active, unexpired lease released; returns what it held, or undefined when it was not in that state. */
export async function releaseActiveLease(
  trx: CapacityExecutor,
  dialect: SqlDialect,
  id: string,
  tenants: TenantFilter,
  now: number,
): Promise<EndedLease | undefined> {
  const query = tenants.kind === 'one' ? releaseOwnLeaseQuery : releaseAnyLeaseQuery;
  const { rows } = await query.execute(trx, dialect, { id, now, tenant: tenants.kind === 'one' ? tenants.tenant : null });
  return rows.map(endedRowToEndedLease)[0];
}

const ENDED_COLUMNS = ['id', 'tenant_id', 'kind', 'pool_id', 'units', 'holder', 'fencing_token', 'expires_at'] as const;
type EndedRow = Pick<CapacityLeaseTable, (typeof ENDED_COLUMNS)[number]>;

function releaseQuery(byTenant: boolean) {
  return new Prepared<'id' | 'now' | 'tenant', EndedRow>((db, dialect, p) => {
    let query = db
      .updateTable('capacity_leases')
      .set({ state: 'released', ended_at: p('now') })
      .where('id', '=', p('id'))
      .where('state', '=', 'active')
      .where('expires_at', '>', p('now'));
    if (byTenant) query = query.where('tenant_id', '=', p('tenant'));
    return dialect === 'mssql'
      ? query.output(ENDED_COLUMNS.map((c) => `inserted.${c}` as const))
      : query.returning([...ENDED_COLUMNS]);
  });
}
const releaseOwnLeaseQuery = releaseQuery(true);
const releaseAnyLeaseQuery = releaseQuery(false);

function endedRowToEndedLease(r: EndedRow): EndedLease {
  return {
    id: r.id,
    tenant: r.tenant_id,
    kind: r.kind as CapacityKind,
    pool: r.pool_id,
    units: Number(r.units),
    holder: r.holder,
    fencingToken: Number(r.fencing_token),
    expiresAt: Number(r.expires_at),
  };
}

/**
 * Moves active leases to `released` (only before their expiry) or `expired` (only after it) and returns what they
 * held. The state is re-checked by the UPDATE itself, so a lease ends once and its units are returned once.
 */
async function endLeases(
  trx: CapacityExecutor,
  dialect: SqlDialect,
  ids: readonly string[],
  to: 'released' | 'expired',
  now: number,
  tenants: TenantFilter,
): Promise<EndedLease[]> {
  let query = trx
    .updateTable('capacity_leases')
    .set({ state: to, ended_at: now })
    .where('id', 'in', ids)
    .where('state', '=', 'active')
    .where('expires_at', to === 'released' ? '>' : '<=', now);
  if (tenants.kind === 'one') query = query.where('tenant_id', '=', tenants.tenant);
  const rows =
    dialect === 'mssql'
      ? await query.output(ENDED_COLUMNS.map((c) => `inserted.${c}` as const)).execute()
      : await query.returning([...ENDED_COLUMNS]).execute();
  return rows.map(endedRowToEndedLease);
}

const returnPoolUnitsQuery = new Prepared<'pool' | 'units', never>((db, _dialect, p) =>
  db
    .updateTable('capacity_pools')
    .set((eb) => ({ used: eb('used', '-', p('units')) }))
    .where('id', '=', p('pool')),
);
const returnTenantUnitsQuery = new Prepared<'tenant' | 'kind' | 'units', never>((db, _dialect, p) =>
  db
    .updateTable('capacity_tenant_usage')
    .set((eb) => ({ used: eb('used', '-', p('units')) }))
    .where('tenant_id', '=', p('tenant'))
    .where('kind', '=', p('kind')),
);

/** Gives units back to pools and tenants; `ended` may hold many leases of the same pool or tenant (the sweep). */
export async function returnUnits(trx: CapacityExecutor, dialect: SqlDialect, ended: readonly EndedLease[]): Promise<void> {
  const perPool = new Map<string, number>();
  const perTenantKind = new Map<string, { tenant: string; kind: string; units: number }>();
  for (const lease of ended) {
    perPool.set(lease.pool, (perPool.get(lease.pool) ?? 0) + lease.units);
    const key = `${lease.tenant}\u0000${lease.kind}`;
    const entry = perTenantKind.get(key) ?? { tenant: lease.tenant, kind: lease.kind, units: 0 };
    entry.units += lease.units;
    perTenantKind.set(key, entry);
  }
  // A stable order keeps two sweepers (or a sweep and a release) from locking the same rows in opposite orders.
  for (const [pool, units] of [...perPool].sort(([a], [b]) => (a < b ? -1 : 1))) {
    await returnPoolUnitsQuery.execute(trx, dialect, { pool, units });
  }
  for (const { tenant, kind, units } of [...perTenantKind.values()].sort((a, b) =>
    a.tenant === b.tenant ? (a.kind < b.kind ? -1 : 1) : a.tenant < b.tenant ? -1 : 1,
  )) {
    await returnTenantUnitsQuery.execute(trx, dialect, { tenant, kind, units });
  }
}

/**
 * Marks up to `limit` active leases past their expiry as expired and returns them. Reads through the
 * (state, expires_at) index, so the cost follows the number of expired leases. The UPDATE re-checks the state,
 * so two sweepers never expire (and free) the same lease twice.
 */
export async function expireDueLeases(trx: CapacityExecutor, dialect: SqlDialect, now: number, limit: number): Promise<EndedLease[]> {
  let due = trx
    .selectFrom('capacity_leases')
    .select('id')
    .where('state', '=', 'active')
    .where('expires_at', '<=', now)
    .orderBy('expires_at');
  due = dialect === 'mssql' ? due.top(limit) : due.limit(limit);
  const ids = (await due.execute()).map((r) => r.id);
  if (ids.length === 0) return [];
  return endLeases(trx, dialect, ids, 'expired', now, { kind: 'all' });
}

// ---- reads ------------------------------------------------------------------------------------------------------

export async function getLease(db: CapacityExecutor, id: string, tenants: TenantFilter): Promise<Lease | undefined> {
  const row = await byTenant(db.selectFrom('capacity_leases').selectAll().where('id', '=', id), 'tenant_id', tenants).executeTakeFirst();
  return row ? leaseRowToLease(row) : undefined;
}

export interface LeaseListQuery {
  readonly holder?: string;
  readonly state?: LeaseState;
  /** Only ids after this one (the cursor). */
  readonly after?: string;
  readonly limit: number;
  readonly now: number;
}

export async function listLeases(db: CapacityExecutor, dialect: SqlDialect, tenants: TenantFilter, q: LeaseListQuery): Promise<Lease[]> {
  let query = byTenant(db.selectFrom('capacity_leases').selectAll(), 'tenant_id', tenants);
  if (q.holder !== undefined) query = query.where('holder', '=', q.holder);
  if (q.after !== undefined) query = query.where('id', '>', q.after);
  // The state a client sees is the effective one: an active lease past its expiry is expired.
  if (q.state === 'active') query = query.where('state', '=', 'active').where('expires_at', '>', q.now);
  else if (q.state === 'released') query = query.where('state', '=', 'released');
  else if (q.state === 'expired') {
    query = query.where((eb) =>
      eb.or([eb('state', '=', 'expired'), eb.and([eb('state', '=', 'active'), eb('expires_at', '<=', q.now)])]),
    );
  }
  query = query.orderBy('id');
  query = dialect === 'mssql' ? query.top(q.limit) : query.limit(q.limit);
  return (await query.execute()).map(leaseRowToLease);
}

export interface TenantLimitView {
  readonly tenant: string;
  readonly edition: string;
  readonly kind: CapacityKind;
  readonly used: number;
  readonly limit?: KindLimit;
}

/** A tenant's use and limit for one kind; undefined when the tenant is unknown. */
export async function tenantLimit(db: CapacityExecutor, tenant: string, kind: CapacityKind): Promise<TenantLimitView | undefined> {
  const row = await db
    .selectFrom('capacity_tenants as t')
    .leftJoin('capacity_edition_limits as l', (join) => join.onRef('l.edition', '=', 't.edition').on('l.kind', '=', kind))
    .leftJoin('capacity_tenant_usage as u', (join) => join.onRef('u.tenant_id', '=', 't.id').on('u.kind', '=', kind))
    .select(['t.id', 't.edition', 'l.max_units', 'l.max_ttl_seconds', 'u.used'])
    .where('t.id', '=', tenant)
    .executeTakeFirst();
  if (!row) return undefined;
  return {
    tenant: row.id,
    edition: row.edition,
    kind,
    used: Number(row.used ?? 0),
    ...(row.max_units !== null && row.max_ttl_seconds !== null
      ? { limit: { maxUnits: Number(row.max_units), maxTtlSeconds: Number(row.max_ttl_seconds) } }
      : {}),
  };
}

/**
 * Soonest expiry among active leases of a tenant and kind, or of a pool (or all pools) of a kind. Walks the
 * (state, expires_at) index in order and stops at the first match; only refusals ask.
 */
export async function soonestExpiry(
  db: CapacityExecutor,
  dialect: SqlDialect,
  scope: { tenant: string; kind: CapacityKind } | { kind: CapacityKind; pool?: string },
): Promise<number | undefined> {
  let query = db
    .selectFrom('capacity_leases')
    .select('expires_at')
    .where('state', '=', 'active')
    .where('kind', '=', scope.kind)
    .orderBy('expires_at');
  if ('tenant' in scope) query = query.where('tenant_id', '=', scope.tenant);
  else if (scope.pool !== undefined) query = query.where('pool_id', '=', scope.pool);
  query = dialect === 'mssql' ? query.top(1) : query.limit(1);
  const row = await query.executeTakeFirst();
  return row === undefined ? undefined : Number(row.expires_at);
}

export async function poolUse(db: CapacityExecutor, kind: CapacityKind, pool: string | undefined): Promise<{ used: number; capacity: number }> {
  let query = db
    .selectFrom('capacity_pools')
    .select((eb) => [eb.fn.coalesce(eb.fn.sum<number>('used'), sql.lit(0)).as('used'), eb.fn.coalesce(eb.fn.sum<number>('capacity'), sql.lit(0)).as('capacity')])
    .where('kind', '=', kind);
  if (pool !== undefined) query = query.where('id', '=', pool);
  const row = await query.executeTakeFirst();
  return { used: Number(row?.used ?? 0), capacity: Number(row?.capacity ?? 0) };
}

export async function listPools(db: CapacityExecutor): Promise<Pool[]> {
  return (await db.selectFrom('capacity_pools').selectAll().orderBy('id').execute()).map(poolRowToPool);
}

export async function getPool(db: CapacityExecutor, id: string): Promise<Pool | undefined> {
  const row = await db.selectFrom('capacity_pools').selectAll().where('id', '=', id).executeTakeFirst();
  return row ? poolRowToPool(row) : undefined;
}

export interface TenantUseRow {
  readonly tenant: string;
  readonly edition: string;
  readonly kind: string;
  readonly used: number;
  readonly maxUnits: number | null;
}

export async function tenantUse(db: CapacityExecutor, tenants: TenantFilter): Promise<TenantUseRow[]> {
  const rows = await byTenant(
    db
      .selectFrom('capacity_tenants as t')
      .innerJoin('capacity_tenant_usage as u', 'u.tenant_id', 't.id')
      .leftJoin('capacity_edition_limits as l', (join) => join.onRef('l.edition', '=', 't.edition').onRef('l.kind', '=', 'u.kind'))
      .select(['t.id', 't.edition', 'u.kind', 'u.used', 'l.max_units']),
    't.id',
    tenants,
  )
    .orderBy('t.id')
    .orderBy('u.kind')
    .execute();
  return rows.map((r) => ({
    tenant: r.id,
    edition: r.edition,
    kind: r.kind,
    used: Number(r.used),
    maxUnits: r.max_units === null ? null : Number(r.max_units),
  }));
}

// ---- administration: pools, editions, tenants -----------------------------------------------------------------

/**
 * Creates a pool or changes its definition, never its `used` units or fencing counter. Returns the pool as it
 * was before (undefined when created). On PostgreSQL the row is locked first so two concurrent changes are ordered.
 */
export async function upsertPool(
  trx: Transaction<CapacityTables>,
  dialect: SqlDialect,
  id: string,
  spec: PoolSpec,
  now: number,
): Promise<Pool | undefined> {
  let read = trx.selectFrom('capacity_pools').selectAll().where('id', '=', id);
  if (dialect === 'postgres') read = read.forUpdate();
  const before = await read.executeTakeFirst();
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
  if (before) {
    await trx.updateTable('capacity_pools').set(values).where('id', '=', id).execute();
    return poolRowToPool(before);
  }
  const inserted = await trx
    .insertInto('capacity_pools')
    .values({ id, ...values, used: 0, fencing_counter: 0 })
    .onConflict((oc) => oc.column('id').doNothing())
    .executeTakeFirst();
  if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 0) {
    // Created meanwhile by a concurrent upsert (another host seeding): change it as an update would.
    const created = await trx.selectFrom('capacity_pools').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    await trx.updateTable('capacity_pools').set(values).where('id', '=', id).execute();
    return poolRowToPool(created);
  }
  return undefined;
}

/** Creates an edition or replaces its limits (kinds left out get none). */
export async function upsertEdition(trx: Transaction<CapacityTables>, edition: Edition, now: number): Promise<void> {
  await trx
    .insertInto('capacity_editions')
    .values({ name: edition.name, updated_at: now })
    .onConflict((oc) => oc.column('name').doUpdateSet({ updated_at: now }))
    .execute();
  await trx.deleteFrom('capacity_edition_limits').where('edition', '=', edition.name).execute();
  const rows = Object.entries(edition.limits)
    .filter((e): e is [CapacityKind, KindLimit] => isCapacityKind(e[0]) && e[1] !== undefined)
    .map(([kind, limit]) => ({ edition: edition.name, kind, max_units: limit.maxUnits, max_ttl_seconds: limit.maxTtlSeconds }));
  if (rows.length > 0) await trx.insertInto('capacity_edition_limits').values(rows).execute();
}

export async function editionExists(db: CapacityExecutor, name: string): Promise<boolean> {
  return (await db.selectFrom('capacity_editions').select('name').where('name', '=', name).executeTakeFirst()) !== undefined;
}

/** Creates a tenant or changes its edition; its usage rows (one per kind) exist from then on. */
export async function upsertTenant(trx: Transaction<CapacityTables>, tenant: Tenant, kinds: readonly CapacityKind[], now: number): Promise<void> {
  await trx
    .insertInto('capacity_tenants')
    .values({ id: tenant.id, edition: tenant.edition, updated_at: now })
    .onConflict((oc) => oc.column('id').doUpdateSet({ edition: tenant.edition, updated_at: now }))
    .execute();
  await trx
    .insertInto('capacity_tenant_usage')
    .values(kinds.map((kind) => ({ tenant_id: tenant.id, kind, used: 0 })))
    .onConflict((oc) => oc.columns(['tenant_id', 'kind']).doNothing())
    .execute();
}

export async function listEditions(db: CapacityExecutor): Promise<Edition[]> {
  const names = await db.selectFrom('capacity_editions').select('name').orderBy('name').execute();
  const limits = await db.selectFrom('capacity_edition_limits').selectAll().execute();
  return names.map(({ name }) => ({
    name,
    limits: Object.fromEntries(
      limits
        .filter((l) => l.edition === name)
        .map((l) => [l.kind, { maxUnits: Number(l.max_units), maxTtlSeconds: Number(l.max_ttl_seconds) }]),
    ),
  }));
}
