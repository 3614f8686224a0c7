import { sql, type Kysely, type Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { firstRows, LOCK_ALIAS, lockingRows, returningColumns, type SqlDialect } from '../platform/sql/dialect';
import type { SyncConnection } from '../platform/sql/database';
import { Prepared } from '../platform/sql/prepared';
import { epochBase } from '../platform/sql/store-epoch';
import type { Lease, LeaseState } from './lease';
import type { CapacityKind } from './pool';
import type { CapacityLeaseTable, CapacityTables } from './capacity.tables';

/** Lease rows: the statements both ways of counting units (capacity-slots, capacity-counters) share. */
export type CapacityDb = Kysely<CapacityTables>;
export type CapacityExecutor = CapacityDb | Transaction<CapacityTables>;

export const LEASE_COLUMNS = [
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

/**
 * The next fencing token, drawn inside the lease INSERT from one sequence on PostgreSQL and Azure SQL (no row to
 * queue on), within the store's epoch (see platform/sql/store-epoch.ts): a token drawn after a restore is larger
 * than any drawn before it. SQLite has no sequences: its ledger bumps the pool's counter row in the grant and
 * passes the token, epoch included.
 */
export function nextFencingToken(dialect: SqlDialect, given: unknown) {
  switch (dialect) {
    case 'postgres':
      return sql<number>`${epochBase()} + nextval('capacity_fencing')`;
    case 'mssql':
      return sql<number>`${epochBase()} + next value for capacity_fencing`;
    case 'sqlite':
      return sql<number>`${given}`;
  }
}

export type LeaseColumn = Exclude<keyof CapacityLeaseTable, 'fencing_token'>;

function insertLeaseStatement(token: (dialect: SqlDialect, given: unknown) => unknown) {
  return new Prepared<CapacityTables, LeaseColumn | 'fencing_token', { fencing_token: number }>((db, dialect, p) =>
    returningColumns(
      db.insertInto('capacity_leases').values({
        id: p('id'),
        tenant_id: p('tenant_id'),
        kind: p('kind'),
        pool_id: p('pool_id'),
        units: p('units'),
        holder: p('holder'),
        fencing_token: token(dialect, p('fencing_token')) as number,
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
}

/** Inserts a granted lease; `fencing_token` is read only on SQLite (see `nextFencingToken`). */
export const insertLeaseQuery = insertLeaseStatement(nextFencingToken);

/** Inserts a lease re-registered after a restore, with the fencing token it was granted with before. */
export const insertReRegisteredLeaseQuery = insertLeaseStatement((_dialect, given) => given);

/** The row of a granted lease, without its fencing token (drawn by the ledger). */
export function leaseRow(lease: Omit<Lease, 'fencingToken'>, ttlSeconds: number, requestDigest: string | null): Omit<CapacityLeaseTable, 'fencing_token'> {
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

const findByKeyQuery = new Prepared<CapacityTables, 'tenant' | 'key', CapacityLeaseTable>((db, _dialect, p) =>
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


export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

// ---- renew, release, sweep ---------------------------------------------------------------------------------

export function byTenant<Q extends { where: (...args: never[]) => Q }>(query: Q, column: string, filter: TenantFilter): Q {
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
  tenant: string,
  id: string,
  fencingToken: number,
  now: number,
  ttlSeconds: number | undefined,
): Promise<Lease | undefined> {
  const query = trx
    .updateTable('capacity_leases')
    .set((eb) => ({
      renewed_at: now,
      expires_at: ttlSeconds !== undefined ? now + ttlSeconds * 1000 : eb(sql.lit(now), '+', eb('ttl_seconds', '*', 1000)),
      ...(ttlSeconds !== undefined ? { ttl_seconds: ttlSeconds } : {}),
    }))
    .where('id', '=', id)
    .where('state', '=', 'active')
    .where('expires_at', '>', now)
    .where('fencing_token', '=', fencingToken)
    .where('tenant_id', '=', tenant);
  const rows = await returningColumns<CapacityLeaseTable>(query, dialect, LEASE_COLUMNS).execute();
  return rows[0] === undefined ? undefined : leaseRowToLease(rows[0]);
}

/** What an ended lease held, for its `LeaseExpired` event. */
export type EndedLease = Pick<Lease, 'id' | 'tenant' | 'kind' | 'pool' | 'units' | 'holder' | 'fencingToken'> & {
  /** Epoch ms. */
  readonly expiresAt: number;
};

export const ENDED_COLUMNS = ['id', 'tenant_id', 'kind', 'pool_id', 'units', 'holder', 'fencing_token', 'expires_at'] as const;
export type EndedRow = Pick<CapacityLeaseTable, (typeof ENDED_COLUMNS)[number]>;

export function endedRowToEndedLease(r: EndedRow): EndedLease {
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

/** Ends an active, unexpired lease of the tenant presented with its fencing token and answers what it held. */
const endActiveLeaseQuery = new Prepared<CapacityTables, 'tenant' | 'id' | 'now' | 'token', EndedRow>((db, dialect, p) =>
  returningColumns<EndedRow>(
    db
      .updateTable('capacity_leases')
      .set({ state: 'released', ended_at: p('now') })
      .where('id', '=', p('id'))
      .where('state', '=', 'active')
      .where('expires_at', '>', p('now'))
      .where('fencing_token', '=', p('token'))
      .where('tenant_id', '=', p('tenant')),
    dialect,
    ENDED_COLUMNS,
  ),
);

/** Marks a lease released if it is active, unexpired and presented with its token; undefined otherwise. */
export async function endActiveLease(trx: CapacityExecutor, dialect: SqlDialect, tenant: string, id: string, fencingToken: number, now: number): Promise<EndedLease | undefined> {
  const { rows } = await endActiveLeaseQuery.execute(trx, dialect, { tenant, id, now, token: fencingToken });
  return rows[0] && endedRowToEndedLease(rows[0]);
}

/** `endActiveLease` within `SqliteTransactions.run`. */
export function endActiveLeaseSync(connection: SyncConnection, tenant: string, id: string, fencingToken: number, now: number): EndedLease | undefined {
  const { rows } = endActiveLeaseQuery.executeSync(connection, { tenant, id, now, token: fencingToken });
  return rows[0] && endedRowToEndedLease(rows[0]);
}

/**
 * Marks up to `limit` active leases past their expiry as expired and returns them (the caller gives their units
 * back in the same transaction). Reads through the (state, expires_at) index, so the cost follows the number of
 * expired leases; on a shared database it skips leases another sweeper (or a release) holds, so sweepers take
 * disjoint batches. The UPDATE re-checks the state, so a lease ends once.
 */
export async function expireDue(trx: Transaction<CapacityTables>, dialect: SqlDialect, now: number, limit: number): Promise<EndedLease[]> {
  if (dialect === 'sqlite') return expireDueOnSqlite(trx, now, limit);
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
  return (await returningColumns<EndedRow>(query, dialect, ENDED_COLUMNS).execute()).map(endedRowToEndedLease);
}

/**
 * SQLite: one statement. One writer at a time, so the due leases it reads are still due when it ends them; it finds
 * them by (tenant, id), the leases' key on SQLite (a condition on the state here would lead the plan to the
 * (state, expires_at) index instead).
 */
async function expireDueOnSqlite(trx: Transaction<CapacityTables>, now: number, limit: number): Promise<EndedLease[]> {
  const query = trx
    .updateTable('capacity_leases')
    .set({ state: 'expired', ended_at: now })
    .where((eb) =>
      eb(
        eb.refTuple('tenant_id', 'id'),
        'in',
        eb
          .selectFrom('capacity_leases as due')
          .select(['due.tenant_id', 'due.id'])
          .where('due.state', '=', 'active')
          .where('due.expires_at', '<=', now)
          .orderBy('due.expires_at')
          .limit(limit)
          .$asTuple('tenant_id', 'id'),
      ),
    );
  return (await returningColumns<EndedRow>(query, 'sqlite', ENDED_COLUMNS).execute()).map(endedRowToEndedLease);
}

// ---- reads ------------------------------------------------------------------------------------------------------

export async function getLease(db: CapacityExecutor, tenant: string, id: string): Promise<Lease | undefined> {
  const row = await db.selectFrom('capacity_leases').selectAll().where('tenant_id', '=', tenant).where('id', '=', id).executeTakeFirst();
  return row ? leaseRowToLease(row) : undefined;
}

/**
 * The tenant of a lease, for a caller of all tenants: it then acts on the lease as its tenant would. On SQLite
 * leases are kept by (tenant, id) (see capacity.migrations.ts), so the lease is looked for under each tenant.
 */
export async function leaseTenant(db: CapacityExecutor, id: string): Promise<string | undefined> {
  const row = await db
    .selectFrom('capacity_leases')
    .select('tenant_id')
    .where('tenant_id', 'in', db.selectFrom('capacity_tenants').select('id'))
    .where('id', '=', id)
    .executeTakeFirst();
  return row?.tenant_id;
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


/** Locks tenant rows in id order (lock order step 1), so re-laying their quota scopes is serialized. */
export async function lockTenants(trx: Transaction<CapacityTables>, dialect: SqlDialect, ids: readonly string[]): Promise<void> {
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

/** Units of a kind a tenant's edition allows at once; 0 for an unknown tenant or a kind the edition does not grant. */
export async function quotaLimit(db: CapacityExecutor, tenant: string, kind: CapacityKind): Promise<number> {
  const row = await db
    .selectFrom('capacity_tenants as t')
    .innerJoin('capacity_edition_limits as l', 'l.edition', 't.edition')
    .select('l.max_units')
    .where('t.id', '=', tenant)
    .where('l.kind', '=', kind)
    .executeTakeFirst();
  return Number(row?.max_units ?? 0);
}
