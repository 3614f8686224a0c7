import {
  CompiledQuery,
  sql,
  type Compilable,
  type Expression,
  type ExpressionBuilder,
  type Kysely,
  type QueryCreator,
  type QueryResult,
  type SqlBool,
  type Transaction,
} from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { firstRows, LOCK_ALIAS, lockingRows, returningColumns, type SqlDialect } from '../platform/sql/dialect';
import type { AnyDb } from '../platform/sql/database';
import type { Lease, LeaseState } from './lease';
import { CAPACITY_KINDS, isCapacityKind, type CapacityKind, type Edition, type KindLimit, type Pool, type PoolSpec, type Tenant } from './pool';
import { FREE_SLOT, planSlotLayout, poolScope, quotaScope, type SlotLayoutChange } from './slots';
import type { CapacityLeaseTable, CapacityPoolTable, CapacitySlotTable, CapacityTables } from './capacity.tables';

/**
 * Capacity in SQL. Units are rows (`capacity_slots`, see slots.ts): a grant claims free rows of the tenant's quota
 * scope and of a pool scope with SKIP LOCKED (READPAST on Azure SQL), so concurrent grants on one pool or tenant
 * take different rows and never wait for each other; a release or the sweep frees the rows its leases hold. No
 * statement on the grant or release path updates a row that every request updates. Fencing tokens come from one
 * sequence, drawn while the grant holds its rows: a grant that starts after another finished gets a larger token.
 * Locks follow the order written in platform/sql/transaction.ts.
 */
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

/** One Prepared statement per value of a number that T-SQL's TOP takes only as a literal (units, batch sizes). */
function preparedPer<P extends string, R>(build: (n: number) => Prepared<P, R>): (n: number) => Prepared<P, R> {
  const byN = new Map<number, Prepared<P, R>>();
  return (n) => {
    let prepared = byN.get(n);
    if (!prepared) byN.set(n, (prepared = build(n)));
    return prepared;
  };
}

function affected(result: QueryResult<unknown>): number {
  return Number(result.numAffectedRows ?? 0n);
}

// ---- mapping -------------------------------------------------------------------------------------------------

const LEASE_COLUMNS = [
  'id',
  'tenant_id',
  'kind',
  'pool_id',
  'units',
  'holder',
  'fencing_token',
  'ttl_seconds',
  'granted_at',
  'expires_at',
  'renewed_at',
  'ended_at',
  'state',
  'idempotency_key',
  'request_digest',
] as const satisfies readonly (keyof CapacityLeaseTable)[];

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

// ---- the grant path ----------------------------------------------------------------------------------------------

type PickBuilder = ExpressionBuilder<CapacityTables & { claimable: CapacitySlotTable }, 'claimable'>;

/**
 * Selects (and locks, skipping rows other transactions hold) up to `units` free rows of a scope. Nothing is picked
 * while the scope has a retiring row (it is at or above its capacity), nor unless `allowed` holds.
 */
function pickFreeSlots(qb: QueryCreator<CapacityTables>, dialect: SqlDialect, units: number, scope: unknown, allowed: (w: PickBuilder) => Expression<SqlBool>) {
  return lockingRows(
    firstRows(
      qb
        .selectFrom(`capacity_slots as ${LOCK_ALIAS.skip}`)
        .select(`${LOCK_ALIAS.skip}.slot`)
        .where(`${LOCK_ALIAS.skip}.scope`, '=', scope as string)
        .where(`${LOCK_ALIAS.skip}.lease_id`, '=', FREE_SLOT)
        .where((w) => w.not(w.exists(w.selectFrom('capacity_slots as r').select('r.slot').where('r.scope', '=', scope as string).where('r.retiring', '=', 1))))
        .where(allowed),
      dialect,
      units,
    ),
    dialect,
    'skip',
  );
}

/** A quota scope grants when the tenant's edition grants the kind for this long. */
const quotaAllows = (tenant: unknown, kind: unknown, ttl: unknown) => (w: PickBuilder) =>
  w.exists(
    w
      .selectFrom('capacity_tenants as t')
      .innerJoin('capacity_edition_limits as l', 'l.edition', 't.edition')
      .select('t.id')
      .where('t.id', '=', tenant as string)
      .where('l.kind', '=', kind as string)
      .where('l.max_ttl_seconds', '>=', ttl as number),
  );

