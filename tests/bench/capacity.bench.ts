/**
 * Capacity benchmark (`npm run bench -- capacity`). Prints figures and ratios against the targets of issues 4 and 7;
 * nothing here is asserted. Options: `--seconds N` per load row (default 5), `--clients N` (default 32),
 * `--skip-million` to leave out the 1,000,000-lease sweep, `--store sqlite|postgres` (default sqlite).
 *
 * `--store postgres` runs instead: two local hosts on one fresh PostgreSQL schema (created and dropped here, in the
 * database of RUNTIME_CLOUD_TEST_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test), acquire+release
 * cycles spread over both, and the naive floor of issue 7: a raw `pg` loop of the minimal hot-row transaction.
 */
import BetterSqlite3 from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startTableServer } from '../../local/azurite/table-server';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { createSqlStore, type SqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { randomIds, systemClock } from '../../shared/platform/time/clock';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { adminQuery } from '../support/postgres-admin';
import { rowCollector, type Row } from './table';
import { call, startHost, StepFailed, tokenIssuer, type HostChild, type Issue } from './bench-host';

interface LoadResult {
  readonly perSecond: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly errors: number;
  /** Failed operations by what failed, e.g. `acquire 503` or `release 409`. */
  readonly errorKinds: Readonly<Record<string, number>>;
}

export async function run(args: string[]): Promise<Row[]> {
  const { values } = parseArgs({
    args,
    options: { seconds: { type: 'string' }, clients: { type: 'string' }, 'skip-million': { type: 'boolean' }, store: { type: 'string' }, quick: { type: 'boolean' } },
  });
  // --quick: 1 s per load row and a sweep among 50,000 leases instead of 1,000,000, the same rows.
  const quick = values.quick === true;
  const seconds = Number(values.seconds ?? (quick ? '1' : '5'));
  const clients = Number(values.clients ?? '32');
  const store = values.store ?? 'sqlite';
  if (store !== 'sqlite' && store !== 'postgres') throw new Error(`--store ${store}: expected sqlite or postgres`);
  const work = mkdtempSync(join(tmpdir(), 'rch-bench-capacity-'));
  const { rows, print } = rowCollector();
  try {
    process.stderr.write(`capacity benchmark (${store}): ${clients} clients, ${seconds} s per load row, work dir ${work}\n`);
    if (store === 'postgres') await benchPostgres(join(work, 'hosts'), seconds, clients, print);
    else await benchSqlite(work, seconds, clients, values['skip-million'] === true ? undefined : quick ? 50_000 : 1_000_000, print);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }  return rows;
}

/** The rows of issue 4: HTTP on one SQLite host, etcd, in-process against raw better-sqlite3, the sweep. */
async function benchSqlite(work: string, seconds: number, clients: number, largeSweep: number | undefined, print: (row: Row) => void): Promise<void> {
  const httpRows = await benchHttp(join(work, 'host'), seconds, clients);
  print({ name: 'HTTP acquire+release cycles/s', value: fmt(httpRows.cycles.perSecond), note: latencyNote(httpRows.cycles) });
  print({ name: 'HTTP authenticated GET /meta/targets req/s', value: fmt(httpRows.get.perSecond), note: latencyNote(httpRows.get) });
  print({ name: 'ratio cycles / GET (target ≥ 0.5)', value: ratio(httpRows.cycles.perSecond, httpRows.get.perSecond) });

  const etcd = await benchEtcd(join(work, 'etcd'), seconds, clients);
  if (etcd === undefined) {
    print({ name: 'etcd lease grant+revoke cycles/s', value: 'skipped', note: 'no `etcd` binary on PATH (Debian: apt-get install etcd-server)' });
  } else {
    print({ name: 'etcd lease grant(TTL 60)+revoke cycles/s', value: fmt(etcd.perSecond), note: latencyNote(etcd) });
    print({ name: 'ratio ours / etcd (target ≥ 1.0)', value: ratio(httpRows.cycles.perSecond, etcd.perSecond) });
  }

  const inProcess = await benchInProcess(join(work, 'inproc'));
  print({ name: 'in-process grants/s (CapacityService.acquire)', value: fmt(inProcess.ours) });
  print({ name: 'raw better-sqlite3 conditional UPDATE txns/s', value: fmt(inProcess.raw) });
  print({ name: 'ratio in-process / raw (target ≥ 0.25)', value: ratio(inProcess.ours, inProcess.raw) });

  const small = await benchSweep(join(work, 'sweep-10k'), 10_000, 1_000);
  print({ name: 'sweep 1,000 expired among 10,000 (ms)', value: small.toFixed(1) });
  if (largeSweep !== undefined) {
    const large = await benchSweep(join(work, 'sweep-large'), largeSweep, 1_000);
    print({ name: 'sweep 1,000 expired among many (ms)', value: large.toFixed(1), note: `${largeSweep.toLocaleString('en-US')} leases` });
    print({ name: 'ratio many / 10k sweep (target ≤ 2.0 for 1,000,000)', value: ratio(large, small) });
  }
}

// ---- HTTP on the local host (SQLite), in a child process like etcd ------------------------------------------

async function benchHttp(stateDir: string, seconds: number, clients: number): Promise<{ cycles: LoadResult; get: LoadResult }> {
  const child = await startHost(stateDir);
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  try {
    const issue = await tokenIssuer(stateDir);
    const lease = await setUpBenchCapacity(agent, child.url, await issue({ roles: ['PlatformAdmin'] }), 1_000_000, issue);
    const reader = await issue({ roles: ['Observer'] });
    const cycle = acquireReleaseCycle(agent, lease, () => child.url, () => child.url);
    const get = async () => {
      const response = await call(agent, child.url, 'GET', '/runtime-cloud/meta/targets', reader);
      if (response.status !== 200) throw new StepFailed(`GET ${response.status}`, response.body);
    };
    // Warm-up: the first requests load and compile the functions' modules lazily.
    await load(2, clients, cycle);
    const cycles = await load(seconds, clients, cycle);
    await load(2, clients, get);
    const gets = await load(seconds, clients, get);
    return { cycles, get: gets };
  } finally {
    agent.destroy();
    await child.stop();
  }
}

/** One tenant on an edition and one pool, both of `units`, so that nothing is refused; answers the tenant's lease token. */
async function setUpBenchCapacity(agent: http.Agent, url: URL, admin: string, units: number, issue: Issue): Promise<string> {
  const limit = { maxUnits: units, maxTtlSeconds: 3600 };
  for (const [path, body] of [
    ['/runtime-cloud/editions/bench', { limits: { attempt: limit } }],
    ['/runtime-cloud/tenants/bench', { edition: 'bench' }],
    ['/runtime-cloud/pools/bench-attempt', { kind: 'attempt', target: 'local', capacity: units, max: units }],
  ] as const) {
    const answer = await call(agent, url, 'PUT', path, admin, body);
    if (answer.status !== 200 && answer.status !== 201) throw new Error(`set-up PUT ${path} answered ${answer.status}: ${answer.body}`);
  }
  return issue({ tenant: 'bench', scopes: ['factory.capacity.lease'] });
}

/** acquire (201) then release with the lease's fencing token (204); `acquireAt`/`releaseAt` pick each client's host. */
function acquireReleaseCycle(agent: http.Agent, lease: string, acquireAt: (client: number) => URL, releaseAt: (client: number) => URL): (client: number) => Promise<void> {
  const body = JSON.stringify({ kind: 'attempt', ttlSeconds: 600, holder: 'bench', pool: 'bench-attempt' });
  return async (client) => {
    const granted = await call(agent, acquireAt(client), 'POST', '/runtime-cloud/leases', lease, body);
    if (granted.status !== 201) throw new StepFailed(`acquire ${granted.status}`, granted.body);
    const { leaseId, fencingToken } = JSON.parse(granted.body) as { leaseId: string; fencingToken: number };
    const released = await call(agent, releaseAt(client), 'DELETE', `/runtime-cloud/leases/${leaseId}`, lease, undefined, {
      'fencing-token': String(fencingToken),
    });
    if (released.status !== 204) throw new StepFailed(`release ${released.status}`, released.body);
  };
}

/**
 * Runs `clients` loops of `op` for `seconds`; per-op latency in milliseconds. `op` is told its client's index (to
 * pick a host). Failures are counted by kind: a `StepFailed`'s step and status, else the error's name.
 */
async function load(seconds: number, clients: number, op: (client: number) => Promise<void>): Promise<LoadResult> {
  const latencies: number[] = [];
  let errors = 0;
  const errorKinds: Record<string, number> = {};
  const start = performance.now();
  const deadline = start + seconds * 1000;
  let firstError: unknown;
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        try {
          await op(client);
          latencies.push(performance.now() - t0);
        } catch (error) {
          firstError ??= error;
          errors++;
          const kind = error instanceof StepFailed ? error.what : error instanceof Error ? error.name : 'thrown';
          errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
        }
      }
    }),
  );
  if (errors > 0) process.stderr.write(`  (${errors} failed operations; first: ${String(firstError)})\n`);
  const elapsed = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
  return { perSecond: latencies.length / elapsed, p50: pct(50), p95: pct(95), p99: pct(99), errors, errorKinds };
}

