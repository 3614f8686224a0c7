import type { Kysely, Migration } from 'kysely';
import { sqlTypes, withSeq, type MigrationSource } from '../../shared/platform/sql/migrations';

/**
 * The local host's Durable task hub (local/durable): orchestration instances with their lease, each instance's
 * history, its inbox of pending events (activity results, timers, raised events) and the activity work items.
 * Only the schema lives here, because every migration source is listed in shared/migrations.ts and shared/ never
 * imports local/; the code that reads and writes these tables is local/durable/durable.repository.ts.
 */
export const durableMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const migration: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('durable_instances')
        .addColumn('instance_id', t.key, (c) => c.primaryKey())
        .addColumn('name', t.key, (c) => c.notNull())
        .addColumn('execution_id', t.key, (c) => c.notNull())
        .addColumn('status', t.key, (c) => c.notNull())
        .addColumn('input', t.text)
        .addColumn('output', t.text)
        .addColumn('custom_status', t.text)
        .addColumn('failure', t.text)
        .addColumn('runner_state', t.text, (c) => c.notNull())
        .addColumn('history_length', 'integer', (c) => c.notNull())
        .addColumn('version', 'integer', (c) => c.notNull())
        .addColumn('lease_owner', t.key)
        .addColumn('lease_expires_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('durable_instances_status').on('durable_instances').columns(['status', 'lease_expires_at']).execute();
      await db.schema
        .createTable('durable_history')
        .addColumn('instance_id', t.key, (c) => c.notNull())
        .addColumn('position', 'integer', (c) => c.notNull())
        .addColumn('execution_id', t.key, (c) => c.notNull())
        .addColumn('event_type', 'integer', (c) => c.notNull())
        .addColumn('event', t.text, (c) => c.notNull())
        .addColumn('recorded_by', t.key, (c) => c.notNull())
        .addColumn('recorded_at', 'bigint', (c) => c.notNull())
        // Two workers appending the same position is impossible by construction (the lease); the key makes it certain.
        .addPrimaryKeyConstraint('durable_history_pk', ['instance_id', 'position'])
        .execute();
      await withSeq(db.schema.createTable('durable_inbox'), dialect)
        .addColumn('instance_id', t.key, (c) => c.notNull())
        .addColumn('execution_id', t.key)
        .addColumn('dedupe_key', t.key)
        .addColumn('event', t.text, (c) => c.notNull())
        .addColumn('visible_at', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        // An activity result or a timer is delivered to an execution at most once.
        .addUniqueConstraint('durable_inbox_dedupe', ['instance_id', 'execution_id', 'dedupe_key'])
        .execute();
      await db.schema.createIndex('durable_inbox_due').on('durable_inbox').columns(['visible_at', 'instance_id']).execute();
      await db.schema.createIndex('durable_inbox_instance').on('durable_inbox').columns(['instance_id', 'seq']).execute();
      await withSeq(db.schema.createTable('durable_activities'), dialect)
        .addColumn('instance_id', t.key, (c) => c.notNull())
        .addColumn('execution_id', t.key, (c) => c.notNull())
        .addColumn('task_id', 'integer', (c) => c.notNull())
        .addColumn('name', t.key, (c) => c.notNull())
        .addColumn('input', t.text)
        .addColumn('claims', 'integer', (c) => c.notNull())
        .addColumn('lease_owner', t.key)
        .addColumn('lease_expires_at', 'bigint')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addUniqueConstraint('durable_activities_task', ['instance_id', 'execution_id', 'task_id'])
        .execute();
      await db.schema.createIndex('durable_activities_due').on('durable_activities').columns(['lease_expires_at']).execute();
    },
  };
  // Sub-orchestrations: a child instance names the parent execution and task awaiting it, so its end (completion,
  // failure, termination) is delivered to that parent in the same transaction that records it.
  const parents: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('durable_instances').addColumn('parent_instance_id', t.key).execute();
      await db.schema.alterTable('durable_instances').addColumn('parent_execution_id', t.key).execute();
      await db.schema.alterTable('durable_instances').addColumn('parent_task_id', 'integer').execute();
    },
  };
  // Orchestration versioning: the version an instance was created with (null: none), which it keeps.
  const versions: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('durable_instances').addColumn('orchestration_version', t.key).execute();
    },
  };
  return { '20261130-05-platform-durable-task-hub': migration, '20261204-05-platform-durable-parents': parents, '20261205-05-platform-durable-versions': versions };
};
