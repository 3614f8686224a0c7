import { sql, type Kysely, type Migration } from 'kysely';
import { dropIndex, legacyTenantOfStack, type MigrationSource, sqlTypes, withSeq } from '../../shared/platform/sql/migrations';

/** The local cloud: the resources of each target, whether a target answers, and a log of the applies it took. */
export const localCloudMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const tables: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('local_cloud_resources')
        .addColumn('target', t.key, (c) => c.notNull())
        .addColumn('id', t.key, (c) => c.notNull())
        .addColumn('urn', t.text, (c) => c.notNull())
        .addColumn('type', t.key, (c) => c.notNull())
        // JSON object of the resource's properties.
        .addColumn('properties', t.text, (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        // Lists by target read the key in order; lists by stack use the (target, urn) index of a later migration.
        .addPrimaryKeyConstraint('local_cloud_resources_pk', ['target', 'id'])
        .execute();
      await db.schema
        .createTable('local_cloud_targets')
        .addColumn('target', t.key, (c) => c.primaryKey())
        // 1 or 0; a target without a row answers.
        .addColumn('reachable', 'integer', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      // Insert-only, so concurrent applies never update one counter row.
      await withSeq(db.schema.createTable('local_cloud_applies'), dialect)
        .addColumn('target', t.key, (c) => c.notNull())
        .addColumn('stack', t.key, (c) => c.notNull())
        .addColumn('plan_digest', t.key, (c) => c.notNull())
        .addColumn('applied_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('local_cloud_applies_stack').on('local_cloud_applies').columns(['target', 'stack']).execute();
    },
  };
  /**
   * Lets one stack's resources be read by urn prefix (`listStack`), which the local cloud observer does for every
   * environment of a scan. A prefix is a range `[prefix, end)` only where urns compare code point by code point:
   * SQLite's default (BINARY) does; PostgreSQL's database collation may not (a linguistic collation can ignore the
   * `:` and `-` that tell stack `dev` from `dev-2`), so the column is given the C collation; Azure SQL's default is
   * case-insensitive (stack `DEV` would match `dev`) and cannot index NVARCHAR(MAX), so the column becomes
   * NVARCHAR(450) with a binary collation: with the 200-character target and id of the clustered key, the index key
   * stays within Azure SQL's 1,700 bytes.
   */
  const byUrn: Migration = {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') {
        await db.schema.alterTable('local_cloud_resources').alterColumn('urn', (c) => c.setDataType(sql`text collate "C"`)).execute();
      } else if (dialect === 'mssql') {
        // ALTER COLUMN restates nullability in T-SQL; without `not null` the column would become nullable.
        await sql`alter table local_cloud_resources alter column urn nvarchar(450) collate Latin1_General_100_BIN2 not null`.execute(db);
      }
      await db.schema.createIndex('local_cloud_resources_urn').on('local_cloud_resources').columns(['target', 'urn']).execute();
    },
  };
  /**
   * Resources are kept in their tenant's scope, and a stack's are read by (target, scope, urn prefix): a urn names
   * a project and stack, which two tenants may share. A resource recorded before takes the tenant of the runs of
   * the stack its urn names (`legacyTenantOfStack`); one no run's stack names goes to the scope `unknown`.
   */
  const byTenant: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('local_cloud_resources').addColumn('scope', t.key, (c) => c.notNull().defaultTo('unknown')).execute();
      const all = db as Kysely<{ local_cloud_resources: { target: string; id: string; urn: string; scope: string } }>;
      const rows = await all.selectFrom('local_cloud_resources').select(['target', 'id', 'urn']).execute();
      const stacks = [...new Set(rows.map((r) => urnStack(r.urn)).filter((s): s is string => s !== undefined))];
      for (const stack of stacks) {
        const tenant = await legacyTenantOfStack(db, dialect, stack);
        if (tenant === undefined) continue;
        for (const row of rows.filter((r) => urnStack(r.urn) === stack)) {
          await all.updateTable('local_cloud_resources').set({ scope: tenant }).where('target', '=', row.target).where('id', '=', row.id).execute();
        }
      }
      await dropIndex(db, dialect, 'local_cloud_resources_urn', 'local_cloud_resources');
      await db.schema.createIndex('local_cloud_resources_stack').on('local_cloud_resources').columns(['target', 'scope', 'urn']).execute();
    },
  };
  return { '20261130-30-local-cloud-tables': tables, '20261130-32-local-cloud-resources-by-urn': byUrn, '20261201-11-local-cloud-resources-by-tenant': byTenant };
};

/** The stack a urn names (`urn:pulumi:<stack>::…`). */
function urnStack(urn: string): string | undefined {
  return /^urn:pulumi:([^:]+)::/.exec(urn)?.[1];
}