// ---- PostgreSQL: two hosts on one database against the naive hot-row floor (issue 7) -----------------------------

const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';

async function benchPostgres(stateDir: string, seconds: number, clients: number, print: (row: Row) => void): Promise<void> {
  const url = process.env.RUNTIME_CLOUD_TEST_POSTGRES_URL ?? DEFAULT_POSTGRES_URL;
  const schema = `bench_${randomBytes(6).toString('hex')}`;
  await adminQuery(url, `create schema ${schema}`);
  try {
    // Migrated once here, so the two hosts do not race to create the schema's tables.
    const store = createSqlStore({ dialect: 'postgres', connection: url, postgresSchema: schema });
    try {
      await migrateToLatest(store.db, 'postgres', allMigrations);
    } finally {
      await store.close();
    }
    const ours = await benchPostgresHttp(stateDir, url, schema, seconds, clients);
    print({ name: `PostgreSQL HTTP acquire+release cycles/s (2 hosts)`, value: fmt(ours.perSecond), note: latencyNote(ours) });
    print({ name: 'errors (non-2xx answers)', value: String(ours.errors), note: Object.keys(ours.errorKinds).length ? Object.entries(ours.errorKinds).map(([k, n]) => `${k} ×${n}`).join(', ') : 'none' });

    // The hosts are stopped by now: the floor has the machine to itself, as ours had.
    const floor = await benchHotRowFloor(url, schema, seconds, clients);
    print({
      name: `naive floor: raw pg hot-row cycles/s (${clients} connections)`,
      value: fmt(floor.result.perSecond),
      note: `${latencyNote(floor.result)}; ${floor.deadlocks} deadlocks retried`,
    });
    print({ name: 'ratio ours / floor (target ≥ 3.0)', value: ratio(ours.perSecond, floor.result.perSecond) });
  } finally {
    await adminQuery(url, `drop schema if exists ${schema} cascade`);
  }
}

