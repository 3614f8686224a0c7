import type { Kysely, Selectable, Transaction, Updateable } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { AnyDb, SqlDialect } from '../platform/sql/database';
import { firstRows, LOCK_ALIAS, lockingRows } from '../platform/sql/dialect';
import type { IgnoreRule } from './drift';
import type { InventoryEnvironmentTable, InventoryProposalTable, InventoryTables } from './inventory.tables';

/** SQL statements of the inventory module. Rows are locked in the lock order of transaction.ts: environment rows (2b), then proposals. */

export type InventoryDb = Kysely<InventoryTables> | Transaction<InventoryTables>;
export type EnvironmentRow = Selectable<InventoryEnvironmentTable>;
export type ProposalRow = Selectable<InventoryProposalTable>;

export function inventoryDb(db: AnyDb): Kysely<InventoryTables> {
  return db as Kysely<InventoryTables>;
}

const tenantRows = <Q extends { where(column: 'tenant_id', op: '=', value: string): Q }>(query: Q, tenants: TenantFilter): Q =>
  tenants.kind === 'one' ? query.where('tenant_id', '=', tenants.tenant) : query;

export async function findEnvironment(db: InventoryDb, environmentId: string, tenants: TenantFilter = { kind: 'all' }): Promise<EnvironmentRow | undefined> {
  return tenantRows(db.selectFrom('inventory_environments').selectAll().where('environment_id', '=', environmentId), tenants).executeTakeFirst();
}

/** The environment's row, locked until the transaction ends (scans and decisions of one environment take turns). */
export async function lockEnvironment(trx: Transaction<InventoryTables>, dialect: SqlDialect, environmentId: string): Promise<EnvironmentRow | undefined> {
  const query = trx.selectFrom(`inventory_environments as ${LOCK_ALIAS.wait}`).selectAll().where('environment_id', '=', environmentId);
  return lockingRows(query, dialect, 'wait').executeTakeFirst();
}

/** A page of environments in id order, after the id `after`. */
export async function listEnvironments(db: InventoryDb, dialect: SqlDialect, tenants: TenantFilter, page: { after?: string; limit: number }): Promise<EnvironmentRow[]> {
  let query = tenantRows(db.selectFrom('inventory_environments').selectAll(), tenants);
  if (page.after !== undefined) query = query.where('environment_id', '>', page.after);
  return firstRows(query.orderBy('environment_id'), dialect, page.limit).execute();
}

export async function insertEnvironment(db: InventoryDb, row: EnvironmentRow): Promise<void> {
  await db.insertInto('inventory_environments').values(row).execute();
}

export async function updateEnvironment(db: InventoryDb, environmentId: string, set: Updateable<InventoryEnvironmentTable>): Promise<void> {
  await db.updateTable('inventory_environments').set(set).where('environment_id', '=', environmentId).execute();
}

/** Ids of environments due for a scan at `now`, the longest overdue first. */
export async function dueEnvironments(db: InventoryDb, now: number, limit: number): Promise<{ environment_id: string; next_scan_at: number }[]> {
  const rows = await db
    .selectFrom('inventory_environments')
    .select(['environment_id', 'next_scan_at'])
    .where('next_scan_at', '<=', now)
    .orderBy('next_scan_at')
    .orderBy('environment_id')
    .execute();
  return rows.slice(0, limit).map((r) => ({ environment_id: r.environment_id, next_scan_at: Number(r.next_scan_at) }));
}

/**
 * Claims a due scan for this host: moves `next_scan_at` on only if it still has the value the host read, so of
 * several hosts' timers exactly one scans the environment in that round.
 */