/** A pool scope grants units of the pool's kind only. */
const poolAllows = (pool: unknown, kind: unknown) => (w: PickBuilder) =>
  w.exists(w.selectFrom('capacity_pools as pk').select('pk.id').where('pk.id', '=', pool as string).where('pk.kind', '=', kind as string));

/**
 * Claims free rows of a scope for a lease. The rows are picked once, in a CTE: as `slot IN (subquery)`, PostgreSQL
 * re-runs the subquery per row updated, and each run skips the rows the last one just claimed, so it would claim
 * the whole scope.
 */
function claimSlotsQuery<P extends string>(units: number, allowed: (p: (name: P | 'scope') => never) => (w: PickBuilder) => Expression<SqlBool>) {
  return new Prepared<P | 'scope' | 'lease', never>((db, dialect, p) =>
    db
      // Materialized on PostgreSQL, so it runs once.
      .with(
        (cte) => (dialect === 'postgres' ? cte('picked').materialized() : cte('picked')),
        (qb) => pickFreeSlots(qb, dialect, units, p('scope'), allowed(p)),
      )
      .updateTable('capacity_slots')
      .set({ lease_id: p('lease') })
      .from('picked')
      .where('scope', '=', p('scope'))
      .where('lease_id', '=', FREE_SLOT)
      .whereRef('capacity_slots.slot', '=', 'picked.slot'),
  );
}

const claimQuotaQuery = preparedPer((units) => claimSlotsQuery<'tenant' | 'kind' | 'ttl'>(units, (p) => quotaAllows(p('tenant'), p('kind'), p('ttl'))));
const claimPoolQuery = preparedPer((units) => claimSlotsQuery<'pool' | 'kind'>(units, (p) => poolAllows(p('pool'), p('kind'))));

interface ClaimRequest {
  readonly lease: string;
  readonly tenant: string;
  readonly kind: CapacityKind;
  readonly units: number;
  readonly ttlSeconds: number;
}

/** Claims a tenant's quota rows for a lease; true when all `units` were claimed. */
async function claimQuota(trx: CapacityExecutor, dialect: SqlDialect, request: ClaimRequest): Promise<boolean> {
  const result = await claimQuotaQuery(request.units).execute(trx, dialect, {
    scope: quotaScope(request.tenant, request.kind),
    lease: request.lease,
    tenant: request.tenant,
    kind: request.kind,
    ttl: request.ttlSeconds,
  });
  return affected(result) === request.units;
}

/** Claims a pool's rows for a lease; true when all `units` were claimed. */
async function claimPool(trx: CapacityExecutor, dialect: SqlDialect, request: ClaimRequest, pool: string): Promise<boolean> {
  const result = await claimPoolQuery(request.units).execute(trx, dialect, { scope: poolScope(pool), lease: request.lease, kind: request.kind, pool });
  return affected(result) === request.units;
}

/**
 * The next fencing token of a pool, drawn inside the lease INSERT: a sequence on PostgreSQL and Azure SQL (no row
 * to queue on); on SQLite, whose writers take turns, the pool's highest token plus one.
 */
function nextFencingToken(dialect: SqlDialect, pool: unknown) {
  switch (dialect) {
    case 'postgres':
      return sql<number>`nextval('capacity_fencing')`;
    case 'mssql':
      return sql<number>`next value for capacity_fencing`;
    case 'sqlite':
      return sql<number>`(select coalesce(max(fencing_token), 0) + 1 from capacity_leases where pool_id = ${pool})`;
  }
}

type LeaseColumn = Exclude<keyof CapacityLeaseTable, 'fencing_token'>;
const insertLeaseQuery = new Prepared<LeaseColumn, { fencing_token: number }>((db, dialect, p) =>
  returningColumns(
    db.insertInto('capacity_leases').values({
      id: p('id'),
      tenant_id: p('tenant_id'),
      kind: p('kind'),
      pool_id: p('pool_id'),
      units: p('units'),
      holder: p('holder'),
      fencing_token: nextFencingToken(dialect, p('pool_id')),
      ttl_seconds: p('ttl_seconds'),
      granted_at: p('granted_at'),
      expires_at: p('expires_at'),
      renewed_at: p('renewed_at'),
      ended_at: p('ended_at'),
      state: p('state'),
      idempotency_key: p('idempotency_key'),
      request_digest: p('request_digest'),
    }),
    dialect,
    ['fencing_token'],
  ),
);

