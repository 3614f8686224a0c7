import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  acquireStackLock,
  breakStackLock,
  getStackLock,
  provisioningDb,
  releaseStackLock,
  renewStackLock,
  type ProvisioningDb,
} from '../../shared/provisioning/stack-lock.repository';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import type { SqlStore } from '../../shared/platform/sql/database';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

const TTL = 15_000;
const T0 = Date.parse('2026-01-01T00:00:00Z');

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`stack locks on ${dialect}`, () => {
    let database: TestDatabase;
    let db: ProvisioningDb;
    let n = 0;
    const stack = (tenant = 'tenant-a'): StackRef => ({ tenant, project: 'app', stack: `stack-${n}` });
    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = provisioningDb(database.store.db);
    });
    afterAll(async () => {
      await database?.drop();
    });
    const acquire = (run: string, now = T0, target = db, tenant = 'tenant-a') => acquireStackLock(target, dialect, { stack: stack(tenant), run, host: `host-of-${run}`, now, ttlMs: TTL });

    it('when a free stack is asked for, then the run holds it; another run is told who holds it and until when', async () => {
      n++;
      const first = await acquire('run-a');
      expect(first).toMatchObject({ acquired: true, lock: { holderRun: 'run-a', holderHost: 'host-of-run-a', version: 1 } });
      const second = await acquire('run-b', T0 + 1000);
      expect(second).toEqual({ acquired: false, heldBy: expect.objectContaining({ stack: stack(), holderRun: 'run-a', expiresAt: new Date(T0 + TTL) }) });
    });

    it("when another tenant asks for its stack of the same project and stack names, then it holds its own lock and neither releases the other's", async () => {
      n++;
      expect(await acquire('run-a')).toMatchObject({ acquired: true, lock: { stack: stack(), version: 1 } });
      expect(await acquire('run-b', T0 + 1000, db, 'tenant-b')).toMatchObject({ acquired: true, lock: { stack: stack('tenant-b'), holderRun: 'run-b', version: 1 } });
      // Another project of the same tenant and stack name is another stack too.
      const other = await acquireStackLock(db, dialect, { stack: { ...stack(), project: 'app-2' }, run: 'run-c', host: 'h', now: T0, ttlMs: TTL });
      expect(other.acquired).toBe(true);
      expect(await releaseStackLock(db, stack('tenant-b'), 'run-a')).toBe(false);
      expect(await releaseStackLock(db, stack(), 'run-b')).toBe(false);
      expect((await getStackLock(db, stack()))?.holderRun).toBe('run-a');
      expect((await getStackLock(db, stack('tenant-b')))?.holderRun).toBe('run-b');
      const broken = await database.store.db.transaction().execute((trx) => breakStackLock(trx, dialect, { id: `break-${n}`, stack: stack('tenant-b'), by: 'o', reason: 'r', now: T0 }));
      expect(broken?.holderRun).toBe('run-b');
      expect((await getStackLock(db, stack()))?.holderRun).toBe('run-a');
    });

    it('when the holder asks again, then it keeps the lock with a longer lease and a new version', async () => {
      n++;
      await acquire('run-a');
      expect(await acquire('run-a', T0 + 5000)).toMatchObject({ acquired: true, lock: { expiresAt: new Date(T0 + 5000 + TTL), version: 2 } });
    });

    it("when the holder's lease lapses, then another run takes the lock over and the old holder can neither renew nor release it", async () => {
      n++;
      const first = await acquire('run-a');
      if (!first.acquired) throw new Error('not acquired');
      const takeover = await acquire('run-b', T0 + TTL);
      expect(takeover).toMatchObject({ acquired: true, lock: { holderRun: 'run-b', version: 2 } });
      expect(await renewStackLock(db, first.lock, T0 + TTL + 1, TTL)).toBe(false);
      expect(await releaseStackLock(db, stack(), 'run-a')).toBe(false);
      expect((await getStackLock(db, stack()))?.holderRun).toBe('run-b');
    });

    it('when the holder renews before its lease lapses, then nobody can take the lock; after release, the next run can', async () => {
      n++;
      const first = await acquire('run-a');
      if (!first.acquired) throw new Error('not acquired');
      expect(await renewStackLock(db, first.lock, T0 + TTL - 1, TTL)).toBe(true);
      expect((await acquire('run-b', T0 + TTL + 1)).acquired).toBe(false);
      expect(await releaseStackLock(db, stack(), 'run-a')).toBe(true);
      expect(await getStackLock(db, stack())).toBeUndefined();
      expect((await acquire('run-b', T0 + TTL + 2)).acquired).toBe(true);
    });

    it('when an operator breaks a lock, then it is gone, the break is recorded with whom it was taken from, and the holder cannot renew', async () => {
      n++;
      const first = await acquire('run-a');
      if (!first.acquired) throw new Error('not acquired');
      const broken = await database.store.db.transaction().execute((trx) =>
        breakStackLock(trx, dialect, { id: `break-${n}`, stack: stack(), by: 'operator@example', reason: 'host lost', now: T0 + 10 }),
      );
      expect(broken).toMatchObject({ holderRun: 'run-a', holderHost: 'host-of-run-a' });
      expect(await getStackLock(db, stack())).toBeUndefined();
      expect(await renewStackLock(db, first.lock, T0 + 20, TTL)).toBe(false);
      const audit = await db.selectFrom('provisioning_lock_breaks').selectAll().where('stack', '=', stack().stack).execute();
      expect(audit).toEqual([
        { id: `break-${n}`, tenant_id: 'tenant-a', project: 'app', stack: stack().stack, holder_run: 'run-a', holder_host: 'host-of-run-a', broken_by: 'operator@example', reason: 'host lost', broken_at: T0 + 10 },
      ]);
      const none = await database.store.db.transaction().execute((trx) => breakStackLock(trx, dialect, { id: `break-${n}-again`, stack: stack(), by: 'o', reason: 'r', now: T0 }));
      expect(none).toBeUndefined();
    });
  });
}

