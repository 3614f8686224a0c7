import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalCloud } from '../../local/cloud/local-cloud';
import { migrateToLatest, type MigrationSource } from '../../shared/platform/sql/migrations';
import { ManualClock } from '../../shared/platform/time/clock';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { createProvisioningService } from '../../shared/provisioning/provisioning.service';
import { getStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { provisioningExample, testServiceOptions, type ProvisioningExample } from '../support/provisioning';

/** The migrations that made stacks and environments tenant-qualified (issue 16), in the order they run. */
const TENANCY_MIGRATIONS = [
  '20261201-10-local-iac-stacks-by-tenant',
  '20261201-11-local-cloud-resources-by-tenant',
  '20261201-12-provisioning-stacks-by-tenant',
  '20261201-13-inventory-environments-by-tenant',
];
const before = (first: string): readonly MigrationSource[] => allMigrations.map((source) => (dialect) => Object.fromEntries(Object.entries(source(dialect)).filter(([name]) => name < first)));

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows of tables as they were before the migrations, which no row type describes any more
type LegacyDb = Kysely<any>;
const NOW = Date.parse('2026-03-01T09:00:00Z');

/** A run row as provisioning recorded it before runs had a project. */
function legacyRun(id: string, fields: { tenant: string; environment: string; stack: string; state: string; planProject?: string; desiredState?: { repository: string; commit: string; path: string } }) {
  return {
    id,
    promotion_id: `promotion-${id}`,
    tenant_id: fields.tenant,
    environment_id: fields.environment,
    environment_name: fields.environment,
    tier: 'development',
    release_name: 'app',
    release_version: '1.0.0',
    stack: fields.stack,
    repository: fields.desiredState?.repository ?? 'file:///nowhere',
    commit_sha: fields.desiredState?.commit ?? 'a'.repeat(40),
    project_path: fields.desiredState?.path ?? 'app',
    requested_by: 'someone',
    state: fields.state,
    waiting_kind: null,
    waiting_for: null,
    plan_digest: null,
    approval_required: null,
    plan_receipt: fields.planProject ? JSON.stringify({ plan: { project: fields.planProject, stack: fields.stack } }) : null,
    apply_receipt: null,
    error_code: null,
    error_message: null,
    superseded_by: null,
    created_at: NOW,
    updated_at: NOW,
    finished_at: null,
    reason: 'promotion',
    origin: null,
    config: null,
    plan_expires_at: null,
    reconciliation: null,
  };
}

/**
 * The tenancy migrations on a store written before them: every row gets the tenant of the runs of its stack and the
 * project of its state or plan, nothing one tenant had lands in another's, and what cannot be told is left so that
 * nobody finds it rather than guessed.
 */
for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`the tenancy migrations on ${dialect}`, () => {
    let database: TestDatabase;
    let root: string;
    let example: ProvisioningExample;
    let migrated: string[];

    beforeAll(async () => {
      database = await createTestDatabase(dialect, { migrate: false });
      root = fs.mkdtempSync(join(tmpdir(), 'rch-tenancy-migration-'));
      example = await provisioningExample(root, join(root, 'state'), 0);
      const db = database.store.db as LegacyDb;
      await migrateToLatest(database.store.db, dialect, before(TENANCY_MIGRATIONS[0]!));
      await db
        .insertInto('provisioning_runs')
        .values([
          legacyRun('run-alpha-dev', { tenant: 'alpha', environment: 'env-1', stack: 'dev', state: 'applied', planProject: 'app-alpha' }),
          legacyRun('run-beta-stage', { tenant: 'beta', environment: 'env-2', stack: 'stage', state: 'awaiting-approval' }),
          // Queued before its stack had any state: nothing says its project until its plan reads it.
          legacyRun('run-alpha-queued', { tenant: 'alpha', environment: 'env-3', stack: 'development', state: 'queued', desiredState: { repository: example.repository.url, commit: example.repository.commit, path: 'app' } }),
        ])
        .execute();
      await db
        .insertInto('local_iac_stacks')
        .values([
          { stack: 'dev', project: 'app-alpha', serial: 2, resources: '[]', updated_at: NOW },
          { stack: 'stage', project: 'app-beta', serial: 1, resources: '[]', updated_at: NOW },
          { stack: 'orphan', project: 'app-x', serial: 1, resources: '[]', updated_at: NOW },
        ])
        .execute();
      const resource = (id: string, urn: string) => ({ target: 'local', id, urn, type: 'local:storage:Bucket', properties: '{}', created_at: NOW, updated_at: NOW });
      await db
        .insertInto('local_cloud_resources')
        .values([resource('lcr-1', 'urn:pulumi:dev::app-alpha::local:storage:Bucket::b'), resource('lcr-2', 'urn:pulumi:stage::app-beta::local:storage:Bucket::b'), resource('lcr-3', 'urn:pulumi:nobody::x::local:storage:Bucket::b')])
        .execute();
      const lock = (stack: string, run: string) => ({ stack, holder_run: run, holder_host: 'host-a', acquired_at: NOW, expires_at: NOW + 600_000, version: 3 });
      await db.insertInto('provisioning_stack_locks').values([lock('stage', 'run-beta-stage'), lock('ghost', 'run-gone')]).execute();
      await db.insertInto('provisioning_lock_breaks').values({ id: 'break-1', stack: 'dev', holder_run: 'run-alpha-dev', holder_host: 'host-a', broken_by: 'admin', reason: 'stuck', broken_at: NOW }).execute();
      await db
        .insertInto('inventory_environments')
        .values({
          environment_id: 'env-1',
          tenant_id: 'alpha',
          name: 'env-1',
          tier: 'development',
          stack: 'dev',
          release_name: 'app',
          release_version: '1.0.0',
          desired: '{}',
          project_rules: '[]',
          desired_run_id: 'run-alpha-dev',
          desired_at: NOW,
          next_scan_at: NOW,
          observed_digest: 'digest-of-the-old-partition',
        })
        .execute();
      const proposal = (id: string, tenant: string) => ({
        id, environment_id: 'env-1', tenant_id: tenant, fingerprint: `fp-${id}`, status: 'open', findings: '{"findings":[],"ignored":[]}', plan: '{}',
        created_at: NOW, last_seen_at: NOW, updated_at: NOW,
      });
      await db.insertInto('inventory_proposals').values(proposal('prop-alpha', 'alpha')).execute();
      const pool = (id: string, stack: string) => ({ id, kind: 'build', target: 'local', capacity: 2, min_units: 0, max_units: 10, labels: '{}', iac_stack: stack, updated_at: NOW });
      await db.insertInto('capacity_pools').values([pool('pool-dev', 'dev'), pool('pool-unapplied', 'unapplied')]).execute();

      migrated = await migrateToLatest(database.store.db, dialect, allMigrations);
    });
    afterAll(async () => {
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    const rows = async (table: string, order: string) => (await sql<Record<string, unknown>>`select * from ${sql.table(table)} order by ${sql.ref(order)}`.execute(database.store.db)).rows;

    it('when the store is migrated, then the four tenancy migrations run, in order', () => {
      expect(migrated.filter((name) => name.startsWith('20261201-1'))).toEqual(TENANCY_MIGRATIONS);
    });

    it('when runs are migrated, then each gets the project of its plan or its stack\'s state, and one that has neither keeps none', async () => {
      const projects = Object.fromEntries((await rows('provisioning_runs', 'id')).map((r) => [r.id, r.project]));
      expect(projects).toEqual({ 'run-alpha-dev': 'app-alpha', 'run-beta-stage': 'app-beta', 'run-alpha-queued': '' });
    });

    it('when states, cloud resources, locks and lock breaks are migrated, then each is its runs\' tenant\'s; what no run names is nobody\'s', async () => {
      expect((await rows('local_iac_stacks', 'stack')).map((r) => [r.tenant_id, r.project, r.stack])).toEqual([
        ['alpha', 'app-alpha', 'dev'],
        ['unknown', 'app-x', 'orphan'],
        ['beta', 'app-beta', 'stage'],
      ]);
      expect((await rows('local_cloud_resources', 'id')).map((r) => [r.id, r.scope])).toEqual([
        ['lcr-1', 'alpha'],
        ['lcr-2', 'beta'],
        ['lcr-3', 'unknown'],
      ]);
      const cloud = createLocalCloud({ store: database.store, clock: new ManualClock(new Date(NOW)), ids: { next: () => 'x' } });
      expect((await cloud.listStack('local', { tenant: 'beta', project: 'app-beta', stack: 'stage' })).map((r) => r.id)).toEqual(['lcr-2']);
      expect(await cloud.listStack('local', { tenant: 'alpha', project: 'app-beta', stack: 'stage' })).toEqual([]);
      // The lock of a run that is gone is dropped; the other is its run's tenant's, version and lease kept.
      expect((await rows('provisioning_stack_locks', 'stack')).map((r) => [r.tenant_id, r.project, r.stack, r.holder_run, Number(r.version)])).toEqual([['beta', 'app-beta', 'stage', 'run-beta-stage', 3]]);
      expect(await getStackLock(provisioningDb(database.store.db), { tenant: 'beta', project: 'app-beta', stack: 'stage' })).toMatchObject({ holderRun: 'run-beta-stage', version: 3 });
      expect((await rows('provisioning_lock_breaks', 'id')).map((r) => [r.tenant_id, r.project, r.stack])).toEqual([['alpha', 'app-alpha', 'dev']]);
    });

    it('when environments and pools are migrated, then each environment is bound to its runs\' stack and keeps its row by tenant, and a pool names its stack in full', async () => {
      expect((await rows('provisioning_environment_stacks', 'environment_id')).map((r) => [r.tenant_id, r.environment_id, r.project, r.stack])).toEqual([
        ['alpha', 'env-1', 'app-alpha', 'dev'],
        ['beta', 'env-2', 'app-beta', 'stage'],
      ]);
      // Its observation is written again, whole, into the partition of its tenant and id at its next scan.
      expect((await rows('inventory_environments', 'environment_id')).map((r) => [r.tenant_id, r.environment_id, r.project, r.stack, r.observed_digest])).toEqual([
        ['alpha', 'env-1', 'app-alpha', 'dev', null],
      ]);
      expect(Object.fromEntries((await rows('capacity_pools', 'id')).map((r) => [r.id, r.iac_stack]))).toEqual({ 'pool-dev': 'alpha/app-alpha/dev', 'pool-unapplied': 'unapplied' });
      // One open proposal per environment of a tenant: another tenant's environment of the same id may have its own.
      const db = database.store.db as LegacyDb;
      const open = (id: string, tenant: string) => ({
        id, environment_id: 'env-1', tenant_id: tenant, fingerprint: id, status: 'open', findings: '{}', plan: '{}', created_at: NOW, last_seen_at: NOW, updated_at: NOW,
      });
      await db.insertInto('inventory_proposals').values(open('prop-beta', 'beta')).execute();
      await expect(db.insertInto('inventory_proposals').values(open('prop-alpha-2', 'alpha')).execute()).rejects.toThrow();
    });

    it('when a run queued before the migration plans, then it reads its project from its desired state and takes its tenant\'s stack', async () => {
      // Arrange
      const clock = new ManualClock(new Date(NOW));
      const service = createProvisioningService({
        ...testServiceOptions(database.store, clock, createLocalCloud({ store: database.store, clock, ids: { next: (p = 'id') => `${p}-${Math.random()}` } }), root),
        knowsTenant: () => Promise.resolve(true),
      });

      // Act
      const step = await service.plan('run-alpha-queued');

      // Assert
      expect(step).toEqual({ outcome: 'applying' });
      const detail = await service.getRun({ kind: 'one', tenant: 'alpha' }, 'run-alpha-queued');
      expect(detail.run).toMatchObject({ project: 'demo-app', state: 'applying' });
      expect(detail.planReceipt).toMatchObject({ qualifiedStack: 'alpha/demo-app/development', plan: { counts: { create: 3 } } });
    });
  });
}
