import { init, MsSqlDialect, parse } from '@guanmingchiu/sqlparser-ts';
import { beforeAll, describe, expect, it } from 'vitest';
import { checkTsql, TSQL_ALLOWED } from '../support/tsql-grammar';

/** The T-SQL check that every statement of the T-SQL shadow and of the Azure SQL migrations goes through. */
describe('the T-SQL grammar check', () => {
  beforeAll(async () => {
    await init();
  });

  it('when statements are T-SQL as the product compiles it, then none is a problem', async () => {
    const check = await checkTsql([
      'select top(100) "claimable"."id" from "capacity_leases" as "claimable" with (updlock, readpast, rowlock) where "claimable"."state" = @1 order by "claimable"."expires_at"',
      'merge into "capacity_tenants" with (holdlock) using (select 1 as "one") as "source" on "capacity_tenants"."id" = @1 when matched then update set "edition" = @2 when not matched then insert ("id", "edition") values (@3, @4);',
      'update "queue_messages" set "lock_token" = @1 output "inserted"."seq" where "seq" = @2',
    ]);
    expect(check).toEqual({ checked: 3, allowed: 0, problems: [] });
  });

  it.each([
    ['insert into "topic_subscriptions" ("topic") values (@1) on conflict ("topic") do nothing', 'ON CONFLICT'],
    ['insert into "queue_messages" ("queue") values (@1) returning "seq"', 'RETURNING'],
    ['select * from "topic_messages" where "topic" = @1 order by "seq" limit @2', 'LIMIT'],
    ['select "id" from "capacity_pools" where "id" = @1 for update skip locked', 'FOR UPDATE'],
    ['select "capacity"::bigint from "capacity_pools"', ':: cast'],
    ['select "id" from "capacity_pools" where "id" = $1', '$n'],
    ['select "id" from "capacity_pools" where "retiring" = true', 'TRUE / FALSE'],
  ])('when a statement says %s, which the grammar parses in any dialect, then the check fails it naming %s', async (statement, construct) => {
    const { problems } = await checkTsql([statement]);
    expect(problems).toHaveLength(1);
    expect(problems[0]?.problem).toContain(construct);
  });

  it('when a statement does not parse, then the check fails it with the parser error', async () => {
    const { problems } = await checkTsql(['merge into "capacity_pools" when not matched then insert']);
    expect(problems[0]?.problem).toMatch(/sql parser error/);
  });

  it.each(TSQL_ALLOWED.map((entry) => [entry.example, entry]))('when an allowed construct is used (%s), then the grammar alone rejects it and the check passes it', async (example, entry) => {
    // An entry the grammar has learnt is no longer needed: this fails, and the entry goes.
    expect(() => parse(example, new MsSqlDialect())).toThrow();
    expect(entry.reason.length).toBeGreaterThan(40);
    await expect(checkTsql([example])).resolves.toEqual({ checked: 1, allowed: 1, problems: [] });
  });

  it('when an allowed construct comes with an error elsewhere in the statement, then the statement still fails', async () => {
    const { problems } = await checkTsql(['insert into "capacity_leases" ("id", "fencing_token") values (@1, next value for capacity_fencing) on conflict do nothing']);
    expect(problems).toHaveLength(1);
  });
});