/** Two local hosts (child processes) on the schema, one tenant, one pool; client i acquires on one host and releases on the other. */
async function benchPostgresHttp(stateDir: string, url: string, schema: string, seconds: number, clients: number): Promise<LoadResult> {
  const tables = await startTableServer();
  // The hosts share the state dir, so its issuer key must exist before they start (they would race to create it).
  const issue = await tokenIssuer(stateDir);
  const env = {
    RuntimeCloud__Store__Dialect: 'postgres',
    RuntimeCloud__Store__Connection: `${url}${url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`,
    RuntimeCloud__Tables__Connection: tables.connectionString,
    RuntimeCloud__Capacity__SeedFile: 'none',
  };
  const hosts: HostChild[] = [];
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  try {
    hosts.push(...(await Promise.all([startHost(stateDir, env), startHost(stateDir, env)])));
    const lease = await setUpBenchCapacity(agent, hosts[0]!.url, await issue({ roles: ['PlatformAdmin'] }), 10_000, issue);
    const cycle = acquireReleaseCycle(
      agent,
      lease,
      (client) => hosts[client % hosts.length]!.url,
      (client) => hosts[(client + 1) % hosts.length]!.url,
    );
    await load(2, clients, cycle);
    return await load(seconds, clients, cycle);
  } finally {
    agent.destroy();
    await Promise.all(hosts.map((h) => h.stop()));
    await tables.close();
  }
}

