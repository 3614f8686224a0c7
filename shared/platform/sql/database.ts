import type BetterSqlite3 from 'better-sqlite3';
import {
  CompiledQuery,
  Kysely,
  MssqlDialect,
  SqliteDialect,
  SqliteDriver,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type QueryCompiler,
  type QueryResult,
  type SqliteDialectConfig,
} from 'kysely';
import { mkdirSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import type pg from 'pg';
import { statementName } from './named-statements';
import { SearchPathPostgresDialect } from './postgres-introspector';
import { RuntimeCloudMssqlQueryCompiler, type SqlDialect } from './dialect';
import { startCheckpointer } from './sqlite-checkpointer';
import { ensureError } from '../errors/app-error';

export type { SqlDialect };

/**
 * The one Kysely instance of the runtime-cloud store. Its table types are unknown here (the platform knows no
 * module); each module's repository narrows it with `db.withTables<ModuleTables>()`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the platform cannot name the modules' tables
export type AnyDb = Kysely<any>;

export interface SqlStore {
  readonly db: AnyDb;
  readonly dialect: SqlDialect;
  /** SQLite only: transactions that run synchronously on the store's connection. */
  readonly sqlite?: SqliteTransactions;
  close(): Promise<void>;
}

export interface SqlStoreOptions {
  readonly dialect: SqlDialect;
  /** sqlite: file path (relative to `baseDir`) or `:memory:`; postgres: URL; mssql: `Server=…;Database=…`. */
  readonly connection: string;
  /** Folder that a relative SQLite path is resolved against. Example: `.runtime-cloud`. */
  readonly baseDir?: string;
  /** Pool size for postgres and mssql. Example: `10`. */
  readonly poolSize?: number;
  /** PostgreSQL `search_path`, so tests can own a schema each. Example: `t_capacity_1`. */
  readonly postgresSchema?: string;
}

/**
 * Each dialect's driver is required when a store of that dialect is created, never at module load: a host loads
 * only the driver it is configured for (tedious alone takes about 0.2 s to load).
 */
export function createSqlStore(options: SqlStoreOptions): SqlStore {
  switch (options.dialect) {
    case 'sqlite':
      return sqliteStore(options);
    case 'postgres':
      return postgresStore(options);
    case 'mssql':
      return mssqlStore(options);
  }
}

function sqliteStore(options: SqlStoreOptions): SqlStore {
  const file =
    options.connection === ':memory:' || isAbsolute(options.connection)
      ? options.connection
      : join(options.baseDir ?? '.', options.connection);
  if (file !== ':memory:') mkdirSync(dirname(file), { recursive: true });
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const Sqlite = require('better-sqlite3') as typeof BetterSqlite3;
  const database = new Sqlite(file);
  database.pragma('journal_mode = WAL');
  database.pragma('busy_timeout = 10000');
  database.pragma('synchronous = NORMAL');
  database.pragma('foreign_keys = ON');
  // Checkpoints run on a worker thread (see sqlite-checkpointer.ts), not inside request commits. The inline
  // auto-checkpoint stays as a backstop at 10,000 pages (40 MB): under writes that never pause, a background
  // checkpoint can never let the WAL start over, and only the writer's own checkpoint can.
  database.pragma('journal_size_limit = 67108864');
  const checkpointer = file === ':memory:' ? undefined : (database.pragma('wal_autocheckpoint = 10000'), startCheckpointer(file));
  const cached = withStatementCache(database);
  const db = new Kysely({ dialect: new ImmediateSqliteDialect({ database: cached }) });
  return {
    db,
    dialect: 'sqlite',
    sqlite: sqliteTransactions(db, cached),
    async close() {
      await checkpointer?.stop();
      await db.destroy();
    },
  };
}

/**
 * Kysely's SQLite driver opens transactions with a plain (deferred) BEGIN. With several processes on one file,
 * two deferred transactions that both read and then write deadlock on the lock upgrade and one fails at once
 * with SQLITE_BUSY, ignoring the busy timeout. BEGIN IMMEDIATE takes the write lock up front, so writers queue
 * behind the busy timeout instead.
 */
