import { TableClient, TableServiceClient } from '@azure/data-tables';
import { sql } from 'kysely';
import type { SqlStore } from '../../shared/platform/sql/database';

/**
 * Everything a store holds, as text, to search for values that must never be stored: every row of every SQL table
 * (SQLite's, or the PostgreSQL schema the store's search_path names), and every entity of every table in Table
 * storage. `exceptTables` leaves out SQL tables that stand in for the target (the local cloud holds what an apply
 * put there, secrets resolved, as a real cloud does); the caller names them, so nothing else is left out by
 * accident.
 */
export async function storedBytes(store: SqlStore, tablesConnection: string, options: { exceptTables?: readonly string[] } = {}): Promise<{ sql: string; tables: string }> {
  const except = new Set(options.exceptTables ?? []);
  const names =
    store.dialect === 'sqlite'
      ? (await sql<{ name: string }>`select name from sqlite_master where type = 'table'`.execute(store.db)).rows.map((r) => r.name)
      : (await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = current_schema()`.execute(store.db)).rows.map((r) => r.name);
  if (names.length === 0) throw new Error('the SQL store has no tables: the dump would find nothing');
  const rows: string[] = [];
  for (const name of names.filter((n) => !except.has(n)).sort()) {
    rows.push(`${name}: ${JSON.stringify((await sql`select * from ${sql.table(name)}`.execute(store.db)).rows, asText)}`);
  }

  const clientOptions = { allowInsecureConnection: true };
  const service = TableServiceClient.fromConnectionString(tablesConnection, clientOptions);
  const entities: string[] = [];
  for await (const table of service.listTables()) {
    if (!table.name) continue;
    const client = TableClient.fromConnectionString(tablesConnection, table.name, clientOptions);
    for await (const entity of client.listEntities<Record<string, unknown>>()) {
      // A large value is split across members `p0`, `p1`, ...: joined too, so a value cut in two is found.
      const joined = Object.keys(entity)
        .filter((k) => /^p\d+$/.test(k))
        .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)))
        .map((k) => String(entity[k]))
        .join('');
      entities.push(`${table.name}: ${JSON.stringify(entity, asText)} ${joined}`);
    }
  }
  return { sql: rows.join('\n'), tables: entities.join('\n') };
}

/** Binary columns as the text they hold, so a value stored as bytes is found like any other. */
function asText(_key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  if (typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'Buffer' && Array.isArray((value as { data?: unknown }).data)) {
    return Buffer.from((value as { data: number[] }).data).toString('utf8');
  }
  return value;
}
