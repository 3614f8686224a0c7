import { expect } from 'vitest';
import type { AnyDb } from '../../shared/platform/sql/database';

/**
 * A mixed capacity workload driven over HTTP against one or more hosts that share one store, and the analysis of
 * what it saw. Used by tests/reliability/capacity-mixed-workload.test.ts on PostgreSQL (4 child hosts) and on
 * SQLite (one host in-process).
 *
 * Client loops acquire (plain, by labels, with an Idempotency-Key in the body or the header, as a sequential replay,
 * as a concurrent duplicate on two hosts, and as a reuse of a key with a different request), renew and release with
 * the right fencing token, and now and then with a wrong one; some leases are abandoned to expire. An admin loop
 * resizes the pool up and down, sometimes below its current use; a sampler reads GET /capacity; a sweeper expires
 * leases through `store.sweep()` while the hosts' own timers sweep too. Every exchange is recorded with monotonic
 * send/receive times (performance.now) and wall-clock times (Date.now, the clock the hosts stamp `expiresAt` with).
 *
 * Afterwards it settles the store so that the accounting can be compared exactly:
 *  1. every lease still held is renewed for 60 s; everything else lapses within the workload's longest TTL;
 *  2. it waits for that TTL, sweeps until nothing is left to sweep, sets the pool back to its initial capacity and
 *     fills it (or the quota) with 60 s leases, and takes snapshot A (GET /capacity between two reads of the lease
 *     rows that must agree): `used` against the active leases while units are held;
 *  3. it releases the renewed leases, sweeps again and takes snapshot B: every lease is terminal, `used` is back.
 */

export interface LeaseRow {
  readonly id: string;
  readonly tenant: string;
  readonly kind: string;
  readonly pool: string;
  readonly units: number;
  readonly state: string;
  readonly fencingToken: number;
  /** Epoch ms. */
  readonly expiresAt: number;
  /** Epoch ms when the lease was released or expired; null while active. */
  readonly endedAt: number | null;
}

/** What the workload needs from the shared store besides HTTP. */
export interface WorkloadStore {
  /** Every lease row (all tenants and pools), as stored. */
  leases(): Promise<LeaseRow[]>;
  /** The lease id of every `LeaseExpired` event in the outbox, one entry per event. */
  expiredEvents(): Promise<string[]>;
  /** Runs the capacity service's expiry sweep once (another instance on the same store); answers how many expired. */
  sweep(): Promise<number>;
}

/** Reads lease rows and `LeaseExpired` outbox events with the test's own connection to the shared database. */
export function storeReader(db: AnyDb, sweep: () => Promise<number>): WorkloadStore {
  return {
    async leases() {
      const rows = await db
        .selectFrom('capacity_leases')
        .select(['id', 'tenant_id', 'kind', 'pool_id', 'units', 'state', 'fencing_token', 'expires_at', 'ended_at'])
        .execute();
      return rows.map((r) => ({
        id: String(r.id),
        tenant: String(r.tenant_id),
        kind: String(r.kind),
        pool: String(r.pool_id),
        units: Number(r.units),
        state: String(r.state),
        fencingToken: Number(r.fencing_token),
        expiresAt: Number(r.expires_at),
        endedAt: r.ended_at === null || r.ended_at === undefined ? null : Number(r.ended_at),
      }));
    },
    async expiredEvents() {
      const rows = await db.selectFrom('outbox').select(['payload']).execute();
      const ids: string[] = [];
      for (const row of rows) {
        const event = JSON.parse(String(row.payload)) as { type?: string; data?: { leaseId?: string } };
        if (event.type === 'LeaseExpired' && typeof event.data?.leaseId === 'string') ids.push(event.data.leaseId);
      }
      return ids;
    },
    sweep,
  };
}

export interface WorkloadOptions {
  /** Shown in the summary line. */
  readonly name: string;
  readonly baseUrls: readonly URL[];
  /** A token bound to `tenant` with factory.capacity.lease and factory.runtime.read. */
  readonly leaseToken: string;
  /** A PlatformAdmin token without a tenant: PUT /pools, /editions, /tenants and GET /capacity over all tenants. */
  readonly adminToken: string;
  readonly tenant: string;
  readonly pool: string;
  readonly kind: string;
  /** The edition's maxUnits for `kind`: comparable to the pool so that both limits bind at times. */
  readonly quota: number;
  /** The pool's capacity at the start, and the range the admin loop resizes it within. */
  readonly capacity: { readonly initial: number; readonly min: number; readonly max: number };
  readonly clients: number;
  /**
   * How long the clients run at least. They go on past it (up to three times as long) until the loop's operations
   * reached `minimum`, so a loaded machine gets the same coverage later rather than a failed test.
   */
  readonly durationMs: number;
  /** What `expectWorkloadHeld` will demand; the loop's own operations (grants, releases, renews, resizes) are run to it. */
  readonly minimum?: WorkloadMinimum;
  readonly store: WorkloadStore;
  /** PRNG seed; printed in the summary so that a failing interleaving's choices can be replayed. */
  readonly seed?: number;
}

export type Op =
  | 'setup'
  | 'acquire'
  | 'replay'
  | 'duplicate'
  | 'key-reuse'
  | 'renew'
  | 'renew-wrong-token'
  | 'release'
  | 'release-again'
  | 'release-wrong-token'
  | 'resize'
  | 'capacity'
  | 'settle-renew'
  | 'settle-acquire'
  | 'settle-release'
  | 'get-lease';

/** One request and its answer. `status` 0: no answer (network error or 20 s timeout). */
export interface Exchange {
  readonly op: Op;
  readonly client: number;
  readonly host: number;
  readonly method: string;
  readonly path: string;
  readonly requestBody?: Readonly<Record<string, unknown>>;
  readonly status: number;
  readonly text: string;
  readonly json: Readonly<Record<string, unknown>> | undefined;
  readonly retryAfter: string | null;
  /** performance.now() just before sending and after the whole answer arrived. */
  readonly sentAt: number;
  readonly receivedAt: number;
  /** Date.now() at the same two moments. */
  readonly sentWall: number;
  readonly receivedWall: number;
  /** The lease the request acts on, or the one it was answered with. */
  readonly leaseId?: string;
  readonly key?: string;
  readonly presentedToken?: number;
  /** A resize meant to go below the use last sampled: that use. */
  readonly belowUse?: number;
}