class ImmediateSqliteDialect extends SqliteDialect {
  readonly #config: SqliteDialectConfig;
  constructor(config: SqliteDialectConfig) {
    super(config);
    this.#config = config;
  }
  override createDriver(): Driver {
    return new ImmediateSqliteDriver(this.#config);
  }
}

class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
  }
}

/**
 * SQLite: a transaction's statements run synchronously, one after another on the calling thread, as better-sqlite3
 * runs them anyway. Through Kysely each statement, and its BEGIN and COMMIT, takes several promise hops; for a hot
 * path of a few statements that is about a sixth of the work (the capacity bench: about 15,500 grants/s through
 * Kysely, 18,400 this way).
 */
export interface SqliteTransactions {
  /**
   * Runs `work` in one IMMEDIATE transaction, once the store's connection is free of Kysely's work: committed when
   * it returns, rolled back when it throws. `work` must not wait for anything.
   */
  run<T>(work: (connection: SyncConnection) => T): Promise<T>;
}

/** The store's connection inside `SqliteTransactions.run`. */
export interface SyncConnection {
  /** The store's Kysely instance, to build statements with (see `Prepared.executeSync`). */
  readonly db: AnyDb;
  /** Runs a statement, answering as Kysely's SQLite driver does. */
  execute<R>(sql: string, parameters: readonly unknown[]): QueryResult<R>;
}

function sqliteTransactions(db: AnyDb, database: BetterSqlite3.Database): SqliteTransactions {
  const connection: SyncConnection = {
    db,
    execute<R>(sql: string, parameters: readonly unknown[]): QueryResult<R> {
      const statement = database.prepare(sql);
      if (statement.reader) return { rows: statement.all(parameters) as R[] };
      return { rows: [], numAffectedRows: BigInt(statement.run(parameters).changes) };
    },
  };
  const transaction = database.transaction((work: (connection: SyncConnection) => unknown) => work(connection));
  const runNow = <T>(work: (connection: SyncConnection) => T): Promise<T> => {
    try {
      return Promise.resolve(transaction.immediate(work) as T);
    } catch (error) {
      return Promise.reject(ensureError(error));
    }
  };
  return {
    // Work that does not wait cannot interleave with other statements on the connection, only with a transaction
    // Kysely has open on it (awaiting between its statements): then it waits for Kysely to lend the connection,
    // which it does to one user at a time, once that transaction has ended.
    run: (work) => (database.inTransaction ? db.connection().execute(() => runNow(work)) : runNow(work)),
  };
}

