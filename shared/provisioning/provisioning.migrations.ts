import { sql, type Kysely } from 'kysely';
import { dropColumnUnique, dropIndex, type MigrationSource, renameTable, sqlTypes, withSeq } from '../platform/sql/migrations';
import type { SqlDialect } from '../platform/sql/dialect';

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
    // Stacks belong to tenants: a stack is `tenant/project/stack` (stack-ref.ts) wherever provisioning names one.
    '20261201-12-provisioning-stacks-by-tenant': {
      up: (db: Kysely<unknown>) => stacksByTenant(db, dialect),
    },
    // Plans and applies run as runner jobs, claimed by the agents of the target's pool; stacks an apply lost its
    // runner on are refreshed before their next plan.
    '20261201-20-provisioning-runner-jobs': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('provisioning_runner_jobs')
          .addColumn('id', t.key, (c) => c.primaryKey())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('tenant_id', t.key, (c) => c.notNull())
          .addColumn('kind', t.key, (c) => c.notNull())
          .addColumn('pool', t.key, (c) => c.notNull())
          .addColumn('target', t.key, (c) => c.notNull())
          .addColumn('state', t.key, (c) => c.notNull())
          .addColumn('spec', t.text, (c) => c.notNull())
          .addColumn('fencing_token', 'bigint', (c) => c.notNull())
          .addColumn('token_hash', t.key)
          .addColumn('agent', t.key)
          .addColumn('lease_id', t.key)
          .addColumn('lease_fencing', 'bigint')
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('claimed_at', 'bigint')
          .addColumn('lease_expires_at', 'bigint')
          .addColumn('finished_at', 'bigint')
          .addColumn('outcome', t.text)
          .addColumn('degraded', t.text)
          .addColumn('log', t.text, (c) => c.notNull().defaultTo(''))
          .execute();
        await db.schema.createIndex('provisioning_runner_jobs_queue').on('provisioning_runner_jobs').columns(['pool', 'state', 'created_at']).execute();
        await db.schema.createIndex('provisioning_runner_jobs_run').on('provisioning_runner_jobs').columns(['run_id', 'created_at']).execute();
        await db.schema
          .createTable('provisioning_stack_refresh')
          .addColumn('tenant_id', t.key, (c) => c.notNull())
          .addColumn('project', t.key, (c) => c.notNull())
          .addColumn('stack', t.key, (c) => c.notNull())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('reason', t.text, (c) => c.notNull())
          .addColumn('since', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint('provisioning_stack_refresh_pk', ['tenant_id', 'project', 'stack'])
          .execute();
        await db.schema
          .createTable('provisioning_runner_agents')
          .addColumn('pool', t.key, (c) => c.notNull())
          .addColumn('agent', t.key, (c) => c.notNull())
          .addColumn('job_id', t.key)
          .addColumn('last_seen', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint('provisioning_runner_agents_pk', ['pool', 'agent'])
          .execute();
      },
    },
    // An environment is bound to its target with its stack: existing bindings keep null (their target by the rules).
    '20261202-10-provisioning-environment-targets': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('provisioning_environment_stacks').addColumn('target', t.key).execute();
      },
    },
    // When an apply in the host began its engine's changes: a retry of its step that finds it set knows the engine
    // may have changed the stack, and never applies again (a crash between the changes and their record).
    '20261203-10-provisioning-apply-began': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('provisioning_runs').addColumn('apply_began_at', 'bigint').execute();
      },
    },
    // When an apply job's agent was about to change the target (the host granted it under the job's lease): a lost
    // apply job without it changed nothing, and its apply is dispatched again; one with it is never repeated.
    '20261205-10-provisioning-runner-job-apply-began': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('provisioning_runner_jobs').addColumn('apply_began_at', 'bigint').execute();
      },
    },
    // A run's business key (its promotion id) is unique per tenant, not across tenants: one tenant's promotion id
    // must never make another tenant's promotion of the same id a duplicate of it.
    '20261206-10-provisioning-run-keys-by-tenant': {
      async up(db: Kysely<unknown>) {
        await dropColumnUnique(db, dialect, 'provisioning_runs', 'promotion_id');
        await db.schema.createIndex('provisioning_runs_key').on('provisioning_runs').columns(['tenant_id', 'promotion_id']).unique().execute();
      },
    },
    // A runner job may run until a deadline set at its claim (its target's maximum duration for its kind): the job's
    // lease never reaches past it. Jobs claimed before get the default maximum durations (plan 30 min, apply 2 h).
    '20261206-20-provisioning-runner-job-deadlines': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('provisioning_runner_jobs').addColumn('deadline_at', 'bigint').execute();
        await sql`update provisioning_runner_jobs set deadline_at = claimed_at + case when kind = 'plan' then ${sql.lit(30 * 60_000)} else ${sql.lit(120 * 60_000)} end
          where claimed_at is not null`.execute(db);
      },
    },
    // The DeliveryHost's promotion reports: one row per promotion run that ended, written with its terminal event and
    // sent until the DeliveryHost acknowledges it (delivery-reports.service.ts); and the local DeliveryHost's own
    // record of the reports it took in.
    '20261206-30-provisioning-delivery-reports': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('provisioning_delivery_reports')
          .addColumn('tenant_id', t.key, (c) => c.notNull())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
          .addColumn('attempts', 'integer', (c) => c.notNull())
          .addColumn('claimed_by', t.key)
          .addColumn('claimed_until', 'bigint')
          .addColumn('acknowledged_at', 'bigint')
          .addColumn('report_id', t.key)
          .addColumn('last_error', t.text)
          .addPrimaryKeyConstraint('provisioning_delivery_reports_pk', ['tenant_id', 'run_id'])
          .execute();
        await db.schema.createIndex('provisioning_delivery_reports_due').on('provisioning_delivery_reports').columns(['acknowledged_at', 'next_attempt_at']).execute();
        await db.schema
          .createTable('local_delivery_reports')
          .addColumn('tenant', t.key, (c) => c.notNull())
          .addColumn('run_id', t.key, (c) => c.notNull())
          .addColumn('id', t.key, (c) => c.notNull())
          .addColumn('report', t.text, (c) => c.notNull())
          .addColumn('received_at', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint('local_delivery_reports_pk', ['tenant', 'run_id'])
          .execute();
      },
    },
  };
};