/**
 * The whole grant as one PostgreSQL statement, run without an explicit transaction (one round trip instead of
 * five): pick free quota and pool rows (skipping rows other grants hold), and only if both scopes had `units`
 * free rows, claim them and insert the lease with the next fencing token. The statement is atomic: when either
 * scope ran short nothing is claimed and `fencing_token` is null. PostgreSQL can do this because a data-modifying
 * statement may stand in a CTE; Azure SQL and SQLite cannot, and run the same steps in a transaction.
 */
const grantInOneStatementQuery = preparedPer((units) =>
  new Prepared<LeaseColumn | 'quota_scope' | 'pool_scope', { quota: number; pool: number; fencing_token: number | null }>((db, dialect, p) =>
    db
      .with(
        (cte) => cte('quota').materialized(),
        (qb) => pickFreeSlots(qb, dialect, units, p('quota_scope'), quotaAllows(p('tenant_id'), p('kind'), p('ttl_seconds'))),
      )
      .with(
        (cte) => cte('pool').materialized(),
        (qb) => pickFreeSlots(qb, dialect, units, p('pool_scope'), poolAllows(p('pool_id'), p('kind'))),
      )
      .with('ok', (qb) => qb.selectNoFrom(sql<boolean>`(select count(*) from quota) = ${units} and (select count(*) from pool) = ${units}`.as('ok')))
      .with('claimed_quota', (qb) => claimPicked(qb, 'quota', units, p('quota_scope'), p('id')))
      .with('claimed_pool', (qb) => claimPicked(qb, 'pool', units, p('pool_scope'), p('id')))
      .with('granted', (qb) =>
        qb
          .insertInto('capacity_leases')
          .columns([...LEASE_COLUMNS])
          .expression((eb) =>
            eb
              .selectFrom('ok')
              .select(
                LEASE_COLUMNS.map((column) =>
                  column === 'fencing_token' ? nextFencingToken(dialect, null).as(column) : sql`cast(${p(column)} as ${sql.raw(LEASE_COLUMN_TYPES[column])})`.as(column),
                ),
              )
              .where(sql<boolean>`ok`),
          )
          .returning('fencing_token'),
      )
      .selectNoFrom([
        sql<number>`(select count(*) from quota)`.as('quota'),
        sql<number>`(select count(*) from pool)`.as('pool'),
        sql<number | null>`(select fencing_token from granted)`.as('fencing_token'),
      ]),
  ),
);

/** Claims for a lease the rows a CTE of `grantInOneStatementQuery` picked, only if both scopes had enough. */
function claimPicked(qb: QueryCreator<CapacityTables>, cte: 'quota' | 'pool', units: number, scope: unknown, lease: unknown) {
  return qb
    .updateTable('capacity_slots')
    .set({ lease_id: lease as string })
    .where('scope', '=', scope as string)
    .where('lease_id', '=', FREE_SLOT)
    .where('slot', '=', pickedSlots(cte, units))
    .where(sql<boolean>`(select ok from ok)`)
    .returning('capacity_slots.slot');
}

/**
 * The slots a CTE picked, as the right side of `slot =`: a scalar subquery for one unit, `any(array(…))` for more.
 * Either way PostgreSQL computes them first and looks each row up by its whole key; as a join it may walk every
 * free row of the scope instead.
 */
function pickedSlots(cte: 'quota' | 'pool', units: number) {
  return units === 1 ? sql<number>`(select slot from ${sql.table(cte)})` : sql<number>`any(array(select slot from ${sql.table(cte)}))`;
}

/** PostgreSQL types of the lease columns, for the parameters of `grantInOneStatementQuery` (a SELECT list has none). */
const LEASE_COLUMN_TYPES: Readonly<Record<(typeof LEASE_COLUMNS)[number], string>> = {
  id: 'varchar(200)',
  tenant_id: 'varchar(200)',
  kind: 'varchar(200)',
  pool_id: 'varchar(200)',
  units: 'integer',
  holder: 'varchar(200)',
  fencing_token: 'bigint',
  ttl_seconds: 'integer',
  granted_at: 'bigint',
  expires_at: 'bigint',
  renewed_at: 'bigint',
  ended_at: 'bigint',
  state: 'varchar(200)',
  idempotency_key: 'varchar(200)',
  request_digest: 'varchar(200)',
};

export type GrantOutcome = { readonly fencingToken: number } | { readonly shortOf: 'quota' | 'pool' };

/**
 * Claims quota and pool rows for a lease and inserts it: one statement on PostgreSQL, a short transaction of three
 * elsewhere. Nothing is held when a scope ran short (the quota is claimed, and reported, first).
 */
