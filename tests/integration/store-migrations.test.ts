import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { allMigrations } from '../../shared/migrations';
import { createTestDatabase, DIALECTS, postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';

const expectedNames = () =>
  allMigrations
    .flatMap((source) => Object.keys(source('sqlite')))
    .sort();

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`store migrations on ${dialect}`, () => {
    let database: TestDatabase | undefined;
    afterEach(async () => {
      await database?.drop();
      database = undefined;
    });

    it('when the store is empty, then every migration runs once and a second run does nothing', async () => {
      database = await createTestDatabase(dialect, { migrate: false });
      const first = await migrateToLatest(database.store.db, dialect, allMigrations);
      expect([...first].sort()).toEqual(expectedNames());
      const second = await migrateToLatest(database.store.db, dialect, allMigrations);
      expect(second).toEqual([]);
      const recorded = await database.store.db.selectFrom('kysely_migration').select('name').execute();
      expect(recorded.map((r: { name: string }) => r.name).sort()).toEqual(expectedNames());
    });

    it('when migrated, then the outbox accepts an event row', async () => {
      database = await createTestDatabase(dialect);
      await database.store.db
        .insertInto('outbox')
        .values({ event_id: 'e1', topic: 't', payload: '{}', created_at: Date.now(), attempts: 0 })
        .execute();
      const row = await database.store.db.selectFrom('outbox').selectAll().executeTakeFirstOrThrow();
      expect(row).toMatchObject({ event_id: 'e1', published_at: null });
      expect(typeof row.created_at).toBe('number');
    });
  });
}

describe.skipIf(skipDialect('postgres'))('concurrent migrators on PostgreSQL', () => {
  it('when two instances migrate the same empty schema at once, then both succeed and each migration is recorded once', async () => {
    const database = await createTestDatabase('postgres', { migrate: false });
    const other = database.connectAgain();
    const third = database.connectAgain();
    try {
      const results = await Promise.all([
        migrateToLatest(database.store.db, 'postgres', allMigrations),
        migrateToLatest(other.db, 'postgres', allMigrations),
        migrateToLatest(third.db, 'postgres', allMigrations),
      ]);
      // Exactly one instance applied each migration; the others found it applied.
      expect(results.flat().sort()).toEqual(expectedNames());
      const { rows } = await sql<{ name: string; n: number }>`select name, count(*)::int as n from kysely_migration group by name`.execute(
        database.store.db,
      );
      expect(rows.every((r) => r.n === 1)).toBe(true);
      expect(rows).toHaveLength(expectedNames().length);
    } finally {
      await other.close();
      await third.close();
      await database.drop();
    }
  });
});

describe.runIf(skipDialect('postgres'))('PostgreSQL store tests', () => {
  it('are skipped here', () => {
    console.warn(`PostgreSQL store tests skipped: ${postgresSkipReason()}`);
    expect(postgresSkipReason()).not.toBe('');
  });
});
