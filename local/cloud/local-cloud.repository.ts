import type { Kysely } from 'kysely';
import type { AnyDb } from '../../shared/platform/sql/database';
import { isUniqueViolation } from '../../shared/platform/sql/dialect';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import type { LocalCloudResourceTable, LocalCloudTables } from './local-cloud.tables';

/** Kysely code of the local cloud. Functions take `db` first; rows are mapped before they leave this file. */
export type LocalCloudDb = Kysely<LocalCloudTables>;

export function localCloudDb(db: AnyDb): LocalCloudDb {
  return db as LocalCloudDb;
}

export interface ResourceRecord {
  readonly target: string;
  readonly id: string;
  readonly scope: string;
  readonly urn: string;
  readonly type: string;
  readonly properties: Readonly<Record<string, unknown>>;
  readonly createdAt: number;
  readonly updatedAt: number;
}

export interface ApplyRecord {
  readonly target: string;
  readonly stack: string;
  readonly planDigest: string;
  readonly appliedAt: number;
}

function resourceRowToRecord(row: LocalCloudResourceTable): ResourceRecord {
  return {
    target: row.target,
    id: row.id,
    scope: row.scope,
    urn: row.urn,
    type: row.type,
    properties: JSON.parse(row.properties) as Record<string, unknown>,
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

export async function insertResource(db: LocalCloudDb, record: ResourceRecord): Promise<void> {
  await db
    .insertInto('local_cloud_resources')
    .values({
      target: record.target,
      id: record.id,
      scope: record.scope,
      urn: record.urn,
      type: record.type,
      properties: JSON.stringify(record.properties),
      created_at: record.createdAt,
      updated_at: record.updatedAt,
    })
    .execute();
}

/** True when the resource existed. */
export async function updateResourceProperties(db: LocalCloudDb, target: string, id: string, properties: Readonly<Record<string, unknown>>, now: number): Promise<boolean> {
  const result = await db
    .updateTable('local_cloud_resources')
    .set({ properties: JSON.stringify(properties), updated_at: now })
    .where('target', '=', target)
    .where('id', '=', id)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** True when the resource existed. */
export async function updateResourceUrn(db: LocalCloudDb, target: string, id: string, urn: string, now: number): Promise<boolean> {
  const result = await db.updateTable('local_cloud_resources').set({ urn, updated_at: now }).where('target', '=', target).where('id', '=', id).executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

/** True when the resource existed. */
export async function deleteResource(db: LocalCloudDb, target: string, id: string): Promise<boolean> {
  const result = await db.deleteFrom('local_cloud_resources').where('target', '=', target).where('id', '=', id).executeTakeFirst();
  return Number(result.numDeletedRows) > 0;
}

export async function findResource(db: LocalCloudDb, target: string, id: string): Promise<ResourceRecord | undefined> {
  const row = await db.selectFrom('local_cloud_resources').selectAll().where('target', '=', target).where('id', '=', id).executeTakeFirst();
  return row ? resourceRowToRecord(row) : undefined;
}

/** A target's resources in id order (ids are time-ordered: creation order). */
export async function listResources(db: LocalCloudDb, target: string): Promise<ResourceRecord[]> {
  const rows = await db.selectFrom('local_cloud_resources').selectAll().where('target', '=', target).orderBy('id').execute();
  return rows.map(resourceRowToRecord);
}

/**
 * The resources of the stack's tenant scope whose urn belongs to its project and stack
 * (`urn:pulumi:<stack>::<project>::…`), in id order. The prefix is read as the range `[prefix, prefix with its last
 * `:` turned `;`)` (`;` is the character after `:`), which holds exactly the urns that start with the prefix when
 * urns compare code point by code point, as the `urn` column does on every dialect (see the migration
 * `local-cloud-resources-by-urn`). Unlike LIKE, a range needs no escaping of `%` and `_` in names, and every dialect
 * seeks the (target, scope, urn) index with it.
 */
export async function listStackResources(db: LocalCloudDb, target: string, stack: StackRef): Promise<ResourceRecord[]> {
  const { from, to } = stackUrnRange(stack);
  const rows = await db
    .selectFrom('local_cloud_resources')
    .selectAll()
    .where('target', '=', target)
    .where('scope', '=', stack.tenant)
    .where('urn', '>=', from)
    .where('urn', '<', to)
    .orderBy('id')
    .execute();
  return rows.map(resourceRowToRecord);
}

/** The urns of one project's stack: `from` ≤ urn < `to`. */
function stackUrnRange(stack: StackRef): { from: string; to: string } {
  return { from: `urn:pulumi:${stack.stack}::${stack.project}::`, to: `urn:pulumi:${stack.stack}::${stack.project}:;` };
}

/** Undefined when the target has no row (it was never switched): callers read that as reachable. */
export async function readReachable(db: LocalCloudDb, target: string): Promise<boolean | undefined> {
  const row = await db.selectFrom('local_cloud_targets').select('reachable').where('target', '=', target).executeTakeFirst();
  return row ? Number(row.reachable) === 1 : undefined;
}

/** Sets the flag: an update, or an insert for a target not switched before (no upsert: Azure SQL has none). */
export async function writeReachable(db: LocalCloudDb, target: string, reachable: boolean, now: number): Promise<void> {
  const values = { reachable: reachable ? 1 : 0, updated_at: now };
  const updated = await db.updateTable('local_cloud_targets').set(values).where('target', '=', target).executeTakeFirst();
  if (Number(updated.numUpdatedRows) > 0) return;
  try {
    await db.insertInto('local_cloud_targets').values({ target, ...values }).execute();
  } catch (error) {
    // Another writer inserted the row first: ours is the later write, so it overwrites.
    if (!isUniqueViolation(error)) throw error;
    await db.updateTable('local_cloud_targets').set(values).where('target', '=', target).execute();
  }
}

export async function insertApply(db: LocalCloudDb, record: ApplyRecord): Promise<void> {
  await db
    .insertInto('local_cloud_applies')
    .values({ target: record.target, stack: record.stack, plan_digest: record.planDigest, applied_at: record.appliedAt })
    .execute();
}

export async function listApplies(db: LocalCloudDb, target: string, stack?: string): Promise<ApplyRecord[]> {
  let query = db.selectFrom('local_cloud_applies').select(['target', 'stack', 'plan_digest', 'applied_at']).where('target', '=', target);
  if (stack !== undefined) query = query.where('stack', '=', stack);
  const rows = await query.orderBy('seq').execute();
  return rows.map((r) => ({ target: r.target, stack: r.stack, planDigest: r.plan_digest, appliedAt: Number(r.applied_at) }));
}