export async function grantLease(
  db: CapacityDb,
  dialect: SqlDialect,
  lease: Omit<Lease, 'fencingToken'>,
  ttlSeconds: number,
  requestDigest: string,
): Promise<GrantOutcome> {
  const claim: ClaimRequest = { lease: lease.id, tenant: lease.tenant, kind: lease.kind, units: lease.units, ttlSeconds };
  const row = leaseRow(lease, ttlSeconds, requestDigest);
  if (dialect === 'postgres') {
    const { rows } = await grantInOneStatementQuery(lease.units).execute(db, dialect, {
      ...row,
      quota_scope: quotaScope(lease.tenant, lease.kind),
      pool_scope: poolScope(lease.pool),
    });
    const result = rows[0];
    if (result?.fencing_token != null) return { fencingToken: Number(result.fencing_token) };
    return { shortOf: Number(result?.quota) < lease.units ? 'quota' : 'pool' };
  }
  try {
    return await db.transaction().execute(async (trx) => {
      if (!(await claimQuota(trx, dialect, claim))) throw new RanShort('quota');
      if (!(await claimPool(trx, dialect, claim, lease.pool))) throw new RanShort('pool');
      const { rows } = await insertLeaseQuery.execute(trx, dialect, row);
      return { fencingToken: Number(rows[0]?.fencing_token) };
    });
  } catch (thrown) {
    if (thrown instanceof RanShort) return { shortOf: thrown.scope };
    throw thrown;
  }
}

/** Thrown inside a grant's transaction to roll it back when a scope had too few free rows. */
class RanShort extends Error {
  constructor(readonly scope: 'quota' | 'pool') {
    super(`the ${scope} had too few free rows`);
  }
}

function leaseRow(lease: Omit<Lease, 'fencingToken'>, ttlSeconds: number, requestDigest: string): Omit<CapacityLeaseTable, 'fencing_token'> {
  return {
    id: lease.id,
    tenant_id: lease.tenant,
    kind: lease.kind,
    pool_id: lease.pool,
    units: lease.units,
    holder: lease.holder,
    ttl_seconds: ttlSeconds,
    granted_at: lease.grantedAt.getTime(),
    expires_at: lease.expiresAt.getTime(),
    renewed_at: null,
    ended_at: null,
    state: lease.state,
    idempotency_key: lease.idempotencyKey ?? null,
    request_digest: requestDigest,
  };
}

const findByKeyQuery = new Prepared<'tenant' | 'key', CapacityLeaseTable>((db, _dialect, p) =>
  db.selectFrom('capacity_leases').selectAll().where('tenant_id', '=', p('tenant')).where('idempotency_key', '=', p('key')),
);

/** The lease granted earlier for an idempotency key, with the digest of the request that asked for it. */
export async function findLeaseByIdempotencyKey(
  db: CapacityExecutor,
  dialect: SqlDialect,
  tenant: string,
  key: string,
): Promise<{ lease: Lease; requestDigest: string | null } | undefined> {
  const { rows } = await findByKeyQuery.execute(db, dialect, { tenant, key });
  return rows[0] ? { lease: leaseRowToLease(rows[0]), requestDigest: rows[0].request_digest } : undefined;
}

/** Pools of a kind in id order: the candidates of a grant that names no pool. */
export async function poolsOfKind(db: CapacityExecutor, kind: CapacityKind): Promise<Pick<Pool, 'id' | 'labels'>[]> {
  const rows = await db.selectFrom('capacity_pools').select(['id', 'labels']).where('kind', '=', kind).orderBy('id').execute();
  return rows.map((r) => ({ id: r.id, labels: JSON.parse(r.labels) as Record<string, string> }));
}

/** What a scope's rows say, read without locks: for telling a full scope from one whose free rows are in flight. */
export interface ScopeUse {
  readonly free: number;
  readonly held: number;
  readonly retiring: boolean;
}

export async function scopeUse(db: CapacityExecutor, scope: string): Promise<ScopeUse> {
  const row = await db
    .selectFrom('capacity_slots')
    .select((eb) => [
      eb.fn.sum<number>(eb.case().when('lease_id', '=', FREE_SLOT).then(1).else(0).end()).as('free'),
      eb.fn.sum<number>(eb.case().when('lease_id', '<>', FREE_SLOT).then(1).else(0).end()).as('held'),
      eb.fn.max<number>('retiring').as('retiring'),
    ])
    .where('scope', '=', scope)
    .executeTakeFirst();
  return { free: Number(row?.free ?? 0), held: Number(row?.held ?? 0), retiring: Number(row?.retiring ?? 0) === 1 };
}

