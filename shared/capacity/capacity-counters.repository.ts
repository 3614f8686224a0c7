import { sql, type Transaction } from 'kysely';
import type { SqliteTransactions, SyncConnection } from '../platform/sql/database';
import { Batcher, type BatchLimits } from '../platform/sql/batcher';
import { affectedRows, Prepared } from '../platform/sql/prepared';
import { upsertRow } from '../platform/sql/dialect';
import { epochBase } from '../platform/sql/store-epoch';
import { poolScope, quotaScope } from './slots';
import type { CapacityScopeCounterTable, CapacityTables } from './capacity.tables';
import { grantBatchKey, type CapacityLedger, type GrantOutcome, type GrantRequest, type ReleaseRequest, type ScopeUse } from './capacity-ledger.repository';
import { endActiveLeaseSync, insertLeaseQuery, leaseRow, type CapacityExecutor, type EndedLease } from './lease.repository';

/**
 * The counter ledger (see capacity-ledger.repository.ts), for SQLite: a row per scope with its capacity and the
 * units in use, changed only by conditional UPDATEs inside the grant's or release's transaction. SQLite runs one
 * writer at a time, so this row is never contended, and a grant writes the fewest pages. A scope shrunk below its
 * use simply grants nothing until `used + units <= capacity` again.
 */
const DIALECT = 'sqlite';

/** Takes a tenant's units, if the edition grants the kind for this long and they fit under its limit. */
const takeQuotaQuery = new Prepared<CapacityTables, 'scope' | 'units' | 'tenant' | 'kind' | 'ttl', never>((db, _dialect, p) =>
  db
    .updateTable('capacity_scope_counters')
    .set((eb) => ({ used: eb('used', '+', p('units')) }))
    .where('scope', '=', p('scope'))
    .where(sql<boolean>`used + ${p('units')} <= capacity`)
    .where((eb) =>
      eb.exists(
        eb
          .selectFrom('capacity_tenants as t')
          .innerJoin('capacity_edition_limits as l', 'l.edition', 't.edition')
          .select('t.id')
          .where('t.id', '=', p('tenant'))
          .where('l.kind', '=', p('kind'))
          .where('l.max_ttl_seconds', '>=', p('ttl')),
      ),
    ),
);

/**
 * Takes a pool's units if they fit and the pool is of the kind, drawing the pool's next fencing token: its counter
 * within the store's epoch (platform/sql/store-epoch.ts), so a token drawn after a restore is larger than any before.
 */
const takePoolQuery = new Prepared<CapacityTables, 'scope' | 'units' | 'pool' | 'kind', { fencing: number }>((db, _dialect, p) =>
  db
    .updateTable('capacity_scope_counters')
    .set((eb) => ({ used: eb('used', '+', p('units')), fencing: eb('fencing', '+', 1) }))
    .where('scope', '=', p('scope'))
    .where(sql<boolean>`used + ${p('units')} <= capacity`)
    .where((eb) => eb.exists(eb.selectFrom('capacity_pools as pk').select('pk.id').where('pk.id', '=', p('pool')).where('pk.kind', '=', p('kind'))))
    .returning(sql<number>`${epochBase()} + fencing`.as('fencing')),
);

const giveBackQuery = new Prepared<CapacityTables, 'scope' | 'units', never>((db, _dialect, p) =>
  db
    .updateTable('capacity_scope_counters')
    .set((eb) => ({ used: eb('used', '-', p('units')) }))
    .where('scope', '=', p('scope')),
);

/** Takes a lease's units from its quota and pool and inserts it, within the batch's transaction. */
function grantIn(connection: SyncConnection, { lease, ttlSeconds, requestDigest, reRegistered }: GrantRequest): GrantOutcome {
  const quota = takeQuotaQuery.executeSync(connection, {
    scope: quotaScope(lease.tenant, lease.kind),
    units: lease.units,
    tenant: lease.tenant,
    kind: lease.kind,
    ttl: ttlSeconds,
  });
  if (affectedRows(quota) !== 1) return { shortOf: 'quota' };
  const pool = takePoolQuery.executeSync(connection, { scope: poolScope(lease.pool), units: lease.units, pool: lease.pool, kind: lease.kind });
  const fencing = pool.rows[0]?.fencing;
  // Short on the pool: undo the quota taken above (one writer at a time, so nobody saw it).
  if (fencing === undefined) {
    giveBackQuery.executeSync(connection, { scope: quotaScope(lease.tenant, lease.kind), units: lease.units });
    return { shortOf: 'pool' };
  }
  // A re-registered lease keeps its token; the pool's counter moved on all the same (tokens only grow).
  const token = reRegistered ?? fencing;
  insertLeaseQuery.executeSync(connection, { ...leaseRow(lease, ttlSeconds, requestDigest), fencing_token: token });
  return { fencingToken: Number(token) };
}

