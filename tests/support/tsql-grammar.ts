import { init, MsSqlDialect, parse } from '@guanmingchiu/sqlparser-ts';

/**
 * Checks statements against an independent T-SQL grammar: sqlparser-rs (0.62, through @guanmingchiu/sqlparser-ts)
 * with its MsSqlDialect. It knows no schema: it says a statement is T-SQL in form, not that its names exist.
 */

/**
 * Valid T-SQL that the grammar lacks. Each entry names one construct, rewritten to a form the grammar knows before
 * the statement is parsed, so that the rest of the statement is still checked.
 */
export const TSQL_ALLOWED: readonly { readonly construct: RegExp; readonly as: string; readonly reason: string; readonly example: string }[] = [
  {
    construct: /\bnext value for (capacity_fencing)\b/g,
    as: '$1',
    example: 'insert into "capacity_leases" ("id", "fencing_token") output "inserted"."fencing_token" values (@1, next value for capacity_fencing)',
    reason:
      'NEXT VALUE FOR <sequence> (SQL Server 2012 on; the fencing token of a lease) is an expression the grammar does ' +
      'not parse: it reads NEXT as a name and then expects FOR UPDATE; the sequence name stands in for it.',
  },
  {
    construct: /\balter column ("?\w+"?) (\w+(?:\(\w+\))?)(?: collate \w+)?(?: not null| null)?$/,
    as: 'alter column $1 set data type $2',
    example: 'alter table local_cloud_resources alter column urn nvarchar(450) collate Latin1_General_100_BIN2 not null',
    reason:
      "T-SQL's ALTER TABLE … ALTER COLUMN <column> <type> [COLLATE <collation>] [NOT NULL] sets a column's type, " +
      "collation and nullability in one clause; the grammar knows only PostgreSQL's ALTER COLUMN … SET DATA TYPE " +
      '<type>, so the type is checked in that form and the collation and nullability are not.',
  },
];

/**
 * Constructs the grammar accepts whatever the dialect (sqlparser-rs parses the union of the dialects it knows) but
 * that T-SQL does not have: found in the syntax tree, they make a statement fail too. Each is what SQLite or
 * PostgreSQL would say instead of T-SQL, so a query that takes the wrong dialect's spelling is caught.
 */
const NOT_TSQL: readonly { readonly construct: string; readonly found: (key: string, value: unknown) => boolean }[] = [
  { construct: 'ON CONFLICT (T-SQL upserts with MERGE)', found: (key) => key === 'OnConflict' || key === 'DuplicateKeyUpdate' },
  { construct: 'RETURNING (T-SQL says OUTPUT)', found: (key, value) => key === 'returning' && value != null },
  { construct: 'LIMIT (T-SQL says TOP, or OFFSET … FETCH)', found: (key, value) => key === 'LimitOffset' && (value as { limit?: unknown }).limit != null },
  { construct: 'FOR UPDATE / FOR SHARE (T-SQL locks with table hints)', found: (key, value) => key === 'locks' && Array.isArray(value) && value.length > 0 },
  { construct: 'a :: cast (T-SQL says CAST)', found: (key, value) => key === 'kind' && value === 'DoubleColon' },
  { construct: 'ILIKE', found: (key) => key === 'ILike' },
  { construct: 'a $n or ? parameter (T-SQL parameters are @name)', found: (key) => key === 'Placeholder' },
  {
    construct: 'TRUE / FALSE (T-SQL has no boolean literals; the grammar reads them as column names)',
    found: (key, value) => key === 'Identifier' && isUnquotedName(value, ['true', 'false']),
  },
];

function isUnquotedName(value: unknown, names: readonly string[]): boolean {
  const ident = value as { value?: unknown; quote_style?: unknown };
  return typeof ident.value === 'string' && ident.quote_style == null && names.includes(ident.value.toLowerCase());
}

export interface TsqlProblem {
  readonly statement: string;
  readonly problem: string;
}

export interface TsqlCheck {
  /** Distinct statements checked. */
  readonly checked: number;
  /** Statements that parsed only through an entry of TSQL_ALLOWED. */
  readonly allowed: number;
  readonly problems: readonly TsqlProblem[];
}

/** Parses each distinct statement as T-SQL; a statement fails when it does not parse or uses a construct of NOT_TSQL. */
export async function checkTsql(statements: Iterable<string>): Promise<TsqlCheck> {
  await init();
  const dialect = new MsSqlDialect();
  const distinct = new Set(statements);
  const problems: TsqlProblem[] = [];
  let allowed = 0;
  for (const statement of distinct) {
    const rewritten = TSQL_ALLOWED.reduce((text, entry) => text.replace(entry.construct, entry.as), statement);
    if (rewritten !== statement) allowed++;
    let tree: unknown;
    try {
      tree = parse(rewritten, dialect);
    } catch (error) {
      problems.push({ statement, problem: error instanceof Error ? error.message : String(error) });
      continue;
    }
    const lacking = [...new Set(constructsIn(tree))];
    if (lacking.length > 0) problems.push({ statement, problem: `not T-SQL: ${lacking.join('; ')}` });
  }
  return { checked: distinct.size, allowed, problems };
}

/** The constructs of NOT_TSQL found anywhere in a syntax tree (the parser's JSON form). */
function* constructsIn(node: unknown): Generator<string> {
  if (Array.isArray(node)) {
    for (const item of node) yield* constructsIn(item);
  } else if (node !== null && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      for (const check of NOT_TSQL) if (check.found(key, value)) yield check.construct;
      yield* constructsIn(value);
    }
  }
}

/** A failure message listing each problem under its statement; empty when there is none. */
export function describeTsqlProblems(where: string, check: TsqlCheck): string {
  if (check.problems.length === 0) return '';
  const lines = check.problems.map((p) => `- ${p.statement}\n    ${p.problem}`);
  return `${check.problems.length} of the ${check.checked} statements ${where} compiled for Azure SQL are not T-SQL:\n${lines.join('\n')}`;
}
