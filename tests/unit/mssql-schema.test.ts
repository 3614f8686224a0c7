import { describe, expect, it } from 'vitest';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { recordInbound } from '../../shared/platform/bus/inbox.repository';
import { claimPending } from '../../shared/platform/bus/outbox-relay.repository';
import { ManualClock } from '../../shared/platform/time/clock';
import { recordingMssql } from '../support/recording-mssql';
import { checkTsql, describeTsqlProblems } from '../support/tsql-grammar';

describe('the store schema on Azure SQL (compiled T-SQL)', () => {
  it('when every migration is compiled for Azure SQL, then none uses a type or clause T-SQL lacks', async () => {
    const { db, queries } = recordingMssql();
    const names: string[] = [];
    for (const source of allMigrations) {
      for (const [name, migration] of Object.entries(source('mssql'))) {
        names.push(name);
        await migration.up(db);
      }
    }
    expect(names.length).toBeGreaterThan(3);
    const ddl = queries.map((q) => q.sql).join('\n');
    // TEXT cannot be compared or indexed in T-SQL; SQLite's and PostgreSQL's auto-increment spellings do not exist there.
    expect(ddl).not.toMatch(/\btext\b|autoincrement|bigserial|without rowid|\bbytea\b|\bblob\b/i);
    expect(ddl).toMatch(/nvarchar\(max\)/);
  });

  it('when every migration is compiled for Azure SQL, then each of its statements parses as T-SQL', async () => {
    const { db, queries } = recordingMssql();
    for (const source of allMigrations) for (const migration of Object.values(source('mssql'))) await migration.up(db);

    const check = await checkTsql(queries.map((q) => q.sql));

    expect(describeTsqlProblems('of the migrations', check)).toBe('');
    expect(check.checked).toBeGreaterThan(50);
  });

  it('when the outbox is created for Azure SQL, then its sequence is an identity column', async () => {
    const { db, queries } = recordingMssql();
    const outbox = allMigrations[0]?.('mssql')['20261130-01-platform-outbox'];
    await outbox?.up(db);
    expect(queries[0]?.sql).toBe(
      'create table "outbox" ("seq" bigint identity primary key, "event_id" nvarchar(200) not null unique, ' +
        '"topic" nvarchar(200) not null, "correlation_id" nvarchar(200), "payload" nvarchar(max) not null, ' +
        '"created_at" bigint not null, "published_at" bigint, "attempts" integer default 0 not null, "last_error" nvarchar(max))',
    );
  });
});

describe('the outbox relay on Azure SQL (compiled T-SQL)', () => {
  it('when pending rows are claimed, then the head is read with TOP and its lanes claimed by a conditional UPDATE', async () => {
    const { db, queries } = recordingMssql((q) => (/^select top\(100\) "lane"/.test(q.sql) ? { rows: [{ lane: 7 }, { lane: 3 }, { lane: 7 }] } : { rows: [], numAffectedRows: 1n }));
    await claimPending(db, { claimToken: 'c1', now: 1000, leaseMs: 30_000, batchSize: 100, dialect: 'mssql' });
    expect(queries.slice(0, 3)).toEqual([
      { sql: 'select top(100) "lane" from "outbox" where "published_at" is null and "dead_lettered_at" is null order by "seq"', parameters: [] },
      {
        sql: 'update "outbox_lanes" set "claimed_by" = @1, "claimed_until" = @2 where "lane" in (@3, @4) and ("claimed_until" is null or "claimed_until" <= @5)',
        // The claim lasts until now + lease, for the lanes of the head rows read above, if free at now.
        parameters: ['c1', 31_000, 7, 3, 1000],
      },
      {
        sql: 'select top(100) "seq", "event_id", "topic", "correlation_id", "payload", "attempts" from "outbox" where "lane" in (select "lane" from "outbox_lanes" where "claimed_by" = @1) and "published_at" is null and "dead_lettered_at" is null order by "seq"',
        parameters: ['c1'],
      },
    ]);
  });
});

describe('the inbox on Azure SQL (compiled T-SQL)', () => {
  const INSERT =
    'insert into "inbox" ("module", "message_id", "business_key", "received_at", "processed_at", "outcome") ' +
    'select @1 as "module", @2 as "message_id", @3 as "business_key", @4 as "received_at", @5 as "processed_at", @6 as "outcome" ' +
    'where not exists (select "message_id" from "inbox" where "module" = @7 and "message_id" = @8)';
  const SAME_KEY = 'select "message_id" from "inbox" where "module" = @1 and "business_key" = @2';
  /** ManualClock's default start, 2026-01-01T00:00:00Z. */
  const NOW = 1_767_225_600_000;

  it('when a new message is recorded, then the insert is conditional without ON CONFLICT and leaves it unprocessed', async () => {
    const { db, queries } = recordingMssql();
    await recordInbound(db, { module: 'provisioning', messageId: 'm1', businessKey: 'promo-1' }, new ManualClock());
    expect(queries).toEqual([
      { sql: SAME_KEY, parameters: ['provisioning', 'promo-1'] },
      { sql: INSERT, parameters: ['provisioning', 'm1', 'promo-1', NOW, null, null, 'provisioning', 'm1'] },
    ]);
  });

  it('when a known business key arrives under a new message id, then the same insert settles it as a duplicate on arrival', async () => {
    const { db, queries } = recordingMssql((q) => (q.sql === SAME_KEY ? { rows: [{ message_id: 'm0' }] } : { rows: [], numAffectedRows: 1n }));
    await recordInbound(db, { module: 'provisioning', messageId: 'm1', businessKey: 'promo-1' }, new ManualClock());
    expect(queries).toEqual([
      { sql: SAME_KEY, parameters: ['provisioning', 'promo-1'] },
      { sql: INSERT, parameters: ['provisioning', 'm1', 'promo-1', NOW, NOW, 'duplicate-business-key', 'provisioning', 'm1'] },
    ]);
  });
});