/**
 * The floor of issue 7: the least work a hot-row design does per cycle, with nothing else. Each client has its own
 * connection; one tenant row and one pool row are shared by all. Grant: BEGIN; UPDATE the tenant counter; UPDATE the
 * pool counter (and its fencing counter); INSERT the lease; COMMIT. Release, the reverse work: BEGIN; UPDATE the
 * lease; UPDATE the tenant; UPDATE the pool; COMMIT.
 *
 * The release takes the two hot rows in the grant's order (tenant, then pool). In the opposite order (pool, then
 * tenant) 32 clients deadlock continuously and every deadlock waits out `deadlock_timeout` (1 s) before PostgreSQL
 * breaks it: that loop ran at about 1 cycle/s here, a floor that measures the deadlock timer, not the hot row.
 * Deadlocks and serialization failures would be retried and counted; with one order there should be none.
 */
async function benchHotRowFloor(url: string, schema: string, seconds: number, clients: number): Promise<{ result: LoadResult; deadlocks: number }> {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  try {
    await setup.query(`set search_path to ${schema}`);
    await setup.query('create table floor_tenant (id text primary key, used integer not null, quota integer not null)');
    await setup.query('create table floor_pool (id text primary key, used integer not null, capacity integer not null, fencing bigint not null)');
    await setup.query('create table floor_lease (id bigserial primary key, tenant_id text not null, pool_id text not null, fencing bigint not null, state text not null)');
    await setup.query("insert into floor_tenant values ('bench', 0, 1000000)");
    await setup.query("insert into floor_pool values ('bench-attempt', 0, 1000000, 0)");
  } finally {
    await setup.end();
  }
  const connections = await Promise.all(
    Array.from({ length: clients }, async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      await client.query(`set search_path to ${schema}`);
      return client;
    }),
  );
  let deadlocks = 0;
  const transaction = async (client: pg.Client, work: () => Promise<void>) => {
    for (;;) {
      try {
        await client.query('begin');
        await work();
        await client.query('commit');
        return;
      } catch (error) {
        await client.query('rollback');
        const code = (error as { code?: unknown }).code;
        if (code !== '40P01' && code !== '40001') throw error;
        deadlocks++;
      }
    }
  };
  const cycle = async (index: number) => {
    const client = connections[index]!;
    let lease = '';
    await transaction(client, async () => {
      const tenant = await client.query("update floor_tenant set used = used + 1 where id = 'bench' and used + 1 <= quota");
      if (tenant.rowCount !== 1) throw new Error('floor: quota refused');
      const pool = await client.query<{ fencing: string }>(
        "update floor_pool set used = used + 1, fencing = fencing + 1 where id = 'bench-attempt' and used + 1 <= capacity returning fencing",
      );
      if (pool.rowCount !== 1) throw new Error('floor: pool refused');
      const inserted = await client.query<{ id: string }>(
        "insert into floor_lease (tenant_id, pool_id, fencing, state) values ('bench', 'bench-attempt', $1, 'active') returning id",
        [pool.rows[0]!.fencing],
      );
      lease = inserted.rows[0]!.id;
    });
    await transaction(client, async () => {
      const ended = await client.query("update floor_lease set state = 'released' where id = $1 and state = 'active'", [lease]);
      if (ended.rowCount !== 1) throw new Error('floor: lease not active');
      await client.query("update floor_tenant set used = used - 1 where id = 'bench'");
      await client.query("update floor_pool set used = used - 1 where id = 'bench-attempt'");
    });
  };
  try {
    await load(1, clients, cycle);
    deadlocks = 0;
    const result = await load(seconds, clients, cycle);
    return { result, deadlocks };
  } finally {
    await Promise.all(connections.map((c) => c.end()));
  }
}

