import { sql, type CreateTableBuilder, type Kysely } from 'kysely';
import type { SqlDialect } from '../platform/sql/dialect';
import { dropIndex, type MigrationSource, renameTable, sqlTypes } from '../platform/sql/migrations';

/** The inventory module's schema: environments with their desired state and drift status, ignore rules, proposals. */
export const inventoryMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  return {
    '20261130-60-inventory': {
      async up(db: Kysely<unknown>) {
        await environmentColumns(db.schema.createTable('inventory_environments').addColumn('environment_id', t.key, (c) => c.primaryKey()), t).execute();
        await db.schema.createIndex('inventory_environments_due').on('inventory_environments').columns(['next_scan_at']).execute();
        await db.schema.createIndex('inventory_environments_tenant').on('inventory_environments').columns(['tenant_id', 'environment_id']).execute();

        await db.schema
          .createTable('inventory_ignore_rules')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('environment_id', t.key, (c) => c.notNull())
          .addColumn('tenant_id', t.key, (c) => c.notNull())
          .addColumn('scope_kind', t.key, (c) => c.notNull())
          .addColumn('scope_value', t.key, (c) => c.notNull())
          .addColumn('path', t.key, (c) => c.notNull())
          .addColumn('reason', t.text, (c) => c.notNull())
          .addColumn('owner', t.key, (c) => c.notNull())
          .addColumn('expires_at', 'bigint', (c) => c.notNull())
          .addColumn('holds_on_apply', 'integer', (c) => c.notNull())
          .addColumn('created_by', t.key, (c) => c.notNull())
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('deleted_by', t.key)
          .addColumn('deleted_at', 'bigint')
          .addColumn('idempotency_key', t.key)
          .addColumn('request_digest', t.key)
          .execute();
        // A retried POST with its Idempotency-Key finds the rule it made instead of recording a second one.
        await db.schema
          .createIndex('inventory_ignore_rules_idempotency')
          .on('inventory_ignore_rules')
          .columns(['environment_id', 'idempotency_key'])
          .unique()
          .where(sql.ref('idempotency_key'), 'is not', null)
          .execute();
        await db.schema.createIndex('inventory_ignore_rules_environment').on('inventory_ignore_rules').columns(['environment_id', 'id']).execute();

        await db.schema
          .createTable('inventory_proposals')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('environment_id', t.key, (c) => c.notNull())
          .addColumn('tenant_id', t.key, (c) => c.notNull())
          .addColumn('fingerprint', t.key, (c) => c.notNull())
          .addColumn('status', t.key, (c) => c.notNull())
          .addColumn('findings', t.text, (c) => c.notNull())
          .addColumn('plan', t.text, (c) => c.notNull())
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('last_seen_at', 'bigint', (c) => c.notNull())
          .addColumn('updated_at', 'bigint', (c) => c.notNull())
          .addColumn('superseded_by', t.key)
          .addColumn('run_id', t.key)
          .addColumn('decided_by', t.key)
          .addColumn('note', t.text)
          .execute();
        // One open proposal per environment, whatever two scans do at once: the second insert fails and finds the first.
        await db.schema
          .createIndex('inventory_proposals_one_open')
          .on('inventory_proposals')
          .columns(['environment_id'])
          .unique()
          .where(sql.ref('status'), '=', 'open')
          .execute();
        await db.schema.createIndex('inventory_proposals_environment').on('inventory_proposals').columns(['environment_id', 'id']).execute();
        await db.schema.createIndex('inventory_proposals_tenant_status').on('inventory_proposals').columns(['tenant_id', 'status', 'id']).execute();
      },
    },
    // Environment ids are unique per tenant only: environments are kept by (tenant, id), with the project of the
    // stack they are bound to (from the run that applied their desired state), and their rules and proposals are
    // found by both.
    '20261201-13-inventory-environments-by-tenant': {
      up: (db: Kysely<unknown>) => environmentsByTenant(db, dialect),
    },
    '20261203-30-inventory-rejections': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('inventory_rejections')
          .addColumn('message_id', t.key, (c) => c.primaryKey())
          .addColumn('event_id', t.key)
          .addColumn('event_type', t.key)
          .addColumn('tenant_id', t.key)
          .addColumn('code', t.key, (c) => c.notNull())
          .addColumn('reason', t.text, (c) => c.notNull())
          .addColumn('problems', t.text, (c) => c.notNull())
          .addColumn('received_at', 'bigint', (c) => c.notNull())
          .execute();
      },
    },
  };
};