describe.skipIf(skipDialect('postgres'))('stack locks under contention on PostgreSQL (two connection pools)', () => {
  let database: TestDatabase;
  let second: SqlStore;
  beforeAll(async () => {
    database = await createTestDatabase('postgres');
    second = database.connectAgain();
  });
  afterAll(async () => {
    await second?.close();
    await database?.drop();
  });

  const contended: StackRef = { tenant: 'tenant-a', project: 'app', stack: 'contended' };

  it('when 24 runs on two hosts acquire and release one stack in loops, then never two hold it at once and every run gets its turns', async () => {
    const hosts = [provisioningDb(database.store.db), provisioningDb(second.db)];
    const TURNS = 3;
    let inside = 0;
    let most = 0;
    const turns = new Map<string, number>();
    // Each run loops until it has had its turns: the test counts turns, not time, so a busy machine only makes it slower.
    await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const run = `run-${i}`;
        const db = hosts[i % 2]!;
        while ((turns.get(run) ?? 0) < TURNS) {
          const outcome = await acquireStackLock(db, 'postgres', { stack: contended, run, host: `host-${i % 2}`, now: Date.now(), ttlMs: 60_000 });
          if (!outcome.acquired) {
            await new Promise((resolve) => setTimeout(resolve, Math.random() * 5));
            continue;
          }
          inside++;
          most = Math.max(most, inside);
          await new Promise((resolve) => setTimeout(resolve, 1));
          inside--;
          expect(await releaseStackLock(db, contended, run)).toBe(true);
          turns.set(run, (turns.get(run) ?? 0) + 1);
        }
      }),
    );
    expect(most).toBe(1);
    expect([...turns.values()]).toEqual(Array.from({ length: 24 }, () => TURNS));
    expect(await getStackLock(provisioningDb(database.store.db), contended)).toBeUndefined();
  }, 30_000);
});