/** What leases held, per scope, in scope order. */
function unitsByScope(leases: readonly EndedLease[]): [scope: string, units: number][] {
  const units = new Map<string, number>();
  for (const lease of leases) {
    for (const scope of [poolScope(lease.pool), quotaScope(lease.tenant, lease.kind)]) units.set(scope, (units.get(scope) ?? 0) + lease.units);
  }
  return [...units].sort(([a], [b]) => (a < b ? -1 : 1));
}

/** Gives back what leases held, one UPDATE per scope, in scope order (the sweep's, inside its transaction). */
async function free(trx: CapacityExecutor, leases: readonly EndedLease[]): Promise<void> {
  for (const [scope, units] of unitsByScope(leases)) await giveBackQuery.execute(trx, DIALECT, { scope, units });
}

async function resize(trx: Transaction<CapacityTables>, scope: string, capacity: number): Promise<void> {
  await upsertRow<CapacityScopeCounterTable>(trx, DIALECT, 'capacity_scope_counters', { values: { scope, capacity, used: 0, fencing: 0 }, key: ['scope'], update: { capacity } });
}

async function use(db: CapacityExecutor, scope: string): Promise<ScopeUse> {
  const row = await db.selectFrom('capacity_scope_counters').select(['capacity', 'used']).where('scope', '=', scope).executeTakeFirst();
  const used = Number(row?.used ?? 0);
  return { free: Math.max(0, Number(row?.capacity ?? 0) - used), held: used, retiring: false };
}

async function held(db: CapacityExecutor, scopes?: readonly string[]): Promise<Map<string, number>> {
  if (scopes !== undefined && scopes.length === 0) return new Map();
  let query = db.selectFrom('capacity_scope_counters').select(['scope', 'used']).where('used', '>', 0);
  if (scopes !== undefined) query = query.where('scope', 'in', scopes);
  return new Map((await query.execute()).map((r) => [r.scope, Number(r.used)]));
}

/** Runs a batch of grants in one transaction, in arrival order. */
function grantBatch(sqlite: SqliteTransactions) {
  return (items: readonly GrantRequest[]): Promise<GrantOutcome[]> => sqlite.run((connection) => items.map((item) => grantIn(connection, item)));
}

/**
 * Runs a batch of releases in one transaction, in arrival order: each ends its lease if active and presented
 * rightly; then what the ended leases held goes back, one UPDATE per scope for the whole batch.
 */
function releaseBatch(sqlite: SqliteTransactions) {
  return (items: readonly ReleaseRequest[]): Promise<(EndedLease | undefined)[]> =>
    sqlite.run((connection) => {
      const ended = items.map(({ tenant, id, fencingToken, now }) => endActiveLeaseSync(connection, tenant, id, fencingToken, now));
      const freed = ended.filter((lease) => lease !== undefined);
      for (const [scope, units] of unitsByScope(freed)) giveBackQuery.executeSync(connection, { scope, units });
      return ended;
    });
}

/**
 * Grants, and releases, of the requests a host handles at once go together in one transaction (group commit, see
 * `Batcher`): most of a SQLite write transaction's cost is its BEGIN and COMMIT (the pages it writes to the WAL),
 * and one writer at a time is the rule anyway. Under concurrent load a write waits for the end of the event loop's
 * turn, so that the writes of the other requests handled in that turn join it (see `gather`). Each request runs its
 * own statements in the transaction, in arrival order, and none of them fails alone: a scope running short is an
 * answer, undone within the transaction. A grant with an idempotency key goes alone (see `grantBatchKey`). The
 * capacity bench: about 5,000 acquire+release cycles/s on one host, against 2,100 one by one.
 */
const BATCHES: BatchLimits = { maxBatch: 64, maxInFlight: 1, gather: { probeEveryMs: 50 } };

/** The counter ledger for SQLite; a host has one per store. */
export function counterLedger(sqlite: SqliteTransactions): CapacityLedger {
  const grants = new Batcher(grantBatch(sqlite), BATCHES);
  const releases = new Batcher(releaseBatch(sqlite), BATCHES);
  return {
    grant: (db, lease, ttlSeconds, requestDigest, reRegistered) => {
      const request = { db, lease, ttlSeconds, requestDigest, ...(reRegistered !== undefined ? { reRegistered } : {}) };
      return grants.submit(grantBatchKey(request, 'grants'), request);
    },
    release: (db, tenant, id, fencingToken, now) => releases.submit('releases', { db, tenant, id, fencingToken, now }),
    free,
    resize,
    // Counters need no re-laying: a scope above its capacity grants nothing by the same condition that always holds.
    relay: () => Promise.resolve(),
    use,
    held,
  };
}