export interface Sample {
  readonly sentAt: number;
  readonly receivedAt: number;
  readonly poolCapacity: number;
  readonly poolUsed: number;
  readonly tenantUsed: number;
  readonly tenantLimit: number | null;
}

export interface SweepRun {
  readonly at: number;
  readonly expired: number;
  readonly error?: string;
}

export interface Snapshot {
  readonly label: string;
  readonly mismatches: string[];
  /** Units held by active leases of the workload's pool when the snapshot was taken. */
  readonly activeUnits: number;
}

export interface WorkloadCounts {
  /** Distinct leases granted (201). */
  readonly grants: number;
  readonly releases: number;
  readonly renews: number;
  readonly replays: number;
  readonly duplicates: number;
  readonly keyReuses: number;
  readonly resizes: number;
  readonly shrinksBelowUse: number;
  /** The workload's leases whose stored final state is `expired`. */
  readonly expired: number;
  /** Units the workload's pool held in snapshot A (0 would make that comparison trivial). */
  readonly snapshotUnits: number;
  readonly samples: number;
  readonly sweeps: number;
}

export interface WorkloadViolations {
  /** Every 5xx, every request without an answer, every failed sweep. */
  readonly serverErrors: string[];
  /** `used` (GET /capacity) against the active leases' units, per pool and per tenant. */
  readonly accounting: string[];
  /** Sampled use above what the capacity (and its resizes) and the quota allowed. */
  readonly overGrant: string[];
  /** Fencing tokens not unique, or not increasing in grant order, per pool. */
  readonly fencing: string[];
  /** A lease whose end contradicts the answers: released and expired, released after expiry, left active, … */
  readonly terminal: string[];
  /** Answers the API contract does not allow (idempotency, fencing on renew/release, unexpected statuses). */
  readonly contract: string[];
}

export interface WorkloadReport {
  readonly summary: string;
  readonly counts: WorkloadCounts;
  readonly violations: WorkloadViolations;
  readonly exchanges: readonly Exchange[];
}

/** The longest TTL the clients ask for; the settle phase waits this long for unheld leases to lapse. */
const WORKLOAD_MAX_TTL_SECONDS = 3;
const SETTLE_TTL_SECONDS = 60;
const EDITION_MAX_TTL_SECONDS = 120;
const REQUEST_TIMEOUT_MS = 20_000;
/** How many entries of one violation list are spelled out. */
const LIST_LIMIT = 25;

interface Held {
  readonly id: string;
  readonly token: number;
  readonly units: number;
  /** Latest expiresAt an answer told (epoch ms). */
  expiresAt: number;
}

