/**
 * Capacity benchmark (`npm run bench -- capacity`). Prints figures and ratios against the targets of issue 4;
 * nothing here is asserted. Options: `--seconds N` per load row (default 5), `--clients N` (default 32),
 * `--skip-million` to leave out the 1,000,000-lease sweep.
 */
import BetterSqlite3 from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { parseArgs } from 'node:util';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { parseConfig } from '../../shared/platform/config/config';
import { createSqlStore, type SqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { randomIds, systemClock } from '../../shared/platform/time/clock';
import { allMigrations } from '../../shared/migrations';

const ROOT = join(__dirname, '..', '..');

interface Row {
  readonly name: string;
  readonly value: string;
  readonly note?: string;
}

interface LoadResult {
  readonly perSecond: number;
  readonly p50: number;
  readonly p95: number;
  readonly p99: number;
  readonly errors: number;
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: { seconds: { type: 'string' }, clients: { type: 'string' }, 'skip-million': { type: 'boolean' } },
  });
  const seconds = Number(values.seconds ?? '5');
  const clients = Number(values.clients ?? '32');
  const work = mkdtempSync(join(tmpdir(), 'rch-bench-capacity-'));
  const rows: Row[] = [];
  const print = (row: Row) => {
    rows.push(row);
    process.stderr.write(`  ${row.name}: ${row.value}${row.note ? ` (${row.note})` : ''}\n`);
  };
  try {
    process.stderr.write(`capacity benchmark: ${clients} clients, ${seconds} s per load row, work dir ${work}\n`);
    const httpRows = await benchHttp(join(work, 'host'), seconds, clients);
    print({ name: 'HTTP acquire+release cycles/s', value: fmt(httpRows.cycles.perSecond), note: latencyNote(httpRows.cycles) });
    print({ name: 'HTTP authenticated GET /health?probe=live req/s', value: fmt(httpRows.get.perSecond), note: latencyNote(httpRows.get) });
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
    if (!values['skip-million']) {
      const large = await benchSweep(join(work, 'sweep-1m'), 1_000_000, 1_000);
      print({ name: 'sweep 1,000 expired among 1,000,000 (ms)', value: large.toFixed(1) });
      print({ name: 'ratio 1M / 10k sweep (target ≤ 2.0)', value: ratio(large, small) });
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const width = Math.max(...rows.map((r) => r.name.length));
  process.stdout.write(`\n${'row'.padEnd(width)} | value\n${'-'.repeat(width)}-|-${'-'.repeat(40)}\n`);
  for (const row of rows) process.stdout.write(`${row.name.padEnd(width)} | ${row.value}${row.note ? `  (${row.note})` : ''}\n`);
}

// ---- HTTP on the local host (SQLite), in a child process like etcd ------------------------------------------

async function benchHttp(stateDir: string, seconds: number, clients: number): Promise<{ cycles: LoadResult; get: LoadResult }> {
  const child = await startHost(stateDir);
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  try {
    const keys = await ensureLocalKeys(stateDir);
    const config = parseConfig({});
    const issue = (claims: object) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
    const admin = await issue({ roles: ['PlatformAdmin'] });
    const limit = { maxUnits: 1_000_000, maxTtlSeconds: 3600 };
    await call(agent, child.url, 'PUT', '/runtime-cloud/editions/bench', admin, { limits: { attempt: limit } });
    await call(agent, child.url, 'PUT', '/runtime-cloud/tenants/bench', admin, { edition: 'bench' });
    await call(agent, child.url, 'PUT', '/runtime-cloud/pools/bench-attempt', admin, { kind: 'attempt', target: 'local', capacity: 1_000_000 });
    const lease = await issue({ tenant: 'bench', scopes: ['factory.capacity.lease'] });
    const reader = await issue({ roles: ['Observer'] });
    const body = JSON.stringify({ kind: 'attempt', ttlSeconds: 600, holder: 'bench', pool: 'bench-attempt' });
    const cycle = async () => {
      const granted = await call(agent, child.url, 'POST', '/runtime-cloud/leases', lease, body);
      if (granted.status !== 201) throw new Error(`acquire answered ${granted.status}: ${granted.body}`);
      const { leaseId } = JSON.parse(granted.body) as { leaseId: string };
      const released = await call(agent, child.url, 'DELETE', `/runtime-cloud/leases/${leaseId}`, lease);
      if (released.status !== 204) throw new Error(`release answered ${released.status}: ${released.body}`);
    };
    const get = async () => {
      const response = await call(agent, child.url, 'GET', '/runtime-cloud/health?probe=live', reader);
      if (response.status !== 200) throw new Error(`GET answered ${response.status}`);
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

interface HostChild {
  readonly url: URL;
  stop(): Promise<void>;
}

function startHost(stateDir: string): Promise<HostChild> {
  const child = spawn(process.execPath, ['--require', 'tsx/cjs', 'local/cli.ts', 'start', '--port', '0', '--state-dir', stateDir], {
    cwd: ROOT,
    env: { ...process.env, RuntimeCloud__Host__EnabledModules: 'capacity' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return waitForUrl(child, /listening on (http:\/\/\S+)/, 'runtime-cloud host', async () => {
    child.kill('SIGTERM');
    await new Promise((done) => child.once('exit', done));
  });
}

function waitForUrl(child: ChildProcess, pattern: RegExp, what: string, stop: () => Promise<void>): Promise<HostChild> {
  let output = '';
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = pattern.exec(output);
      if (match?.[1]) {
        child.stdout?.off('data', onData);
        resolve({ url: new URL(match[1]), stop });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => reject(new Error(`${what} exited with ${code}:\n${output}`)));
  });
}

function call(agent: http.Agent, base: URL, method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: string }> {
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        agent,
        host: base.hostname,
        port: base.port,
        method,
        path,
        headers: {
          authorization: `Bearer ${token}`,
          ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
        },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (c: Buffer) => chunks.push(c));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}

/** Runs `clients` loops of `op` for `seconds`; per-op latency in milliseconds. */
async function load(seconds: number, clients: number, op: () => Promise<void>): Promise<LoadResult> {
  const latencies: number[] = [];
  let errors = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  let firstError: unknown;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        try {
          await op();
          latencies.push(performance.now() - t0);
        } catch (error) {
          firstError ??= error;
          errors++;
        }
      }
    }),
  );
  if (errors > 0) process.stderr.write(`  (${errors} failed operations; first: ${String(firstError)})\n`);
  const elapsed = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN;
  return { perSecond: latencies.length / elapsed, p50: pct(50), p95: pct(95), p99: pct(99), errors };
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
  await capacity.putEdition({ name: 'bench', limits: { attempt: { maxUnits: 1_000_000_000, maxTtlSeconds: 3600 } } });
  await capacity.putTenant({ id: 'bench', edition: 'bench' });
  await capacity.putPool('bench-attempt', { kind: 'attempt', target: 'local', capacity: 1_000_000_000 });
  const request = { tenant: 'bench', kind: 'attempt' as const, units: 1, ttlSeconds: 600, holder: 'bench', pool: 'bench-attempt' };
  for (let i = 0; i < 2000; i++) await capacity.acquire(request);
  const n = 20_000;
  let t0 = performance.now();
  for (let i = 0; i < n; i++) await capacity.acquire(request);
  const ours = n / ((performance.now() - t0) / 1000);
  await store.close();

  // The floor: the same conditional UPDATE (quota-free), prepared once, one IMMEDIATE transaction per grant.
  const raw = new BetterSqlite3(join(dir, 'store.sqlite'));
  raw.pragma('journal_mode = WAL');
  raw.pragma('synchronous = NORMAL');
  const grant = raw.prepare(
    'update capacity_pools set used = used + ?, fencing_counter = fencing_counter + 1 where id = ? and kind = ? and used + ? <= capacity returning fencing_counter',
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

async function benchSweep(dir: string, total: number, expired: number): Promise<number> {
  const store = await migratedStore(dir);
  const capacity = createCapacityService({ store, clock: systemClock, ids: randomIds });
  await capacity.putEdition({ name: 'bench', limits: { attempt: { maxUnits: 1_000_000_000, maxTtlSeconds: 3600 } } });
  for (let t = 0; t < 10; t++) await capacity.putTenant({ id: `tenant-${t}`, edition: 'bench' });
  for (let p = 0; p < 4; p++) await capacity.putPool(`pool-${p}`, { kind: 'attempt', target: 'local', capacity: 1_000_000_000 });
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
    for (let i = 0; i < total; i++) {
      const due = i % Math.floor(total / expired) === 0 && i / Math.floor(total / expired) < expired;
      insert.run(`lease_${String(i).padStart(8, '0')}`, `tenant-${i % 10}`, `pool-${i % 4}`, i + 1, now - 600_000, due ? now - 1000 : now + 600_000);
    }
  })();
  raw.prepare("update capacity_pools set used = (select count(*) from capacity_leases l where l.pool_id = capacity_pools.id and l.state = 'active')").run();
  raw.prepare("update capacity_tenant_usage set used = (select count(*) from capacity_leases l where l.tenant_id = capacity_tenant_usage.tenant_id and l.kind = capacity_tenant_usage.kind and l.state = 'active')").run();
  raw.pragma('wal_checkpoint(TRUNCATE)');
  raw.exec('analyze');
  raw.close();

  const reopened = createSqlStore({ dialect: 'sqlite', connection: join(dir, 'store.sqlite') });
  const sweeper = createCapacityService({ store: reopened, clock: systemClock, ids: randomIds });
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
  return `p50 ${r.p50.toFixed(2)} ms, p95 ${r.p95.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms${r.errors ? `, ${r.errors} errors` : ''}`;
}
