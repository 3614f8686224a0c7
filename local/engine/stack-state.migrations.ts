import { sql, type Kysely, type Migration } from 'kysely';
import { legacyStackTenant, renameTable, sqlTypes, type MigrationSource } from '../../shared/platform/sql/migrations';

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
  /**
   * States are kept by `tenant/project/stack` (stack-ref.ts): two tenants' `development` stacks are two states. A
   * state recorded before takes the tenant of its stack's runs (`legacyStackTenant`); one whose stack no run names
   * (written by hand) goes to the tenant `unknown`, where no run finds it.
   */
  const byTenant: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('local_iac_stacks_by_tenant')
        .addColumn('tenant_id', t.key, (c) => c.notNull())
        .addColumn('project', t.key, (c) => c.notNull())
        .addColumn('stack', t.key, (c) => c.notNull())
        .addColumn('serial', 'integer', (c) => c.notNull())
        .addColumn('resources', t.text, (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('local_iac_stacks_pk', ['tenant_id', 'project', 'stack'])
        .execute();
      const tenant = legacyStackTenant(dialect, 's.stack');
      await sql`insert into local_iac_stacks_by_tenant (tenant_id, project, stack, serial, resources, updated_at)
        select coalesce(${tenant}, 'unknown'), s.project, s.stack, s.serial, s.resources, s.updated_at from local_iac_stacks s`.execute(db);
      await db.schema.dropTable('local_iac_stacks').execute();
      await renameTable(db, dialect, 'local_iac_stacks_by_tenant', 'local_iac_stacks');
    },
  };
  return { '20261130-31-local-iac-stacks': stacks, '20261201-10-local-iac-stacks-by-tenant': byTenant };
};