export async function runCapacityWorkload(options: WorkloadOptions): Promise<WorkloadReport> {
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const random = mulberry32(seed);
  const between = (low: number, high: number) => low + Math.floor(random() * (high - low + 1));
  const exchanges: Exchange[] = [];
  const samples: Sample[] = [];
  const sweeps: SweepRun[] = [];
  const labels = { workload: options.pool };
  const runId = `${options.name}-${seed.toString(36)}`;

  async function send(
    op: Op,
    client: number,
    host: number,
    method: string,
    path: string,
    extra: {
      body?: Record<string, unknown>;
      headers?: Record<string, string>;
      token?: string;
      leaseId?: string;
      key?: string;
      presentedToken?: number;
      belowUse?: number;
    } = {},
  ): Promise<Exchange> {
    const base = options.baseUrls[host % options.baseUrls.length]!;
    const headers: Record<string, string> = { authorization: `Bearer ${extra.token ?? options.leaseToken}`, ...extra.headers };
    if (extra.body !== undefined) headers['content-type'] = 'application/json';
    const sentWall = Date.now();
    const sentAt = performance.now();
    let status = 0;
    let text = '';
    let retryAfter: string | null = null;
    try {
      const response = await fetch(new URL(path, base), {
        method,
        headers,
        ...(extra.body !== undefined ? { body: JSON.stringify(extra.body) } : {}),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      text = await response.text();
      status = response.status;
      retryAfter = response.headers.get('retry-after');
    } catch (thrown) {
      text = thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown);
    }
    const receivedAt = performance.now();
    const receivedWall = Date.now();
    let json: Record<string, unknown> | undefined;
    try {
      json = text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
    } catch {
      json = undefined;
    }
    const answeredLease = typeof json?.leaseId === 'string' ? json.leaseId : undefined;
    const leaseId = extra.leaseId ?? answeredLease;
    const exchange: Exchange = {
      op,
      client,
      host: host % options.baseUrls.length,
      method,
      path,
      ...(extra.body !== undefined ? { requestBody: extra.body } : {}),
      status,
      text,
      json,
      retryAfter,
      sentAt,
      receivedAt,
      sentWall,
      receivedWall,
      ...(leaseId !== undefined ? { leaseId } : {}),
      ...(extra.key !== undefined ? { key: extra.key } : {}),
      ...(extra.presentedToken !== undefined ? { presentedToken: extra.presentedToken } : {}),
      ...(extra.belowUse !== undefined ? { belowUse: extra.belowUse } : {}),
    };
    exchanges.push(exchange);
    return exchange;
  }

  const admin = (op: Op, method: string, path: string, body?: Record<string, unknown>, belowUse?: number) =>
    send(op, -1, between(0, options.baseUrls.length - 1), method, path, {
      token: options.adminToken,
      ...(body ? { body } : {}),
      ...(belowUse !== undefined ? { belowUse } : {}),
    });

  // ---- set-up: one edition whose quota binds against a pool that is resized around it ----
  const poolSpec = (capacity: number) => ({ kind: options.kind, target: 'local', capacity, min: 0, max: Math.max(options.capacity.max, 100), labels });
  const edition = `${options.tenant}-edition`;
  for (const [path, body] of [
    [`/runtime-cloud/editions/${edition}`, { limits: { [options.kind]: { maxUnits: options.quota, maxTtlSeconds: EDITION_MAX_TTL_SECONDS } } }],
    [`/runtime-cloud/tenants/${options.tenant}`, { edition }],
    [`/runtime-cloud/pools/${options.pool}`, poolSpec(options.capacity.initial)],
  ] as const) {
    const answer = await send('setup', -1, 0, 'PUT', path, { token: options.adminToken, body });
    if (answer.status !== 200 && answer.status !== 201) throw new Error(`set-up PUT ${path} answered ${answer.status}: ${answer.text}`);
  }
  const start = performance.now();
  const stopAt = start + options.durationMs;
  const giveUpAt = start + 3 * options.durationMs;
  const covered = () => {
    const minimum = options.minimum;
    if (!minimum) return true;
    const done = loopCounts(exchanges, samples);
    return (
      done.grants >= minimum.grants &&
      done.releases >= minimum.releases &&
      done.renews >= minimum.renews &&
      done.resizes >= minimum.resizes &&
      (Object.keys(ALWAYS_MINIMUM) as (keyof typeof ALWAYS_MINIMUM)[]).every((k) => done[k] >= ALWAYS_MINIMUM[k])
    );
  };
  const running = () => {
    const now = performance.now();
    return now < stopAt || (now < giveUpAt && !covered());
  };
  samples.push({ sentAt: start, receivedAt: start, poolCapacity: options.capacity.initial, poolUsed: 0, tenantUsed: 0, tenantLimit: options.quota });

  const heldByClient: Held[][] = Array.from({ length: options.clients }, () => []);

  const leasePath = (id: string) => `/runtime-cloud/leases/${encodeURIComponent(id)}`;
  const expiresOf = (e: Exchange) => (typeof e.json?.expiresAt === 'string' ? Date.parse(e.json.expiresAt) : NaN);
  const tokenOf = (e: Exchange) => (typeof e.json?.fencingToken === 'number' ? e.json.fencingToken : NaN);

  function remember(client: number, answer: Exchange, units: number): void {
    if ((answer.status === 201 || answer.status === 200) && answer.leaseId !== undefined) {
      const held = heldByClient[client]!;
      if (held.some((h) => h.id === answer.leaseId)) return;
      held.push({ id: answer.leaseId, token: tokenOf(answer), units, expiresAt: expiresOf(answer) });
    }
  }

  async function acquire(client: number): Promise<Exchange[]> {
    const units = random() < 0.8 ? 1 : 2;
    const body: Record<string, unknown> = {
      kind: options.kind,
      units,
      ttlSeconds: between(1, WORKLOAD_MAX_TTL_SECONDS),
      holder: `client-${client}`,
      ...(random() < 0.3 ? { labels } : { pool: options.pool }),
    };
    const host = between(0, options.baseUrls.length - 1);
    const mode = random();
    if (mode < 0.55) {
      const answer = await send('acquire', client, host, 'POST', '/runtime-cloud/leases', { body });
      remember(client, answer, units);
      return [answer];
    }
    const key = `${runId}-c${client}-${between(0, 1e9).toString(36)}-${exchanges.length}`;
    const inHeader = random() < 0.5;
    const keyed = (b: Record<string, unknown>) => (inHeader ? { body: b, headers: { 'idempotency-key': key } } : { body: { ...b, idempotencyKey: key } });
    if (mode < 0.7) {
      // Two hosts receive the same request at once, as when a client times out and retries elsewhere.
      const pair = await Promise.all([
        send('duplicate', client, host, 'POST', '/runtime-cloud/leases', { ...keyed(body), key }),
        send('duplicate', client, host + 1, 'POST', '/runtime-cloud/leases', { ...keyed(body), key }),
      ]);
      for (const answer of pair) remember(client, answer, units);
      return pair;
    }
    const first = await send('acquire', client, host, 'POST', '/runtime-cloud/leases', { ...keyed(body), key });
    remember(client, first, units);
    const out = [first];
    if (first.status !== 201) return out;
    if (random() < 0.5) {
      out.push(await send('replay', client, host + between(0, 3), 'POST', '/runtime-cloud/leases', { ...keyed(body), key }));
    }
    if (random() < 0.25) {
      const changed = random() < 0.5 ? { ...body, units: units + 1 } : { ...body, holder: `client-${client}-other` };
      out.push(await send('key-reuse', client, host + between(0, 3), 'POST', '/runtime-cloud/leases', { ...keyed(changed), key }));
    }
    return out;
  }

  async function release(client: number, lease: Held, op: 'release' | 'release-again' | 'release-wrong-token', token: number): Promise<Exchange> {
    const host = between(0, options.baseUrls.length - 1);
    return random() < 0.5
      ? send(op, client, host, 'DELETE', leasePath(lease.id), { headers: { 'fencing-token': String(token) }, leaseId: lease.id, presentedToken: token })
      : send(op, client, host, 'DELETE', `${leasePath(lease.id)}?fencingToken=${token}`, { leaseId: lease.id, presentedToken: token });
  }

  async function clientLoop(client: number): Promise<void> {
    const held = heldByClient[client]!;
    while (running()) {
      const choice = random();
      const lease = held.length > 0 ? held[between(0, held.length - 1)]! : undefined;
      const drop = (id: string) => {
        const at = held.findIndex((h) => h.id === id);
        if (at >= 0) held.splice(at, 1);
      };
      if (!lease || (held.length < 2 && choice < 0.45)) {
        const answers = await acquire(client);
        if (answers.some((a) => a.status === 429)) await sleep(between(10, 60));
      } else {
        const action = random();
        if (action < 0.35) {
          const answer = await send('renew', client, between(0, 3), 'POST', `${leasePath(lease.id)}/renew`, {
            body: { fencingToken: lease.token, ttlSeconds: between(1, WORKLOAD_MAX_TTL_SECONDS) },
            leaseId: lease.id,
            presentedToken: lease.token,
          });
          if (answer.status === 200) lease.expiresAt = expiresOf(answer);
          else if (answer.status === 410) drop(lease.id);
        } else if (action < 0.42) {
          // A stale holder's older token, or one never handed out yet.
          const wrong = lease.token > 5 && random() < 0.5 ? lease.token - between(1, 5) : lease.token + between(1, 5);
          const answer = await send('renew-wrong-token', client, between(0, 3), 'POST', `${leasePath(lease.id)}/renew`, {
            body: { fencingToken: wrong },
            leaseId: lease.id,
            presentedToken: wrong,
          });
          if (answer.status === 410) drop(lease.id);
        } else if (action < 0.82) {
          const answer = await release(client, lease, 'release', lease.token);
          if (answer.status === 204 || answer.status === 410) drop(lease.id);
          if (answer.status === 204 && random() < 0.15) await release(client, lease, 'release-again', lease.token);
        } else if (action < 0.9) {
          const answer = await release(client, lease, 'release-wrong-token', lease.token + between(1, 5));
          // The contract refuses it (409); if a host released anyway, the lease is gone all the same.
          if (answer.status === 204 || answer.status === 410) drop(lease.id);
        } else {
          // Abandoned: the holder "crashes"; the lease expires and the sweep gives its units back.
          drop(lease.id);
        }
      }
      await sleep(between(0, 15));
    }
  }

  async function adminLoop(): Promise<void> {
    while (running()) {
      const used = samples[samples.length - 1]?.poolUsed ?? 0;
      const below = used > 0 && random() < 0.35;
      const capacity = below ? Math.max(0, used - between(1, 3)) : between(options.capacity.min, options.capacity.max);
      await admin('resize', 'PUT', `/runtime-cloud/pools/${options.pool}`, poolSpec(capacity), below ? used : undefined);
      await sleep(between(250, 600));
    }
  }

  async function samplerLoop(): Promise<void> {
    while (running()) {
      const answer = await admin('capacity', 'GET', '/runtime-cloud/capacity');
      const sample = sampleOf(answer, options);
      if (sample) samples.push(sample);
      await sleep(between(80, 180));
    }
  }

  async function sweeperLoop(): Promise<void> {
    while (running()) {
      await sleep(between(400, 900));
      sweeps.push(await sweepOnce(options.store));
    }
  }

  await Promise.all([...heldByClient.map((_, i) => clientLoop(i)), adminLoop(), samplerLoop(), sweeperLoop()]);
  const workloadSeconds = (performance.now() - start) / 1000;

  // ---- settle 1: keep what is held for the snapshot, let everything else lapse ----
  const settled: Held[] = [];
  await Promise.all(
    heldByClient.flatMap((held, client) =>
      held.map(async (lease) => {
        const answer = await send('settle-renew', client, client, 'POST', `${leasePath(lease.id)}/renew`, {
          body: { fencingToken: lease.token, ttlSeconds: SETTLE_TTL_SECONDS },
          leaseId: lease.id,
          presentedToken: lease.token,
        });
        if (answer.status === 200) settled.push({ ...lease, expiresAt: expiresOf(answer) });
      }),
    ),
  );
  // Every lease granted or renewed before the loops ended, and not renewed just now, is past expiry after this.
  await sleep(WORKLOAD_MAX_TTL_SECONDS * 1000 + 250);
  await sweepUntilQuiet(options.store, sweeps);
  // Units held for snapshot A, whatever the clients happened to hold when the loops ended.
  await admin('resize', 'PUT', `/runtime-cloud/pools/${options.pool}`, poolSpec(options.capacity.initial));
  for (let i = 0; i < options.quota + options.capacity.max; i++) {
    const body = { kind: options.kind, units: 1, ttlSeconds: SETTLE_TTL_SECONDS, holder: 'settle', pool: options.pool };
    const answer = await send('settle-acquire', -1, i, 'POST', '/runtime-cloud/leases', { body });
    if (answer.status !== 201 || answer.leaseId === undefined) break;
    settled.push({ id: answer.leaseId, token: tokenOf(answer), units: 1, expiresAt: expiresOf(answer) });
  }
  const snapshotA = await snapshot('A (leases held)', options, exchanges, send);

  // ---- settle 2: release what is held; every lease is now terminal ----
  await Promise.all(
    settled.map((lease, i) =>
      send('settle-release', -1, i, 'DELETE', leasePath(lease.id), {
        headers: { 'fencing-token': String(lease.token) },
        leaseId: lease.id,
        presentedToken: lease.token,
      }),
    ),
  );
  await sweepUntilQuiet(options.store, sweeps);
  const snapshotB = await snapshot('B (all ended)', options, exchanges, send);

  const rows = await options.store.leases();
  const expiredEvents = await options.store.expiredEvents();
  // The API's view of a few ended leases must agree with the rows.
  const ours = rows.filter((r) => r.pool === options.pool);
  const apiViews = await Promise.all(
    ours.slice(0, 40).map((row, i) => send('get-lease', -1, i, 'GET', leasePath(row.id), { leaseId: row.id })),
  );

  const violations: WorkloadViolations = {
    serverErrors: listed(serverErrors(exchanges, sweeps)),
    accounting: listed([...snapshotA.mismatches, ...snapshotB.mismatches]),
    overGrant: listed(overGrants(samples, exchanges)),
    fencing: listed(fencingProblems(exchanges, rows, options.pool)),
    terminal: listed(terminalProblems(exchanges, ours, expiredEvents, apiViews)),
    contract: listed(contractProblems(exchanges)),
  };
  const counts: WorkloadCounts = {
    ...loopCounts(exchanges, samples),
    expired: ours.filter((r) => r.state === 'expired').length,
    snapshotUnits: snapshotA.activeUnits,
    sweeps: sweeps.length,
  };
  const summary =
    `[capacity-workload ${options.name}] seed ${seed}, ${options.clients} clients on ${options.baseUrls.length} host(s) for ` +
    `${workloadSeconds.toFixed(1)} s; quota ${options.quota}, pool ${options.capacity.min}..${options.capacity.max}; ` +
    `${statusLine(exchanges)}; sweeps ${sweeps.length} (expired ${sweeps.reduce((n, s) => n + s.expired, 0)}, failed ` +
    `${sweeps.filter((s) => s.error).length}); snapshot A held ${snapshotA.activeUnits} units; final leases: ` +
    `${Object.entries(tally(ours.map((r) => r.state))).map(([s, n]) => `${s} ${n}`).join(', ')}`;
  return { summary, counts, violations, exchanges };
}

// ---- settle helpers ------------------------------------------------------------------------------------------

async function sweepOnce(store: WorkloadStore): Promise<SweepRun> {
  const at = performance.now();
  try {
    return { at, expired: await store.sweep() };
  } catch (thrown) {
    return { at, expired: 0, error: thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown) };
  }
}

