import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { createSqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { readStoreEpoch } from '../../shared/platform/sql/store-epoch';
import { runCli } from '../support/child-process';
import { createTestDatabase, skipDialect } from '../support/databases';

/** `runtime-cloud backup`, `restore` and `restored` as an operator runs them: their answers and exit codes. */
describe('runtime-cloud backup, restore and restored (the command line)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-backup-cli-'));
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

  async function epochOf(file: string): Promise<number> {
    const store = createSqlStore({ dialect: 'sqlite', connection: file });
    try {
      return (await readStoreEpoch(store.db)).epoch;
    } finally {
      await store.close();
    }
  }

  it('when the same backup is restored twice, then the epoch rises each time, above the replaced store as well as the backup', async () => {
    const store = createSqlStore({ dialect: 'sqlite', connection: join(stateDir, 'runtime-cloud.sqlite') });
    await migrateToLatest(store.db, 'sqlite', allMigrations);
    await store.close();
    const backup = await runCli(['backup', '--state-dir', stateDir]);
    expect(backup.code).toBe(0);
    const file = backup.stdout.trim();
    expect(file).toMatch(/backups\/runtime-cloud-.*\.sqlite$/);
    expect(await epochOf(file)).toBe(0);
    for (const epoch of [1, 2]) {
      const restored = await runCli(['restore', '--state-dir', stateDir, '--from', file]);
      expect(restored).toMatchObject({ code: 0, stdout: expect.stringContaining(`store epoch ${epoch}`) });
      expect(await epochOf(join(stateDir, 'runtime-cloud.sqlite'))).toBe(epoch);
    }
    // The backup itself is left as it was.
    expect(await epochOf(file)).toBe(0);
    expect((await runCli(['backup', '--state-dir', stateDir, '--to', file])).stderr).toMatch(/exists already/);
  }, 60_000);

  it('when restore is asked without a backup, with a missing one or with a file that is no store, then it refuses with a clear line and a non-zero code', async () => {
    expect(await runCli(['restore', '--state-dir', stateDir])).toMatchObject({ code: 2, stderr: expect.stringContaining('restore needs --from FILE') });
    expect(await runCli(['restore', '--state-dir', stateDir, '--from', join(stateDir, 'nothing.sqlite')])).toMatchObject({
      code: 1,
      stderr: expect.stringContaining('there is no backup at'),
    });
    const text = join(stateDir, 'notes.txt');
    writeFileSync(text, 'not a database at all, just some text that is long enough to be a header');
    expect(await runCli(['restore', '--state-dir', stateDir, '--from', text])).toMatchObject({ code: 1, stderr: expect.stringContaining('is not a SQLite database') });
  }, 60_000);

  it.skipIf(skipDialect('postgres'))('when the store is PostgreSQL, then backup and restore name the database\'s own tools and exit 1, and restored raises its epoch', async () => {
    const database = await createTestDatabase('postgres');
    try {
      const backup = await runCli(['backup', '--state-dir', stateDir], database.settings);
      expect(backup).toMatchObject({ code: 1, stderr: expect.stringMatching(/PostgreSQL: its backups are the database's own \(pg_dump.*runtime-cloud restored/) });
      expect((await runCli(['restore', '--state-dir', stateDir, '--from', 'x'], database.settings)).code).toBe(1);
      const restored = await runCli(['restored', '--state-dir', stateDir, '--note', 'PITR to 12:00'], database.settings);
      expect(restored).toMatchObject({ code: 0, stdout: expect.stringContaining('store epoch 1') });
      expect(await readStoreEpoch(database.store.db)).toMatchObject({ epoch: 1, restoredFrom: 'PITR to 12:00', recoveryPending: true });
    } finally {
      await database.drop();
    }
  }, 60_000);
});
