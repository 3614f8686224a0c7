import { sql, type Kysely, type Migration } from 'kysely';
import { sqlTypes, type MigrationSource } from '../platform/sql/migrations';

/** The capacity module's schema: pools, editions and their limits, tenants and their usage, leases. */
export const capacityMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const migration: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('capacity_pools')
        .addColumn('id', t.key, (c) => c.primaryKey())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('target', t.key, (c) => c.notNull())
        .addColumn('capacity', 'integer', (c) => c.notNull())
        .addColumn('min_units', 'integer', (c) => c.notNull())
        .addColumn('max_units', 'integer', (c) => c.notNull())
        .addColumn('labels', t.text, (c) => c.notNull())
        .addColumn('iac_stack', t.key)
        .addColumn('used', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('fencing_counter', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('capacity_pools_kind').on('capacity_pools').columns(['kind']).execute();
      await db.schema
        .createTable('capacity_editions')
        .addColumn('name', t.key, (c) => c.primaryKey())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('capacity_edition_limits')
        .addColumn('edition', t.key, (c) => c.notNull())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('max_units', 'integer', (c) => c.notNull())
        .addColumn('max_ttl_seconds', 'integer', (c) => c.notNull())
        .addPrimaryKeyConstraint('capacity_edition_limits_pk', ['edition', 'kind'])
        .execute();
      await db.schema
        .createTable('capacity_tenants')
        .addColumn('id', t.key, (c) => c.primaryKey())
        .addColumn('edition', t.key, (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('capacity_tenant_usage')
        .addColumn('tenant_id', t.key, (c) => c.notNull())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('used', 'integer', (c) => c.notNull().defaultTo(0))
        .addPrimaryKeyConstraint('capacity_tenant_usage_pk', ['tenant_id', 'kind'])
        .execute();
      await db.schema
        .createTable('capacity_leases')
        .addColumn('id', t.key, (c) => c.primaryKey())
        .addColumn('tenant_id', t.key, (c) => c.notNull())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('pool_id', t.key, (c) => c.notNull())
        .addColumn('units', 'integer', (c) => c.notNull())
        .addColumn('holder', t.key, (c) => c.notNull())
        .addColumn('fencing_token', 'bigint', (c) => c.notNull())
        .addColumn('ttl_seconds', 'integer', (c) => c.notNull())
        .addColumn('granted_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .addColumn('renewed_at', 'bigint')
        .addColumn('ended_at', 'bigint')
        .addColumn('state', t.key, (c) => c.notNull())
        .addColumn('idempotency_key', t.key)
        // SQLite: the lease row lives in its primary-key b-tree, one page fewer to write per grant and release.
        .$call((table) => (dialect === 'sqlite' ? table.modifyEnd(sql`without rowid`) : table))
        .execute();
      // The sweep reads only active leases past expiry: its cost follows the expired leases, not all leases.
      await db.schema.createIndex('capacity_leases_due').on('capacity_leases').columns(['state', 'expires_at']).execute();
      // A retried acquire finds its lease; a concurrent duplicate fails here instead of granting twice.
      await db.schema
        .createIndex('capacity_leases_idempotency')
        .on('capacity_leases')
        .columns(['tenant_id', 'idempotency_key'])
        .unique()
        .where('idempotency_key', 'is not', null)
        .execute();
      // Tenant-filtered lists page by id. Few indexes on purpose: every index is one more page written per grant.
      await db.schema.createIndex('capacity_leases_tenant').on('capacity_leases').columns(['tenant_id', 'id']).execute();
    },
  };
  return { '20261130-10-capacity-tables': migration };
};