/** Kysely prepares every statement anew; better-sqlite3 statements are reusable, so keep them by SQL text. */
function withStatementCache(database: BetterSqlite3.Database): BetterSqlite3.Database {
  const cache = new Map<string, BetterSqlite3.Statement>();
  const prepare = (source: string): BetterSqlite3.Statement => {
    let statement = cache.get(source);
    if (!statement) {
      statement = database.prepare(source);
      if (cache.size > 2000) cache.clear();
      cache.set(source, statement);
    }
    return statement;
  };
  return new Proxy(database, {
    get(target, property, receiver) {
      if (property === 'prepare') return prepare;
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

const INT8_OID = 20;
const NUMERIC_OID = 1700;

const numericBigints = (driver: typeof pg): typeof pg.types.getTypeParser =>
  ((oid: number, format?: 'text' | 'binary'): unknown =>
    oid === INT8_OID || oid === NUMERIC_OID
      ? (value: string) => Number(value)
      : (driver.types.getTypeParser as (oid: number, format: 'text' | 'binary') => unknown)(oid, format ?? 'text')) as typeof pg.types.getTypeParser;

function postgresStore(options: SqlStoreOptions): SqlStore {
  const db = new Kysely({ dialect: postgresDialect(options) });
  return { db, dialect: 'postgres', close: () => db.destroy() };
}

/** The store's PostgreSQL dialect: its pool (search path, number parsing, named statements) and introspector. */
export function postgresDialect(options: SqlStoreOptions): Dialect {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const driver = require('pg') as typeof pg;
  const pool = new driver.Pool({
    connectionString: options.connection,
    max: options.poolSize ?? 10,
    // A connection is replaced after this many uses, so that the plans PostgreSQL keeps for its named statements
    // (see withNamedStatements) are made again as tables grow: a plan made while a table was nearly empty may read
    // it whole. ANALYZE (autovacuum) re-plans them too, where it runs; without it, nothing else would.
    maxUses: 2000,
    ...(options.postgresSchema ? { options: `-c search_path=${options.postgresSchema}` } : {}),
    // Counters and epoch-millisecond times are BIGINT; they fit a double, and the product treats them as numbers.
    types: { getTypeParser: numericBigints(driver) },
  });
  // An idle connection the server ended (a restart, `pg_terminate_backend`) is an 'error' event of the pool, which
  // drops that connection itself; unheard, the event would end the process. The next query opens a new one.
  pool.on('error', () => undefined);
  // A connection the server ends while it is checked out is an 'error' event of the client, unheard by Kysely: the
  // query in flight fails with it, and the pool drops the broken connection when it is given back. The listener goes
  // on as the pool makes the connection ('connect' comes before the pool takes its own idle listener off): a server
  // that ends it right as it becomes ready sends both in one segment, and the event comes before the connection's
  // first user could listen.
  pool.on('connect', (client) => client.on('error', () => undefined));
  return new SearchPathPostgresDialect({ pool: withNamedStatements(pool) });
}

/**
 * Sends the statements marked by `nameStatement` as named statements, which PostgreSQL parses once per connection
 * and, after five executions, plans once (a generic plan, when it costs no more than those made for the values;
 * `Prepared` writes constants into the text so that it can). Every other statement goes as Kysely sent it.
 */
function withNamedStatements(pool: pg.Pool): pg.Pool {
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  const patched = new WeakSet<pg.PoolClient>();
  const patchedConnect = async (): Promise<pg.PoolClient> => {
    const client = await connect();
    if (!patched.has(client)) {
      patched.add(client);
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (text: unknown, values?: unknown) => {
        const name = typeof text === 'string' ? statementName(text) : undefined;
        return name ? query({ name, text, values }) : values === undefined ? query(text) : query(text, values);
      };
    }
    return client;
  };
  (pool as { connect: unknown }).connect = patchedConnect;
  return pool;
}

/** `Server=tcp:host[,port];Database=name` → tedious options; authentication is always an Entra token. */
export function parseMssqlConnection(connection: string): { server: string; port: number; database: string } {
  const parts = new Map(
    connection
      .split(';')
      .map((p) => p.split('='))
      .filter((kv): kv is [string, string] => kv.length === 2 && kv[0] !== undefined && kv[1] !== undefined)
      .map(([k, v]) => [k.trim().toLowerCase(), v.trim()]),
  );
  const rawServer = (parts.get('server') ?? parts.get('data source') ?? '').replace(/^tcp:/i, '');
  const [server = '', port = '1433'] = rawServer.split(',');
  const database = parts.get('database') ?? parts.get('initial catalog') ?? '';
  if (!server || !database) throw new Error('mssql connection needs Server and Database');
  return { server, port: Number(port), database };
}

/** Azure SQL with the compiler that adds lock hints (see `LOCK_ALIAS`). */
class HintingMssqlDialect extends MssqlDialect {
  override createQueryCompiler(): QueryCompiler {
    return new RuntimeCloudMssqlQueryCompiler();
  }
}

function mssqlStore(options: SqlStoreOptions): SqlStore {
  const { server, port, database } = parseMssqlConnection(options.connection);
  /* eslint-disable @typescript-eslint/no-require-imports */
  const tarn = require('tarn') as typeof import('tarn');
  const tedious = require('tedious') as typeof import('tedious');
  const { DefaultAzureCredential } = require('@azure/identity') as typeof import('@azure/identity');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const credential = new DefaultAzureCredential();
  const db = new Kysely({
    dialect: new HintingMssqlDialect({
      tarn: { ...tarn, options: { min: 0, max: options.poolSize ?? 10 } },
      tedious: {
        ...tedious,
        connectionFactory: () =>
          new tedious.Connection({
            server,
            authentication: { type: 'token-credential', options: { credential } },
            options: { database, port, encrypt: true, trustServerCertificate: false },
          }),
      },
    }),
  });
  return { db, dialect: 'mssql', close: () => db.destroy() };
}
