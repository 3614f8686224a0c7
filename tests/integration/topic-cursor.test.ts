import { sql, type ControlledTransaction, type Kysely } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { appendToTopic, readTopic } from '../../local/bus/topic.repository';
import type { SqlStore } from '../../shared/platform/sql/database';
import { createTestDatabase, postgresUrl, skipDialect, type TestDatabase } from '../support/databases';

/**
 * Reading the embedded topic by cursor while publishers on other connections commit out of order: a publish whose
 * transaction stays open while later ones are ready to commit. The interleaving is forced with explicit
 * transactions; a publish that waits is seen waiting on a lock in pg_stat_activity, never guessed with a sleep.
 * PostgreSQL, and the T-SQL shadow (the Azure SQL statements, run on PostgreSQL). SQLite has one writer at a time.
 */
for (const dialect of ['postgres', 'mssql'] as const) {
  describe.skipIf(skipDialect(dialect))(`reading the embedded topic by cursor under concurrent publishers on ${dialect}`, () => {
    const TOPIC = 'events';
    const PUBLISHERS = 4;
    let database: TestDatabase;
    let hosts: SqlStore[] = [];
    let watcher: pg.Client;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      hosts = Array.from({ length: PUBLISHERS }, () => database.connectAgain());
      watcher = new pg.Client({ connectionString: postgresUrl() });
      await watcher.connect();
    });
    afterAll(async () => {
      await watcher?.end();
      for (const host of hosts) await host.close();
      await database?.drop();
    });

    const busOf = (store: SqlStore) => store.db as Kysely<BusTables>;
    const message = (id: string) => ({ messageId: id, body: JSON.stringify({ id }), contentType: 'application/json' });

    /** True once the backend `pid` waits for a lock another transaction holds. */
    async function waitsForLock(pid: number): Promise<boolean> {
      const { rows } = await watcher.query<{ wait_event_type: string | null }>('select wait_event_type from pg_stat_activity where pid = $1', [pid]);
      return rows[0]?.wait_event_type === 'Lock';
    }

    it('when publishes commit in the reverse of their order and a reader pages between the commits, then the reader gets every message once, in sequence order', async () => {
      // Arrange: the topic exists; the reader's cursor stands after its first message.
      const reader = busOf(database.store);
      await appendToTopic(reader, dialect, TOPIC, [message('before')], 1000);
      let cursor = (await readTopic(reader, dialect, TOPIC, { limit: 10 }))[0]?.sequenceNumber ?? 0;
      const seen: { sequenceNumber: number; messageId: string }[] = [];
      const page = async () => {
        for (let items = await readTopic(reader, dialect, TOPIC, { after: cursor, limit: 2 }); items.length > 0; items = await readTopic(reader, dialect, TOPIC, { after: cursor, limit: 2 })) {
          seen.push(...items.map((m) => ({ sequenceNumber: m.sequenceNumber, messageId: m.messageId })));
          cursor = items[items.length - 1]?.sequenceNumber ?? cursor;
        }
      };

      // Act: each host opens a transaction and publishes two messages in it, one host after the other; a host that
      // cannot publish yet (waiting for a lock) is left waiting. Then the transactions commit, the one whose publish
      // came last first, the reader paging after each commit.
      const open: { trx: ControlledTransaction<BusTables>; publish: Promise<number>; settled: boolean; pid: number }[] = [];
      for (const [index, host] of hosts.entries()) {
        const trx = await busOf(host).startTransaction().execute();
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
        const entry = { trx, pid: Number(rows[0]?.pid), settled: false, publish: appendToTopic(trx, dialect, TOPIC, [message(`m${index}a`), message(`m${index}b`)], 2000 + index) };
        const settle = () => {
          entry.settled = true;
        };
        entry.publish.then(settle, settle);
        open.push(entry);
        await vi.waitFor(async () => expect(entry.settled || (await waitsForLock(entry.pid))).toBe(true), { timeout: 10_000, interval: 5 });
      }
      while (open.length > 0) {
        // The last publish that has ended commits first; the ones still waiting wait for the commits before theirs.
        await vi.waitFor(async () => {
          for (const entry of open) expect(entry.settled || (await waitsForLock(entry.pid))).toBe(true);
        }, { timeout: 10_000, interval: 5 });
        const next = open.filter((entry) => entry.settled).at(-1);
        if (!next) throw new Error('every publish waits for a lock, yet none holds one');
        expect(await next.publish).toBe(2);
        await next.trx.commit().execute();
        open.splice(open.indexOf(next), 1);
        await page();
      }
      await page();

      // Assert
      const published = hosts.flatMap((_, index) => [`m${index}a`, `m${index}b`]);
      expect(seen.map((m) => m.messageId).sort()).toEqual([...published].sort());
      expect(seen.map((m) => m.sequenceNumber)).toEqual([...seen.map((m) => m.sequenceNumber)].sort((a, b) => a - b));
      for (const [index] of hosts.entries()) {
        const mine = seen.map((m) => m.messageId).filter((id) => id.startsWith(`m${index}`));
        expect(mine).toEqual([`m${index}a`, `m${index}b`]);
      }
      const all = await readTopic(reader, dialect, TOPIC, { limit: 100 });
      expect(all.slice(1).map((m) => m.messageId)).toEqual(seen.map((m) => m.messageId));
    });

    it('when a publish that others wait for rolls back, then the next one publishes and the reader gets only what was committed', async () => {
      // Arrange
      const reader = busOf(database.store);
      const [first, second] = hosts;
      if (!first || !second) throw new Error('two hosts expected');
      let cursor = (await readTopic(reader, dialect, TOPIC, { limit: 1000 })).at(-1)?.sequenceNumber ?? 0;
      const rolledBack = await busOf(first).startTransaction().execute();
      await appendToTopic(rolledBack, dialect, TOPIC, [message('undone')], 3000);
      const waiting = await busOf(second).startTransaction().execute();
      const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(waiting);
      let settled = false;
      const publish = appendToTopic(waiting, dialect, TOPIC, [message('kept')], 3001).finally(() => (settled = true));
      await vi.waitFor(async () => expect(settled || (await waitsForLock(Number(rows[0]?.pid)))).toBe(true), { timeout: 10_000, interval: 5 });

      // Act
      await rolledBack.rollback().execute();
      expect(await publish).toBe(1);
      await waiting.commit().execute();
      const items = await readTopic(reader, dialect, TOPIC, { after: cursor, limit: 10 });
      cursor = items.at(-1)?.sequenceNumber ?? cursor;

      // Assert
      expect(items.map((m) => m.messageId)).toEqual(['kept']);
      expect(await readTopic(reader, dialect, TOPIC, { after: cursor, limit: 10 })).toEqual([]);
    });
  });
}