async function environmentsByTenant(db: Kysely<unknown>, dialect: SqlDialect): Promise<void> {
  const t = sqlTypes(dialect);
  await environmentColumns(db.schema.createTable('inventory_environments_by_tenant').addColumn('environment_id', t.key, (c) => c.notNull()), t)
    .addColumn('project', t.key, (c) => c.notNull().defaultTo(''))
    .addPrimaryKeyConstraint('inventory_environments_pk', ['tenant_id', 'environment_id'])
    .execute();
  const columns = sql.join(ENVIRONMENT_COLUMNS.map((c) => sql.ref(c)));
  const copied = sql.join(ENVIRONMENT_COLUMNS.map((c) => sql.ref(`e.${c}`)));
  await sql`insert into inventory_environments_by_tenant (${columns}, project)
    select ${copied}, coalesce((select r.project from provisioning_runs r where r.id = e.desired_run_id), '') from inventory_environments e`.execute(db);
  await db.schema.dropTable('inventory_environments').execute();
  await renameTable(db, dialect, 'inventory_environments_by_tenant', 'inventory_environments');
  // Observed inventory is partitioned by tenant and environment now (observed-inventory.repository.ts): the next scan
  // of each environment writes its new partition whole, as if it had never been observed.
  await sql`update inventory_environments set observed_digest = null`.execute(db);
  await db.schema.createIndex('inventory_environments_due_by_tenant').on('inventory_environments').columns(['next_scan_at']).execute();

  await dropIndex(db, dialect, 'inventory_ignore_rules_idempotency', 'inventory_ignore_rules');
  await dropIndex(db, dialect, 'inventory_ignore_rules_environment', 'inventory_ignore_rules');
  await dropIndex(db, dialect, 'inventory_proposals_one_open', 'inventory_proposals');
  await dropIndex(db, dialect, 'inventory_proposals_environment', 'inventory_proposals');
  await db.schema
    .createIndex('inventory_ignore_rules_idempotency_by_tenant')
    .on('inventory_ignore_rules')
    .columns(['tenant_id', 'environment_id', 'idempotency_key'])
    .unique()
    .where(sql.ref('idempotency_key'), 'is not', null)
    .execute();
  await db.schema.createIndex('inventory_ignore_rules_by_environment').on('inventory_ignore_rules').columns(['tenant_id', 'environment_id', 'id']).execute();
  await db.schema
    .createIndex('inventory_proposals_one_open_by_tenant')
    .on('inventory_proposals')
    .columns(['tenant_id', 'environment_id'])
    .unique()
    .where(sql.ref('status'), '=', 'open')
    .execute();
  await db.schema.createIndex('inventory_proposals_by_environment').on('inventory_proposals').columns(['tenant_id', 'environment_id', 'id']).execute();
}

/** Every column of an environment's row before it had a project: what the by-tenant migration copies. */
const ENVIRONMENT_COLUMNS = [
  'environment_id', 'tenant_id', 'name', 'tier', 'stack', 'release_name', 'release_version', 'desired', 'project_rules', 'desired_run_id', 'desired_at',
  'last_run_id', 'last_run_state', 'last_run_at', 'scan_disabled_by', 'scan_disabled_reason', 'scan_disabled_at', 'next_scan_at', 'last_scan_at',
  'last_scan_outcome', 'last_scan_reason', 'last_observed_at', 'stale_since', 'stale_reason', 'drift_status', 'report', 'observed_digest',
] as const;

/** The columns of an environment's row after its id (whose key differs by migration). */
function environmentColumns(table: CreateTableBuilder<string, string>, t: ReturnType<typeof sqlTypes>): CreateTableBuilder<string, string> {
  return table
    .addColumn('tenant_id', t.key, (c) => c.notNull())
    .addColumn('name', t.key, (c) => c.notNull())
    .addColumn('tier', t.key, (c) => c.notNull())
    .addColumn('stack', t.key, (c) => c.notNull())
    .addColumn('release_name', t.key, (c) => c.notNull())
    .addColumn('release_version', t.key, (c) => c.notNull())
    .addColumn('desired', t.text, (c) => c.notNull())
    .addColumn('project_rules', t.text, (c) => c.notNull())
    .addColumn('desired_run_id', t.key, (c) => c.notNull())
    .addColumn('desired_at', 'bigint', (c) => c.notNull())
    .addColumn('last_run_id', t.key)
    .addColumn('last_run_state', t.key)
    .addColumn('last_run_at', 'bigint')
    .addColumn('scan_disabled_by', t.key)
    .addColumn('scan_disabled_reason', t.text)
    .addColumn('scan_disabled_at', 'bigint')
    .addColumn('next_scan_at', 'bigint', (c) => c.notNull())
    .addColumn('last_scan_at', 'bigint')
    .addColumn('last_scan_outcome', t.key)
    .addColumn('last_scan_reason', t.text)
    .addColumn('last_observed_at', 'bigint')
    .addColumn('stale_since', 'bigint')
    .addColumn('stale_reason', t.text)
    .addColumn('drift_status', t.key)
    .addColumn('report', t.text)
    .addColumn('observed_digest', t.key);
}
