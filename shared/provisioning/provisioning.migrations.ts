import type { Kysely } from 'kysely';
import { sqlTypes, withSeq, type MigrationSource } from '../platform/sql/migrations';

/**
 * The provisioning module's schema: stack locks and their audit trail; runs, their approvals, rejected messages;
 * the plans of runs that went stale and were replanned; the ids of what runs stored at external services, and the
 * local host's stand-ins for those services; what a reconciliation run carries out; plans waiting for a policy check.
 */
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
    '20261130-41-provisioning-runs': {
      async up(db: Kysely<unknown>) {
        await withSeq(db.schema.createTable('provisioning_runs'), dialect)
          .addColumn('id', t.key, (c) => c.notNull().unique())
          .addColumn('promotion_id', t.key, (c) => c.notNull().unique())
          .addColumn('tenant_id', t.key, (c) => c.notNull())
          .addColumn('environment_id', t.key, (c) => c.notNull())
          .addColumn('environment_name', t.key, (c) => c.notNull())
          .addColumn('tier', t.key, (c) => c.notNull())
          .addColumn('release_name', t.key, (c) => c.notNull())
          .addColumn('release_version', t.key, (c) => c.notNull())
          .addColumn('stack', t.key, (c) => c.notNull())
          .addColumn('repository', t.text, (c) => c.notNull())
          .addColumn('commit_sha', t.key, (c) => c.notNull())
          .addColumn('project_path', t.text, (c) => c.notNull())
          .addColumn('requested_by', t.key, (c) => c.notNull())
          .addColumn('state', t.key, (c) => c.notNull())
          .addColumn('waiting_kind', t.key)
          .addColumn('waiting_for', t.text)
          .addColumn('plan_digest', t.key)
          .addColumn('approval_required', 'integer')
          .addColumn('plan_receipt', t.text)
          .addColumn('apply_receipt', t.text)
          .addColumn('error_code', t.key)
          .addColumn('error_message', t.text)
          .addColumn('superseded_by', t.key)
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('updated_at', 'bigint', (c) => c.notNull())
          .addColumn('finished_at', 'bigint')
          .execute();
        // Listing a tenant's runs by id (the cursor), and one stack's runs in FIFO order.
        await db.schema.createIndex('provisioning_runs_tenant').on('provisioning_runs').columns(['tenant_id', 'id']).execute();
        await db.schema.createIndex('provisioning_runs_stack').on('provisioning_runs').columns(['stack', 'seq']).execute();
        await db.schema
          .createTable('provisioning_approvals')
          .addColumn('run_id', t.key, (c) => c.primaryKey())
          .addColumn('decision', t.key, (c) => c.notNull())
          .addColumn('plan_digest', t.key, (c) => c.notNull())
          .addColumn('decided_by', t.key, (c) => c.notNull())
          .addColumn('comment', t.text)
          .addColumn('decided_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('provisioning_rejections')
          .addColumn('message_id', t.key, (c) => c.primaryKey())
          .addColumn('promotion_id', t.key)
          .addColumn('tenant_id', t.key)
          .addColumn('code', t.key, (c) => c.notNull())
          .addColumn('reason', t.text, (c) => c.notNull())
          .addColumn('problems', t.text, (c) => c.notNull())
          .addColumn('received_at', 'bigint', (c) => c.notNull())
          .execute();
      },
    },
    '20261130-42-provisioning-stale-plans': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('provisioning_runs').addColumn('reason', t.key, (c) => c.notNull().defaultTo('promotion')).execute();
        await db.schema.alterTable('provisioning_runs').addColumn('origin', t.text).execute();
        await db.schema.alterTable('provisioning_runs').addColumn('config', t.text).execute();
        await db.schema.alterTable('provisioning_runs').addColumn('plan_expires_at', 'bigint').execute();
        await db.schema
          .createTable('provisioning_replaced_plans')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('plan_digest', t.key, (c) => c.notNull())
          .addColumn('plan_receipt', t.text, (c) => c.notNull())
          .addColumn('decision', t.text)
          .addColumn('stale_code', t.key, (c) => c.notNull())
          .addColumn('stale_message', t.text, (c) => c.notNull())
          .addColumn('replanned_by', t.key, (c) => c.notNull())
          .addColumn('replanned_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('provisioning_replaced_plans_run').on('provisioning_replaced_plans').columns(['run_id', 'replanned_at']).execute();
      },
    },
    // The external services' ports: what a run stored at the KnowledgeHost and the GovernanceHost (ids only), and the
    // local host's stand-ins for those services (their artifacts, evidence, and the unreachable switch).
    '20261130-43-provisioning-external-services': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('provisioning_run_artifacts')
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('kind', t.key, (c) => c.notNull())
          .addColumn('external_id', t.key, (c) => c.notNull())
          .addColumn('recorded_at', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint('provisioning_run_artifacts_pk', ['run_id', 'kind', 'external_id'])
          .execute();
        await db.schema
          .createTable('local_knowledge_artifacts')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('kind', t.key, (c) => c.notNull())
          .addColumn('content', t.text, (c) => c.notNull())
          .addColumn('stored_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('local_governance_evidence')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('evidence', t.text, (c) => c.notNull())
          .addColumn('recorded_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('local_external_services')
          .addColumn('name', t.key, (c) => c.primaryKey())
          .addColumn('reachable', 'integer', (c) => c.notNull())
          .execute();
      },
    },
    // Reconciliation runs: the proposal a run carries out and the ignore rules it plans with (JSON of the run
    // model's `Reconciliation`); null for every other run. A nullable column added alone, so runs recorded before
    // it read as they did.
    '20261130-44-provisioning-reconciliation-runs': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('provisioning_runs').addColumn('reconciliation', t.text).execute();
      },
    },
    // Policy checks the GovernanceHost decides later: the plan a run made, kept until the check is decided (at most
    // one per run); and the local GovernanceHost's own record of the checks it took in and their decisions.
    '20261130-45-provisioning-policy-checks': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('provisioning_policy_checks')
          .addColumn('run_id', t.key, (c) => c.primaryKey())
          .addColumn('check_id', t.key, (c) => c.notNull())
          .addColumn('plan_digest', t.key, (c) => c.notNull())
          .addColumn('plan_receipt', t.text, (c) => c.notNull())
          .addColumn('requested_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('local_governance_checks')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('plan_digest', t.key, (c) => c.notNull())
          .addColumn('policies', t.text, (c) => c.notNull())
          .addColumn('review', t.text, (c) => c.notNull())
          .addColumn('requested_at', 'bigint', (c) => c.notNull())
          .addColumn('decision', t.text)
          .addColumn('decided_at', 'bigint')
          .execute();
      },
    },
  };
};
