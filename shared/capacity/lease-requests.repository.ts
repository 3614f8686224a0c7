import type { TenantFilter } from '../platform/auth/auth';
import { firstRows, type SqlDialect } from '../platform/sql/dialect';
import { Prepared } from '../platform/sql/prepared';
import type { CapacityLeaseRequestTable, CapacityTables } from './capacity.tables';
import { byTenant, type CapacityExecutor } from './lease.repository';
import type { Ticket, TicketState } from './lease-queue';
import type { CapacityKind } from './pool';

/** Tickets: lease requests waiting in a pool's queue (capacity_lease_requests), and what became of them. */

function rowToTicket(row: CapacityLeaseRequestTable): Ticket {
  return {
    id: row.id,
    tenant: row.tenant_id,
    kind: row.kind as CapacityKind,
    pool: row.pool_id,
    units: Number(row.units),
    ttlSeconds: Number(row.ttl_seconds),
    holder: row.holder,
    idempotencyKey: row.idempotency_key,
    requestDigest: row.request_digest,
    requestedAt: new Date(Number(row.requested_at)),
    deadline: new Date(Number(row.deadline)),
    state: row.state as TicketState,
    leaseId: row.lease_id,
    ...(row.fencing_token !== null ? { fencingToken: Number(row.fencing_token) } : {}),
    ...(row.ended_at !== null ? { endedAt: new Date(Number(row.ended_at)) } : {}),
  };
}

export async function insertTicket(db: CapacityExecutor, ticket: Ticket): Promise<void> {
  await db
    .insertInto('capacity_lease_requests')
    .values({
      id: ticket.id,
      tenant_id: ticket.tenant,
      kind: ticket.kind,
      pool_id: ticket.pool,
      units: ticket.units,
      ttl_seconds: ticket.ttlSeconds,
      holder: ticket.holder,
      idempotency_key: ticket.idempotencyKey,
      request_digest: ticket.requestDigest,
      requested_at: ticket.requestedAt.getTime(),
      deadline: ticket.deadline.getTime(),
      state: ticket.state,
      lease_id: ticket.leaseId,
      fencing_token: null,
      ended_at: null,
    })
    .execute();
}

/** The tenant's ticket by id; another tenant's is not found. */
export async function findTicket(db: CapacityExecutor, tenants: TenantFilter, id: string): Promise<Ticket | undefined> {
  const row = await byTenant(db.selectFrom('capacity_lease_requests').selectAll(), 'tenant_id', tenants).where('id', '=', id).executeTakeFirst();
  return row ? rowToTicket(row) : undefined;
}

export async function findTicketByKey(db: CapacityExecutor, tenant: string, key: string): Promise<Ticket | undefined> {
  const row = await db.selectFrom('capacity_lease_requests').selectAll().where('tenant_id', '=', tenant).where('idempotency_key', '=', key).executeTakeFirst();
  return row ? rowToTicket(row) : undefined;
}

/** A pool's waiting tickets, oldest first (at most `limit`). */
export async function waitingTickets(db: CapacityExecutor, dialect: SqlDialect, pool: string, limit: number): Promise<Ticket[]> {
  const query = db.selectFrom('capacity_lease_requests').selectAll().where('pool_id', '=', pool).where('state', '=', 'waiting').orderBy('requested_at').orderBy('id');
  return (await firstRows(query, dialect, limit).execute()).map(rowToTicket);
}

/** Pools with a waiting ticket, by id. */
export async function poolsWithWaiting(db: CapacityExecutor): Promise<string[]> {
  const rows = await db.selectFrom('capacity_lease_requests').select('pool_id').distinct().where('state', '=', 'waiting').orderBy('pool_id').execute();
  return rows.map((r) => r.pool_id);
}

const anyWaitingQuery = new Prepared<CapacityTables, 'pool', { id: string }>((db, dialect, p) =>
  firstRows(db.selectFrom('capacity_lease_requests').select('id').where('pool_id', '=', p('pool')).where('state', '=', 'waiting'), dialect, 1),
);

/** Whether a pool has a ticket waiting: then the units it frees go to its queue, not to a new request. */
export async function hasWaiting(db: CapacityExecutor, dialect: SqlDialect, pool: string): Promise<boolean> {
  return (await anyWaitingQuery.execute(db, dialect, { pool })).rows.length > 0;
}

