import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureLocalKeys, issueLocalToken, type TokenRequest } from '../../local/auth/local-issuer';
import { localComponents } from '../../local/components';
import { LocalHost, type HostComponent, type LocalHostOptions } from '../../local/host';
import { assertHostStoreMatchesContract } from './event-contracts';

export interface TestHost {
  readonly host: LocalHost;
  readonly url: URL;
  readonly stateDir: string;
  /** A bearer token from the host's own issuer. */
  token(request?: Omit<TokenRequest, 'issuer' | 'audience'>): Promise<string>;
  /** fetch against the host with a token for the given claims (omit claims for no Authorization header). */
  fetch(path: string, init?: RequestInit & { claims?: Omit<TokenRequest, 'issuer' | 'audience'> }): Promise<Response>;
  /**
   * Stops the host and removes its state dir. Before removing it, every event in the outbox of the host's own SQLite
   * store is checked against asyncapi.json (a store from createTestDatabase is checked by its drop()); stop() throws
   * when one breaks it.
   */
  stop(): Promise<void>;
}

/**
 * Starts a whole local host in this process: a temporary state dir, a free port, Azurite in memory.
 * `settings` override configuration (for example a PostgreSQL store from createTestDatabase).
 */
export async function startTestHost(
  options: { settings?: Record<string, string>; components?: readonly HostComponent[] } & Partial<LocalHostOptions> = {},
): Promise<TestHost> {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-host-'));
  const host = new LocalHost(
    { stateDir, port: 0, inMemoryTables: true, ...options, settings: options.settings ?? {} },
    options.components ?? localComponents(),
  );
  const url = await host.start();
  const keys = await ensureLocalKeys(stateDir);
  const token = (request: Omit<TokenRequest, 'issuer' | 'audience'> = {}) =>
    issueLocalToken(keys, { issuer: host.config.auth.issuer, audience: host.config.auth.audience, ...request });
  return {
    host,
    url,
    stateDir,
    token,
    async fetch(path, init = {}) {
      const { claims, ...rest } = init;
      const headers = new Headers(rest.headers);
      if (claims) headers.set('authorization', `Bearer ${await token(claims)}`);
      return fetch(new URL(path, url), { ...rest, headers });
    },
    async stop() {
      const store = host.config.store;
      const baseDir = options.depsOverrides?.baseDir ?? stateDir;
      await host.stop();
      try {
        await assertHostStoreMatchesContract(store, baseDir, 'the local host');
      } finally {
        rmSync(stateDir, { recursive: true, force: true });
      }
    },
  };
}
