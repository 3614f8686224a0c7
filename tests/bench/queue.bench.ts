/**
 * Lease queue benchmark (`npm run bench -- queue`): the hand-over from a release to the next waiter's grant, and
 * grants/s with 32 clients waiting on a pool of one unit, beside the polling baseline measured in the same run on the
 * same host (a request without `wait`; after a 429 the client asks again 10 ms later: Retry-After counts whole
 * seconds, so a poller that honoured it would grant at most once a second, and this is the strongest poller).
 * Targets of issue 35: p50 hand-over ≤ 20 ms on SQLite and ≤ 50 ms on PostgreSQL, and at least the baseline's
 * grants/s with a tenth of its requests. Printed, never asserted.
 *
 * Options: `--seconds N` per row (default 10), `--clients N` (default 32), `--hold-ms N` (how long each holder holds
 * its unit, default 10), `--store sqlite|postgres` (default sqlite; postgres: two hosts on a fresh schema of the
 * database of RUNTIME_CLOUD_TEST_POSTGRES_URL, each client on one of them, so half the hand-overs cross hosts).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { createSqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { adminQuery } from '../support/postgres-admin';
import { call, startHost, StepFailed, tokenIssuer, type HostChild } from './bench-host';
import { rowCollector, type Row } from './table';

const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';
const POOL = 'queue-bench-one';
/** How long a polling client waits after a 429 before it asks again. */
const POLL_MS = 10;

interface Hosts {
  readonly urls: readonly URL[];
  stop(): Promise<void>;
}

interface Measured {
  readonly grants: number;
  readonly perSecond: number;
  /** Every request: the acquire (and, waiting, the ticket's long polls), then the release. */
  readonly requests: number;
  /** The requests that asked for the unit: the acquire and the ticket's long polls, or each polling acquire. */
  readonly acquires: number;
  /** From a release's request to the answer that shows the next grant, ms. */
  readonly handOvers: readonly number[];
  readonly errors: number;
}