async function sweepUntilQuiet(store: WorkloadStore, sweeps: SweepRun[]): Promise<void> {
  for (let i = 0; i < 10; i++) {
    const run = await sweepOnce(store);
    sweeps.push(run);
    if (!run.error && run.expired === 0) return;
  }
}

type Send = (op: Op, client: number, host: number, method: string, path: string, extra?: { token?: string }) => Promise<Exchange>;

/**
 * `used` of every pool and every tenant against the units of the active lease rows. The rows are read before and
 * after GET /capacity; the comparison is made only when both reads agree (a host's timer sweep may run in between).
 * By now no active lease may be past its expiry: the clients' TTLs have run out and a sweep found nothing more.
 */
async function snapshot(label: string, options: WorkloadOptions, exchanges: Exchange[], send: Send): Promise<Snapshot> {
  for (let attempt = 0; ; attempt++) {
    const before = await options.store.leases();
    const answer = await send('capacity', -1, attempt, 'GET', '/runtime-cloud/capacity', { token: options.adminToken });
    const after = await options.store.leases();
    const activeKey = (rows: LeaseRow[]) =>
      rows
        .filter((r) => r.state === 'active')
        .map((r) => `${r.id}:${r.units}`)
        .sort()
        .join(',');
    if (activeKey(before) !== activeKey(after) && attempt < 5) continue;
    const mismatches: string[] = [];
    if (answer.status !== 200 || !answer.json) {
      return { label, mismatches: [`snapshot ${label}: GET /capacity answered ${answer.status}: ${answer.text.slice(0, 300)}`], activeUnits: NaN };
    }
    const active = after.filter((r) => r.state === 'active');
    const now = Date.now();
    for (const row of active.filter((r) => r.expiresAt <= answer.sentWall)) {
      mismatches.push(`snapshot ${label}: lease ${row.id} is still active ${now - row.expiresAt} ms after its expiry, after a sweep that found nothing`);
    }
    const sum = (pick: (r: LeaseRow) => boolean) => active.filter(pick).reduce((n, r) => n + r.units, 0);
    const summary = answer.json as { pools?: { id: string; capacity: number; used: number }[]; tenants?: { tenant: string; usage: { kind: string; used: number }[] }[] };
    const pools = summary.pools ?? [];
    const tenants = summary.tenants ?? [];
    for (const pool of pools) {
      const expected = sum((r) => r.pool === pool.id);
      if (pool.used !== expected) mismatches.push(`snapshot ${label}: pool ${pool.id} used ${pool.used}, active leases hold ${expected}`);
    }
    for (const id of new Set(active.map((r) => r.pool))) {
      if (!pools.some((p) => p.id === id)) mismatches.push(`snapshot ${label}: pool ${id} holds active leases but GET /capacity does not list it`);
    }
    for (const tenant of tenants) {
      for (const usage of tenant.usage) {
        const expected = sum((r) => r.tenant === tenant.tenant && r.kind === usage.kind);
        if (usage.used !== expected) {
          mismatches.push(`snapshot ${label}: tenant ${tenant.tenant} ${usage.kind} used ${usage.used}, active leases hold ${expected}`);
        }
      }
    }
    for (const key of new Set(active.map((r) => `${r.tenant}/${r.kind}`))) {
      const [tenant, kind] = key.split('/');
      if (!tenants.some((t) => t.tenant === tenant && t.usage.some((u) => u.kind === kind))) {
        mismatches.push(`snapshot ${label}: tenant ${tenant} holds active ${kind} leases but GET /capacity does not list its use`);
      }
    }
    if (!pools.some((p) => p.id === options.pool)) mismatches.push(`snapshot ${label}: GET /capacity does not list pool ${options.pool}`);
    if (!tenants.some((t) => t.tenant === options.tenant)) mismatches.push(`snapshot ${label}: GET /capacity does not list tenant ${options.tenant}`);
    return { label, mismatches, activeUnits: sum((r) => r.pool === options.pool) };
  }
}