/** Tickets waiting in these pools. */
export async function waitingCount(db: CapacityExecutor, pools: readonly string[]): Promise<number> {
  if (pools.length === 0) return 0;
  const row = await db
    .selectFrom('capacity_lease_requests')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('pool_id', 'in', pools)
    .where('state', '=', 'waiting')
    .executeTakeFirst();
  return Number(row?.n ?? 0);
}

/** Records a waiting ticket's grant; false when it was no longer waiting (canceled meanwhile). */
export async function markGranted(db: CapacityExecutor, id: string, fencingToken: number, at: number): Promise<boolean> {
  const result = await db
    .updateTable('capacity_lease_requests')
    .set({ state: 'granted', fencing_token: fencingToken, ended_at: at })
    .where('id', '=', id)
    .where('state', '=', 'waiting')
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Takes a waiting ticket out of the queue unanswered; false when it was no longer waiting. */
export async function endWaiting(db: CapacityExecutor, id: string, state: 'canceled' | 'expired', at: number): Promise<boolean> {
  const result = await db.updateTable('capacity_lease_requests').set({ state, ended_at: at }).where('id', '=', id).where('state', '=', 'waiting').executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** Expires a pool's waiting tickets past their deadline. */
export async function expireOverdue(db: CapacityExecutor, pool: string, now: number): Promise<number> {
  const result = await db
    .updateTable('capacity_lease_requests')
    .set({ state: 'expired', ended_at: now })
    .where('pool_id', '=', pool)
    .where('state', '=', 'waiting')
    .where('deadline', '<=', now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** The tickets of these ids that are no longer waiting (a host's long polls ask this together). */
export async function ticketsDone(db: CapacityExecutor, ids: readonly string[]): Promise<Ticket[]> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom('capacity_lease_requests').selectAll().where('id', 'in', ids).where('state', '!=', 'waiting').execute();
  return rows.map(rowToTicket);
}

/** Active leases of a pool by expiry (for a ticket's estimate), at most `limit`. */
export async function poolExpiries(db: CapacityExecutor, dialect: SqlDialect, pool: string, limit: number): Promise<{ units: number; expiresAt: number }[]> {
  const query = db.selectFrom('capacity_leases').select(['units', 'expires_at']).where('state', '=', 'active').where('pool_id', '=', pool).orderBy('expires_at');
  return (await firstRows(query, dialect, limit).execute()).map((r) => ({ units: Number(r.units), expiresAt: Number(r.expires_at) }));
}

/** Each tenant's edition weight, for the tenants given. */
export async function tenantWeights(db: CapacityExecutor, tenants: readonly string[]): Promise<Map<string, number>> {
  if (tenants.length === 0) return new Map();
  const rows = await db
    .selectFrom('capacity_tenants as t')
    .innerJoin('capacity_editions as e', 'e.name', 't.edition')
    .select(['t.id', 'e.weight'])
    .where('t.id', 'in', tenants)
    .execute();
  return new Map(rows.map((r) => [r.id, Number(r.weight)]));
}

/** Each tenant's quota of a kind (0 when its edition grants none). */
export async function tenantQuotas(db: CapacityExecutor, tenants: readonly string[], kind: CapacityKind): Promise<Map<string, number>> {
  if (tenants.length === 0) return new Map();
  const rows = await db
    .selectFrom('capacity_tenants as t')
    .innerJoin('capacity_edition_limits as l', 'l.edition', 't.edition')
    .select(['t.id', 'l.max_units'])
    .where('t.id', 'in', tenants)
    .where('l.kind', '=', kind)
    .execute();
  return new Map(rows.map((r) => [r.id, Number(r.max_units)]));
}

/** Tickets waiting per pool and tenant. */
export async function queueDepth(db: CapacityExecutor): Promise<{ pool: string; tenant: string; waiting: number }[]> {
  const rows = await db
    .selectFrom('capacity_lease_requests')
    .select(['pool_id', 'tenant_id', (eb) => eb.fn.countAll<number>().as('n')])
    .where('state', '=', 'waiting')
    .groupBy(['pool_id', 'tenant_id'])
    .execute();
  return rows.map((r) => ({ pool: r.pool_id, tenant: r.tenant_id, waiting: Number(r.n) }));
}
