import { Migrator, sql, type ColumnDataType, type CreateTableBuilder, type Expression, type Kysely, type Migration, type MigrationProvider } from 'kysely';

/** A column type as Kysely's schema builder takes it. */
export type ColumnType = ColumnDataType | Expression<unknown>;
import { ensureError } from '../errors/app-error';
import { retry } from '../time/retry';
import type { AnyDb, SqlDialect } from './database';

/**
 * A module's migrations. Names are global and sort in the order they must run: `YYYYMMDD-NN-module-what`.
 * They receive the dialect for the few column types that differ (see `sqlTypes`).
 */
export type MigrationSource = (dialect: SqlDialect) => Record<string, Migration>;

/** Column types that differ between the dialects. Times are stored as epoch milliseconds (BIGINT). */
export function sqlTypes(dialect: SqlDialect): { text: ColumnType; key: ColumnType; bytes: ColumnType } {
  return {
    /** Unbounded text; Azure SQL needs NVARCHAR(MAX) (TEXT is deprecated and cannot be compared). */
    text: dialect === 'mssql' ? sql`nvarchar(max)` : 'text',
    /** Text that is indexed or part of a key; Azure SQL cannot index NVARCHAR(MAX). */
    key: dialect === 'mssql' ? sql`nvarchar(200)` : 'varchar(200)',
    /** Binary blobs. */
    bytes: dialect === 'postgres' ? 'bytea' : dialect === 'mssql' ? sql`varbinary(max)` : 'blob',
  };
}

/** An auto-increment BIGINT primary key named `seq` (insertion order), as each dialect spells it. */
export function withSeq(table: CreateTableBuilder<string, never>, dialect: SqlDialect): CreateTableBuilder<string, 'seq'> {
  return dialect === 'postgres'
    ? table.addColumn('seq', 'bigserial', (c) => c.primaryKey())
    : dialect === 'mssql'
      ? table.addColumn('seq', 'bigint', (c) => c.identity().primaryKey())
      : table.addColumn('seq', 'integer', (c) => c.primaryKey().autoIncrement());
}

/**
 * Brings the store to the latest schema. Safe when several instances start at once: Kysely takes a lock
 * (a row lock on PostgreSQL, an application lock on Azure SQL, the write lock on SQLite) around the whole run,
 * and a run that finds everything applied does nothing.
 */
export async function migrateToLatest(db: AnyDb, dialect: SqlDialect, sources: readonly MigrationSource[]): Promise<string[]> {
  const provider: MigrationProvider = {
    getMigrations: () => {
      const all: Record<string, Migration> = {};
      for (const source of sources) {
        for (const [name, migration] of Object.entries(source(dialect))) {
          if (all[name]) throw new Error(`duplicate migration name ${name}`);
          all[name] = migration;
        }
      }
      return Promise.resolve(all);
    },
  };
  // Kysely looks for its bookkeeping tables in any schema unless told which; on PostgreSQL, name the schema of
  // the search path, so stores that share a server (one schema per host or test) never see each other's tables.
  const migrationTableSchema =
    dialect === 'postgres' ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(db)).rows[0]?.schema : undefined;
  // Modules add migrations independently, so one may sort before another that already ran.
  const migrator = new Migrator({
    db,
    provider,
    allowUnorderedMigrations: true,
    ...(migrationTableSchema ? { migrationTableSchema } : {}),
  });
  // Two processes creating Kysely's bookkeeping tables at the same moment can collide on PostgreSQL's catalog;
  // the loser retries at once and then finds the tables there.
  return retry(
    async () => {
      const { error, results } = await migrator.migrateToLatest();
      if (error) throw ensureError(error);
      return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
    },
    { attempts: 5, backoff: { kind: 'fixed', firstMs: 0 }, retryIf: isConcurrentCreateConflict },
  );
}

function isConcurrentCreateConflict(error: Error): boolean {
  const code = (error as { code?: unknown }).code;
  return code === '23505' || code === '42P07' || code === 'SQLITE_BUSY' || /already exists/i.test(error.message);
}

/**
 * Drops columns. Azure SQL first needs the column's default constraint gone, and Kysely's `defaultTo` gave it a
 * generated name, so the name is looked up.
 */
export async function dropColumns(db: Kysely<unknown>, dialect: SqlDialect, table: string, columns: readonly string[]): Promise<void> {
  for (const column of columns) {
    if (dialect === 'mssql') {
      await sql`declare @name sysname = (select d.name from sys.default_constraints d join sys.columns c on c.default_object_id = d.object_id where c.object_id = object_id(${table}) and c.name = ${column});
if @name is not null exec('alter table ' + ${table} + ' drop constraint ' + @name)`.execute(db);
    }
    await db.schema.alterTable(table).dropColumn(column).execute();
  }
}

/** Drops an index; Azure SQL names indexes per table, so it needs the table too. */
export async function dropIndex(db: Kysely<unknown>, dialect: SqlDialect, index: string, table: string): Promise<void> {
  await db.schema.dropIndex(index).$call((q) => (dialect === 'mssql' ? q.on(table) : q)).execute();
}

