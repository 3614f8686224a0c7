import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createSqlStore } from '../../shared/platform/sql/database';
import type { TestDatabase } from './databases';
import { freePort } from './table-servers';

const run = promisify(execFile);

/**
 * A PostgreSQL server of one test's own (Debian's binaries, a fresh cluster in a temporary folder, trust auth on a
 * free loopback port), so the test may restart it without cutting the shared server's other tests. As root (CI, this
 * machine) the server runs as the `postgres` user, as the cluster tools run it; undefined when no binaries are found.
 */
export interface PrivatePostgres {
  readonly database: TestDatabase;
  /** Stops the server (`fast`: every connection ended, as a failover or a maintenance restart does) and starts it again. */
  restart(): Promise<void>;
}

export function privatePostgresBin(): string | undefined {
  const root = '/usr/lib/postgresql';
  try {
    const version = readdirSync(root).sort().pop();
    return version ? join(root, version, 'bin') : undefined;
  } catch {
    return undefined;
  }
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = privatePostgresBin();
  if (!bin) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql');
  const dir = mkdtempSync(join(tmpdir(), 'rch-private-pg-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) chownSync(dir, Number((await run('id', ['-u', 'postgres'])).stdout.trim()), Number((await run('id', ['-g', 'postgres'])).stdout.trim()));
  const tool = (name: string, args: string[]) => (asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, name), ...args]) : run(join(bin, name), args));
  const data = join(dir, 'data');
  const port = await freePort();
  await tool('initdb', ['-D', data, '--auth=trust', '-U', 'postgres', '--no-sync']);
  const options = ['-D', data, '-l', join(dir, 'log'), '-w', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`];
  await tool('pg_ctl', ['start', ...options]);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres?sslmode=disable`;
  const store = createSqlStore({ dialect: 'postgres', connection: url });
  return {
    database: {
      store,
      settings: { RuntimeCloud__Store__Dialect: 'postgres', RuntimeCloud__Store__Connection: url },
      overrides: {},
      connectAgain: () => createSqlStore({ dialect: 'postgres', connection: url }),
      async drop() {
        await store.close();
        await tool('pg_ctl', ['stop', '-D', data, '-m', 'immediate']).catch(() => undefined);
        rmSync(dir, { recursive: true, force: true });
      },
    },
    async restart() {
      await tool('pg_ctl', ['restart', '-m', 'fast', ...options]);
    },
  };
}
