import type { Kysely, Selectable, Transaction, Updateable } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import type { AnyDb, SqlDialect } from '../platform/sql/database';
import { firstRows, LOCK_ALIAS, lockingRows } from '../platform/sql/dialect';
import type { FieldProblem } from '../platform/validation/validation';
import type { IgnoreRule } from './drift';
import type { EnvironmentKey } from './environment';
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

/**
 * Narrows a query of a table that names an environment by `tenant_id` and `environment_id` to one environment:
 * environment ids are unique per tenant only.
 */
function forEnvironment<Q>(query: Q, key: EnvironmentKey): Q {
  const where = (q: Q, column: string, value: string) => (q as unknown as { where: (c: string, op: '=', v: string) => Q }).where(column, '=', value);
  return where(where(query, 'tenant_id', key.tenant), 'environment_id', key.id);
}

/** The environments of that id the tenants may see: one for a tenant, one per tenant that has it for all. */
export async function findEnvironments(db: InventoryDb, environmentId: string, tenants: TenantFilter): Promise<EnvironmentRow[]> {
  return tenantRows(db.selectFrom('inventory_environments').selectAll().where('environment_id', '=', environmentId), tenants).orderBy('tenant_id').execute();
}

export async function findEnvironment(db: InventoryDb, key: EnvironmentKey): Promise<EnvironmentRow | undefined> {
  return forEnvironment(db.selectFrom('inventory_environments').selectAll(), key).executeTakeFirst();
}

/** The environment's row, locked until the transaction ends (scans and decisions of one environment take turns). */
export async function lockEnvironment(trx: Transaction<InventoryTables>, dialect: SqlDialect, key: EnvironmentKey): Promise<EnvironmentRow | undefined> {
  const query = trx.selectFrom(`inventory_environments as ${LOCK_ALIAS.wait}`).selectAll().where('tenant_id', '=', key.tenant).where('environment_id', '=', key.id);
  return lockingRows(query, dialect, 'wait').executeTakeFirst();
}

/** A page of environments in (tenant, id) order, after `after`. */
export async function listEnvironments(db: InventoryDb, dialect: SqlDialect, tenants: TenantFilter, page: { after?: EnvironmentKey; limit: number }): Promise<EnvironmentRow[]> {
  let query = tenantRows(db.selectFrom('inventory_environments').selectAll(), tenants);
  const after = page.after;
  if (after !== undefined) {
    query = query.where((eb) => eb.or([eb('tenant_id', '>', after.tenant), eb.and([eb('tenant_id', '=', after.tenant), eb('environment_id', '>', after.id)])]));
  }
  return firstRows(query.orderBy('tenant_id').orderBy('environment_id'), dialect, page.limit).execute();
}

export async function insertEnvironment(db: InventoryDb, row: EnvironmentRow): Promise<void> {
  await db.insertInto('inventory_environments').values(row).execute();
}

export async function updateEnvironment(db: InventoryDb, key: EnvironmentKey, set: Updateable<InventoryEnvironmentTable>): Promise<void> {
  await forEnvironment(db.updateTable('inventory_environments').set(set), key).execute();
}

/** Environments due for a scan at `now`, the longest overdue first. */
export async function dueEnvironments(db: InventoryDb, now: number, limit: number): Promise<{ key: EnvironmentKey; name: string; nextScanAt: number }[]> {
  const rows = await db
    .selectFrom('inventory_environments')
    .select(['tenant_id', 'environment_id', 'name', 'next_scan_at'])
    .where('next_scan_at', '<=', now)
    .orderBy('next_scan_at')
    .orderBy('tenant_id')
    .orderBy('environment_id')
    .execute();
  return rows.slice(0, limit).map((r) => ({ key: { tenant: r.tenant_id, id: r.environment_id }, name: r.name, nextScanAt: Number(r.next_scan_at) }));
}

/**
 * Claims a due scan for this host: moves `next_scan_at` on only if it still has the value the host read, so of
 * several hosts' timers exactly one scans the environment in that round.
 */
