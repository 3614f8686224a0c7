import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureLocalKeys, issueLocalToken, type TokenRequest } from '../../local/auth/local-issuer';
import { localComponents } from '../../local/components';
import { inspect } from 'node:util';
import type { LogHandler } from '../../local/http/http-binding';
import { jsonLineLog, LocalHost, type HostComponent, type LocalHostOptions } from '../../local/host';
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
   * store is checked against asyncapi.json (a store from createTestDatabase is checked by its drop()), and everything
   * the host logged, at every level, is searched for the tokens this host was sent; stop() throws when an event
   * breaks the contract or a token was logged.
   */
  stop(): Promise<void>;
}

/**
 * The engine in process, and no agents: what most tests of the host's other parts run on, so the suite does not
 * start two agent processes per host. Tests of the runner path (runner-jobs, tenant-isolation) and the e2e tests of
 * `runtime-cloud start` run the product's default, runner jobs on the host's agents: pass `RUNNER_JOBS`.
 */
const IN_PROCESS: Readonly<Record<string, string>> = { RuntimeCloud__IaC__Execution: 'in-process', RuntimeCloud__Local__Runners: '0' };

/** The local host's defaults: plans and applies as runner jobs on its two agents. */
export const RUNNER_JOBS: Readonly<Record<string, string>> = { RuntimeCloud__IaC__Execution: 'runner-jobs', RuntimeCloud__Local__Runners: '2' };

/**
 * Starts a whole local host in this process: a temporary state dir, a free port, Azurite in memory.
 * `settings` override configuration (for example a PostgreSQL store from createTestDatabase).
 */
export async function startTestHost(
  options: { settings?: Record<string, string>; components?: readonly HostComponent[] } & Partial<LocalHostOptions> = {},
): Promise<TestHost> {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-host-'));
  // Every log entry of the host, whatever its level, kept to be searched for the tokens it was sent.
  const logged: string[] = [];
  const shown = options.log ?? jsonLineLog('warning');
  const log: LogHandler = (level, category, ...args) => {
    logged.push(args.map((a) => (typeof a === 'string' ? a : a instanceof Error ? `${a.message} ${a.stack ?? ''}` : inspect(a, { depth: 6 }))).join(' '));
    shown(level, category, ...args);
  };
  const host = new LocalHost(
    { stateDir, port: 0, inMemoryTables: true, ...options, log, settings: { ...IN_PROCESS, ...options.settings } },
    options.components ?? localComponents(),
  );
  const url = await host.start();
  const keys = await ensureLocalKeys(stateDir);
  const issued = new Set<string>();
  const token = async (request: Omit<TokenRequest, 'issuer' | 'audience'> = {}) => {
    const jwt = await issueLocalToken(keys, { issuer: host.config.auth.issuer, audience: host.config.auth.audience, ...request });
    issued.add(jwt);
    return jwt;
  };
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
        // A token's signature is what makes it usable: finding it in a log line means the token leaked.
        const leaked = [...issued].filter((jwt) => logged.some((line) => line.includes(jwt.split('.')[2]!)));
        if (leaked.length > 0) throw new Error(`the host logged ${leaked.length} of the ${issued.size} tokens it was sent`);
      } finally {
        rmSync(stateDir, { recursive: true, force: true });
      }
    },
  };
}
