import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';

/**
 * A digest of every table of a SQLite store, per tenant where a table has a `tenant` column: key `table` or
 * `table@tenant`, value a SHA-256 of its rows. Two digests differ exactly where a row was written.
 */
export class StateDigest {
  readonly #db: Database.Database;
  readonly #tables: readonly { name: string; perTenant: boolean }[];

  constructor(file: string) {
    this.#db = new Database(file, { readonly: true, fileMustExist: true });
    const names = this.#db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").pluck().all() as string[];
    this.#tables = names.map((name) => ({
      name,
      perTenant: (this.#db.prepare(`SELECT name FROM pragma_table_info(?)`).pluck().all(name) as string[]).includes('tenant'),
    }));
  }

  /** The digest last taken, and the store's `data_version` then. */
  #last: { readonly version: number; readonly digest: ReadonlyMap<string, string> } | undefined;

  /**
   * The digest of every table now. SQLite's `data_version` changes whenever another connection commits, so while
   * it stands still nothing was written and the last digest still holds (fuzzing takes one per request).
   */
  take(): ReadonlyMap<string, string> {
    const version = this.#db.pragma('data_version', { simple: true }) as number;
    if (this.#last?.version === version) return this.#last.digest;
    const digest = this.#read();
    this.#last = { version, digest };
    return digest;
  }

  #read(): Map<string, string> {
    const digest = new Map<string, string>();
    for (const table of this.#tables) {
      const rows = this.#db.prepare(`SELECT * FROM "${table.name}"`).all() as Record<string, unknown>[];
      // Sorted as text: some tables have no rowid, and the digest must not depend on the order rows come in.
      const lines = new Map<string, string[]>();
      for (const row of rows) {
        const key = table.perTenant ? `${table.name}@${String(row.tenant)}` : table.name;
        const line = JSON.stringify(row, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : Buffer.isBuffer(v) ? v.toString('base64') : v));
        const list = lines.get(key);
        if (list) list.push(line);
        else lines.set(key, [line]);
      }
      for (const [key, list] of lines) digest.set(key, createHash('sha256').update(list.sort().join('\n')).digest('hex'));
    }
    return digest;
  }

  close(): void {
    this.#db.close();
  }
}

/** The keys (`table` or `table@tenant`) whose rows differ between two digests. */
export function changedKeys(before: ReadonlyMap<string, string>, after: ReadonlyMap<string, string>): string[] {
  const keys = new Set([...before.keys(), ...after.keys()]);
  return [...keys].filter((k) => before.get(k) !== after.get(k)).sort();
}