export async function claimScan(db: InventoryDb, environmentId: string, seenNextScanAt: number, nextScanAt: number): Promise<boolean> {
  const result = await db
    .updateTable('inventory_environments')
    .set({ next_scan_at: nextScanAt })
    .where('environment_id', '=', environmentId)
    .where('next_scan_at', '=', seenNextScanAt)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function insertIgnoreRule(
  db: InventoryDb,
  environmentId: string,
  tenant: string,
  rule: IgnoreRule,
  made: { by: string; at: number; idempotencyKey?: string; requestDigest: string },
): Promise<void> {
  await db
    .insertInto('inventory_ignore_rules')
    .values({
      id: rule.id,
      environment_id: environmentId,
      tenant_id: tenant,
      scope_kind: 'urn' in rule.scope ? 'urn' : 'type',
      scope_value: 'urn' in rule.scope ? rule.scope.urn : rule.scope.type,
      path: rule.path,
      reason: rule.reason,
      owner: rule.owner,
      expires_at: Date.parse(rule.expiresAt),
      holds_on_apply: rule.holdsOnApply ? 1 : 0,
      created_by: made.by,
      created_at: made.at,
      deleted_by: null,
      deleted_at: null,
      idempotency_key: made.idempotencyKey ?? null,
      request_digest: made.requestDigest,
    })
    .execute();
}

/** A rule as recorded, with who made it and, once deleted, who deleted it. */
export interface RecordedIgnoreRule extends IgnoreRule {
  readonly createdBy: string;
  readonly createdAt: string;
  readonly deletedBy?: string;
  readonly deletedAt?: string;
}

/** The environment's rules in the order they were made; a page of them when `page` is given (after a rule id). */
export async function listIgnoreRules(
  db: InventoryDb,
  dialect: SqlDialect,
  environmentId: string,
  options: { includeDeleted: boolean; page?: { after?: string; limit: number } },
): Promise<RecordedIgnoreRule[]> {
  let query = db.selectFrom('inventory_ignore_rules').selectAll().where('environment_id', '=', environmentId);
  if (!options.includeDeleted) query = query.where('deleted_at', 'is', null);
  // Rule ids are time-ordered (uuid v7), so id order is the order they were made in.
  if (options.page?.after !== undefined) query = query.where('id', '>', options.page.after);
  query = query.orderBy('id');
  const rows = await (options.page ? firstRows(query, dialect, options.page.limit) : query).execute();
  return rows.map((r) => ({
    id: r.id,
    scope: r.scope_kind === 'urn' ? { urn: r.scope_value } : { type: r.scope_value },
    path: r.path,
    reason: r.reason,
    owner: r.owner,
    expiresAt: new Date(Number(r.expires_at)).toISOString(),
    holdsOnApply: Number(r.holds_on_apply) === 1,
    createdBy: r.created_by,
    createdAt: new Date(Number(r.created_at)).toISOString(),
    ...(r.deleted_by !== null ? { deletedBy: r.deleted_by } : {}),
    ...(r.deleted_at !== null ? { deletedAt: new Date(Number(r.deleted_at)).toISOString() } : {}),
  }));
}

/** The rule an earlier POST with this Idempotency-Key made, with the digest of what it asked for. */
export async function findIgnoreRuleByKey(db: InventoryDb, environmentId: string, key: string): Promise<{ id: string; requestDigest: string | null } | undefined> {
  const row = await db
    .selectFrom('inventory_ignore_rules')
    .select(['id', 'request_digest'])
    .where('environment_id', '=', environmentId)
    .where('idempotency_key', '=', key)
    .executeTakeFirst();
  return row ? { id: row.id, requestDigest: row.request_digest } : undefined;
}

export async function deleteIgnoreRule(db: InventoryDb, environmentId: string, ruleId: string, by: string, at: number): Promise<boolean> {
  const result = await db
    .updateTable('inventory_ignore_rules')
    .set({ deleted_by: by, deleted_at: at })
    .where('environment_id', '=', environmentId)
    .where('id', '=', ruleId)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function openProposal(db: InventoryDb, environmentId: string): Promise<ProposalRow | undefined> {
  return db.selectFrom('inventory_proposals').selectAll().where('environment_id', '=', environmentId).where('status', '=', 'open').executeTakeFirst();
}

/** The environment's newest proposal that is accepted or dismissed: a scan with its findings opens no new one. */
export async function latestDecidedProposal(db: InventoryDb, environmentId: string): Promise<ProposalRow | undefined> {
  return db
    .selectFrom('inventory_proposals')
    .selectAll()
    .where('environment_id', '=', environmentId)
    .where('status', 'in', ['accepted', 'dismissed'])
    .orderBy('updated_at', 'desc')
    .orderBy('id', 'desc')
    .executeTakeFirst();
}

export async function insertProposal(db: InventoryDb, row: ProposalRow): Promise<void> {
  await db.insertInto('inventory_proposals').values(row).execute();
}

/** Moves a proposal on only from the status given (decisions race with scans); true when it moved. */
export async function updateProposal(db: InventoryDb, id: string, from: readonly string[], set: Updateable<InventoryProposalTable>): Promise<boolean> {
  const result = await db.updateTable('inventory_proposals').set(set).where('id', '=', id).where('status', 'in', from).executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Proposals of the environment in any of `statuses` (resolving the accepted ones when drift is gone). */
export async function proposalsIn(db: InventoryDb, environmentId: string, statuses: readonly string[]): Promise<ProposalRow[]> {
  return db.selectFrom('inventory_proposals').selectAll().where('environment_id', '=', environmentId).where('status', 'in', statuses).execute();
}

export async function findProposal(db: InventoryDb, id: string, tenants: TenantFilter = { kind: 'all' }): Promise<ProposalRow | undefined> {
  return tenantRows(db.selectFrom('inventory_proposals').selectAll().where('id', '=', id), tenants).executeTakeFirst();
}

export async function findProposalByRun(db: InventoryDb, runId: string): Promise<ProposalRow | undefined> {
  return db.selectFrom('inventory_proposals').selectAll().where('run_id', '=', runId).executeTakeFirst();
}

/** A page of proposals, newest first (proposal ids are time-ordered), before the id `before`. */
export async function listProposals(
  db: InventoryDb,
  dialect: SqlDialect,
  tenants: TenantFilter,
  query: { status?: string; environment?: string; before?: string; limit: number },
): Promise<ProposalRow[]> {
  let q = tenantRows(db.selectFrom('inventory_proposals').selectAll(), tenants);
  if (query.status !== undefined) q = q.where('status', '=', query.status);
  if (query.environment !== undefined) q = q.where('environment_id', '=', query.environment);
  if (query.before !== undefined) q = q.where('id', '<', query.before);
  return firstRows(q.orderBy('id', 'desc'), dialect, query.limit).execute();
}
