import { sql, type Expression, type ExpressionBuilder, type QueryCreator, type SqlBool, type Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { firstRows, LOCK_ALIAS, lockingRows, type SqlDialect } from '../platform/sql/dialect';
import { affectedRows, Prepared, preparedPer } from '../platform/sql/prepared';
import type { Lease } from './lease';
import type { CapacityKind } from './pool';
import { FREE_SLOT, planSlotLayout, poolScope, quotaScope, type SlotLayoutChange } from './slots';
import type { CapacitySlotTable, CapacityTables } from './capacity.tables';
import type { CapacityLedger, GrantOutcome, ScopeOwner, ScopeUse } from './capacity-ledger.repository';
import {
  chunks,
  endActiveLease,
  endLease,
  lockTenants,
  quotaLimit,
  ENDED_COLUMNS,
  endedRowToEndedLease,
  insertLeaseQuery,
  LEASE_COLUMNS,
  leaseRow,
  nextFencingToken,
  type CapacityDb,
  type CapacityExecutor,
  type EndedLease,
  type EndedRow,
  type LeaseColumn,
} from './lease.repository';

/**
 * The slot ledger (see capacity-ledger.repository.ts), for PostgreSQL and Azure SQL. Units are rows
 * (`capacity_slots`, see slots.ts): a grant claims free rows of the tenant's quota scope and of a pool scope with
 * SKIP LOCKED (READPAST on Azure SQL), so concurrent grants on one pool or tenant take different rows and never
 * wait for each other; a release or the sweep frees the rows its leases hold. No statement on the grant or release
 * path updates a row that every request updates. Fencing tokens come from one sequence, drawn while the grant holds
 * its rows: a grant that starts after another finished gets a larger token. Locks follow the order written in
 * platform/sql/transaction.ts.
 */
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
  return new Prepared<CapacityTables, P | 'scope' | 'lease', never>((db, dialect, p) =>
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
  return affectedRows(result) === request.units;
}

/** Claims a pool's rows for a lease; true when all `units` were claimed. */
async function claimPool(trx: CapacityExecutor, dialect: SqlDialect, request: ClaimRequest, pool: string): Promise<boolean> {
  const result = await claimPoolQuery(request.units).execute(trx, dialect, { scope: poolScope(pool), lease: request.lease, kind: request.kind, pool });
  return affectedRows(result) === request.units;
}

/**
 * The whole grant as one PostgreSQL statement, run without an explicit transaction (one round trip instead of
 * five): pick free quota and pool rows (skipping rows other grants hold), and only if both scopes had `units`
 * free rows, claim them and insert the lease with the next fencing token. The statement is atomic: when either
 * scope ran short nothing is claimed and `fencing_token` is null. PostgreSQL can do this because a data-modifying
 * statement may stand in a CTE; Azure SQL cannot, and runs the same steps in a transaction.
 */
const grantInOneStatementQuery = preparedPer((units) =>
  new Prepared<CapacityTables, LeaseColumn | 'quota_scope' | 'pool_scope', { quota: number; pool: number; fencing_token: number | null }>((db, dialect, p) =>
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

/**
 * Claims quota and pool rows for a lease and inserts it: one statement on PostgreSQL, a short transaction of three
 * elsewhere. Nothing is held when a scope ran short (the quota is claimed, and reported, first).
 */
async function grantLease(
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
      const { rows } = await insertLeaseQuery.execute(trx, dialect, { ...row, fencing_token: null });
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

async function scopeUse(db: CapacityExecutor, scope: string): Promise<ScopeUse> {
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
async function layOutScope(trx: Transaction<CapacityTables>, dialect: SqlDialect, scope: string, capacity: number): Promise<SlotLayoutChange> {
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



/**
 * Lays out a scope's rows again for its owner's current capacity (the pool's, or the edition's limit for the
 * tenant and kind; 0 when there is none). The owner row is locked first (lock order step 1): two re-lays of one
 * scope would otherwise each plan from rows read before the other committed, and add rows twice.
 */
async function relayScope(trx: Transaction<CapacityTables>, dialect: SqlDialect, owner: ScopeOwner): Promise<void> {
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
  await layOutScope(trx, dialect, quotaScope(owner.tenant, owner.kind), await quotaLimit(trx, owner.tenant, owner.kind));
}

const freeSlotsQuery = new Prepared<CapacityTables, 'lease' | 'pool_scope' | 'quota_scope', never>((db, _dialect, p) =>
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
async function releaseLease(
  db: CapacityDb,
  dialect: SqlDialect,
  id: string,
  fencingToken: number,
  tenants: TenantFilter,
  now: number,
): Promise<EndedLease | undefined> {
  if (dialect === 'postgres') {
    const query = tenants.kind === 'one' ? releaseOwnInOneStatement : releaseAnyInOneStatement;
    const { rows } = await query.execute(db, dialect, { id, now, token: fencingToken, tenant: tenants.kind === 'one' ? tenants.tenant : null });
    return rows[0] && endedRowToEndedLease(rows[0]);
  }
  return db.transaction().execute(async (trx) => {
    const lease = await endActiveLease(trx, dialect, id, fencingToken, tenants, now);
    if (lease) await freeSlotsQuery.execute(trx, dialect, { lease: lease.id, pool_scope: poolScope(lease.pool), quota_scope: quotaScope(lease.tenant, lease.kind) });
    return lease;
  });
}

/** PostgreSQL: end the lease, then free the rows it held, in one statement (the CTE's output orders the two). */
function releaseInOneStatement(byTenant: boolean) {
  return new Prepared<CapacityTables, 'id' | 'now' | 'token' | 'tenant', EndedRow>((db, _dialect, p) =>
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
      .selectAll(),
  );
}
const releaseOwnInOneStatement = releaseInOneStatement(true);
const releaseAnyInOneStatement = releaseInOneStatement(false);

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

/** The slot ledger for a server database (PostgreSQL or Azure SQL). */
export function slotLedger(dialect: SqlDialect): CapacityLedger {
  return {
    grant: (db, lease, ttlSeconds, digest) => grantLease(db, dialect, lease, ttlSeconds, digest),
    release: (db, id, token, tenants, now) => releaseLease(db, dialect, id, token, tenants, now),
    free: freeLeaseSlots,
    resize: async (trx, scope, capacity) => {
      await layOutScope(trx, dialect, scope, capacity);
    },
    relay: (trx, owner) => relayScope(trx, dialect, owner),
    use: scopeUse,
    held: heldPerScope,
  };
}
