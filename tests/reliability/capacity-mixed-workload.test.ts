import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { parseConfig } from '../../shared/platform/config/config';
import { createDeps, type Deps } from '../../shared/deps';
import { expectWorkloadHeld, runCapacityWorkload, storeReader, type WorkloadMinimum } from '../support/capacity-workload';
import { startChildHost, type RunningChild } from '../support/child-process';
import { createTestDatabase, postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';
import { startTestHost, type TestHost } from '../support/local-host';
import { localTwin } from '../../local/twin';

/** What each workload must have done (its loop runs on past its duration until it has). */
const SQLITE_MINIMUM: WorkloadMinimum = { grants: 40, releases: 20, renews: 15, resizes: 6, expired: 5 };
const POSTGRES_MINIMUM: WorkloadMinimum = { grants: 60, releases: 30, renews: 30, resizes: 15, expired: 10 };

/**
 * The capacity module's invariants under a mixed workload on one tenant and one pool (the worst case): acquire,
 * renew, release with fencing tokens, idempotent retries and key reuse, pool resizes below and above use, and the
 * expiry sweep with TTLs of 1–3 s. The driver and its analysis live in tests/support/capacity-workload.ts.
 *
 * The quota (10) sits inside the range the pool is resized through (4..16), so at times the quota refuses and at
 * times the pool does. The hosts' own `leaseExpirySweep` timers run on a fixed schedule (every 15 s, no setting
 * shortens it), so the test process also sweeps every ~0.5–1 s as one more instance on the same store.
 */
const LEASE_SCOPES = ['factory.capacity.lease', 'factory.runtime.read'];
const SHAPE = { kind: 'sandbox', quota: 10, capacity: { initial: 12, min: 4, max: 16 } } as const;

const skip = skipDialect('postgres');
if (skip) console.warn(`[capacity-mixed-workload] PostgreSQL block SKIPPED: ${postgresSkipReason()}`);

describe.skipIf(skip)('capacity mixed workload: 4 local hosts on one PostgreSQL', () => {
  const HOSTS = 4;
  let database: TestDatabase;
  let tables: RunningTableServer;
  let stateDir: string;
  let hosts: RunningChild[] = [];
  let sweeper: Deps;
  let leaseToken: string;
  let adminToken: string;

  beforeAll(async () => {
    database = await createTestDatabase('postgres');
    tables = await startTableServer();
    // One state dir: the hosts share the issuer key (created here first), so one token works on all of them.
    stateDir = mkdtempSync(join(tmpdir(), 'rch-capacity-mixed-'));
    const keys = await ensureLocalKeys(stateDir);
    const settings = {
      ...database.settings,
      RuntimeCloud__Tables__Connection: tables.connectionString,
      RuntimeCloud__Host__EnabledModules: 'capacity',
    };
    const config = parseConfig(settings);
    const issue = (claims: { tenant?: string; roles?: string[]; scopes?: string[] }) =>
      issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
    leaseToken = await issue({ tenant: 'mixed-pg', scopes: LEASE_SCOPES });
    adminToken = await issue({ roles: ['PlatformAdmin'] });
    hosts = await Promise.all(Array.from({ length: HOSTS }, () => startChildHost(stateDir, settings)));
    // A fifth instance of the app on the same schema, built by the same composition root: the test's sweeper.
    sweeper = await createDeps(config, { twin: localTwin, jwks: keys.jwks, ...database.overrides });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await sweeper?.close();
    await tables?.close();
    await database?.drop();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });

  it('when 24 clients on 4 hosts acquire, renew, release, retry and resize for 20 s, then no 5xx, exact accounting, no over-grant, increasing fencing tokens and one end per lease', async () => {
    const report = await runCapacityWorkload({
      name: 'postgres',
      baseUrls: hosts.map((h) => h.url),
      leaseToken,
      adminToken,
      tenant: 'mixed-pg',
      pool: 'mixed-pg-sandbox',
      ...SHAPE,
      clients: 24,
      durationMs: 20_000,
      minimum: POSTGRES_MINIMUM,
      store: storeReader(database.store.db, async () => (await sweeper.capacity.sweepExpired()).expired),
    });
    console.log(report.summary);
    // A 500's body carries only a correlation id; what the host logged about it is the lead to the cause.
    const correlations = report.exchanges.filter((e) => e.status === 500).map((e) => String(e.json?.correlationId));
    const logged = hosts.flatMap((h) => {
      const lines = h.output().split('\n');
      return lines.flatMap((line, i) => (correlations.some((id) => line.includes(id)) ? [lines.slice(i, i + 4).join('\n')] : []));
    });
    if (logged.length > 0) console.log(`host log of the 500s:\n${logged.slice(0, 5).join('\n---\n')}`);
    expectWorkloadHeld(report, POSTGRES_MINIMUM);
    // What no client saw: the hosts' own timers (the sweep, the outbox relay) failing under the same contention.
    for (const h of hosts) expect.soft(h.output(), 'host log').not.toMatch(/"level":"(error|critical|warning)"/);
  }, 150_000);
});

describe('capacity mixed workload: one local host in-process on SQLite', () => {
  let database: TestDatabase;
  let host: TestHost;

  beforeAll(async () => {
    database = await createTestDatabase('sqlite');
    host = await startTestHost({ settings: { ...database.settings, RuntimeCloud__Host__EnabledModules: 'capacity' } });
  });

  afterAll(async () => {
    await host?.stop();
    await database?.drop();
  });

  it('when 16 clients acquire, renew, release, retry and resize for 8 s, then no 5xx, exact accounting, no over-grant, increasing fencing tokens and one end per lease', async () => {
    const report = await runCapacityWorkload({
      name: 'sqlite',
      baseUrls: [host.url],
      leaseToken: await host.token({ tenant: 'mixed-lite', scopes: LEASE_SCOPES, ttlSeconds: 3600 }),
      adminToken: await host.token({ roles: ['PlatformAdmin'], ttlSeconds: 3600 }),
      tenant: 'mixed-lite',
      pool: 'mixed-lite-sandbox',
      ...SHAPE,
      clients: 16,
      durationMs: 8_000,
      minimum: SQLITE_MINIMUM,
      store: storeReader(database.store.db, async () => (await host.host.deps.capacity.sweepExpired()).expired),
    });
    console.log(report.summary);
    expectWorkloadHeld(report, SQLITE_MINIMUM);
  }, 60_000);
});