// ---- laying out a scope's rows -----------------------------------------------------------------------------------

/**
 * Makes a scope's rows match its capacity (see `planSlotLayout`): waits for and locks all of them in slot order,
 * then deletes, flags and inserts. Used when a pool or a quota changes size, and when a grant finds retiring rows
 * that may have come free. Concurrent grants skip the locked rows meanwhile.
 */
export async function layOutScope(trx: Transaction<CapacityTables>, dialect: SqlDialect, scope: string, capacity: number): Promise<SlotLayoutChange> {
  const rows = await lockingRows(
    trx
      .selectFrom(`capacity_slots as ${LOCK_ALIAS.wait}`)
      .select([`${LOCK_ALIAS.wait}.slot`, `${LOCK_ALIAS.wait}.lease_id`, `${LOCK_ALIAS.wait}.retiring`])
      .where(`${LOCK_ALIAS.wait}.scope`, '=', scope)
      .orderBy(`${LOCK_ALIAS.wait}.slot`),
    dialect,
    'wait',
  ).execute();
  const change = planSlotLayout(
    rows.map((r) => ({ slot: Number(r.slot), leaseId: r.lease_id === FREE_SLOT ? null : r.lease_id, retiring: Number(r.retiring) === 1 })),
    capacity,
  );
  // Azure SQL takes at most 2,100 parameters a statement.
  for (const part of chunks(change.remove, 1000)) {
    await trx.deleteFrom('capacity_slots').where('scope', '=', scope).where('lease_id', '=', FREE_SLOT).where('slot', 'in', part).execute();
  }
  for (const [slots, retiring] of [
    [change.setRetiring, 1],
    [change.clearRetiring, 0],
  ] as const) {
    for (const part of chunks(slots, 1000)) {
      await trx.updateTable('capacity_slots').set({ retiring }).where('scope', '=', scope).where('slot', 'in', part).execute();
    }
  }
  for (const part of chunks(change.add, 500)) {
    await trx
      .insertInto('capacity_slots')
      .values(part.map((slot) => ({ scope, slot, lease_id: FREE_SLOT, retiring: 0 })))
      .execute();
  }
  return change;
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

export type ScopeOwner = { readonly pool: string } | { readonly tenant: string; readonly kind: CapacityKind };

/**
 * Lays out a scope's rows again for its owner's current capacity (the pool's, or the edition's limit for the
 * tenant and kind; 0 when there is none). The owner row is locked first (lock order step 1): two re-lays of one
 * scope would otherwise each plan from rows read before the other committed, and add rows twice.
 */
export async function relayScope(trx: Transaction<CapacityTables>, dialect: SqlDialect, owner: ScopeOwner): Promise<void> {
  if ('pool' in owner) {
    const pool = await lockingRows(
      trx.selectFrom(`capacity_pools as ${LOCK_ALIAS.wait}`).select(`${LOCK_ALIAS.wait}.capacity`).where(`${LOCK_ALIAS.wait}.id`, '=', owner.pool),
      dialect,
      'wait',
    ).executeTakeFirst();
    await layOutScope(trx, dialect, poolScope(owner.pool), Number(pool?.capacity ?? 0));
    return;
  }
  await lockTenants(trx, dialect, [owner.tenant]);
  const view = await tenantLimit(trx, owner.tenant, owner.kind);
  await layOutScope(trx, dialect, quotaScope(owner.tenant, owner.kind), view?.limit?.maxUnits ?? 0);
}

async function lockTenants(trx: Transaction<CapacityTables>, dialect: SqlDialect, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  await lockingRows(
    trx
      .selectFrom(`capacity_tenants as ${LOCK_ALIAS.wait}`)
      .select(`${LOCK_ALIAS.wait}.id`)
      .where(`${LOCK_ALIAS.wait}.id`, 'in', ids)
      .orderBy(`${LOCK_ALIAS.wait}.id`),
    dialect,
    'wait',
  ).execute();
}

// ---- renew, release, sweep ---------------------------------------------------------------------------------

function byTenant<Q extends { where: (...args: never[]) => Q }>(query: Q, column: string, filter: TenantFilter): Q {
  if (filter.kind === 'all') return query;
  return (query.where as unknown as (c: string, op: string, v: string) => Q)(column, '=', filter.tenant);
}

/**
 * Extends an active, unexpired lease presented with its fencing token. Expiry is judged against `now`, so a lease
 * past its expiry cannot be renewed even before the sweep has marked it. Returns the renewed lease, or undefined.
 */
export async function renewActiveLease(
  trx: CapacityExecutor,
  dialect: SqlDialect,
  id: string,
  tenants: TenantFilter,
  fencingToken: number,
  now: number,
  ttlSeconds: number | undefined,
): Promise<Lease | undefined> {
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
  const rows = await returningColumns<CapacityLeaseTable>(query, dialect, LEASE_COLUMNS).execute();
  return rows[0] === undefined ? undefined : leaseRowToLease(rows[0]);
}

/** What an ended lease held, for its `LeaseExpired` event. */
export type EndedLease = Pick<Lease, 'id' | 'tenant' | 'kind' | 'pool' | 'units' | 'holder' | 'fencingToken'> & {
  /** Epoch ms. */
  readonly expiresAt: number;
};

const ENDED_COLUMNS = ['id', 'tenant_id', 'kind', 'pool_id', 'units', 'holder', 'fencing_token', 'expires_at'] as const;
type EndedRow = Pick<CapacityLeaseTable, (typeof ENDED_COLUMNS)[number]>;

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

/** Ends an active, unexpired lease presented with its fencing token (and of the tenant, when one is given). */
function endLease(db: CapacityExecutor, p: (name: 'id' | 'now' | 'token' | 'tenant') => never, byTenant: boolean) {
  let query = db
    .updateTable('capacity_leases')
    .set({ state: 'released', ended_at: p('now') })
    .where('id', '=', p('id'))
    .where('state', '=', 'active')
    .where('expires_at', '>', p('now'))
    .where('fencing_token', '=', p('token'));
  if (byTenant) query = query.where('tenant_id', '=', p('tenant'));
  return query;
}

function releaseQuery(byTenant: boolean) {
  return new Prepared<'id' | 'now' | 'token' | 'tenant', EndedRow>((db, dialect, p) =>
    dialect === 'postgres'
      ? // One statement: end the lease, then free the rows it held (the CTE's output orders the two).
        db
          .with('ended', (qb) => endLease(qb as CapacityExecutor, p, byTenant).returning([...ENDED_COLUMNS]))
          .with('freed', (qb) =>
            qb
              .updateTable('capacity_slots')
              .set({ lease_id: FREE_SLOT })
              // The lease's two scopes, named as slots.ts names them.
              .where('scope', '=', sql<string>`any(array(select concat('pool:', pool_id) from ended union all select concat('quota:', kind, ':', tenant_id) from ended))`)
              .where('lease_id', '=', sql<string>`(select id from ended)`)
              .returning('capacity_slots.slot'),
          )
          .selectFrom('ended')
          .selectAll()
      : returningColumns<EndedRow>(endLease(db, p, byTenant), dialect, ENDED_COLUMNS),
  );
}
const releaseOwnLeaseQuery = releaseQuery(true);
const releaseAnyLeaseQuery = releaseQuery(false);

const freeSlotsQuery = new Prepared<'lease' | 'pool_scope' | 'quota_scope', never>((db, _dialect, p) =>
  db
    .updateTable('capacity_slots')
    .set({ lease_id: FREE_SLOT })
    .where('scope', 'in', [p('pool_scope'), p('quota_scope')])
    .where('lease_id', '=', p('lease')),
);

/**
 * Marks an active, unexpired lease presented with its fencing token released, and frees its rows: one statement on
 * PostgreSQL, a transaction of two elsewhere. Returns what it held, or undefined when the lease was not in that
 * state or the token was not its own.
 */
export async function releaseLease(
  db: CapacityDb,
  dialect: SqlDialect,
  id: string,
  fencingToken: number,
  tenants: TenantFilter,
  now: number,
): Promise<EndedLease | undefined> {
  const query = tenants.kind === 'one' ? releaseOwnLeaseQuery : releaseAnyLeaseQuery;
  const values = { id, now, token: fencingToken, tenant: tenants.kind === 'one' ? tenants.tenant : null };
  if (dialect === 'postgres') {
    const { rows } = await query.execute(db, dialect, values);
    return rows[0] && endedRowToEndedLease(rows[0]);
  }
  return db.transaction().execute(async (trx) => {
    const { rows } = await query.execute(trx, dialect, values);
    const ended = rows[0];
    if (!ended) return undefined;
    const lease = endedRowToEndedLease(ended);
    await freeSlotsQuery.execute(trx, dialect, { lease: lease.id, pool_scope: poolScope(lease.pool), quota_scope: quotaScope(lease.tenant, lease.kind) });
    return lease;
  });
}

/** Frees the rows ended leases hold: by key, (scope, lease), in each lease's two scopes. */
async function freeLeaseSlots(trx: CapacityExecutor, leases: readonly EndedLease[]): Promise<void> {
  for (const part of chunks(leases, 500)) {
    const scopes = new Set(part.flatMap((l) => [poolScope(l.pool), quotaScope(l.tenant, l.kind)]));
    await trx
      .updateTable('capacity_slots')
      .set({ lease_id: FREE_SLOT })
      .where('scope', 'in', [...scopes])
      .where(
        'lease_id',
        'in',
        part.map((l) => l.id),
      )
      .execute();
  }
}

/**
 * Marks up to `limit` active leases past their expiry as expired, frees their rows and returns them. Reads through
 * the (state, expires_at) index, so the cost follows the number of expired leases; on a shared database it skips
 * leases another sweeper (or a release) holds, so sweepers take disjoint batches. The UPDATE re-checks the state,
 * so a lease ends once.
 */
export async function expireDueLeases(trx: Transaction<CapacityTables>, dialect: SqlDialect, now: number, limit: number): Promise<EndedLease[]> {
  const due = lockingRows(
    firstRows(
      trx
        .selectFrom(`capacity_leases as ${LOCK_ALIAS.skip}`)
        .select(`${LOCK_ALIAS.skip}.id`)
        .where(`${LOCK_ALIAS.skip}.state`, '=', 'active')
        .where(`${LOCK_ALIAS.skip}.expires_at`, '<=', now)
        .orderBy(`${LOCK_ALIAS.skip}.expires_at`),
      dialect,
      limit,
    ),
    dialect,
    'skip',
  );
  const ids = (await due.execute()).map((r) => r.id);
  if (ids.length === 0) return [];
  const query = trx
    .updateTable('capacity_leases')
    .set({ state: 'expired', ended_at: now })
    .where('id', 'in', ids)
    .where('state', '=', 'active')
    .where('expires_at', '<=', now);
  const ended = (await returningColumns<EndedRow>(query, dialect, ENDED_COLUMNS).execute()).map(endedRowToEndedLease);
  await freeLeaseSlots(trx, ended);
  return ended;
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
  return (await firstRows(query.orderBy('id'), dialect, q.limit).execute()).map(leaseRowToLease);
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
    .select(['t.id', 't.edition', 'l.max_units', 'l.max_ttl_seconds'])
    .where('t.id', '=', tenant)
    .executeTakeFirst();
  if (!row) return undefined;
  return {
    tenant: row.id,
    edition: row.edition,
    kind,
    used: (await scopeUse(db, quotaScope(tenant, kind))).held,
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
  const row = await firstRows(query, dialect, 1).executeTakeFirst();
  return row === undefined ? undefined : Number(row.expires_at);
}

/** Units held per scope, for the scopes given (all when undefined). */
async function heldPerScope(db: CapacityExecutor, scopes?: readonly string[]): Promise<Map<string, number>> {
  if (scopes !== undefined && scopes.length === 0) return new Map();
  let query = db
    .selectFrom('capacity_slots')
    .select((eb) => ['scope', eb.fn.countAll<number>().as('held')])
    .where('lease_id', '<>', FREE_SLOT)
    .groupBy('scope');
  if (scopes !== undefined) query = query.where('scope', 'in', scopes);
  return new Map((await query.execute()).map((r) => [r.scope, Number(r.held)]));
}

export async function listPools(db: CapacityExecutor, kind?: CapacityKind): Promise<Pool[]> {
  let query = db.selectFrom('capacity_pools').selectAll().orderBy('id');
  if (kind !== undefined) query = query.where('kind', '=', kind);
  const rows = await query.execute();
  const held = await heldPerScope(db, kind === undefined ? undefined : rows.map((r) => poolScope(r.id)));
  return rows.map((row) => poolRowToPool(row, held.get(poolScope(row.id)) ?? 0));
}

export async function getPool(db: CapacityExecutor, id: string): Promise<Pool | undefined> {
  const row = await db.selectFrom('capacity_pools').selectAll().where('id', '=', id).executeTakeFirst();
  return row ? poolRowToPool(row, (await scopeUse(db, poolScope(id))).held) : undefined;
}

export interface TenantUseRow {
  readonly tenant: string;
  readonly edition: string;
  readonly kind: string;
  readonly used: number;
  readonly maxUnits: number | null;
}

/** Each visible tenant's use of every kind its edition grants or it still holds. */
export async function tenantUse(db: CapacityExecutor, tenants: TenantFilter): Promise<TenantUseRow[]> {
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
  const held = await heldPerScope(db);
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
    const inserted = await trx
      .insertInto('capacity_pools')
      .values({ id, ...values })
      .onConflict((oc) => oc.column('id').doNothing())
      .executeTakeFirst();
    // Created meanwhile by a concurrent upsert (another host seeding): change it as an update would.
    if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 0) before = await lockPool();
  }
  const usedBefore = (await scopeUse(trx, poolScope(id))).held;
  if (before) await trx.updateTable('capacity_pools').set(values).where('id', '=', id).execute();
  await layOutScope(trx, dialect, poolScope(id), spec.capacity);
  return before ? poolRowToPool(before, usedBefore) : undefined;
}