type LegacyDb = Kysely<{
  provisioning_runs: { id: string; tenant_id: string; environment_id: string; project: string; stack: string; state: string; seq: number; plan_receipt: string | null; updated_at: number };
  provisioning_environment_stacks: { tenant_id: string; environment_id: string; project: string; stack: string; bound_by_run: string; bound_at: number };
  capacity_pools: { id: string; iac_stack: string | null };
}>;

/**
 * Runs get their project, which with the tenant and the stack name is their stack's identity; the stack locks are
 * kept by that identity, and the lock breaks record it; each environment is bound to the stack of its runs; pools
 * name their stack `tenant/project/stack`. And approvals refused as self-approvals (four eyes) are recorded.
 *
 * Where a row's tenant and project come from: a run's project from its plan receipt's plan, else from the local
 * engine's state of its tenant's stack (migrated by tenant just before, `20261201-10`), else it stays empty and the
 * run's plan step reads it from its desired state; a lock and a lock break from the run that held the lock (a lock
 * whose run is gone is dropped: nothing waits on it); an environment's stack from its latest applied run, else its
 * newest run that was not refused; a pool's stack from the latest applied run of the stack it names (a pool whose
 * stack no run applied keeps the bare name, and a resize of it is refused until an administrator names the stack).
 */
async function stacksByTenant(db: Kysely<unknown>, dialect: SqlDialect): Promise<void> {
  const t = sqlTypes(dialect);
  const legacy = db as LegacyDb;
  await db.schema.alterTable('provisioning_runs').addColumn('project', t.key, (c) => c.notNull().defaultTo('')).execute();
  for (const run of await legacy.selectFrom('provisioning_runs').select(['id', 'plan_receipt']).where('plan_receipt', 'is not', null).execute()) {
    const project = (JSON.parse(run.plan_receipt ?? '{}') as { plan?: { project?: unknown } }).plan?.project;
    if (typeof project === 'string') await legacy.updateTable('provisioning_runs').set({ project }).where('id', '=', run.id).execute();
  }
  // The local engine's stacks are the local host's (local/engine/): a deployed store has none to read.
  if (await tableExists(db, dialect, 'local_iac_stacks')) {
    await sql`update provisioning_runs set project = coalesce((select max(s.project) from local_iac_stacks s where s.tenant_id = provisioning_runs.tenant_id and s.stack = provisioning_runs.stack), '')
      where project = ''`.execute(db);
  }
  await dropIndex(db, dialect, 'provisioning_runs_stack', 'provisioning_runs');
  await db.schema.createIndex('provisioning_runs_by_stack').on('provisioning_runs').columns(['tenant_id', 'project', 'stack', 'seq']).execute();

  await db.schema
    .createTable('provisioning_stack_locks_by_tenant')
    .addColumn('tenant_id', t.key, (c) => c.notNull())
    .addColumn('project', t.key, (c) => c.notNull())
    .addColumn('stack', t.key, (c) => c.notNull())
    .addColumn('holder_run', t.key, (c) => c.notNull())
    .addColumn('holder_host', t.key, (c) => c.notNull())
    .addColumn('acquired_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('version', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('provisioning_stack_locks_pk', ['tenant_id', 'project', 'stack'])
    .execute();
  await sql`insert into provisioning_stack_locks_by_tenant (tenant_id, project, stack, holder_run, holder_host, acquired_at, expires_at, version)
    select r.tenant_id, r.project, l.stack, l.holder_run, l.holder_host, l.acquired_at, l.expires_at, l.version
    from provisioning_stack_locks l join provisioning_runs r on r.id = l.holder_run`.execute(db);
  await db.schema.dropTable('provisioning_stack_locks').execute();
  await renameTable(db, dialect, 'provisioning_stack_locks_by_tenant', 'provisioning_stack_locks');

  await db.schema.alterTable('provisioning_lock_breaks').addColumn('tenant_id', t.key, (c) => c.notNull().defaultTo('')).execute();
  await db.schema.alterTable('provisioning_lock_breaks').addColumn('project', t.key, (c) => c.notNull().defaultTo('')).execute();
  await sql`update provisioning_lock_breaks
    set tenant_id = coalesce((select r.tenant_id from provisioning_runs r where r.id = provisioning_lock_breaks.holder_run), ''),
        project = coalesce((select r.project from provisioning_runs r where r.id = provisioning_lock_breaks.holder_run), '')`.execute(db);

  await db.schema
    .createTable('provisioning_environment_stacks')
    .addColumn('tenant_id', t.key, (c) => c.notNull())
    .addColumn('environment_id', t.key, (c) => c.notNull())
    .addColumn('project', t.key, (c) => c.notNull())
    .addColumn('stack', t.key, (c) => c.notNull())
    .addColumn('bound_by_run', t.key, (c) => c.notNull())
    .addColumn('bound_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('provisioning_environment_stacks_pk', ['tenant_id', 'environment_id'])
    .execute();
  const runs = await legacy
    .selectFrom('provisioning_runs')
    .select(['id', 'tenant_id', 'environment_id', 'project', 'stack', 'state', 'updated_at'])
    .where('project', '<>', '')
    .where('state', '<>', 'rejected')
    .orderBy('seq')
    .execute();
  const owners = new Map<string, (typeof runs)[number]>();
  for (const run of runs) {
    const key = JSON.stringify([run.tenant_id, run.environment_id]);
    const known = owners.get(key);
    if (!known || run.state === 'applied' || known.state !== 'applied') owners.set(key, run);
  }
  for (const run of owners.values()) {
    await legacy
      .insertInto('provisioning_environment_stacks')
      .values({ tenant_id: run.tenant_id, environment_id: run.environment_id, project: run.project, stack: run.stack, bound_by_run: run.id, bound_at: Number(run.updated_at) })
      .execute();
  }

  await db.schema
    .createTable('provisioning_refused_approvals')
    .addColumn('id', t.key, (c) => c.primaryKey())
    .addColumn('run_id', t.key, (c) => c.notNull())
    .addColumn('refused_by', t.key, (c) => c.notNull())
    .addColumn('plan_digest', t.key, (c) => c.notNull())
    .addColumn('code', t.key, (c) => c.notNull())
    .addColumn('reason', t.text, (c) => c.notNull())
    .addColumn('refused_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('provisioning_refused_approvals_run').on('provisioning_refused_approvals').columns(['run_id', 'refused_at']).execute();

  for (const pool of await legacy.selectFrom('capacity_pools').select(['id', 'iac_stack']).where('iac_stack', 'is not', null).execute()) {
    const stack = pool.iac_stack ?? '';
    if (stack.includes('/')) continue;
    const applied = runs.filter((r) => r.stack === stack && r.state === 'applied').pop();
    if (applied) await legacy.updateTable('capacity_pools').set({ iac_stack: `${applied.tenant_id}/${applied.project}/${stack}` }).where('id', '=', pool.id).execute();
  }
}

/** Whether the store has the table, in the schema migrations run in (PostgreSQL's search path). */
async function tableExists(db: Kysely<unknown>, dialect: SqlDialect, table: string): Promise<boolean> {
  const query =
    dialect === 'sqlite'
      ? sql<{ found: unknown }>`select name as found from sqlite_master where type = 'table' and name = ${table}`
      : dialect === 'postgres'
        ? sql<{ found: unknown }>`select to_regclass(${table}) as found`
        : sql<{ found: unknown }>`select object_id(${table}, 'U') as found`;
  const found = (await query.execute(db)).rows[0]?.found;
  return found !== undefined && found !== null;
}