// ---- etcd: the peer a user would otherwise pick for leases ------------------------------------------------

function findOnPath(binary: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir, binary);
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  await new Promise((done) => server.close(done));
  return port;
}

async function benchEtcd(dataDir: string, seconds: number, clients: number): Promise<LoadResult | undefined> {
  const binary = findOnPath('etcd');
  if (!binary) return undefined;
  const { Etcd3 } = await import('etcd3');
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const clientUrl = `http://127.0.0.1:${clientPort}`;
  const peerUrl = `http://127.0.0.1:${peerPort}`;
  const child = spawn(
    binary,
    [
      '--name', 'bench', '--data-dir', dataDir,
      '--listen-client-urls', clientUrl, '--advertise-client-urls', clientUrl,
      '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
      '--initial-cluster', `bench=${peerUrl}`, '--log-level', 'error',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = new Promise((done) => child.once('exit', done));
  const client = new Etcd3({ hosts: clientUrl });
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await client.get('ready').string();
        break;
      } catch (error) {
        if (attempt > 100) throw error;
        await new Promise((done) => setTimeout(done, 100));
      }
    }
    const cycle = async () => {
      const lease = client.lease(60, { autoKeepAlive: false });
      await lease.grant();
      await lease.revoke();
    };
    await load(1, clients, cycle);
    return await load(seconds, clients, cycle);
  } finally {
    client.close();
    child.kill('SIGTERM');
    await exited;
  }
}

// ---- in-process: the use case against the floor of its work ------------------------------------------------

async function migratedStore(dir: string): Promise<SqlStore> {
  const store = createSqlStore({ dialect: 'sqlite', connection: join(dir, 'store.sqlite') });
  await migrateToLatest(store.db, 'sqlite', allMigrations);
  return store;
}

async function benchInProcess(dir: string): Promise<{ ours: number; raw: number }> {
  const store = await migratedStore(dir);
  const capacity = createCapacityService({ store, clock: systemClock, ids: randomIds });
  const warmUp = 2000;
  const n = 20_000;
  // Room for every grant of the row and no more: a store may keep a row per unit of capacity (issue 7's slots).
  const units = warmUp + n;
  await capacity.putEdition({ name: 'bench', limits: { attempt: { maxUnits: units, maxTtlSeconds: 3600 } } });
  await capacity.putTenant({ id: 'bench', edition: 'bench' });
  await capacity.putPool('bench-attempt', { kind: 'attempt', target: 'local', capacity: units });
  const request = { tenant: 'bench', kind: 'attempt' as const, units: 1, ttlSeconds: 600, holder: 'bench', pool: 'bench-attempt' };
  for (let i = 0; i < warmUp; i++) await capacity.acquire(request);
  let t0 = performance.now();
  for (let i = 0; i < n; i++) await capacity.acquire(request);
  const ours = n / ((performance.now() - t0) / 1000);
  await store.close();

  // The floor: issue 4's counter-row grant (a conditional UPDATE, quota-free), prepared once, one IMMEDIATE
  // transaction per grant. It has a table of its own in the same file, so it does not depend on how the store
  // keeps capacity (the capacity tables changed shape with issue 7).
  const raw = new BetterSqlite3(join(dir, 'store.sqlite'));
  raw.pragma('journal_mode = WAL');
  raw.pragma('synchronous = NORMAL');
  raw.exec(
    `create table floor_pools (id text primary key, kind text not null, capacity integer not null, used integer not null, fencing_counter integer not null);
     insert into floor_pools values ('bench-attempt', 'attempt', 1000000000, 0, 0);`,
  );
  const grant = raw.prepare(
    'update floor_pools set used = used + ?, fencing_counter = fencing_counter + 1 where id = ? and kind = ? and used + ? <= capacity returning fencing_counter',
  );
  const once = raw.transaction(() => grant.get(1, 'bench-attempt', 'attempt', 1));
  const m = 200_000;
  for (let i = 0; i < 10_000; i++) once.immediate();
  t0 = performance.now();
  for (let i = 0; i < m; i++) once.immediate();
  const rawRate = m / ((performance.now() - t0) / 1000);
  raw.close();
  return { ours, raw: rawRate };
}