/** Creates an edition or replaces its limits (kinds left out get none), then re-lays its tenants' quota rows. */
export async function upsertEdition(trx: Transaction<CapacityTables>, dialect: SqlDialect, edition: Edition, now: number): Promise<void> {
  await trx
    .insertInto('capacity_editions')
    .values({ name: edition.name, updated_at: now })
    .onConflict((oc) => oc.column('name').doUpdateSet({ updated_at: now }))
    .execute();
  await trx.deleteFrom('capacity_edition_limits').where('edition', '=', edition.name).execute();
  const limits = Object.entries(edition.limits).filter((e): e is [CapacityKind, KindLimit] => isCapacityKind(e[0]) && e[1] !== undefined);
  const rows = limits.map(([kind, limit]) => ({ edition: edition.name, kind, max_units: limit.maxUnits, max_ttl_seconds: limit.maxTtlSeconds }));
  if (rows.length > 0) await trx.insertInto('capacity_edition_limits').values(rows).execute();
  const tenants = (await trx.selectFrom('capacity_tenants').select('id').where('edition', '=', edition.name).orderBy('id').execute()).map((t) => t.id);
  await lockTenants(trx, dialect, tenants);
  for (const id of tenants) await layOutQuotas(trx, dialect, id, edition.limits);
}