function sampleOf(answer: Exchange, options: WorkloadOptions): Sample | undefined {
  if (answer.status !== 200 || !answer.json) return undefined;
  const summary = answer.json as { pools?: { id: string; capacity: number; used: number }[]; tenants?: { tenant: string; usage: { kind: string; used: number; limit: number | null }[] }[] };
  const pool = summary.pools?.find((p) => p.id === options.pool);
  const usage = summary.tenants?.find((t) => t.tenant === options.tenant)?.usage.find((u) => u.kind === options.kind);
  if (!pool || !usage) return undefined;
  return {
    sentAt: answer.sentAt,
    receivedAt: answer.receivedAt,
    poolCapacity: pool.capacity,
    poolUsed: pool.used,
    tenantUsed: usage.used,
    tenantLimit: usage.limit,
  };
}

// ---- analysis ------------------------------------------------------------------------------------------------

function isAcquire(op: Op): boolean {
  return op === 'acquire' || op === 'replay' || op === 'duplicate' || op === 'key-reuse' || op === 'settle-acquire';
}

function describeExchange(e: Exchange): string {
  const body = e.text.length > 400 ? `${e.text.slice(0, 400)}…` : e.text;
  return `${e.op} ${e.method} ${e.path} on host ${e.host}${e.presentedToken !== undefined ? ` (token ${e.presentedToken})` : ''} → ${e.status || 'no answer'}: ${body}`;
}

/**
 * Every 5xx, unanswered request and failed sweep, grouped by what went wrong (status, op, code and message) with a
 * count and the first body of each group, so that a rare 500 is not hidden behind a hundred identical 503s.
 */
function serverErrors(exchanges: readonly Exchange[], sweeps: readonly SweepRun[]): string[] {
  const groups = new Map<string, { count: number; first: string }>();
  const add = (key: string, text: string) => {
    const group = groups.get(key);
    if (group) group.count++;
    else groups.set(key, { count: 1, first: text });
  };
  for (const e of exchanges) {
    if (e.status !== 0 && e.status < 500) continue;
    const message = [e.json?.detail, e.json?.title].find((m): m is string => typeof m === 'string') ?? '';
    const why = typeof e.json?.code === 'string' ? `${e.json.code} ${message}` : e.text.slice(0, 120);
    add(`${e.status} ${e.op} ${why}`, describeExchange(e));
  }
  for (const s of sweeps) if (s.error) add(`sweep ${s.error}`, `sweep failed: ${s.error}`);
  return [...groups.entries()]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([, g]) => `${g.count}× ${g.first}`);
}

/**
 * Sampled use never above what the limits allowed. The quota does not change: tenant use ≤ quota at every sample.
 * The capacity does: between two samples s1 and s2 every grant needed room under the capacity in force when it
 * committed, so s2.used ≤ max(s1.used, every capacity that may have been in force in between: s1's, s2's, and every
 * resize that overlapped the interval). After a shrink below use, use may stay above the capacity but never grow.
 */