// ---- the sweep: cost follows the expired leases, not all leases ---------------------------------------------

/**
 * `total` leases of which `expired` are past their expiry. The others are written raw (far from expiry, outside any
 * accounting: the sweep must not even read them); the expired ones are granted through the service with a TTL of
 * 1 s, so their units are held however the store counts them, and the sweep's freeing of them is measured too.
 */
async function benchSweep(dir: string, total: number, expired: number): Promise<number> {
  const tenants = 10;
  const pools = 4;
  const store = await migratedStore(dir);
  const capacity = createCapacityService({ store, clock: systemClock, ids: randomIds });
  await capacity.putEdition({ name: 'bench', limits: { attempt: { maxUnits: expired, maxTtlSeconds: 3600 } } });
  for (let t = 0; t < tenants; t++) await capacity.putTenant({ id: `tenant-${t}`, edition: 'bench' });
  for (let p = 0; p < pools; p++) await capacity.putPool(`pool-${p}`, { kind: 'attempt', target: 'local', capacity: expired });
  await store.close();

  const raw = new BetterSqlite3(join(dir, 'store.sqlite'));
  raw.pragma('journal_mode = WAL');
  raw.pragma('synchronous = NORMAL');
  const now = Date.now();
  const insert = raw.prepare(
    `insert into capacity_leases (id, tenant_id, kind, pool_id, units, holder, fencing_token, ttl_seconds, granted_at, expires_at, state)
     values (?, ?, 'attempt', ?, 1, 'bench', ?, 600, ?, ?, 'active')`,
  );
  raw.transaction(() => {
    for (let i = 0; i < total - expired; i++) {
      insert.run(`lease_${String(i).padStart(8, '0')}`, `tenant-${i % tenants}`, `pool-${i % pools}`, i + 1, now - 600_000, now + 3_600_000);
    }
  })();
  raw.pragma('wal_checkpoint(TRUNCATE)');
  raw.exec('analyze');
  raw.close();

  const reopened = createSqlStore({ dialect: 'sqlite', connection: join(dir, 'store.sqlite') });
  const sweeper = createCapacityService({ store: reopened, clock: systemClock, ids: randomIds });
  for (let i = 0; i < expired; i++) {
    await sweeper.acquire({ tenant: `tenant-${i % tenants}`, kind: 'attempt', units: 1, ttlSeconds: 1, holder: 'bench', pool: `pool-${i % pools}` });
  }
  await new Promise((done) => setTimeout(done, 1100));
  const t0 = performance.now();
  const result = await sweeper.sweepExpired();
  const ms = performance.now() - t0;
  await reopened.close();
  if (result.expired !== expired) throw new Error(`sweep expired ${result.expired}, expected ${expired}`);
  return ms;
}

// ---- formatting ----------------------------------------------------------------------------------------------

function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

function ratio(a: number, b: number): string {
  return `${(a / b).toFixed(2)}×`;
}

function latencyNote(r: LoadResult): string {
  const kinds = Object.entries(r.errorKinds)
    .map(([kind, n]) => `${kind} ×${n}`)
    .join(', ');
  return `p50 ${r.p50.toFixed(2)} ms, p95 ${r.p95.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms${r.errors ? `, ${r.errors} errors: ${kinds}` : ''}`;
}
