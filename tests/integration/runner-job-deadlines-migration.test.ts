import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { migrateToLatest, type MigrationSource } from '../../shared/platform/sql/migrations';
import { findJob } from '../../shared/provisioning/runner-jobs.repository';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

/**
 * Runner jobs got deadlines (issue 32, part 3): jobs claimed before the migration get their claim plus the default
 * maximum duration of their kind (plan 30 minutes, apply 2 hours), so the host limits them too; queued jobs get
 * theirs when claimed.
 */
const MIGRATION = '20261206-20-provisioning-runner-job-deadlines';
const before = (first: string): readonly MigrationSource[] => allMigrations.map((source) => (dialect) => Object.fromEntries(Object.entries(source(dialect)).filter(([name]) => name < first)));
const CLAIMED_AT = Date.parse('2026-03-01T09:00:00Z');

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows as they were before the migration, which no row type describes any more
type LegacyDb = Kysely<any>;

function legacyJob(id: string, kind: 'plan' | 'apply', state: string, claimedAt: number | null) {
  return {
    id,
    run_id: `run-${id}`,
    tenant_id: 'demo-team',
    kind,
    pool: 'local-runner.demo-team',
    target: 'local',
    state,
    spec: JSON.stringify({ id, kind }),
    fencing_token: 1,
    token_hash: null,
    agent: claimedAt === null ? null : 'agent',
    lease_id: null,
    lease_fencing: null,
    created_at: CLAIMED_AT - 1000,
    claimed_at: claimedAt,
    lease_expires_at: claimedAt === null ? null : claimedAt + 60_000,
    finished_at: null,
    outcome: null,
    degraded: null,
    log: '',
    apply_began_at: null,
  };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner job deadlines migration on ${dialect}`, () => {
    let database: TestDatabase;
    beforeAll(async () => {
      database = await createTestDatabase(dialect, { migrate: false });
    });
    afterAll(async () => {
      await database?.drop();
    });

    it('when jobs were claimed before deadlines, then each gets its claim plus its kind\'s default maximum duration, and a queued job none', async () => {
      // Arrange
      await migrateToLatest(database.store.db, dialect, before(MIGRATION));
      const legacy = database.store.db as LegacyDb;
      await legacy
        .insertInto('provisioning_runner_jobs')
        .values([legacyJob('job-plan', 'plan', 'running', CLAIMED_AT), legacyJob('job-apply', 'apply', 'running', CLAIMED_AT), legacyJob('job-queued', 'plan', 'queued', null)])
        .execute();

      // Act
      const ran = await migrateToLatest(database.store.db, dialect, allMigrations);

      // Assert
      expect(ran).toContain(MIGRATION);
      const db = provisioningDb(database.store.db);
      expect((await findJob(db, dialect, 'job-plan'))?.deadlineAt).toEqual(new Date(CLAIMED_AT + 30 * 60_000));
      expect((await findJob(db, dialect, 'job-apply'))?.deadlineAt).toEqual(new Date(CLAIMED_AT + 120 * 60_000));
      expect((await findJob(db, dialect, 'job-queued'))?.deadlineAt).toBeUndefined();
    });
  });
}