function overGrants(samples: readonly Sample[], exchanges: readonly Exchange[]): string[] {
  const problems: string[] = [];
  const resizes = exchanges.filter((e) => e.op === 'resize' && (e.status === 0 || e.status === 200 || e.status >= 500));
  for (let i = 1; i < samples.length; i++) {
    const s1 = samples[i - 1]!;
    const s2 = samples[i]!;
    if (s2.tenantLimit !== null && s2.tenantUsed > s2.tenantLimit) {
      problems.push(`tenant used ${s2.tenantUsed} above its quota ${s2.tenantLimit} at ${s2.receivedAt.toFixed(0)} ms`);
    }
    if (s2.poolUsed < 0 || s2.tenantUsed < 0) problems.push(`negative use sampled: pool ${s2.poolUsed}, tenant ${s2.tenantUsed}`);
    const capacities = [s1.poolCapacity, s2.poolCapacity];
    for (const r of resizes) {
      if (r.receivedAt > s1.sentAt && r.sentAt < s2.receivedAt && typeof r.requestBody?.capacity === 'number') capacities.push(r.requestBody.capacity);
    }
    const bound = Math.max(s1.poolUsed, ...capacities);
    if (s2.poolUsed > bound) {
      problems.push(
        `pool used ${s2.poolUsed} (capacity ${s2.poolCapacity}) at ${s2.receivedAt.toFixed(0)} ms, after used ${s1.poolUsed} ` +
          `(capacity ${s1.poolCapacity}) at ${s1.receivedAt.toFixed(0)} ms with capacities ${[...new Set(capacities)].join('/')} in force in between`,
      );
    }
  }
  return problems;
}

/** The exchange that granted each lease: its 201 (a replay's 200 names the same grant). */
function grantsOf(exchanges: readonly Exchange[]): Map<string, Exchange> {
  const grants = new Map<string, Exchange>();
  for (const e of exchanges) {
    if (isAcquire(e.op) && e.status === 201 && e.leaseId !== undefined && !grants.has(e.leaseId)) grants.set(e.leaseId, e);
  }
  return grants;
}

/**
 * Fencing tokens are unique per pool, the answered token is the stored one, and they increase in grant order: when
 * A's answer arrived before B's request was sent, token(A) < token(B).
 */
function fencingProblems(exchanges: readonly Exchange[], rows: readonly LeaseRow[], pool: string): string[] {
  const problems: string[] = [];
  const byPool = new Map<string, LeaseRow[]>();
  for (const row of rows) byPool.set(row.pool, [...(byPool.get(row.pool) ?? []), row]);
  for (const [id, poolRows] of byPool) {
    const seen = new Map<number, string>();
    for (const row of poolRows) {
      const other = seen.get(row.fencingToken);
      if (other !== undefined) problems.push(`pool ${id}: leases ${other} and ${row.id} share fencing token ${row.fencingToken}`);
      seen.set(row.fencingToken, row.id);
    }
  }
  const stored = new Map(rows.map((r) => [r.id, r]));
  const grants = [...grantsOf(exchanges).entries()].map(([id, e]) => ({ id, e, token: e.json?.fencingToken, pool: e.json?.pool }));
  for (const g of grants) {
    if (typeof g.token !== 'number') problems.push(`lease ${g.id} was granted without a numeric fencing token: ${g.e.text.slice(0, 200)}`);
    else if (stored.get(g.id) && stored.get(g.id)!.fencingToken !== g.token) {
      problems.push(`lease ${g.id} was answered with fencing token ${g.token} but stored with ${stored.get(g.id)!.fencingToken}`);
    }
    if (g.pool !== pool) problems.push(`lease ${g.id} was granted from pool ${String(g.pool)}, not ${pool}`);
  }
  const valid = grants.filter((g): g is typeof g & { token: number } => typeof g.token === 'number');
  const byArrival = [...valid].sort((a, b) => a.e.receivedAt - b.e.receivedAt);
  const bySending = [...valid].sort((a, b) => a.e.sentAt - b.e.sentAt);
  let next = 0;
  let highest: (typeof valid)[number] | undefined;
  for (const b of bySending) {
    while (next < byArrival.length && byArrival[next]!.e.receivedAt < b.e.sentAt) {
      const a = byArrival[next++]!;
      if (!highest || a.token > highest.token) highest = a;
    }
    if (highest && highest.token >= b.token) {
      problems.push(
        `lease ${b.id} got fencing token ${b.token}, requested at ${b.e.sentAt.toFixed(1)} ms after lease ${highest.id} had been ` +
          `answered with token ${highest.token} at ${highest.e.receivedAt.toFixed(1)} ms`,
      );
    }
  }
  return problems;
}

/**
 * Each lease ends in exactly one state, and that state agrees with every answer about it: a 204 release means
 * released (never expired, never a `LeaseExpired` event), a 410 naming expiry means expired; a release or renewal
 * is never accepted after the expiry the lease was last given, nor refused as expired before it; no lease stays
 * active; no lease exists that no answer granted.
 */
