import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { localCloudMigrations } from '../../local/cloud/local-cloud.migrations';
import { listStackResources, localCloudDb } from '../../local/cloud/local-cloud.repository';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import { migrateToLatest, type MigrationSource } from '../../shared/platform/sql/migrations';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { refusal } from '../support/refusal';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { recordingMssql } from '../support/recording-mssql';

const BY_URN = '20261130-32-local-cloud-resources-by-urn';
const BY_TENANT = '20261201-11-local-cloud-resources-by-tenant';

/** Every migration but the local cloud's from `first` on: a store as it was before that one. */
const migrationsBefore = (first: string): readonly MigrationSource[] =>
  allMigrations.map((source) =>
    source === localCloudMigrations ? (dialect) => Object.fromEntries(Object.entries(source(dialect)).filter(([name]) => name < first)) : source,
  );

/** The scope every resource of these tests is made in, unless a test says otherwise. */
const TENANT = 'tenant-a';
/** Stack `stack` of project `project` of the test tenant. */
const ref = (stack: string, project = 'app', tenant = TENANT): StackRef => ({ tenant, project, stack });

/**
 * Urns of stacks and projects that a sloppy prefix filter confuses with stack `dev` of project `app` (as a prefix,
 * by case, by LIKE wildcards, by collations that ignore punctuation), and urns of `dev`/`app` with characters beyond
 * ASCII after the prefix. `-` marks a urn of no stack of project `app` named here.
 */
const STACK_URNS: readonly (readonly [stack: string, urn: string])[] = [
  ['dev', 'urn:pulumi:dev::app::local:web:App::api'],
  ['dev-2', 'urn:pulumi:dev-2::app::local:web:App::api'],
  ['DEV', 'urn:pulumi:DEV::app::local:web:App::api'],
  ['d_v', 'urn:pulumi:d_v::app::local:web:App::api'],
  ['dxv', 'urn:pulumi:dxv::app::local:web:App::api'],
  ['de%', 'urn:pulumi:de%::app::local:web:App::api'],
  ['dev', 'urn:pulumi:dev::app::local:sql:Database::db-ü-名前-𝒳'],
  // A character beyond U+FFFF right after the prefix: a `prefix + '\uffff'` bound would miss it where urns are UTF-8.
  ['dev', 'urn:pulumi:dev::app::𝒳ocal:web:App::api'],
  ['devx', 'urn:pulumi:devx::app::local:web:App::api'],
  // Stack `dev` of other projects: a prefix of `app`, one `app` is a prefix of, by case, by wildcard, beyond U+FFFF.
  ['-', 'urn:pulumi:dev::ap::local:web:App::api'],
  ['-', 'urn:pulumi:dev::app-2::local:web:App::api'],
  ['-', 'urn:pulumi:dev::APP::local:web:App::api'],
  ['-', 'urn:pulumi:dev::a_p::local:web:App::api'],
  ['-', 'urn:pulumi:dev::𝒳pp::local:web:App::api'],
  // Not urns of any stack named here: one colon, and the first string past the range.
  ['-', 'urn:pulumi:dev::app:x'],
  ['-', 'urn:pulumi:dev::app:;'],
  ['dev', 'urn:pulumi:dev::app::'],
];


