import { sql } from 'kysely';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { createTestDatabase, DIALECTS, postgresSkipReason, postgresUrl, skipDialect, type TestDatabase } from '../support/databases';
import { adminQuery } from '../support/postgres-admin';
import { configuredPostgresUrl, probePostgres } from '../support/postgres-probe';

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

describe.skipIf(skipDialect('postgres'))('schemas of other stores on the same PostgreSQL server', () => {
  it('when other stores drop their schemas while one migrates, then it neither fails nor sees their tables', async () => {
    const database = await createTestDatabase('postgres');
    const url = postgresUrl();
    const churn = async (round: number) => {
      const schema = `churn_${randomBytes(4).toString('hex')}_${round}`;
      await adminQuery(url, `create schema ${schema}; create table ${schema}.t (id serial primary key, v text)`);
      await adminQuery(url, `drop schema ${schema} cascade`);
    };
    try {
      let churning = true;
      const churners = Array.from({ length: 3 }, async (_, lane) => {
        for (let round = 0; churning; round++) await churn(lane * 10_000 + round);
      });
      const seen: string[] = [];
      try {
        for (let i = 0; i < 40; i++) {
          expect(await migrateToLatest(database.store.db, 'postgres', allMigrations)).toEqual([]);
          const tables = await database.store.db.introspection.getTables({ withInternalKyselyTables: true });
          seen.push(...tables.map((t) => t.schema ?? ''));
        }
      } finally {
        churning = false;
        await Promise.all(churners);
      }
      expect(new Set(seen)).toEqual(new Set([database.overrides.postgresSchema]));
      expect(seen.length).toBeGreaterThan(40);
    } finally {
      await database.drop();
    }
  });
});

describe.runIf(skipDialect('postgres'))('PostgreSQL store tests', () => {
  it('are skipped here, for the reason the probe gave for the configured URL', () => {
    console.warn(`PostgreSQL store tests skipped: ${postgresSkipReason()}`);
    expect(postgresSkipReason()).toMatch(new RegExp(`^PostgreSQL not reachable at ${escapeRegExp(configuredPostgresUrl())} \\(.+\\)$`));
  });
});

describe('PostgreSQL detection', () => {
  /** A port that nothing listens on: taken from the OS, then let go. */
  async function closedPort(): Promise<number> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    return port;
  }

  it('when nothing listens at the URL, then the tests are skipped with a reason naming the URL and the refused connection', async () => {
    const port = await closedPort();
    const url = `postgres://postgres@127.0.0.1:${port}/test`;
    expect(await probePostgres(url, { required: false })).toEqual({
      url: '',
      skipReason: `PostgreSQL not reachable at ${url} (connect ECONNREFUSED 127.0.0.1:${port})`,
    });
  });

  it('when nothing listens and PostgreSQL is required, then the probe fails naming the setting', async () => {
    const port = await closedPort();
    const url = `postgres://postgres@127.0.0.1:${port}/test`;
    await expect(probePostgres(url, { required: true })).rejects.toThrow(
      `PostgreSQL not reachable at ${url} (connect ECONNREFUSED 127.0.0.1:${port}); RUNTIME_CLOUD_TEST_POSTGRES=required`,
    );
  });

  it.skipIf(skipDialect('postgres'))('when the server answers, then its URL is used and nothing is skipped', async () => {
    expect(await probePostgres(postgresUrl(), { required: true })).toEqual({ url: postgresUrl(), skipReason: '' });
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
