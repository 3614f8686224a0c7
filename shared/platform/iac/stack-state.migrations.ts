import type { Kysely, Migration } from 'kysely';
import { sqlTypes, type MigrationSource } from '../sql/migrations';

/** The local IaC engine's state backend: one row per stack (what Pulumi keeps in its state file). */
export const localIacMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const stacks: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('local_iac_stacks')
        .addColumn('stack', t.key, (c) => c.primaryKey())
        .addColumn('project', t.key, (c) => c.notNull())
        .addColumn('serial', 'integer', (c) => c.notNull())
        // JSON array of StateResource (plan.ts).
        .addColumn('resources', t.text, (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  };
  return { '20261130-31-local-iac-stacks': stacks };
};
