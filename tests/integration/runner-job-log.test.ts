import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendJobLog, findJob, insertJob, JOB_LOG_CHARS, type StoredSpec } from '../../shared/provisioning/runner-jobs.repository';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import type { SqlStore } from '../../shared/platform/sql/database';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

/**
 * A runner job's log excerpt is appended to by its heartbeats and by the host recording its target calls, which can
 * run at once (on several hosts): each append is one statement, so no line is lost to another append, and the
 * excerpt keeps its last JOB_LOG_CHARS characters.
 */
function aSpec(id: string): StoredSpec {
  return {
    id,
    kind: 'apply',
    runId: `run-${id}`,
    pool: 'local',
    target: 'local',
    engine: 'local',
    stack: { tenant: 'demo-team', project: 'demo-app', stack: 'development' },
    files: {},
    filesDigest: '',
    config: {},
    options: {},
    fencingToken: 1,
  };
}

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner job logs (${dialect})`, () => {
    let database: TestDatabase;
    const stores: SqlStore[] = [];
    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      // Two more connection pools: appends from "other hosts" at the same time.
      stores.push(database.store, database.connectAgain(), database.connectAgain());
    });
    afterAll(async () => {
      for (const store of stores.slice(1)) await store.close();
      await database?.drop();
    });

    it('loses no line when appends from several hosts meet', async () => {
      await insertJob(provisioningDb(database.store.db), aSpec('job-concurrent'), Date.now());
      const lines = Array.from({ length: 60 }, (_, i) => `line ${String(i).padStart(2, '0')}`);
      await Promise.all(lines.map((line, i) => appendJobLog(provisioningDb(stores[i % stores.length]!.db), dialect, 'job-concurrent', [line])));
      const log = (await findJob(provisioningDb(database.store.db), dialect, 'job-concurrent'))!.log;
      expect(log.split('\n').filter(Boolean).sort()).toEqual(lines);
    });

    it('keeps the last JOB_LOG_CHARS characters of a long log', async () => {
      const db = provisioningDb(database.store.db);
      await insertJob(db, aSpec('job-long'), Date.now());
      const chunk = (i: number) => `${String(i).padStart(5, '0')} ${'x'.repeat(994)}`;
      for (let i = 0; i < 40; i++) await appendJobLog(db, dialect, 'job-long', [chunk(i)]);
      const log = (await findJob(db, dialect, 'job-long'))!.log;
      expect(log.length).toBe(JOB_LOG_CHARS);
      expect(log.endsWith(`${chunk(39)}\n`)).toBe(true);
      const written = Array.from({ length: 40 }, (_, i) => `${chunk(i)}\n`).join('');
      expect(log).toBe(written.slice(-JOB_LOG_CHARS));
    });

    it('appends nothing for no lines, and nothing to a job that does not exist', async () => {
      const db = provisioningDb(database.store.db);
      await insertJob(db, aSpec('job-quiet'), Date.now());
      await appendJobLog(db, dialect, 'job-quiet', []);
      await appendJobLog(db, dialect, 'job-missing', ['lost']);
      expect((await findJob(db, dialect, 'job-quiet'))!.log).toBe('');
      expect(await findJob(db, dialect, 'job-missing')).toBeUndefined();
    });
  });
}
