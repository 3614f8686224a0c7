import { sql, type Expression, type ExpressionBuilder, type QueryCreator, type SqlBool, type Transaction } from 'kysely';
import { firstRows, LOCK_ALIAS, lockingRows, type SqlDialect } from '../platform/sql/dialect';
import { Batcher } from '../platform/sql/batcher';
import { affectedRows, Prepared, preparedPer } from '../platform/sql/prepared';
import type { Lease } from './lease';
import type { CapacityKind } from './pool';
import { FREE_SLOT, planSlotLayout, poolScope, quotaScope, type SlotLayoutChange } from './slots';
import type { CapacitySlotTable, CapacityTables } from './capacity.tables';
import { grantBatchKey, type CapacityLedger, type GrantOutcome, type GrantRequest, type ReleaseRequest, type ScopeOwner, type ScopeUse } from './capacity-ledger.repository';
import {
  chunks,
  endActiveLease,
  lockTenants,
  quotaLimit,
  ENDED_COLUMNS,
  endedRowToEndedLease,
  insertLeaseQuery,
  insertReRegisteredLeaseQuery,
  LEASE_COLUMNS,
  leaseRow,
  nextFencingToken,
  type CapacityDb,
  type CapacityExecutor,
  type EndedLease,
  type EndedRow,
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

// ---- PostgreSQL: grants and releases in batches ----------------------------------------------------------------

/**
 * PostgreSQL runs a grant, and a release, as one statement without an explicit transaction (one round trip instead
 * of five), and concurrent requests share that statement (see `Batcher`): most of its cost is fixed (the round
 * trip, executor start, the commit), so a host under load sends fewer, larger statements. One at a time per host
 * (and, for grants, per shape) measured best: the capacity bench ran 1,570–1,770 cycles/s with grants alone
 * batched so, against 1,460 with two at a time and 1,160–1,360 with four; 1,880–2,020 with releases batched too.
 * A data-modifying statement may stand in a CTE on PostgreSQL; Azure SQL cannot, and runs the steps in a
 * transaction.
 */
const BATCHES = { maxBatch: 32, maxInFlight: 1 } as const;

type GrantBatchParam = 'ids' | 'holders' | 'granted_at' | 'expires_at' | 'idempotency_keys' | 'request_digests' | 'limit' | 'quota_scope' | 'pool_scope' | 'tenant' | 'kind' | 'pool' | 'ttl';

/**
 * Grants a batch of leases of one shape (`units` each), in one statement: pick up to `limit` (= leases × units)
 * free rows of the quota scope and of the pool scope (skipping rows other grants hold); the first n leases, n as
 * many as both scopes have rows for, claim their rows and are inserted with the next fencing tokens, in request
 * order; the others get nothing (the answer says which scope ran short). The statement is atomic.
 */
const grantBatchQuery = preparedPer(
  (units) =>
    new Prepared<CapacityTables, GrantBatchParam, { n: number; fencing_token: number | null; quota: number; pool: number }>((db, dialect, p) => {
      const pickQuota = pickFreeSlots(db, dialect, p('limit'), p('quota_scope'), quotaAllows(p('tenant'), p('kind'), p('ttl')));
      const pickPool = pickFreeSlots(db, dialect, p('limit'), p('pool_scope'), poolAllows(p('pool'), p('kind')));
      const varchars = (name: GrantBatchParam) => sql`cast(${p(name)} as varchar(200)[])`;
      const bigints = (name: GrantBatchParam) => sql`cast(${p(name)} as bigint[])`;
      // Picked row i of a scope goes to lease (i - 1) / units + 1, if that lease is granted.
      const claims = (picked: string) => sql`
        select c.slot, g.id from (select slot, (row_number() over () - 1) / ${units} + 1 as n from ${sql.table(picked)}) c join grants g on g.n = c.n`;
      // Claimed by key, as a grant that finds a row changed since its snapshot must (it then claims the row's latest
      // version). The range bounds the index walk to the claimed slots: as `slot = any(…)` alone, a plan made
      // without statistics may walk every free row of the scope.
      const claim = (claimed: string, scope: GrantBatchParam) => sql`
        update capacity_slots set lease_id = (select c.id from ${sql.table(claimed)} c where c.slot = capacity_slots.slot)
        where scope = ${p(scope)} and lease_id = ${FREE_SLOT}
          and slot between (select min(slot) from ${sql.table(claimed)}) and (select max(slot) from ${sql.table(claimed)})
          and slot = any(array(select slot from ${sql.table(claimed)}))
        returning slot`;
      return sql<{ n: number; fencing_token: number | null; quota: number; pool: number }>`
        with req as (
          select * from unnest(${varchars('ids')}, ${varchars('holders')}, ${bigints('granted_at')}, ${bigints('expires_at')}, ${varchars('idempotency_keys')}, ${varchars('request_digests')})
            with ordinality as r(id, holder, granted_at, expires_at, idempotency_key, request_digest, n)
        ),
        quota as materialized (${pickQuota}),
        pool as materialized (${pickPool}),
        grants as (select * from req where n <= least((select count(*) from quota), (select count(*) from pool)) / ${units}),
        quota_claims as (${claims('quota')}),
        pool_claims as (${claims('pool')}),
        claimed_quota as (${claim('quota_claims', 'quota_scope')}),
        claimed_pool as (${claim('pool_claims', 'pool_scope')}),
        granted as (
          insert into capacity_leases (${sql.join(LEASE_COLUMNS.map((c) => sql.ref(c)))})
          select id, cast(${p('tenant')} as varchar(200)), cast(${p('kind')} as varchar(200)), cast(${p('pool')} as varchar(200)), ${units}, holder,
            ${nextFencingToken(dialect, null)}, cast(${p('ttl')} as integer), granted_at, expires_at, cast(null as bigint), cast(null as bigint), ${'active'},
            idempotency_key, request_digest
          from grants order by n
          returning id, fencing_token
        )
        select req.n, granted.fencing_token, (select count(*) from quota) as quota, (select count(*) from pool) as pool
        from req left join granted on granted.id = req.id order by req.n`;
    }),
);

async function grantBatch(items: readonly GrantRequest[]): Promise<GrantOutcome[]> {
  const [first] = items;
  if (!first) return [];
  const { lease, ttlSeconds } = first;
  const { rows } = await grantBatchQuery(lease.units).execute(first.db, 'postgres', {
    ids: items.map((i) => i.lease.id),
    holders: items.map((i) => i.lease.holder),
    granted_at: items.map((i) => i.lease.grantedAt.getTime()),
    expires_at: items.map((i) => i.lease.expiresAt.getTime()),
    idempotency_keys: items.map((i) => i.lease.idempotencyKey ?? null),
    request_digests: items.map((i) => i.requestDigest),
    limit: items.length * lease.units,
    quota_scope: quotaScope(lease.tenant, lease.kind),
    pool_scope: poolScope(lease.pool),
    tenant: lease.tenant,
    kind: lease.kind,
    pool: lease.pool,
    ttl: ttlSeconds,
  });
  return rows.map((row) => {
    if (row.fencing_token != null) return { fencingToken: Number(row.fencing_token) };
    // Lease n got nothing: the scope with fewer than n × units rows ran short (the quota is reported first).
    return { shortOf: Number(row.quota) < Number(row.n) * lease.units ? 'quota' : 'pool' };
  });
}

/**
 * Azure SQL (and re-registrations on PostgreSQL): claims quota and pool rows for a lease and inserts it, in a short
 * transaction of three statements. Nothing is held when a scope ran short (the quota is claimed, and reported,
 * first). A re-registered lease is inserted with its own token.
 */
async function grantInTransaction(
  db: CapacityDb,
  dialect: SqlDialect,
  lease: Omit<Lease, 'fencingToken'>,
  ttlSeconds: number,
  requestDigest: string | null,
  reRegistered: number | undefined,
): Promise<GrantOutcome> {
  const claim: ClaimRequest = { lease: lease.id, tenant: lease.tenant, kind: lease.kind, units: lease.units, ttlSeconds };
  const row = leaseRow(lease, ttlSeconds, requestDigest);
  try {
    return await db.transaction().execute(async (trx) => {
      if (!(await claimQuota(trx, dialect, claim))) throw new RanShort('quota');
      if (!(await claimPool(trx, dialect, claim, lease.pool))) throw new RanShort('pool');
      const insert = reRegistered === undefined ? insertLeaseQuery : insertReRegisteredLeaseQuery;
      const { rows } = await insert.execute(trx, dialect, { ...row, fencing_token: reRegistered ?? null });
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
 * Azure SQL: marks an active, unexpired lease presented with its fencing token released, and frees its rows, in a
 * transaction of two statements. Returns what it held, or undefined when the lease was not in that state or the
 * token was not its own.
 */
async function releaseInTransaction(
  db: CapacityDb,
  dialect: SqlDialect,
  tenant: string,
  id: string,
  fencingToken: number,
  now: number,
): Promise<EndedLease | undefined> {
  return db.transaction().execute(async (trx) => {
    const lease = await endActiveLease(trx, dialect, tenant, id, fencingToken, now);
    if (lease) await freeSlotsQuery.execute(trx, dialect, { lease: lease.id, pool_scope: poolScope(lease.pool), quota_scope: quotaScope(lease.tenant, lease.kind) });
    return lease;
  });
}

/**
 * PostgreSQL: ends the leases of a batch that are active, unexpired, presented with their tokens and of the tenant
 * each request names, then frees the rows they held in their two scopes (named as slots.ts names them), in
 * one statement (the CTE's output orders the two). Leases are found by id and their rows by (scope, lease): no
 * other condition on either table is one an index serves. (Active is "not yet ended": release and the sweep set
 * `ended_at` with the state, and no index holds it, where `state = 'active'` could lead a plan to walk every
 * active lease.)
 */
const releaseBatchQuery = new Prepared<CapacityTables, 'ids' | 'tokens' | 'nows' | 'tenants', EndedRow>((_db, _dialect, p) => {
  const ids = sql`cast(${p('ids')} as varchar(200)[])`;
  return sql<EndedRow>`
    with req as (
      select * from unnest(${ids}, cast(${p('tokens')} as bigint[]), cast(${p('nows')} as bigint[]), cast(${p('tenants')} as varchar(200)[]))
        as r(id, token, now, tenant)
    ),
    ended as (
      update capacity_leases l set state = ${'released'}, ended_at = req.now
      from req
      where l.id = any(${ids}) and l.id = req.id and l.ended_at is null and l.expires_at > req.now and l.fencing_token = req.token
        and l.tenant_id = req.tenant
      returning ${sql.join(ENDED_COLUMNS.map((c) => sql.ref(`l.${c}`)))}
    ),
    freed as (
      update capacity_slots s set lease_id = ${FREE_SLOT}
      from (select concat('pool:', pool_id) as scope, id from ended union all select concat('quota:', kind, ':', tenant_id), id from ended) k
      where s.scope = k.scope and s.lease_id = k.id
      returning s.slot
    )
    select * from ended`;
});

async function releaseBatch(items: readonly ReleaseRequest[]): Promise<(EndedLease | undefined)[]> {
  const [first] = items;
  if (!first) return [];
  const { rows } = await releaseBatchQuery.execute(first.db, 'postgres', {
    ids: items.map((i) => i.id),
    tokens: items.map((i) => i.fencingToken),
    nows: items.map((i) => i.now),
    tenants: items.map((i) => i.tenant),
  });
  // A lease released twice in one batch ends once: the first of its requests gets it.
  const ended = new Map(rows.map((row) => [row.id, row]));
  return items.map((item) => {
    const row = ended.get(item.id);
    ended.delete(item.id);
    return row && endedRowToEndedLease(row);
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
  const grants = new Batcher(grantBatch, BATCHES);
  const releases = new Batcher(releaseBatch, BATCHES);
  return {
    grant: (db, lease, ttlSeconds, requestDigest, reRegistered) => {
      if (dialect !== 'postgres' || reRegistered !== undefined) return grantInTransaction(db, dialect, lease, ttlSeconds, requestDigest, reRegistered);
      const request = { db, lease, ttlSeconds, requestDigest };
      // Grants share a statement when of one tenant, kind, pool, units and TTL.
      return grants.submit(grantBatchKey(request, JSON.stringify([lease.tenant, lease.kind, lease.pool, lease.units, ttlSeconds])), request);
    },
    release: (db, tenant, id, fencingToken, now) => {
      if (dialect !== 'postgres') return releaseInTransaction(db, dialect, tenant, id, fencingToken, now);
      return releases.submit('releases', { db, tenant, id, fencingToken, now });
    },
    free: freeLeaseSlots,
    resize: async (trx, scope, capacity) => {
      await layOutScope(trx, dialect, scope, capacity);
    },
    relay: (trx, owner) => relayScope(trx, dialect, owner),
    use: scopeUse,
    held: heldPerScope,
  };
}
