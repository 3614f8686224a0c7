import { sql, type Kysely } from 'kysely';
import { sqlTypes, type MigrationSource } from '../platform/sql/migrations';

/** The inventory module's schema: environments with their desired state and drift status, ignore rules, proposals. */
export const inventoryMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  return {
    '20261130-60-inventory': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('inventory_environments')
          .addColumn('environment_id', t.key, (c) => c.primaryKey())
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
          .addColumn('observed_digest', t.key)
          .execute();
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
  };
};
