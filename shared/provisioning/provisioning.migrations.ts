import type { Kysely } from 'kysely';
import { sqlTypes, type MigrationSource } from '../platform/sql/migrations';

/** The provisioning module's schema: stack locks and their audit trail. */
export const provisioningMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  return {
    '20261130-40-provisioning-stack-locks': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('provisioning_stack_locks')
          .addColumn('stack', t.key, (c) => c.primaryKey())
          .addColumn('holder_run', t.key, (c) => c.notNull())
          .addColumn('holder_host', t.key, (c) => c.notNull())
          .addColumn('acquired_at', 'bigint', (c) => c.notNull())
          .addColumn('expires_at', 'bigint', (c) => c.notNull())
          .addColumn('version', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('provisioning_lock_breaks')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('stack', t.key, (c) => c.notNull())
          .addColumn('holder_run', t.key, (c) => c.notNull())
          .addColumn('holder_host', t.key, (c) => c.notNull())
          .addColumn('broken_by', t.key, (c) => c.notNull())
          .addColumn('reason', t.text, (c) => c.notNull())
          .addColumn('broken_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('provisioning_lock_breaks_stack').on('provisioning_lock_breaks').columns(['stack', 'broken_at']).execute();
      },
    },
  };
};