function terminalProblems(exchanges: readonly Exchange[], rows: readonly LeaseRow[], expiredEvents: readonly string[], views: readonly Exchange[]): string[] {
  const problems: string[] = [];
  const grants = grantsOf(exchanges);
  const byLease = new Map<string, Exchange[]>();
  for (const e of exchanges) {
    if (e.leaseId !== undefined && !isAcquire(e.op) && e.op !== 'get-lease') byLease.set(e.leaseId, [...(byLease.get(e.leaseId) ?? []), e]);
  }
  const events = tally(expiredEvents);
  const stored = new Map(rows.map((r) => [r.id, r]));
  for (const row of rows) {
    if (!grants.has(row.id)) problems.push(`lease ${row.id} (${row.state}) is stored, but no answer granted it`);
    const answers = byLease.get(row.id) ?? [];
    const released = answers.filter((e) => e.method === 'DELETE' && e.status === 204);
    const goneAs = (state: string) => answers.filter((e) => e.status === 410 && (e.json?.state === state || (state === 'expired' && e.method === 'DELETE' && e.json?.state === undefined)));
    const expiredAnswers = goneAs('expired');
    const releasedAnswers = goneAs('released');
    if (released.length > 0 && expiredAnswers.length > 0) {
      problems.push(`lease ${row.id} was answered both as released (${describeExchange(released[0]!)}) and as expired (${describeExchange(expiredAnswers[0]!)})`);
    }
    const eventCount = events[row.id] ?? 0;
    if (eventCount > 1) problems.push(`lease ${row.id} has ${eventCount} LeaseExpired events`);
    if (row.state === 'active') problems.push(`lease ${row.id} is still active after every lease was released or had expired and was swept`);
    if (row.state === 'released') {
      if (released.length === 0 && releasedAnswers.length === 0) problems.push(`lease ${row.id} is stored as released, but no release was answered 204`);
      if (expiredAnswers.length > 0) problems.push(`lease ${row.id} is stored as released, but was answered as expired: ${describeExchange(expiredAnswers[0]!)}`);
      if (eventCount > 0) problems.push(`lease ${row.id} is stored as released, but a LeaseExpired event was recorded for it`);
      if (row.endedAt === null || row.endedAt >= row.expiresAt) {
        problems.push(`lease ${row.id} was released at ${String(row.endedAt)}, not before its expiry ${row.expiresAt}`);
      }
    } else if (row.state === 'expired') {
      if (released.length > 0) problems.push(`lease ${row.id} is stored as expired, but a release was answered 204: ${describeExchange(released[0]!)}`);
      if (eventCount !== 1) problems.push(`lease ${row.id} is stored as expired with ${eventCount} LeaseExpired events, not 1`);
      if (row.endedAt === null || row.endedAt < row.expiresAt) {
        problems.push(`lease ${row.id} was marked expired at ${String(row.endedAt)}, before its expiry ${row.expiresAt}`);
      }
    } else if (row.state !== 'active') {
      problems.push(`lease ${row.id} has unknown state ${row.state}`);
    }
    problems.push(...expiryOrderProblems(row.id, grants.get(row.id), answers));
  }
  for (const id of grants.keys()) if (!stored.has(id)) problems.push(`lease ${id} was granted (201) but is not stored`);
  for (const view of views) {
    const row = view.leaseId === undefined ? undefined : stored.get(view.leaseId);
    if (row && (view.status !== 200 || view.json?.state !== row.state)) {
      problems.push(`GET lease ${row.id} answered ${view.status} state ${String(view.json?.state)}, stored state ${row.state}`);
    }
  }
  return problems;
}

/**
 * Walks one lease's answers in order, tracking the expiry the client was last told. Only answers that arrived
 * before the next request was sent are ordered; each client acts on its own leases one request at a time.
 */
function expiryOrderProblems(id: string, grant: Exchange | undefined, answers: readonly Exchange[]): string[] {
  if (!grant) return [];
  const problems: string[] = [];
  let expiresAt = typeof grant.json?.expiresAt === 'string' ? Date.parse(grant.json.expiresAt) : NaN;
  let uncertain = false;
  for (const e of [...answers].sort((a, b) => a.sentAt - b.sentAt)) {
    if (e.status === 0 || e.status >= 500) {
      // Its effect is unknown (a renewal may have committed); stop judging by the expiry last told.
      uncertain = true;
      continue;
    }
    if (uncertain || Number.isNaN(expiresAt)) continue;
    const accepted = (e.method === 'DELETE' && e.status === 204 && e.op !== 'release-again') || (e.op !== 'renew-wrong-token' && e.method === 'POST' && e.status === 200);
    if (accepted && expiresAt < e.sentWall) {
      problems.push(`lease ${id} expired at ${expiresAt}, yet ${describeExchange(e)} was sent at ${e.sentWall}`);
    }
    if (e.status === 410 && e.json?.state !== 'released' && expiresAt > e.receivedWall + 5) {
      problems.push(`lease ${id} expires at ${expiresAt}, yet was answered as expired at ${e.receivedWall}: ${describeExchange(e)}`);
    }
    if (e.method === 'POST' && e.status === 200 && typeof e.json?.expiresAt === 'string') expiresAt = Date.parse(e.json.expiresAt);
  }
  return problems;
}

/** Answers the contract does not allow, other than 5xx (listed apart). */
function contractProblems(exchanges: readonly Exchange[]): string[] {
  const problems: string[] = [];
  const bad = (e: Exchange, why: string) => problems.push(`${why}: ${describeExchange(e)}`);
  const grants = grantsOf(exchanges);
  const byKey = new Map<string, Exchange[]>();
  for (const e of exchanges) if (e.key !== undefined) byKey.set(e.key, [...(byKey.get(e.key) ?? []), e]);
  for (const e of exchanges) {
    if (e.status === 0 || e.status >= 500) continue;
    switch (e.op) {
      case 'acquire':
      case 'settle-acquire':
        if (e.status === 429) {
          if (e.json?.code !== 'CAPACITY.QUOTA_EXCEEDED' && e.json?.code !== 'CAPACITY.EXHAUSTED') bad(e, 'a 429 without a capacity code');
          if (!e.retryAfter || !(Number(e.retryAfter) >= 1)) bad(e, 'a 429 without Retry-After');
        } else if (e.status !== 201) bad(e, 'acquire answered neither 201 nor 429');
        break;
      case 'duplicate':
        if (e.status !== 201 && e.status !== 200 && e.status !== 429) bad(e, 'a concurrent duplicate answered neither 201, 200 nor 429');
        break;
      case 'replay': {
        const original = byKey.get(e.key ?? '')?.find((o) => o.op === 'acquire' && o.status === 201);
        if (e.status !== 200) bad(e, 'the same request with the same Idempotency-Key was not answered 200');
        else if (e.leaseId !== original?.leaseId || e.json?.fencingToken !== original?.json?.fencingToken) {
          bad(e, `a replay answered another lease than ${String(original?.leaseId)}`);
        }
        break;
      }
      case 'key-reuse':
        if (e.status !== 422 || e.json?.code !== 'REQUEST.IDEMPOTENCY_KEY_REUSED') bad(e, 'an Idempotency-Key reused with a different request was not refused with 422 REQUEST.IDEMPOTENCY_KEY_REUSED');
        break;
      case 'renew':
      case 'settle-renew':
        if (e.status === 200) {
          if (e.json?.fencingToken !== e.presentedToken) bad(e, 'a renewal answered another fencing token');
        } else if (e.status !== 410) bad(e, 'a renewal with the right fencing token answered neither 200 nor 410');
        break;
      case 'renew-wrong-token':
        if (e.status !== 409 && e.status !== 410) bad(e, 'a renewal with a wrong fencing token answered neither 409 nor 410');
        break;
      case 'release':
        if (e.status !== 204 && e.status !== 410) bad(e, 'a release with the right fencing token answered neither 204 nor 410');
        break;
      case 'release-again':
      case 'settle-release':
        if (e.status !== 204) bad(e, 'a release with the right fencing token of a released (or renewed) lease was not answered 204');
        break;
      case 'release-wrong-token':
        if (e.status !== 409 && e.status !== 410) bad(e, 'a release with a wrong fencing token answered neither 409 nor 410');
        break;
      case 'resize':
      case 'capacity':
      case 'get-lease':
        if (e.status !== 200) bad(e, `${e.op} answered ${e.status}`);
        break;
      case 'setup':
        break;
    }
  }
  // Per key: at most one grant, and every 200/201 for it names that one lease.
  for (const [key, answers] of byKey) {
    const leases = new Set(answers.filter((e) => (e.status === 200 || e.status === 201) && e.op !== 'key-reuse').map((e) => e.leaseId));
    const created = answers.filter((e) => e.status === 201);
    if (created.length > 1 || leases.size > 1) {
      problems.push(`Idempotency-Key ${key} granted ${created.length} leases and named ${[...leases].join(', ')}`);
    }
  }
  for (const [id, e] of grants) if (e.op === 'key-reuse') problems.push(`a reused Idempotency-Key granted a new lease ${id}`);
  return problems;
}

