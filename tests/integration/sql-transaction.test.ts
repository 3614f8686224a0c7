import { sql, type Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../shared/platform/errors/app-error';
import { Prepared } from '../../shared/platform/sql/prepared';
import { inTransaction, isContention, retryingContention } from '../../shared/platform/sql/transaction';
import { createTestDatabase, postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';

const failure = (fields: Record<string, unknown>) => Object.assign(new Error('store failure'), fields);

describe('transaction retry helper', () => {
  it('when the store reports a deadlock, serialization failure, lock timeout or busy file, then it is contention; other failures are not', () => {
    for (const fields of [{ code: '40P01' }, { code: '40001' }, { code: '55P03' }, { number: 1205 }, { number: 1222 }, { code: 'SQLITE_BUSY' }, { code: 'SQLITE_BUSY_SNAPSHOT' }]) {
      expect(isContention(failure(fields)), JSON.stringify(fields)).toBe(true);
    }
    for (const fields of [{ code: '23505' }, { number: 2627 }, { code: 'SQLITE_CONSTRAINT_UNIQUE' }, {}]) {
      expect(isContention(failure(fields)), JSON.stringify(fields)).toBe(false);
    }
  });

  it('when contention persists past the attempts, then STORE.CONTENTION (unavailable, Retry-After 1) after exactly that many runs', async () => {
    let runs = 0;
    const error = await retryingContention(
      () => {
        runs++;
        return Promise.reject(failure({ code: '40P01' }));
      },
      { attempts: 4, baseDelayMs: 1 },
    ).catch((e: unknown) => e);
    expect(runs).toBe(4);
    expect(error).toBeInstanceOf(AppError);
    expect(error).toMatchObject({ code: 'STORE.CONTENTION', kind: 'unavailable', details: { retryAfterSeconds: 1 } });
  });

  it('when a failure is not contention, then it is thrown at once, unchanged', async () => {
    let runs = 0;
    const original = failure({ code: '23505' });
    await expect(
      retryingContention(() => {
        runs++;
        return Promise.reject(original);
      }),
    ).rejects.toBe(original);
    expect(runs).toBe(1);
  });
});

const skip = skipDialect('postgres');
if (skip) console.warn(`[sql-transaction] PostgreSQL deadlock test SKIPPED: ${postgresSkipReason()}`);

describe.skipIf(skip)('transaction retry on PostgreSQL', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase('postgres');
    await sql`create table lock_order_probe (id int primary key, n int not null)`.execute(database.store.db);
    await sql`insert into lock_order_probe values (1, 0), (2, 0)`.execute(database.store.db);
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('when two transactions lock two rows in opposite orders, then the deadlock victim is retried and both commit', async () => {
    const other = database.connectAgain();
    let attempts = 0;
    try {
      let bothHoldFirstRow!: () => void;
      const gate = new Promise<void>((resolve) => (bothHoldFirstRow = resolve));
      let holding = 0;
      const cross = (db: typeof database.store.db, first: number, second: number) =>
        inTransaction(db, async (trx) => {
          attempts++;
          // A deadlock is detected after deadlock_timeout (1 s by default).
          await sql`set local deadlock_timeout = '50ms'`.execute(trx);
          await sql`update lock_order_probe set n = n + 1 where id = ${first}`.execute(trx);
          if (++holding === 2) bothHoldFirstRow();
          await Promise.race([gate, new Promise((resolve) => setTimeout(resolve, 500))]);
          await sql`update lock_order_probe set n = n + 1 where id = ${second}`.execute(trx);
        });
      await Promise.all([cross(database.store.db, 1, 2), cross(other.db, 2, 1)]);
    } finally {
      await other.close();
    }
    // Three runs: both first attempts, one of which PostgreSQL aborted as the deadlock victim, and its retry.
    expect(attempts).toBe(3);
    const rows = await sql<{ id: number; n: number }>`select id, n from lock_order_probe order by id`.execute(database.store.db);
    expect(rows.rows).toEqual([
      { id: 1, n: 2 },
      { id: 2, n: 2 },
    ]);
  });
});

describe.skipIf(skip)('hot-path statements on PostgreSQL', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase('postgres');
    await sql`create table named_probe (id int primary key, n int not null, label text not null)`.execute(database.store.db);
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('when a Prepared statement runs, then its connection keeps it prepared under a name with its constants in the text, and plans it once; other statements stay unnamed', async () => {
    type Db = { named_probe: { id: number; n: number; label: string } };
    // `n: 1` and the label are constants: written into the text (the quote doubled), so the one plan sees them.
    const bump = new Prepared<Db, 'id', never>((db, _dialect, p) =>
      db
        .insertInto('named_probe')
        .values({ id: p('id'), n: 1, label: "it's" })
        .onConflict((oc) => oc.column('id').doUpdateSet({ n: sql`named_probe.n + 1` })),
    );
    const db = database.store.db as unknown as Kysely<Db>;
    const seen = await db.connection().execute(async (connection) => {
      for (let i = 0; i < 7; i++) await bump.execute(connection, 'postgres', { id: 1 });
      await sql`select n from named_probe`.execute(connection);
      const statements = await sql<{ name: string; statement: string; generic_plans: number }>`select name, statement, generic_plans from pg_prepared_statements`.execute(connection);
      return statements.rows;
    });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ name: expect.stringMatching(/^rc_[0-9a-f]{24}$/), statement: expect.stringContaining(`values ($1, 1, 'it''s')`) });
    // PostgreSQL plans afresh for the first five executions, then keeps one plan for all values.
    expect(Number(seen[0]?.generic_plans)).toBeGreaterThanOrEqual(1);
    expect((await sql<{ n: number; label: string }>`select n, label from named_probe where id = 1`.execute(database.store.db)).rows[0]).toEqual({ n: 7, label: "it's" });
  });
});