export async function run(args: string[]): Promise<Row[]> {
  const { values } = parseArgs({
    args,
    options: { seconds: { type: 'string' }, clients: { type: 'string' }, 'hold-ms': { type: 'string' }, store: { type: 'string' }, quick: { type: 'boolean' } },
  });
  const seconds = Number(values.seconds ?? (values.quick ? 3 : 10));
  const clients = Number(values.clients ?? 32);
  const holdMs = Number(values['hold-ms'] ?? 10);
  const store = values.store ?? 'sqlite';
  if (store !== 'sqlite' && store !== 'postgres') throw new Error(`--store sqlite|postgres (given: ${store})`);
  const { rows, print } = rowCollector();
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-queue-bench-'));
  const hosts = store === 'postgres' ? await postgresHosts(stateDir) : await sqliteHost(stateDir);
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients * 2 });
  try {
    const issue = await tokenIssuer(stateDir);
    const admin = await issue({ roles: ['PlatformAdmin'] });
    const limits = { sandbox: { maxUnits: 10_000, maxTtlSeconds: 600, maxWaitSeconds: 600 } };
    for (const [path, body] of [
      ['/runtime-cloud/editions/queue-bench', { limits }],
      ['/runtime-cloud/tenants/queue-bench', { edition: 'queue-bench' }],
      [`/runtime-cloud/pools/${POOL}`, { kind: 'sandbox', target: 'local', capacity: 1 }],
    ] as const) {
      const answer = await call(agent, hosts.urls[0] as URL, 'PUT', path, admin, body);
      if (answer.status !== 200 && answer.status !== 201) throw new Error(`set-up PUT ${path} answered ${answer.status}: ${answer.body}`);
    }
    const lease = await issue({ tenant: 'queue-bench', scopes: ['factory.capacity.lease'] });
    const hostOf = (client: number) => hosts.urls[client % hosts.urls.length] as URL;
    const label = store === 'postgres' ? 'PostgreSQL, 2 hosts' : 'SQLite, 1 host';

    // Warm-up of both paths (the functions' modules load lazily), then each measured on its own.
    await measure(2, clients, holdMs, (client) => waitingGrant(agent, hostOf(client), lease), agent, hostOf, lease);
    await measure(2, clients, holdMs, (client) => pollingGrant(agent, hostOf(client), lease), agent, hostOf, lease);
    const queued = await measure(seconds, clients, holdMs, (client) => waitingGrant(agent, hostOf(client), lease), agent, hostOf, lease);
    const polled = await measure(seconds, clients, holdMs, (client) => pollingGrant(agent, hostOf(client), lease), agent, hostOf, lease);

    const note = `${clients} clients, pool of 1, hold ${holdMs} ms, ${seconds} s`;
    print({ name: `queue hand-over, release to next grant (${label})`, value: percentiles(queued.handOvers), note: `target p50 ≤ ${store === 'postgres' ? 50 : 20} ms` });
    print({ name: `queue grants/s (${label})`, value: queued.perSecond.toFixed(1), note: `${note}; ${(queued.requests / queued.grants).toFixed(2)} requests per grant; ${queued.errors} errors` });
    print({ name: `polling hand-over (${label})`, value: percentiles(polled.handOvers) });
    print({ name: `polling grants/s, 429 then again in ${POLL_MS} ms (${label})`, value: polled.perSecond.toFixed(1), note: `${(polled.requests / polled.grants).toFixed(2)} requests per grant; ${polled.errors} errors` });
    print({ name: 'ratio grants/s queue / polling (target ≥ 1.0)', value: `${(queued.perSecond / polled.perSecond).toFixed(2)}×` });
    const perGrant = (m: Measured, n: number) => n / m.grants;
    print({ name: 'ratio requests per grant queue / polling (target ≤ 0.1)', value: `${(perGrant(queued, queued.requests) / perGrant(polled, polled.requests)).toFixed(3)}×`, note: 'every request, the release included' });
    print({
      name: 'ratio acquire requests per grant queue / polling',
      value: `${(perGrant(queued, queued.acquires) / perGrant(polled, polled.acquires)).toFixed(3)}×`,
      note: `${perGrant(queued, queued.acquires).toFixed(2)} / ${perGrant(polled, polled.acquires).toFixed(2)}: the requests that ask for the unit; the release, one per grant either way, left out`,
    });
    return rows;
  } finally {
    agent.destroy();
    await hosts.stop();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

/** A grant: the lease and how many requests it took. */
type Grant = { leaseId: string; fencingToken: number; requests: number };

/** Joins the queue (the call holds up to 20 s), then long-polls its ticket until granted. */
async function waitingGrant(agent: http.Agent, host: URL, token: string): Promise<Grant> {
  const body = { kind: 'sandbox', ttlSeconds: 600, holder: 'bench', pool: POOL, wait: { seconds: 600 } };
  let answer = await call(agent, host, 'POST', '/runtime-cloud/leases', token, body);
  let requests = 1;
  while (answer.status === 202 || (answer.status === 200 && (JSON.parse(answer.body) as { state?: string }).state === 'waiting')) {
    const { requestId } = JSON.parse(answer.body) as { requestId: string };
    answer = await call(agent, host, 'GET', `/runtime-cloud/lease-requests/${requestId}?waitSeconds=20`, token);
    requests++;
  }
  if (answer.status !== 200 && answer.status !== 201) throw new StepFailed(`acquire ${answer.status}`, answer.body);
  const parsed = JSON.parse(answer.body) as { leaseId?: string; fencingToken?: number; lease?: { leaseId: string; fencingToken: number } };
  const granted = parsed.lease ?? (parsed as { leaseId: string; fencingToken: number });
  return { leaseId: granted.leaseId, fencingToken: granted.fencingToken, requests };
}

/** Asks without `wait`; after a 429 asks again `POLL_MS` later, until granted. */
async function pollingGrant(agent: http.Agent, host: URL, token: string): Promise<Grant> {
  const body = { kind: 'sandbox', ttlSeconds: 600, holder: 'bench', pool: POOL };
  for (let requests = 1; ; requests++) {
    const answer = await call(agent, host, 'POST', '/runtime-cloud/leases', token, body);
    if (answer.status === 201) return { ...(JSON.parse(answer.body) as { leaseId: string; fencingToken: number }), requests };
    if (answer.status !== 429) throw new StepFailed(`acquire ${answer.status}`, answer.body);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/**
 * `clients` loops of grant, hold `holdMs`, release, for `seconds`. The pool holds one unit, so grants follow one
 * another: each grant's hand-over is from the request of the release before it to the answer that showed it.
 */
async function measure(
  seconds: number,
  clients: number,
  holdMs: number,
  grant: (client: number) => Promise<Grant>,
  agent: http.Agent,
  hostOf: (client: number) => URL,
  token: string,
): Promise<Measured> {
  const handOvers: number[] = [];
  let lastRelease: number | undefined;
  let grants = 0;
  let requests = 0;
  let acquires = 0;
  let errors = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  const loop = async (client: number): Promise<void> => {
    while (performance.now() < end) {
      try {
        const granted = await grant(client);
        const at = performance.now();
        if (lastRelease !== undefined) handOvers.push(at - lastRelease);
        grants++;
        acquires += granted.requests;
        requests += granted.requests + 1;
        await new Promise((resolve) => setTimeout(resolve, holdMs));
        lastRelease = performance.now();
        const released = await call(agent, hostOf(client), 'DELETE', `/runtime-cloud/leases/${granted.leaseId}?fencingToken=${granted.fencingToken}`, token);
        if (released.status !== 204) throw new StepFailed(`release ${released.status}`, released.body);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, client) => loop(client)));
  return { grants, perSecond: grants / ((performance.now() - started) / 1000), requests, acquires, handOvers, errors };
}

function percentiles(samples: readonly number[]): string {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => (sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? Number.NaN).toFixed(1);
  return `p50 ${at(0.5)} ms, p99 ${at(0.99)} ms`;
}

async function sqliteHost(stateDir: string): Promise<Hosts> {
  const host = await startHost(stateDir, { RuntimeCloud__Capacity__SeedFile: 'none' });
  return { urls: [host.url], stop: () => host.stop() };
}

/** Two hosts on a fresh schema (migrated here once, so they do not race to create its tables), dropped at the end. */
async function postgresHosts(stateDir: string): Promise<Hosts> {
  const url = process.env.RUNTIME_CLOUD_TEST_POSTGRES_URL ?? DEFAULT_POSTGRES_URL;
  const schema = `bench_${randomBytes(6).toString('hex')}`;
  await adminQuery(url, `create schema ${schema}`);
  const store = createSqlStore({ dialect: 'postgres', connection: url, postgresSchema: schema });
  try {
    await migrateToLatest(store.db, 'postgres', allMigrations);
  } finally {
    await store.close();
  }
  let tables: RunningTableServer | undefined;
  const hosts: HostChild[] = [];
  const stop = async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await tables?.close();
    await adminQuery(url, `drop schema if exists ${schema} cascade`);
  };
  try {
    tables = await startTableServer();
    await tokenIssuer(stateDir);
    const env = {
      RuntimeCloud__Store__Dialect: 'postgres',
      RuntimeCloud__Store__Connection: `${url}${url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`,
      RuntimeCloud__Tables__Connection: tables.connectionString,
      RuntimeCloud__Capacity__SeedFile: 'none',
    };
    hosts.push(...(await Promise.all([startHost(stateDir, env), startHost(stateDir, env)])));
    return { urls: hosts.map((h) => h.url), stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