function statusLine(exchanges: readonly Exchange[]): string {
  const byOp = new Map<Op, Record<string, number>>();
  for (const e of exchanges) {
    const statuses = byOp.get(e.op) ?? {};
    statuses[String(e.status)] = (statuses[String(e.status)] ?? 0) + 1;
    byOp.set(e.op, statuses);
  }
  return [...byOp]
    .map(([op, statuses]) => `${op} ${Object.entries(statuses).map(([s, n]) => `${s}×${n}`).join(' ')}`)
    .join('; ');
}

function listed(problems: string[]): string[] {
  return problems.length <= LIST_LIMIT ? problems : [...problems.slice(0, LIST_LIMIT), `… and ${problems.length - LIST_LIMIT} more`];
}

/** What the clients' loop did so far: the counts it is run to and judged on (the rest come after the loop). */
function loopCounts(exchanges: readonly Exchange[], samples: readonly unknown[]) {
  return {
    grants: new Set(exchanges.filter((e) => e.status === 201 && isAcquire(e.op)).map((e) => e.leaseId)).size,
    releases: count(exchanges, (e) => e.op === 'release' && e.status === 204),
    renews: count(exchanges, (e) => e.op === 'renew' && e.status === 200),
    replays: count(exchanges, (e) => e.op === 'replay'),
    duplicates: count(exchanges, (e) => e.op === 'duplicate') / 2,
    keyReuses: count(exchanges, (e) => e.op === 'key-reuse'),
    resizes: count(exchanges, (e) => e.op === 'resize' && e.status === 200),
    shrinksBelowUse: count(exchanges, (e) => e.op === 'resize' && e.status === 200 && e.belowUse !== undefined),
    samples: samples.length - 1,
  };
}

/** What every workload must have done besides its own `WorkloadMinimum`. */
const ALWAYS_MINIMUM = { shrinksBelowUse: 1, replays: 3, duplicates: 3, keyReuses: 1, samples: 20 } as const;

function count<T>(items: readonly T[], pick: (item: T) => boolean): number {
  return items.reduce((n, item) => n + (pick(item) ? 1 : 0), 0);
}

function tally(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}

function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** A small seeded PRNG, so a run's choices follow from the seed it prints. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The workload's invariants held (soft assertions, each named), and it did at least `minimum` of each operation. */
export interface WorkloadMinimum {
  readonly grants: number;
  readonly releases: number;
  readonly renews: number;
  readonly resizes: number;
  readonly expired: number;
}

export function expectWorkloadHeld(report: WorkloadReport, minimum: WorkloadMinimum): void {
  const { violations, counts } = report;
  expect.soft(violations.serverErrors, 'no 5xx, no request without an answer, no failed sweep').toEqual([]);
  expect.soft(violations.accounting, 'used (GET /capacity) equals the units of the active leases, per pool and per tenant').toEqual([]);
  expect.soft(violations.overGrant, 'use never above the quota, nor above the capacity except after a shrink (and then never growing)').toEqual([]);
  expect.soft(violations.fencing, 'fencing tokens unique and increasing per pool in grant order').toEqual([]);
  expect.soft(violations.terminal, 'each lease ends in exactly one state, agreeing with every answer about it').toEqual([]);
  expect.soft(violations.contract, 'answers the API contract allows').toEqual([]);
  // A workload that silently did nothing must not pass.
  expect.soft(counts.grants, 'grants').toBeGreaterThanOrEqual(minimum.grants);
  expect.soft(counts.releases, 'releases answered 204').toBeGreaterThanOrEqual(minimum.releases);
  expect.soft(counts.renews, 'renewals answered 200').toBeGreaterThanOrEqual(minimum.renews);
  expect.soft(counts.resizes, 'pool resizes').toBeGreaterThanOrEqual(minimum.resizes);
  expect.soft(counts.shrinksBelowUse, 'resizes below the use last sampled').toBeGreaterThanOrEqual(ALWAYS_MINIMUM.shrinksBelowUse);
  expect.soft(counts.expired, 'leases ended by expiry').toBeGreaterThanOrEqual(minimum.expired);
  expect.soft(counts.replays, 'idempotent replays').toBeGreaterThanOrEqual(ALWAYS_MINIMUM.replays);
  expect.soft(counts.duplicates, 'concurrent duplicates').toBeGreaterThanOrEqual(ALWAYS_MINIMUM.duplicates);
  expect.soft(counts.keyReuses, 'keys reused with another request').toBeGreaterThanOrEqual(ALWAYS_MINIMUM.keyReuses);
  expect.soft(counts.samples, 'GET /capacity samples').toBeGreaterThanOrEqual(ALWAYS_MINIMUM.samples);
  expect.soft(counts.snapshotUnits, 'units held while used was compared with the leases').toBeGreaterThanOrEqual(1);
}