describe('synchronous transactions on SQLite', () => {
  type Db = { sync_probe: { id: number; n: number } };
  let database: TestDatabase;
  let db: Kysely<Db>;
  const bump = new Prepared<Db, 'id', { n: number }>((builder, _dialect, p) =>
    builder
      .updateTable('sync_probe')
      .set({ n: sql`n + 1` })
      .where('id', '=', p('id'))
      .returning('n'),
  );
  const valueOf = async (id: number) => (await db.selectFrom('sync_probe').select('n').where('id', '=', id).executeTakeFirstOrThrow()).n;
  beforeAll(async () => {
    database = await createTestDatabase('sqlite', { migrate: false });
    db = database.store.db;
    await sql`create table sync_probe (id int primary key, n int not null)`.execute(db);
    await sql`insert into sync_probe values (1, 0), (2, 0)`.execute(db);
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('when the work returns, then its statements are committed and their results are answered as Kysely answers them', async () => {
    const before = await valueOf(1);
    const answers = await database.store.sqlite!.run((connection) => [bump.executeSync(connection, { id: 1 }), bump.executeSync(connection, { id: 1 })]);
    expect(answers.map((a) => a.rows)).toEqual([[{ n: before + 1 }], [{ n: before + 2 }]]);
    expect(await valueOf(1)).toBe(before + 2);
  });

  it('when the work throws, then the promise rejects with its error and none of its statements stays', async () => {
    const before = await valueOf(1);
    const failure = new Error('the work failed');
    const outcome = database.store.sqlite!.run((connection) => {
      bump.executeSync(connection, { id: 1 });
      throw failure;
    });
    await expect(outcome).rejects.toBe(failure);
    expect(await valueOf(1)).toBe(before);
  });

  it('when a Kysely transaction is open on the connection, then the work waits for it to end instead of joining it', async () => {
    const order: string[] = [];
    let letGo!: () => void;
    const released = new Promise<void>((resolve) => (letGo = resolve));
    const kyselyWork = db.transaction().execute(async (trx) => {
      await trx.updateTable('sync_probe').set({ n: 100 }).where('id', '=', 2).execute();
      await released;
      order.push('kysely ends');
      // Rolled back: had the synchronous work run inside it, its bump would be rolled back too.
      throw new Error('roll back');
    });
    await new Promise((resolve) => setImmediate(resolve));
    const syncWork = database.store.sqlite!.run((connection) => {
      order.push('sync runs');
      return bump.executeSync(connection, { id: 2 }).rows[0]?.n;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);
    letGo();
    await expect(kyselyWork).rejects.toThrow('roll back');
    expect(await syncWork).toBe(1);
    expect(order).toEqual(['kysely ends', 'sync runs']);
    expect(await valueOf(2)).toBe(1);
  });
});
