import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BusTables, QueueMessageIdTable, TopicSubscriptionTable } from '../../shared/platform/bus/bus.tables';
import { upsertRow } from '../../shared/platform/sql/dialect';
import { createTestDatabase, postgresUrl, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { tsqlShadowStore } from '../support/tsql-shadow';

/**
 * `upsertRow` has one outcome on every dialect: ON CONFLICT on SQLite and PostgreSQL, MERGE WITH (HOLDLOCK) in
 * T-SQL (on the shadow, the same MERGE run by PostgreSQL).
 */
for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`upsertRow on ${dialect}`, () => {
    let database: TestDatabase;
    let db: Kysely<BusTables>;
    let n = 0;
    const key = () => `key-${++n}`;
    const accepted = (queue: string) => db.selectFrom('queue_message_ids').select('accepted_at').where('queue', '=', queue).execute();

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      db = database.store.db as Kysely<BusTables>;
    });
    afterAll(async () => {
      await database?.drop();
    });

    it('when a row is inserted if absent, then the first upsert inserts it, the second finds it and changes nothing', async () => {
      const topic = key();
      const subscribe = (createdAt: number) =>
        upsertRow<TopicSubscriptionTable>(db, dialect, 'topic_subscriptions', { values: { topic, subscription: 's', created_at: createdAt }, key: ['topic', 'subscription'] });

      expect([await subscribe(1), await subscribe(2)]).toEqual([1, 0]);

      expect(await db.selectFrom('topic_subscriptions').select('created_at').where('topic', '=', topic).execute()).toEqual([{ created_at: 1 }]);
    });

    it('when a row is upserted with an update, then the first inserts it and the second updates it', async () => {
      const queue = key();
      const accept = (at: number) =>
        upsertRow<QueueMessageIdTable>(db, dialect, 'queue_message_ids', { values: { queue, message_id: 'm', accepted_at: at }, key: ['queue', 'message_id'], update: { accepted_at: at } });

      expect([await accept(1), await accept(2)]).toEqual([1, 1]);

      expect(await accepted(queue)).toEqual([{ accepted_at: 2 }]);
    });

    it("when the update has a condition, then it changes the existing row only when the row meets it", async () => {
      const queue = key();
      const acceptAfter = (at: number, notBefore: number) =>
        upsertRow<QueueMessageIdTable>(db, dialect, 'queue_message_ids', {
          values: { queue, message_id: 'm', accepted_at: at },
          key: ['queue', 'message_id'],
          update: { accepted_at: at },
          updateWhen: ['accepted_at', '<=', notBefore],
        });

      expect(await acceptAfter(10, 0)).toBe(1);
      expect(await acceptAfter(20, 9)).toBe(0);
      expect(await accepted(queue)).toEqual([{ accepted_at: 10 }]);
      expect(await acceptAfter(30, 10)).toBe(1);
      expect(await accepted(queue)).toEqual([{ accepted_at: 30 }]);
    });
  });
}

describe.skipIf(skipDialect('mssql'))('the T-SQL shadow', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase('postgres');
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('when a repository statement runs on it, then the T-SQL compiler\'s text is recorded and PostgreSQL runs its own form', async () => {
    const recorded = new Set<string>();
    const shadow = tsqlShadowStore({ connection: postgresUrl(), postgresSchema: database.overrides.postgresSchema ?? '' }, recorded);
    try {
      const values = { topic: 'shadowed', subscription: 's', created_at: 1 };
      expect(await upsertRow<TopicSubscriptionTable>(shadow.db, shadow.dialect, 'topic_subscriptions', { values, key: ['topic', 'subscription'] })).toBe(1);

      expect([...recorded]).toEqual([
        'merge into "topic_subscriptions" with (holdlock) using (select 1 as "one") as "source" on "topic_subscriptions"."topic" = @1 ' +
          'and "topic_subscriptions"."subscription" = @2 when not matched then insert ("topic", "subscription", "created_at") values (@3, @4, @5);',
      ]);
      expect(await database.store.db.selectFrom('topic_subscriptions').selectAll().where('topic', '=', 'shadowed').execute()).toEqual([values]);
      await expect(shadow.db.schema.createTable('not_here').addColumn('id', 'integer').execute()).rejects.toThrow(/runs no DDL/);
    } finally {
      await shadow.close();
    }
  });
});