for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`local cloud on ${dialect}`, () => {
    let database: TestDatabase;
    let clock: ManualClock;
    let cloud: LocalCloud;
    let target: string;
    let run = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await database?.drop();
    });
    beforeEach(() => {
      // Each test has its own target in the file's database.
      run++;
      target = `target-${run}`;
      clock = new ManualClock('2026-03-01T10:00:00Z');
      cloud = createLocalCloud({ store: database.store, clock, ids: randomIds });
    });

    it('when resources are created, updated and deleted, then get and list show exactly the current ones with their times', async () => {
      const a = await cloud.create(target, { scope: TENANT, urn: 'urn:a', type: 'local:web:App', properties: { size: 1, tags: { env: 'dev' } } });
      clock.advance(1000);
      const b = await cloud.create(target, { scope: TENANT, urn: 'urn:b', type: 'local:sql:Database', properties: { sku: 'basic' } });
      clock.advance(1000);
      const updated = await cloud.update(target, a.id, { size: 2 });

      expect(a.id).not.toBe(b.id);
      expect(updated).toEqual({ ...a, properties: { size: 2 }, updatedAt: '2026-03-01T10:00:02.000Z' });
      expect(await cloud.get(target, a.id)).toEqual(updated);
      expect((await cloud.list(target)).map((r) => r.urn)).toEqual(['urn:a', 'urn:b']);
      expect(await cloud.list(`${target}-other`)).toEqual([]);

      expect(await cloud.delete(target, b.id)).toBe(true);
      expect(await cloud.delete(target, b.id)).toBe(false);
      expect(await cloud.get(target, b.id)).toBeUndefined();
      expect((await cloud.list(target)).map((r) => r.id)).toEqual([a.id]);
    });

    it('when a resource that does not exist is updated, then NOT_FOUND', async () => {
      expect(await refusal(cloud.update(target, 'lcr_missing', {}))).toMatchObject({ code: 'LOCAL_CLOUD.NOT_FOUND', kind: 'not-found' });
    });

    it("when a stack adopts a resource, then it takes the stack's urn, keeps its properties, and listStack finds it; a missing one is NOT_FOUND", async () => {
      const stack = { tenant: TENANT, project: 'shop', stack: 'dev' };
      const legacy = await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:old::ops::local:storage:Bucket::logs', type: 'local:storage:Bucket', properties: { tier: 'hot' } });
      clock.advance(1000);
      const adopted = await cloud.adopt(target, legacy.id, 'urn:pulumi:dev::shop::local:storage:Bucket::logs');
      expect(adopted).toEqual({ ...legacy, urn: 'urn:pulumi:dev::shop::local:storage:Bucket::logs', updatedAt: '2026-03-01T10:00:01.000Z' });
      expect((await cloud.listStack(target, stack)).map((r) => r.id)).toEqual([legacy.id]);
      expect(await refusal(cloud.adopt(target, 'lcr_missing', 'urn:x'))).toMatchObject({ code: 'LOCAL_CLOUD.NOT_FOUND' });
    });

    it('when a target is switched unreachable, then every resource call fails with TARGET_UNREACHABLE until it is switched back', async () => {
      const a = await cloud.create(target, { scope: TENANT, urn: 'urn:a', type: 'local:web:App', properties: {} });
      expect(await cloud.isReachable(target)).toBe(true);

      await cloud.setReachable(target, false);
      expect(await cloud.isReachable(target)).toBe(false);
      const calls: (() => Promise<unknown>)[] = [
        () => cloud.create(target, { scope: TENANT, urn: 'urn:b', type: 'local:web:App', properties: {} }),
        () => cloud.update(target, a.id, { x: 1 }),
        () => cloud.delete(target, a.id),
        () => cloud.get(target, a.id),
        () => cloud.list(target),
        () => cloud.listStack(target, ref('dev')),
        () => cloud.recordApply(target, { stack: ref('s'), planDigest: 'sha256:x' }),
      ];
      for (const call of calls) {
        expect(await refusal(call())).toMatchObject({ code: 'PROVISIONING.TARGET_UNREACHABLE', kind: 'unavailable', details: { target } });
      }
      // Another target is not affected.
      await expect(cloud.list(`${target}-other`)).resolves.toEqual([]);

      await cloud.setReachable(target, true);
      await cloud.setReachable(target, true);
      expect((await cloud.list(target)).map((r) => ({ id: r.id, properties: r.properties }))).toEqual([{ id: a.id, properties: {} }]);
    });

    it("when stacks share a target, then listStack returns exactly the urns of the tenant's scope that start with urn:pulumi:<stack>::<project>::, in creation order", async () => {
      for (const [, urn] of STACK_URNS) {
        await cloud.create(target, { scope: TENANT, urn, type: 'local:web:App', properties: { urn } });
        clock.advance(1);
      }
      await cloud.create(`${target}-other`, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:web:App::elsewhere', type: 'local:web:App', properties: {} });
      // Another tenant's stack of the same project and stack names, and a scope the tenant's name is a prefix of.
      await cloud.create(target, { scope: 'tenant-b', urn: 'urn:pulumi:dev::app::local:web:App::theirs', type: 'local:web:App', properties: {} });
      await cloud.create(target, { scope: `${TENANT}x`, urn: 'urn:pulumi:dev::app::local:web:App::near', type: 'local:web:App', properties: {} });

      const urnsOf = async (stack: StackRef) => (await cloud.listStack(target, stack)).map((r) => r.urn);
      for (const stack of ['dev', 'dev-2', 'DEV', 'd_v', 'dxv', 'de%', 'devx', 'de', 'd']) {
        expect(await urnsOf(ref(stack)), stack).toEqual(STACK_URNS.filter(([s]) => s === stack).map(([, urn]) => urn));
      }
      for (const project of ['ap', 'app-2', 'APP', 'a_p', 'a']) {
        expect(await urnsOf(ref('dev', project)), project).toEqual(STACK_URNS.filter(([, urn]) => urn.startsWith(`urn:pulumi:dev::${project}::`)).map(([, urn]) => urn));
      }
      const [api] = await cloud.listStack(target, ref('dev'));
      expect(api).toEqual({ ...(await cloud.get(target, api!.id)), scope: TENANT, properties: { urn: 'urn:pulumi:dev::app::local:web:App::api' } });
      expect(await urnsOf(ref('dev', 'app', 'tenant-b'))).toEqual(['urn:pulumi:dev::app::local:web:App::theirs']);
      expect(await urnsOf(ref('dev', 'app', 'tenant'))).toEqual([]);
      expect(await cloud.listStack(`${target}-none`, ref('dev'))).toEqual([]);
    });

    // Migrations and query plans are each dialect's own; the T-SQL shadow runs neither (its schema and plans are
    // PostgreSQL's), and mssql-schema.test.ts checks the Azure SQL migrations.
    it.skipIf(dialect === 'mssql')('when a store made before the urn index holds resources, then the migrations keep them and listStack reads them (in scope unknown: no run names their stack)', async () => {
      const old = await createTestDatabase(dialect, { migrate: false });
      try {
        const db = old.store.db;
        await migrateToLatest(db, dialect, migrationsBefore(BY_URN));
        const row = { target: 'local', urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', properties: '{"size":1}', created_at: 1, updated_at: 1 };
        await db.insertInto('local_cloud_resources').values([{ ...row, id: 'lcr_1' }, { ...row, id: 'lcr_2', urn: 'urn:pulumi:dev-2::app::local:web:App::api' }]).execute();

        expect(await migrateToLatest(db, dialect, allMigrations)).toEqual([BY_URN, BY_TENANT]);

        expect(await listStackResources(localCloudDb(db), 'local', ref('dev', 'app', 'unknown'))).toEqual([
          { target: 'local', id: 'lcr_1', scope: 'unknown', urn: row.urn, type: row.type, properties: { size: 1 }, createdAt: 1, updatedAt: 1 },
        ]);
        expect(await listStackResources(localCloudDb(db), 'local', ref('dev'))).toEqual([]);
      } finally {
        await old.drop();
      }
    });

    it.skipIf(dialect === 'mssql')('when one stack of many is listed, then the store seeks the (target, scope, urn) index, and urns compare code point by code point', async () => {
      // 40 stacks of 50 resources, with statistics, so the planner weighs a real table rather than an empty one.
      const db = database.store.db;
      const rows = Array.from({ length: 2000 }, (_, i) => ({
        target,
        id: `lcr_${String(i).padStart(5, '0')}`,
        scope: TENANT,
        urn: `urn:pulumi:stack-${i % 40}::app::local:web:App::r${i}`,
        type: 'local:web:App',
        properties: '{}',
        created_at: i,
        updated_at: i,
      }));
      for (let i = 0; i < rows.length; i += 200) await db.insertInto('local_cloud_resources').values(rows.slice(i, i + 200)).execute();
      await sql`analyze`.execute(db);
      const from = 'urn:pulumi:stack-7::app::';
      const to = 'urn:pulumi:stack-7::app:;';

      expect(await cloud.listStack(target, ref('stack-7'))).toHaveLength(50);
      if (dialect === 'sqlite') {
        const plan = await sql<{ detail: string }>`explain query plan select * from local_cloud_resources where target = ${target} and scope = ${TENANT} and urn >= ${from} and urn < ${to} order by id`.execute(db);
        expect(plan.rows.map((r) => r.detail).join('\n')).toMatch(/SEARCH local_cloud_resources USING INDEX local_cloud_resources_stack \(target=\? AND scope=\? AND urn>\? AND urn<\?\)/);
      } else {
        const plan = await sql<{ 'QUERY PLAN': string }>`explain select * from local_cloud_resources where target = ${target} and scope = ${TENANT} and urn >= ${from} and urn < ${to} order by id`.execute(db);
        expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/local_cloud_resources_stack[\s\S]*Index Cond: .*target.*scope.*urn >= .*urn < /);
        // The test server's database collation may well be C already; the column must be C whatever the database's is.
        const column = await sql<{ collation_name: string | null }>`select collation_name from information_schema.columns where table_schema = current_schema() and table_name = 'local_cloud_resources' and column_name = 'urn'`.execute(db);
        expect(column.rows).toEqual([{ collation_name: 'C' }]);
      }
    });

    it('when applies are recorded, then they are counted per target and tenant-qualified stack, oldest first', async () => {
      await cloud.recordApply(target, { stack: ref('dev'), planDigest: 'sha256:1' });
      clock.advance(5);
      await cloud.recordApply(target, { stack: ref('prod'), planDigest: 'sha256:2' });
      await cloud.recordApply(target, { stack: ref('dev'), planDigest: 'sha256:3' });
      await cloud.recordApply(target, { stack: ref('dev', 'app', 'tenant-b'), planDigest: 'sha256:4' });
      expect((await cloud.applies(target, ref('dev'))).map((a) => a.planDigest)).toEqual(['sha256:1', 'sha256:3']);
      expect((await cloud.applies(target, ref('dev', 'app', 'tenant-b'))).map((a) => a.planDigest)).toEqual(['sha256:4']);
      expect(await cloud.applies(target)).toHaveLength(4);
      expect((await cloud.applies(target))[1]).toEqual({ target, stack: `${TENANT}/app/prod`, planDigest: 'sha256:2', appliedAt: '2026-03-01T10:00:00.005Z' });
    });
  });
}

describe('local cloud on Azure SQL (compiled T-SQL)', () => {
  it('when the urn index is created, then the column becomes indexable with a binary collation and keeps NOT NULL', async () => {
    const { db, queries } = recordingMssql();
    await localCloudMigrations('mssql')[BY_URN]!.up(db);
    expect(queries.map((q) => q.sql)).toEqual([
      'alter table local_cloud_resources alter column urn nvarchar(450) collate Latin1_General_100_BIN2 not null',
      'create index "local_cloud_resources_urn" on "local_cloud_resources" ("target", "urn")',
    ]);
  });

  it('when one stack is listed, then it is a range on (target, scope, urn) with no LIKE to escape', async () => {
    const { db, queries } = recordingMssql(() => ({ rows: [] }));
    await listStackResources(localCloudDb(db), 'local', ref('a%_b', 'p%_q'));
    expect(queries).toEqual([
      {
        sql: 'select * from "local_cloud_resources" where "target" = @1 and "scope" = @2 and "urn" >= @3 and "urn" < @4 order by "id"',
        parameters: ['local', TENANT, 'urn:pulumi:a%_b::p%_q::', 'urn:pulumi:a%_b::p%_q:;'],
      },
    ]);
  });
});
