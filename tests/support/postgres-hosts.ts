import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { parseConfig } from '../../shared/platform/config/config';
import { startChildHost, type RunningChild } from './child-process';
import { createTestDatabase, type TestDatabase } from './databases';

export interface PostgresHosts {
  readonly hosts: readonly RunningChild[];
  readonly database: TestDatabase;
  /** A token every host accepts (they share one state dir, so one issuer key). */
  readonly token: (claims: { tenant?: string; roles?: string[]; scopes?: string[] }) => Promise<string>;
  /** Stops the hosts, the table server and drops the database. */
  stop(): Promise<void>;
}

/**
 * `count` local hosts in child processes on one fresh PostgreSQL database and one table server, sharing a state dir
 * (its issuer key is made here first, so the hosts do not race to make it), all started at once.
 */
export async function startPostgresHosts(count: number, settings: Record<string, string> = {}): Promise<PostgresHosts> {
  const database = await createTestDatabase('postgres');
  let tables: RunningTableServer | undefined;
  let hosts: RunningChild[] = [];
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-pg-hosts-'));
  const stop = async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await tables?.close();
    await database.drop();
    rmSync(stateDir, { recursive: true, force: true });
  };
  try {
    tables = await startTableServer();
    const keys = await ensureLocalKeys(stateDir);
    const config = parseConfig({});
    const env = { ...database.settings, RuntimeCloud__Tables__Connection: tables.connectionString, ...settings };
    const started = await Promise.allSettled(Array.from({ length: count }, () => startChildHost(stateDir, env)));
    hosts = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    return {
      hosts,
      database,
      token: (claims) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims }),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