export async function claimScan(db: InventoryDb, key: EnvironmentKey, seenNextScanAt: number, nextScanAt: number): Promise<boolean> {
  const result = await forEnvironment(db.updateTable('inventory_environments').set({ next_scan_at: nextScanAt }), key)
    .where('next_scan_at', '=', seenNextScanAt)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function insertIgnoreRule(
  db: InventoryDb,
  key: EnvironmentKey,
  rule: IgnoreRule,
  made: { by: string; at: number; idempotencyKey?: string; requestDigest: string },
): Promise<void> {
  await db
    .insertInto('inventory_ignore_rules')
    .values({
      id: rule.id,
      environment_id: key.id,
      tenant_id: key.tenant,
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
  key: EnvironmentKey,
  options: { includeDeleted: boolean; page?: { after?: string; limit: number } },
): Promise<RecordedIgnoreRule[]> {
  let query = forEnvironment(db.selectFrom('inventory_ignore_rules').selectAll(), key);
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
export async function findIgnoreRuleByKey(db: InventoryDb, environment: EnvironmentKey, idempotencyKey: string): Promise<{ id: string; requestDigest: string | null } | undefined> {
  const row = await forEnvironment(db.selectFrom('inventory_ignore_rules').select(['id', 'request_digest']), environment).where('idempotency_key', '=', idempotencyKey).executeTakeFirst();
  return row ? { id: row.id, requestDigest: row.request_digest } : undefined;
}

export async function deleteIgnoreRule(db: InventoryDb, key: EnvironmentKey, ruleId: string, by: string, at: number): Promise<boolean> {
  const result = await forEnvironment(db.updateTable('inventory_ignore_rules').set({ deleted_by: by, deleted_at: at }), key)
    .where('id', '=', ruleId)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function openProposal(db: InventoryDb, key: EnvironmentKey): Promise<ProposalRow | undefined> {
  return forEnvironment(db.selectFrom('inventory_proposals').selectAll(), key).where('status', '=', 'open').executeTakeFirst();
}

/** The environment's newest proposal that is accepted or dismissed: a scan with its findings opens no new one. */
export async function latestDecidedProposal(db: InventoryDb, key: EnvironmentKey): Promise<ProposalRow | undefined> {
  return forEnvironment(db.selectFrom('inventory_proposals').selectAll(), key)
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
export async function proposalsIn(db: InventoryDb, key: EnvironmentKey, statuses: readonly string[]): Promise<ProposalRow[]> {
  return forEnvironment(db.selectFrom('inventory_proposals').selectAll(), key).where('status', 'in', statuses).execute();
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

/** A message inventory could not take in, as recorded. */
export interface InventoryRejection {
  readonly messageId: string;
  readonly eventId?: string;
  readonly eventType?: string;
  readonly tenantId?: string;
  readonly code: string;
  readonly reason: string;
  readonly problems: readonly FieldProblem[];
  readonly receivedAt: Date;
}

/** Records a rejection; false when its message was rejected before (a redelivery): the first record stands. */
export async function insertRejection(db: InventoryDb, rejection: InventoryRejection): Promise<boolean> {
  const known = await db.selectFrom('inventory_rejections').select('message_id').where('message_id', '=', rejection.messageId).executeTakeFirst();
  if (known) return false;
  await db
    .insertInto('inventory_rejections')
    .values({
      message_id: rejection.messageId,
      event_id: rejection.eventId ?? null,
      event_type: rejection.eventType ?? null,
      tenant_id: rejection.tenantId ?? null,
      code: rejection.code,
      reason: rejection.reason,
      problems: JSON.stringify(rejection.problems),
      received_at: rejection.receivedAt.getTime(),
    })
    .execute();
  return true;
}

export async function findRejection(db: InventoryDb, messageId: string): Promise<InventoryRejection | undefined> {
  const row = await db.selectFrom('inventory_rejections').selectAll().where('message_id', '=', messageId).executeTakeFirst();
  if (!row) return undefined;
  return {
    messageId: row.message_id,
    ...(row.event_id !== null ? { eventId: row.event_id } : {}),
    ...(row.event_type !== null ? { eventType: row.event_type } : {}),
    ...(row.tenant_id !== null ? { tenantId: row.tenant_id } : {}),
    code: row.code,
    reason: row.reason,
    problems: JSON.parse(row.problems) as FieldProblem[],
    receivedAt: new Date(Number(row.received_at)),
  };
}

/**
 * Marks every environment stale as of `at` and due for a scan now (after a restore of the store, which may have
 * lost observations): stale until a scan that starts after `at` observes it. Returns how many there are.
 */
export async function markEveryEnvironmentStale(db: InventoryDb, at: number, reason: string): Promise<number> {
  const result = await db
    .updateTable('inventory_environments')
    .set({ stale_since: at, stale_reason: reason, next_scan_at: at })
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