export async function editionExists(db: CapacityExecutor, name: string): Promise<boolean> {
  return (await db.selectFrom('capacity_editions').select('name').where('name', '=', name).executeTakeFirst()) !== undefined;
}

/** Creates a tenant or changes its edition, then lays out its quota rows for the edition's limits. */
export async function upsertTenant(trx: Transaction<CapacityTables>, dialect: SqlDialect, tenant: Tenant, now: number): Promise<void> {
  await trx
    .insertInto('capacity_tenants')
    .values({ id: tenant.id, edition: tenant.edition, updated_at: now })
    .onConflict((oc) => oc.column('id').doUpdateSet({ edition: tenant.edition, updated_at: now }))
    .execute();
  const [edition] = await listEditions(trx, tenant.edition);
  await layOutQuotas(trx, dialect, tenant.id, edition?.limits ?? {});
}

async function layOutQuotas(
  trx: Transaction<CapacityTables>,
  dialect: SqlDialect,
  tenant: string,
  limits: Readonly<Partial<Record<CapacityKind, KindLimit>>>,
): Promise<void> {
  for (const kind of CAPACITY_KINDS) {
    await layOutScope(trx, dialect, quotaScope(tenant, kind), limits[kind]?.maxUnits ?? 0);
  }
}

export async function listEditions(db: CapacityExecutor, only?: string): Promise<Edition[]> {
  let names = db.selectFrom('capacity_editions').select('name').orderBy('name');
  let limitRows = db.selectFrom('capacity_edition_limits').selectAll();
  if (only !== undefined) {
    names = names.where('name', '=', only);
    limitRows = limitRows.where('edition', '=', only);
  }
  const limits = await limitRows.execute();
  return (await names.execute()).map(({ name }) => ({
    name,
    limits: Object.fromEntries(
      limits
        .filter((l) => l.edition === name)
        .map((l) => [l.kind, { maxUnits: Number(l.max_units), maxTtlSeconds: Number(l.max_ttl_seconds) }]),
    ),
  }));
}