/** Renames a table; Azure SQL has no `alter table … rename to`, its stored procedure does it. */
export async function renameTable(db: Kysely<unknown>, dialect: SqlDialect, from: string, to: string): Promise<void> {
  if (dialect === 'mssql') await sql`exec sp_rename ${sql.lit(from)}, ${sql.lit(to)}`.execute(db);
  else await db.schema.alterTable(from).renameTo(to).execute();
}

/** The order of a stack's runs that puts the one telling whose the stack is first: its latest applied, else its newest. */
const LEGACY_OWNER_ORDER = sql`case when r.state = 'applied' then 1 else 0 end desc, r.seq desc`;

/**
 * The tenant of a stack named before stacks were tenant-qualified, as a correlated subquery over `stackColumn`:
 * the tenant of its latest applied run (else its newest run), the only record of whose a stack was. For the
 * migrations that qualify the local engine's states, the local cloud's resources and the stack locks.
 */
export function legacyStackTenant(dialect: SqlDialect, stackColumn: string) {
  return dialect === 'mssql'
    ? sql<string>`(select top 1 r.tenant_id from provisioning_runs r where r.stack = ${sql.ref(stackColumn)} order by ${LEGACY_OWNER_ORDER})`
    : sql<string>`(select r.tenant_id from provisioning_runs r where r.stack = ${sql.ref(stackColumn)} order by ${LEGACY_OWNER_ORDER} limit 1)`;
}

/** `legacyStackTenant` for one stack name; undefined when no run names it. */
export async function legacyTenantOfStack(db: Kysely<unknown>, dialect: SqlDialect, stack: string): Promise<string | undefined> {
  const query =
    dialect === 'mssql'
      ? sql<{ tenant_id: string }>`select top 1 r.tenant_id from provisioning_runs r where r.stack = ${stack} order by ${LEGACY_OWNER_ORDER}`
      : sql<{ tenant_id: string }>`select r.tenant_id from provisioning_runs r where r.stack = ${stack} order by ${LEGACY_OWNER_ORDER} limit 1`;
  return (await query.execute(db)).rows[0]?.tenant_id;
}

/**
 * Drops the unique constraint a column was created with (`.unique()` on the column, so its name was generated by
 * the database). PostgreSQL and Azure SQL drop the constraint found by its column; SQLite cannot drop a constraint,
 * so the table is made again without it, as SQLite's documentation describes (new table from the stored definition,
 * rows copied, old table dropped, new one renamed, its indexes made again). The table's other constraints stay.
 */
export async function dropColumnUnique(db: Kysely<unknown>, dialect: SqlDialect, table: string, column: string): Promise<void> {
  if (dialect === 'postgres') {
    const found = await sql<{ conname: string }>`select c.conname from pg_constraint c
      join pg_attribute a on a.attrelid = c.conrelid and a.attnum = any(c.conkey)
      where c.conrelid = to_regclass(${table}) and c.contype = 'u' and a.attname = ${column} and cardinality(c.conkey) = 1`.execute(db);
    for (const { conname } of found.rows) await sql`alter table ${sql.table(table)} drop constraint ${sql.id(conname)}`.execute(db);
    return;
  }
  if (dialect === 'mssql') {
    await sql`declare @name sysname = (select kc.name from sys.key_constraints kc
  join sys.index_columns ic on ic.object_id = kc.parent_object_id and ic.index_id = kc.unique_index_id
  join sys.columns c on c.object_id = ic.object_id and c.column_id = ic.column_id
  where kc.parent_object_id = object_id(${table}) and kc.type = 'UQ' and c.name = ${column});
if @name is not null exec('alter table ' + ${table} + ' drop constraint ' + @name)`.execute(db);
    return;
  }
  const definitions = await sql<{ type: string; name: string; sql: string | null }>`select type, name, sql from sqlite_master where tbl_name = ${table}`.execute(db);
  const created = definitions.rows.find((d) => d.type === 'table')?.sql;
  if (!created) throw new Error(`no table ${table} to drop the unique constraint of ${column} from`);
  const columnUnique = new RegExp(`("${column}"[^,]*?)\\s+unique\\b`, 'i');
  if (!columnUnique.test(created)) throw new Error(`column ${column} of ${table} has no unique constraint of its own: ${created}`);
  const rebuilt = `${table}__rebuilt`;
  const definition = created.replace(columnUnique, '$1').replace(new RegExp(`^create table\\s+"?${table}"?`, 'i'), `create table "${rebuilt}"`);
  await sql.raw(definition).execute(db);
  await sql`insert into ${sql.table(rebuilt)} select * from ${sql.table(table)}`.execute(db);
  await sql`drop table ${sql.table(table)}`.execute(db);
  await sql`alter table ${sql.table(rebuilt)} rename to ${sql.table(table)}`.execute(db);
  // Indexes SQLite made for constraints have no definition (`sql` null): the new table made its own.
  for (const index of definitions.rows) if (index.type === 'index' && index.sql) await sql.raw(index.sql).execute(db);
}
