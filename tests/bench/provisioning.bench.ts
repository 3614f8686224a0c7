/**
 * Provisioning benchmark (`npm run bench -- provisioning`). Prints figures against the targets of issue 8; nothing
 * here is asserted. Options: `--store sqlite|postgres` (default sqlite), `--promotions N` (default 200),
 * `--stacks N` (default 50), `--wait-seconds N` (how long a load may take to end, default 300), `--profile DIR` (each
 * host writes a V8 CPU profile of its life into DIR: `node --cpu-prof`, to open in Chrome DevTools or read with
 * `npx tsx tests/bench/cpu-profile.ts DIR/<file>`), `--pass NAME` (only that pass: runner-jobs, in-process or
 * dynamic-off, its first round), `--no-warm-up` (the rows of a fresh host, below).
 *
 * Development promotions of the example project, each to an environment of its own (so none is superseded and
 * every one is applied), spread round-robin over the stacks, are sent at once to the embedded queue of local hosts
 * (`runtime-cloud start` in child processes): one host on SQLite, or with `--store postgres` two hosts on one fresh
 * PostgreSQL schema (created and dropped here, in the database of RUNTIME_CLOUD_TEST_POSTGRES_URL, default
 * postgres://postgres@127.0.0.1:5432/test). The bench watches the events topic for each promotion's
 * `ProvisioningApplied`, then reads every run's receipts and splits each run's time. It sends to the queue and reads
 * the topic in the store itself, as Service Bus's callers do, not through a host. Each run's time:
 *
 *   sent → run recorded (queue, intake) → [waiting for earlier runs of its stack] → plan → apply → run finished
 *        → event published (the outbox relay timer) → seen by the bench
 *
 * Engine time is what the receipts record: the plan receipt's startedAt..finishedAt (which also covers reading the
 * commit from Git: the receipt has no separate preview time) plus the apply result's startedAt..finishedAt (the
 * engine's own). Orchestration overhead is the rest of recorded → finished, less the wait for earlier runs of the
 * stack (a run can only start once the one before it has finished: that is the stack's serialization, not overhead).
 * Host CPU per run is the hosts' user + system time over the load (from /proc, Linux only) divided by the runs: when
 * it is near one core, the host's event loop is what limits runs per second. Azurite (Table storage, event bodies)
 * and the external services' stand-ins run beside the hosts in a process of their own (`runtime-cloud peers`), as
 * Azure's services and the peers run beside a deployed host; their CPU per run is a row of its own. Before the load, a few promotions run
 * one at a time on the example's own stack: the same split, unloaded.
 *
 * Each host is warmed first with a load of its own, the same size on stacks and environments of its own, and the rows
 * are the second load's: a host's first few hundred runs also pay for V8 compiling its hot code (TurboFan, on V8's
 * background threads, so inside the host's CPU; about 930 functions at about 3 ms each, measured with `--trace-opt`,
 * and moved onto the event loop by `--no-concurrent-recompilation`), which a host serving for hours pays once. The
 * warm-up's host CPU per run is printed too (`--no-warm-up` skips it: the rows are then a fresh host's).
 *
 * Plans and applies run as runner jobs on each host's two local agents (issue 17). The same load runs again, in the
 * same run, with the engine in process (`RuntimeCloud__IaC__Execution=in-process`, today's path before runner jobs,
 * kept as this baseline), and the rows are printed side by side with their ratio. Both run twice, in the order runner
 * jobs, in process, in process, runner jobs, so that a machine getting busier or quieter during the bench moves both
 * alike; the ratio of both rounds together is the figure, each round's beside it. Per job (of the unloaded runs and
 * the load, not the warm-up), the dispatch cost is claim → outcome accepted (the jobs table) less the engine's own time
 * (the agent's `engineMs`), and its wait for an agent is queued → claimed. The agents' CPU per run (the hosts' child
 * processes) is a row of its own, as the peers' is: on Azure they run on the target, and on this machine they share
 * its cores with the host.
 *
 * The hosts run with dynamic concurrency (host.json): while a host is overloaded it takes no new message, so the
 * burst's backlog waits in the queue (sent → run recorded) rather than inside the host. The baseline, measured in the
 * same run on fresh hosts with it turned off (`AzureFunctionsJobHost__concurrency__dynamicConcurrencyEnabled=false`),
 * shows what that changes.
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { EXAMPLES_DIR, EXAMPLE_PROJECT_PATH, ensureExampleRepository, type ExampleRepository } from '../../local/example-repository';
import { parseConfig } from '../../shared/platform/config/config';
import { createSqlStore, type SqlStore } from '../../shared/platform/sql/database';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { busDb } from '../../shared/platform/bus/bus-db';
import { bodyForHandler, QUEUE_DEFAULTS } from '../../shared/platform/bus/queue';
import { enqueue } from '../../local/bus/queue.repository';
import { readTopic } from '../../local/bus/topic.repository';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { adminQuery } from '../support/postgres-admin';
import { startChildHost, startPeersProcess, type RunningChild, type RunningPeers } from '../support/child-process';
import { aStackPromotion, writeExampleReferences } from '../support/provisioning';
import { rowCollector, type Row } from './table';

const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';
const QUEUE = 'runtime-cloud-promotions';
const TERMINAL = ['ProvisioningApplied', 'ProvisioningFailed'];
/** How often the watcher reads the topic: a run is seen up to this late (0.5 % of a 20 s load). */
const WATCH_EVERY_MS = 100;
/** Promotions run one at a time before the load, for the unloaded split. */
const UNLOADED_RUNS = 10;

interface RunDetail {
  runId: string;
  promotionId: string;
  stack: string;
  state: string;
  error?: { code: string; message: string };
  createdAt: string;
  finishedAt?: string;
  planReceipt?: { startedAt: string; finishedAt: string; runner: { engineMs?: number } };
  applyReceipt?: { result: { startedAt: string; finishedAt: string } };
}

interface TopicMessage {
  sequenceNumber: number;
  enqueuedTimeUtc: string;
  body: { type: string; data: { promotionId?: string } };
}

/** One run's moments, epoch ms: the bench's own (sent, seen) and those the host recorded. */
export interface Timeline {
  readonly runId: string;
  readonly stack: string;
  readonly sent: number;
  readonly created: number;
  readonly planStart: number;
  readonly planEnd: number;
  /** The plan engine's own time when a runner job made it (else the plan receipt's span is the engine's). */
  readonly planEngineMs?: number;
  readonly applyStart: number;
  readonly applyEnd: number;
  readonly finished: number;
  readonly published: number;
  readonly seen: number;
}

/** A run's time split (ms). */
interface Split {
  readonly latency: number;
  readonly intake: number;
  readonly engine: number;
  readonly stackWait: number;
  readonly overhead: number;
  /** The overhead's parts: recorded → plan start (less the stack wait), plan end → apply start, apply end → finished. */
  readonly toPlan: number;
  readonly betweenSteps: number;
  readonly toFinished: number;
  /** For a run that waited for an earlier run of its stack: that run finished → this one started planning. */
  readonly afterStackFreed?: number;
  readonly publish: number;
}

export async function run(args: string[]): Promise<Row[]> {
  const { values } = parseArgs({
    args,
    options: {
      store: { type: 'string' },
      promotions: { type: 'string' },
      stacks: { type: 'string' },
      'wait-seconds': { type: 'string' },
      quick: { type: 'boolean' },
      profile: { type: 'string' },
      pass: { type: 'string' },
      'no-warm-up': { type: 'boolean' },
    },
  });
  // --quick: 20 promotions over 10 stacks and 3 unloaded runs, the same rows.
  const quick = values.quick === true;
  const store = values.store ?? 'sqlite';
  if (store !== 'sqlite' && store !== 'postgres') throw new Error(`--store ${store}: expected sqlite or postgres`);
  const promotions = Number(values.promotions ?? (quick ? '20' : '200'));
  const stacks = Number(values.stacks ?? (quick ? '10' : '50'));
  const unloadedRuns = quick ? 3 : UNLOADED_RUNS;
  const waitMs = Number(values['wait-seconds'] ?? '300') * 1000;
  const warmUp = values['no-warm-up'] !== true;
  const work = mkdtempSync(join(tmpdir(), 'rch-bench-provisioning-'));
  const { rows, print } = rowCollector();
  /** The loaded measurement with dynamic concurrency on, compared with the baseline's. */
  let baseline: Measured | undefined;
  try {
    process.stderr.write(`provisioning benchmark (${store}): ${promotions} development promotions over ${stacks} stacks, work dir ${work}\n`);
    // Runner jobs (the product) and the engine in process (its baseline) in two rounds, the second in the opposite
    // order (A B B A), so that a machine that gets busier or quieter during the run moves both sides alike; then
    // dynamic concurrency off (issue 8's baseline).
    const inProcessEnv = { RuntimeCloud__IaC__Execution: 'in-process' };
    const passes = [
      { name: 'runner-jobs', round: 1, env: {} },
      { name: 'in-process', round: 1, env: inProcessEnv },
      { name: 'in-process', round: 2, env: inProcessEnv },
      { name: 'runner-jobs', round: 2, env: {} },
      { name: 'dynamic-off', round: 1, env: { AzureFunctionsJobHost__concurrency__dynamicConcurrencyEnabled: 'false' } },
    ] as const;
    const rounds: Record<'runner-jobs' | 'in-process', Measured[]> = { 'runner-jobs': [], 'in-process': [] };
    const chosen = values.pass === undefined ? passes : passes.filter((p) => p.name === values.pass && p.round === 1);
    if (chosen.length === 0) throw new Error(`--pass ${values.pass}: expected one of ${[...new Set(passes.map((p) => p.name))].join(', ')}`);
    const profile = values.profile === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${resolve(values.profile)}`];
    for (const pass of chosen) {
      const passStarted = performance.now();
      const stateDir = join(work, `state-${pass.name}-${pass.round}`);
      // The hosts share the state dir: issuer key, example repository (with the stack copies) and references exist first.
      const keys = await ensureLocalKeys(stateDir);
      // The warm-up load's stacks follow the measured load's: development-<stacks + 1> … development-<2 × stacks>.
      const repository = await benchRepository(join(work, `source-${pass.name}-${pass.round}`), stateDir, warmUp ? 2 * stacks : stacks);
      writeExampleReferences(stateDir);
      const config = parseConfig({});
      const issue = (claims: object) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
      const tokens = { admin: await issue({ roles: ['PlatformAdmin'] }), operator: await issue({ tenant: 'demo-team', roles: ['Operator'] }) };
      await withHosts(store, stateDir, pass.env, profile, async (hosts, peers, sqlStore) => {
        const client = new BenchClient(hosts, tokens, peers, sqlStore);
        const first = pass === chosen[0];
        if (warmUp) print(await warmUpHost(client, repository, { promotions, stacks, waitMs, pass: pass.name }));
        // The job rows below are the unloaded runs' and the load's, not the warm-up's.
        const measuredFrom = Date.now();
        const unloaded = first ? await runOneAtATime(client, repository, unloadedRuns) : undefined;
        const load = Array.from({ length: promotions }, (_, i) =>
          aStackPromotion(repository, 'development', { stack: `development-${(i % stacks) + 1}`, environmentId: `env-bench-${i}` }),
        );
        const loaded = await runAtOnce(client, load, waitMs);
        if (pass.name !== 'dynamic-off') rounds[pass.name].push(loaded);
        if (unloaded) {
          report(store, hosts.length, loaded, unloaded, client, print);
          baseline = loaded;
          const jobs = await jobTimes(sqlStore, measuredFrom);
          print({ name: 'runner job dispatch, claim → outcome accepted less engine (target ≤ 20 ms p50)', value: percentiles(jobs.dispatch), note: `${jobs.dispatch.length} jobs` });
          print({ name: 'runner job waiting for an agent, queued → claimed', value: percentiles(jobs.waiting), note: `${jobs.waiting.length} jobs` });
        } else if (baseline && pass.name === 'in-process' && pass.round === 1) {
          reportInProcess(baseline, loaded, print);
        } else if (pass.name === 'runner-jobs') {
          reportRounds(rounds['runner-jobs'], rounds['in-process'], print);
        } else if (baseline && pass.name === 'dynamic-off') {
          reportBaseline(baseline, loaded, client, print);
        }
        // The peers' log too: a stand-in's failure reaches the host as an error the bench may never see.
        const troubled = [...hosts, peers].flatMap((h) => h.output().split('\n').filter((line) => /"level":"(warning|error|critical)"|Error/.test(line)));
        print({ name: `host and peers warnings and errors (${pass.name})`, value: String(troubled.length), ...(troubled[0] ? { note: `first: ${troubled[0].slice(0, 200)}` } : {}) });
      });
      process.stderr.write(`  (pass ${pass.name} ${pass.round}: ${((performance.now() - passStarted) / 1000).toFixed(1)} s)\n`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return rows;
}

/**
 * Runs a load of its own on a fresh host (the same size, on `development-<stacks + 1>` … `development-<2 × stacks>`
 * and environments of its own), so that the measured load finds the host's hot code compiled; its row.
 */
async function warmUpHost(client: BenchClient, repository: ExampleRepository, load: { promotions: number; stacks: number; waitMs: number; pass: string }): Promise<Row> {
  const warming = Array.from({ length: load.promotions }, (_, i) =>
    aStackPromotion(repository, 'development', { stack: `development-${(i % load.stacks) + 1 + load.stacks}`, environmentId: `env-bench-warm-up-${i}` }),
  );
  const warmed = await runAtOnce(client, warming, load.waitMs);
  const count = warmed.timelines.length;
  return {
    name: `warm-up load, a fresh host: host CPU per run (${load.pass})`,
    value: warmed.cpuMs === undefined ? 'n/a' : `${(warmed.cpuMs / count).toFixed(1)} ms`,
    note: `${count} runs applied (not applied: ${warmed.notApplied.length}), ${(count / (warmed.wallToSeen / 1000)).toFixed(1)} runs/s; not in the rows below`,
  };
}

/**
 * The example project with `development-1` … `development-<stacks>` beside its own stacks, committed to the example
 * repository in the state dir. Only development copies: every run reads the whole project folder, so copies no run
 * uses would only add reads.
 */
export async function benchRepository(source: string, stateDir: string, stacks: number): Promise<ExampleRepository> {
  cpSync(EXAMPLES_DIR, source, { recursive: true });
  const project = join(source, EXAMPLE_PROJECT_PATH);
  for (let i = 1; i <= stacks; i++) copyFileSync(join(project, 'Pulumi.development.yaml'), join(project, `Pulumi.development-${i}.yaml`));
  return ensureExampleRepository(stateDir, { source });
}

// ---- hosts -----------------------------------------------------------------------------------------------------------

/**
 * One host on SQLite in the state dir, or two hosts on a fresh PostgreSQL schema, beside one peers process (Azurite,
 * the stand-ins) on the same store; stopped after.
 * `jobs` reads the dispatch cost of every finished runner job from their store.
 */
async function withHosts(
  store: 'sqlite' | 'postgres',
  stateDir: string,
  settings: Record<string, string>,
  nodeArgs: readonly string[],
  work: (hosts: RunningChild[], peers: RunningPeers, store: SqlStore) => Promise<void>,
): Promise<void> {
  if (store === 'sqlite') {
    const peers = await startPeersProcess(stateDir);
    try {
      const host = await startChildHost(stateDir, { ...settings, ...peers.settings }, undefined, [], nodeArgs);
      // Opened once the host has made it.
      const sqlStore = createSqlStore({ dialect: 'sqlite', connection: 'runtime-cloud.sqlite', baseDir: stateDir });
      try {
        await work([host], peers, sqlStore);
      } finally {
        await sqlStore.close();
        await host.stop();
      }
    } finally {
      await peers.stop();
    }
    return;
  }
  const url = process.env.RUNTIME_CLOUD_TEST_POSTGRES_URL ?? DEFAULT_POSTGRES_URL;
  const schema = `bench_${randomBytes(6).toString('hex')}`;
  await adminQuery(url, `create schema ${schema}`);
  let peers: RunningPeers | undefined;
  const hosts: RunningChild[] = [];
  const sqlStore = createSqlStore({ dialect: 'postgres', connection: url, postgresSchema: schema });
  try {
    // Migrated once here, so the two hosts do not race to create the schema's tables.
    await migrateToLatest(sqlStore.db, 'postgres', allMigrations);
    const storeSettings = {
      RuntimeCloud__Store__Dialect: 'postgres',
      RuntimeCloud__Store__Connection: `${url}${url.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`,
    };
    peers = await startPeersProcess(stateDir, storeSettings);
    const env = { ...settings, ...storeSettings, ...peers.settings };
    hosts.push(...(await Promise.all([startChildHost(stateDir, env, undefined, [], nodeArgs), startChildHost(stateDir, env, undefined, [], nodeArgs)])));
    await work(hosts, peers, sqlStore);
  } finally {
    await sqlStore.close();
    await Promise.all(hosts.map((h) => h.stop()));
    await peers?.stop();
    await adminQuery(url, `drop schema if exists ${schema} cascade`);
  }
}

/**
 * Of every runner job that finished, ms: claim → outcome accepted less the engine's own time (dispatch), and queued →
 * claimed (waiting for an agent).
 */
async function jobTimes(sqlStore: SqlStore, since: number): Promise<{ dispatch: number[]; waiting: number[] }> {
  const rows = await provisioningDb(sqlStore.db)
    .selectFrom('provisioning_runner_jobs')
    .select(['created_at', 'claimed_at', 'finished_at', 'outcome'])
    .where('state', '=', 'done')
    .where('created_at', '>=', since)
    .execute();
  return {
    dispatch: rows.map((r) => {
      const outcome = JSON.parse(r.outcome ?? '{}') as { runner?: { engineMs?: number } };
      return Number(r.finished_at) - Number(r.claimed_at) - (outcome.runner?.engineMs ?? 0);
    }),
    waiting: rows.map((r) => Number(r.claimed_at) - Number(r.created_at)),
  };
}

/**
 * HTTP to the hosts (round-robin), counting answers that are not 2xx. Given the hosts' store (`bus`), promotions are
 * sent to the embedded queue and events read from the embedded topic in that store directly, as a deployed host's
 * callers use Service Bus and not the host: the host's CPU then holds none of the bench's own traffic.
 */
export class BenchClient {
  #next = 0;
  readonly failures: string[] = [];

  constructor(
    readonly hosts: readonly RunningChild[],
    private readonly tokens: { readonly admin: string; readonly operator: string },
    /** The process that runs Azurite and the external services' stand-ins beside the hosts, where there is one. */
    readonly peers?: RunningPeers,
    private readonly bus?: SqlStore,
  ) {}

  async send(promotion: PromotionApproved): Promise<void> {
    if (!this.bus) {
      await this.call(`/runtime-cloud/local/queues/${QUEUE}/messages`, this.tokens.admin, { body: promotion, messageId: promotion.promotionId });
      return;
    }
    const message = { messageId: promotion.promotionId, body: JSON.stringify(promotion), contentType: 'application/json' };
    await enqueue(busDb(this.bus.db), this.bus.dialect, QUEUE, message, { now: Date.now(), duplicateDetectionWindowMs: QUEUE_DEFAULTS.duplicateDetectionWindowMs });
  }

  /** Topic messages after `after`, from the store, else from the first host (the topic is shared). */
  async topic(after: number): Promise<TopicMessage[]> {
    if (this.bus) {
      const messages = await readTopic(busDb(this.bus.db), this.bus.dialect, 'runtime-cloud-events', { after, limit: 1000 });
      return messages.map((m) => ({ sequenceNumber: m.sequenceNumber, enqueuedTimeUtc: m.enqueuedAt.toISOString(), body: bodyForHandler(m) as TopicMessage['body'] }));
    }
    const page = (await this.call(`/runtime-cloud/local/topics/runtime-cloud-events/messages?after=${after}&limit=1000`, this.tokens.admin, undefined, 0)) as {
      items: TopicMessage[];
    };
    return page.items;
  }

  async runDetail(runId: string): Promise<RunDetail> {
    return (await this.call(`/runtime-cloud/runs/${runId}`, this.tokens.operator)) as RunDetail;
  }

  async runs(): Promise<RunDetail[]> {
    const all: RunDetail[] = [];
    for (let cursor: string | undefined; ; ) {
      const page = (await this.call(`/runtime-cloud/runs?limit=1000${cursor ? `&cursor=${cursor}` : ''}`, this.tokens.operator)) as { items: RunDetail[]; nextCursor?: string };
      all.push(...page.items);
      if (!page.nextCursor) return all;
      cursor = page.nextCursor;
    }
  }

  private async call(path: string, bearer: string, body?: unknown, hostIndex?: number): Promise<unknown> {
    const host = this.hosts[hostIndex ?? this.#next++ % this.hosts.length] as RunningChild;
    const response = await fetch(new URL(path, host.url), {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${bearer}` },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    if (response.status >= 300) {
      this.failures.push(`${response.status} ${path}`);
      throw new Error(`${path} answered ${response.status}: ${text.slice(0, 300)}`);
    }
    return JSON.parse(text) as unknown;
  }
}

// ---- the runs --------------------------------------------------------------------------------------------------------

/** Watches the topic from where it stands and notes when each promotion's terminal event is first seen. */
class TerminalWatcher {
  readonly seen = new Map<string, { at: number; type: string }>();
  readonly published = new Map<string, number>();
  #after = 0;
  #stopped = false;
  #loop: Promise<void> | undefined;

  constructor(private readonly client: BenchClient) {}

  async start(): Promise<void> {
    for (let page = await this.client.topic(0); page.length > 0; page = await this.client.topic(this.#after)) {
      this.#after = page[page.length - 1]?.sequenceNumber ?? this.#after;
    }
    this.#loop = this.#watch();
  }

  async until(promotionIds: readonly string[], timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!promotionIds.every((id) => this.seen.has(id))) {
      if (Date.now() > deadline) throw new Error(await this.#unseen(promotionIds, timeoutMs));
      await sleep(20);
    }
  }

  /** Why promotions were not seen: the topic read again from its start tells a cursor that passed them over from runs not ended. */
  async #unseen(promotionIds: readonly string[], timeoutMs: number): Promise<string> {
    const missing = promotionIds.filter((id) => !this.seen.has(id));
    const ended = new Set<string>();
    for (let after = 0, page = await this.client.topic(0); page.length > 0; page = await this.client.topic(after)) {
      for (const message of page) if (TERMINAL.includes(message.body.type) && message.body.data.promotionId) ended.add(message.body.data.promotionId);
      after = page[page.length - 1]?.sequenceNumber ?? after;
    }
    const passedOver = missing.filter((id) => ended.has(id)).length;
    return `${missing.length} promotions were not seen ending within ${timeoutMs} ms: ${passedOver} of them have their terminal event on the topic (passed over by the cursor), ${missing.length - passedOver} not yet`;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop;
  }

  async #watch(): Promise<void> {
    while (!this.#stopped) {
      // A read that fails (a host closing a kept-alive connection under load) is read again from the same cursor:
      // nothing is passed over, and one reset no longer ends the bench.
      const page = await this.client.topic(this.#after).catch((error: unknown) => {
        this.client.failures.push(`topic read after ${this.#after}: ${String(error)}`);
        return undefined;
      });
      if (!page) {
        await sleep(100);
        continue;
      }
      const at = Date.now();
      for (const message of page) {
        this.#after = message.sequenceNumber;
        const promotionId = message.body.data.promotionId;
        if (!promotionId || !TERMINAL.includes(message.body.type) || this.seen.has(promotionId)) continue;
        this.seen.set(promotionId, { at, type: message.body.type });
        this.published.set(promotionId, Date.parse(message.enqueuedTimeUtc));
      }
      // Every 100 ms: each read costs the host what a client's request costs, and host CPU per run is a figure here.
      if (page.length < 1000) await sleep(WATCH_EVERY_MS);
    }
  }
}

export interface Measured {
  readonly timelines: readonly Timeline[];
  /** Sent first → last seen, and → last run finished, ms. */
  readonly wallToSeen: number;
  readonly wallToFinished: number;
  readonly notApplied: readonly string[];
  /** CPU time the hosts spent from the first promotion sent to the last event seen (Linux: /proc), ms. */
  readonly cpuMs?: number;
  /** The same for the peers' process (Azurite, the external services' stand-ins). */
  readonly peersCpuMs?: number;
  /** The same for the hosts' runner agents (their child processes). */
  readonly agentsCpuMs?: number;
}

/** Sends the promotions at once and waits for every terminal event. */
async function runAtOnce(client: BenchClient, promotions: readonly PromotionApproved[], waitMs: number): Promise<Measured> {
  const watcher = new TerminalWatcher(client);
  await watcher.start();
  const sent = new Map<string, number>();
  const hostPids = client.hosts.map((h) => h.child.pid ?? 0);
  const cpuBefore = processesCpuMs(hostPids);
  const peersBefore = client.peers && processesCpuMs([client.peers.child.pid ?? 0]);
  const agentsBefore = processesCpuMs(hostPids.flatMap(childPids));
  let cpuMs: number | undefined;
  let peersCpuMs: number | undefined;
  let agentsCpuMs: number | undefined;
  try {
    await Promise.all(
      promotions.map(async (promotion) => {
        sent.set(promotion.promotionId, Date.now());
        await client.send(promotion);
      }),
    );
    await watcher.until(promotions.map((p) => p.promotionId), waitMs);
    const cpuAfter = processesCpuMs(hostPids);
    if (cpuBefore !== undefined && cpuAfter !== undefined) cpuMs = cpuAfter - cpuBefore;
    const peersAfter = client.peers && processesCpuMs([client.peers.child.pid ?? 0]);
    if (peersBefore !== undefined && peersAfter !== undefined) peersCpuMs = peersAfter - peersBefore;
    // The same agents before and after: a host starts its agents once, before the load (in process: none).
    const agentsAfter = processesCpuMs(hostPids.flatMap(childPids));
    if (agentsBefore !== undefined && agentsAfter !== undefined && agentsAfter > 0) agentsCpuMs = agentsAfter - agentsBefore;
  } finally {
    await watcher.stop();
  }
  return { ...(await measure(client, promotions, sent, watcher)), ...(cpuMs !== undefined ? { cpuMs } : {}), ...(peersCpuMs !== undefined ? { peersCpuMs } : {}), ...(agentsCpuMs !== undefined ? { agentsCpuMs } : {}) };
}

/** User + system CPU time of the processes so far (ms), from /proc; undefined where there is none. */
function processesCpuMs(pids: readonly number[]): number | undefined {
  let total = 0;
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      return undefined;
    }
    // Fields after the command name (in parentheses, which may hold spaces): utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    total += Number(fields[11]) + Number(fields[12]);
  }
  // Clock ticks: 100 per second on Linux.
  return total * 10;
}

/** The process's children (Linux: /proc), sorted: the host's runner agents. */
function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number).sort((a, b) => a - b);
  } catch {
    return [];
  }
}

/** Sends `count` promotions to the example's own stack, each once the one before has been seen ending. */
export async function runOneAtATime(client: BenchClient, repository: ExampleRepository, count: number): Promise<Measured> {
  const watcher = new TerminalWatcher(client);
  await watcher.start();
  const sent = new Map<string, number>();
  const promotions: PromotionApproved[] = [];
  try {
    // One more than measured: the first run of a host loads code lazily (Git, the engine), which later runs do not pay.
    for (let i = 0; i <= count; i++) {
      const promotion = aStackPromotion(repository, 'development', { environmentId: `env-bench-unloaded-${i}` });
      if (i > 0) promotions.push(promotion);
      sent.set(promotion.promotionId, Date.now());
      await client.send(promotion);
      await watcher.until([promotion.promotionId], 60_000);
    }
  } finally {
    await watcher.stop();
  }
  return measure(client, promotions, sent, watcher);
}

async function measure(client: BenchClient, promotions: readonly PromotionApproved[], sent: ReadonlyMap<string, number>, watcher: TerminalWatcher): Promise<Measured> {
  const wanted = new Set(promotions.map((p) => p.promotionId));
  const runs = (await client.runs()).filter((r) => wanted.has(r.promotionId));
  const notApplied = runs.filter((r) => r.state !== 'applied').map((r) => `${r.runId} ${r.state} ${r.error?.code ?? ''}`);
  const details = await mapLimit(
    runs.filter((r) => r.state === 'applied'),
    8,
    (r) => client.runDetail(r.runId),
  );
  const time = (iso: string | undefined) => (iso === undefined ? NaN : Date.parse(iso));
  const timelines = details.map((d): Timeline => ({
    runId: d.runId,
    stack: d.stack,
    sent: sent.get(d.promotionId) ?? NaN,
    created: time(d.createdAt),
    planStart: time(d.planReceipt?.startedAt),
    planEnd: time(d.planReceipt?.finishedAt),
    ...(d.planReceipt?.runner.engineMs !== undefined ? { planEngineMs: d.planReceipt.runner.engineMs } : {}),
    applyStart: time(d.applyReceipt?.result.startedAt),
    applyEnd: time(d.applyReceipt?.result.finishedAt),
    finished: time(d.finishedAt),
    published: watcher.published.get(d.promotionId) ?? NaN,
    seen: watcher.seen.get(d.promotionId)?.at ?? NaN,
  }));
  const firstSent = Math.min(...promotions.map((p) => sent.get(p.promotionId) ?? NaN));
  return {
    timelines,
    wallToSeen: Math.max(...timelines.map((t) => t.seen)) - firstSent,
    wallToFinished: Math.max(...timelines.map((t) => t.finished)) - firstSent,
    notApplied,
  };
}

/**
 * Each run's split. The wait for earlier runs of its stack: from when it was recorded until the run before it on the
 * stack (by plan start) finished, when that was later.
 */
function splits(timelines: readonly Timeline[]): Split[] {
  const byStack = new Map<string, Timeline[]>();
  for (const t of timelines) byStack.set(t.stack, [...(byStack.get(t.stack) ?? []), t]);
  const previous = new Map<string, Timeline>();
  for (const runs of byStack.values()) {
    runs.sort((a, b) => a.planStart - b.planStart);
    for (let i = 1; i < runs.length; i++) previous.set((runs[i] as Timeline).runId, runs[i - 1] as Timeline);
  }
  return timelines.map((t) => {
    const engine = (t.planEngineMs ?? t.planEnd - t.planStart) + (t.applyEnd - t.applyStart);
    const before = previous.get(t.runId);
    const stackWait = before ? Math.max(0, before.finished - t.created) : 0;
    return {
      ...(stackWait > 0 && before ? { afterStackFreed: t.planStart - before.finished } : {}),
      latency: t.seen - t.sent,
      intake: t.created - t.sent,
      engine,
      stackWait,
      overhead: t.finished - t.created - engine - stackWait,
      toPlan: t.planStart - t.created - stackWait,
      betweenSteps: t.applyStart - t.planEnd,
      toFinished: t.finished - t.applyEnd,
      publish: t.published - t.finished,
    };
  });
}

// ---- the table -------------------------------------------------------------------------------------------------------

function report(store: string, hostCount: number, loaded: Measured, unloaded: Measured, client: BenchClient, print: (row: Row) => void): void {
  const load = splits(loaded.timelines);
  const single = splits(unloaded.timelines);
  const count = loaded.timelines.length;
  const stacks = new Set(loaded.timelines.map((t) => t.stack)).size;
  const on = `${store}, ${hostCount} host${hostCount === 1 ? '' : 's'}`;
  const share = load.map((s) => 1 - s.engine / s.latency);
  print({ name: `runs applied (${on})`, value: `${count}`, note: `${stacks} stacks, sent at once; not applied: ${loaded.notApplied.length}${loaded.notApplied[0] ? `, first: ${loaded.notApplied[0]}` : ''}` });
  print({
    name: `runs/s, sent → last ProvisioningApplied seen${store === 'sqlite' ? ' (target ≥ 20)' : ''}`,
    value: (count / (loaded.wallToSeen / 1000)).toFixed(1),
    note: `${(loaded.wallToSeen / 1000).toFixed(2)} s; to the last run finished: ${(count / (loaded.wallToFinished / 1000)).toFixed(1)} runs/s`,
  });
  print({ name: 'sent → ProvisioningApplied seen', value: percentiles(load.map((s) => s.latency)) });
  print({ name: '  sent → run recorded (queue, intake)', value: percentiles(load.map((s) => s.intake)) });
  print({ name: '  waiting for earlier runs of its stack', value: percentiles(load.map((s) => s.stackWait)) });
  print({ name: '  IaC engine (plan + apply receipts)', value: percentiles(load.map((s) => s.engine)), note: 'plan receipt times include reading the commit from Git' });
  print({
    name: `  orchestration overhead${store === 'sqlite' ? ' (target ≤ 50 ms p50)' : ''}`,
    value: percentiles(load.map((s) => s.overhead)),
    note: 'recorded → finished, less engine and stack wait',
  });
  print({
    name: '    recorded → plan | plan → apply | apply → finished',
    value: [load.map((s) => s.toPlan), load.map((s) => s.betweenSteps), load.map((s) => s.toFinished)].map((v) => `${quantile(v, 0.5).toFixed(0)} ms`).join(' | '),
    note: 'p50 each; recorded → plan less the stack wait',
  });
  print({
    name: '    of which: stack freed → next run planning',
    value: percentiles(load.flatMap((s) => (s.afterStackFreed === undefined ? [] : [s.afterStackFreed]))),
    note: 'the run that frees the stack wakes the next (stack-free event; a 1 s durable timer is the fallback)',
  });
  print({
    name: '  host CPU per run (all hosts, user + system)',
    value: loaded.cpuMs === undefined ? 'n/a' : `${(loaded.cpuMs / count).toFixed(1)} ms`,
    ...(loaded.cpuMs === undefined ? { note: 'no /proc here' } : { note: `${((loaded.cpuMs / loaded.wallToFinished) * 100).toFixed(0)} % of one core while the runs ran` }),
  });
  print({
    name: '  beside: Azurite and the stand-ins per run (their own process)',
    value: loaded.peersCpuMs === undefined ? 'n/a' : `${(loaded.peersCpuMs / count).toFixed(1)} ms`,
    note: 'Table storage, event bodies and the external services, which a deployed host reaches over the network: not in the host CPU above',
  });
  if (loaded.agentsCpuMs !== undefined) {
    print({
      name: '  beside: the runner agents per run (their own processes)',
      value: `${(loaded.agentsCpuMs / count).toFixed(1)} ms`,
      note: "the local engine and the agents' calls; on Azure they run on the target: not in the host CPU above",
    });
  }
  print({ name: '  run finished → event published', value: percentiles(load.map((s) => s.publish)), note: 'published after the commit that ends the run (RuntimeCloud__Outbox__Publish); the 2 s outboxRelay timer is the fallback' });
  print({ name: 'share of sent → seen outside the engine', value: `p50 ${pct(quantile(share, 0.5))}, p95 ${pct(quantile(share, 0.95))}` });
  print({ name: 'unloaded (runs one at a time): sent → seen', value: percentiles(single.map((s) => s.latency)), note: `${unloaded.timelines.length} runs` });
  print({ name: '  unloaded: IaC engine', value: percentiles(single.map((s) => s.engine)) });
  print({ name: '  unloaded: orchestration overhead', value: percentiles(single.map((s) => s.overhead)) });
  print({
    name: '    recorded → plan | plan → apply | apply → finished',
    value: [single.map((s) => s.toPlan), single.map((s) => s.betweenSteps), single.map((s) => s.toFinished)].map((v) => `${quantile(v, 0.5).toFixed(0)} ms`).join(' | '),
    note: 'p50 each',
  });
  print({ name: 'non-2xx answers or failed topic reads to the bench', value: String(client.failures.length), ...(client.failures[0] ? { note: `first: ${client.failures[0]}` } : {}) });
}

/** The same load with the engine in process, in the same run: the runner-job rows beside it, and ratios. */
function reportInProcess(runners: Measured, inProcess: Measured, print: (row: Row) => void): void {
  const jobs = splits(runners.timelines);
  const local = splits(inProcess.timelines);
  const rate = (m: Measured) => m.timelines.length / (m.wallToFinished / 1000);
  print({
    name: 'runs/s to the last run finished: runner jobs | in process (target ≥ 0.7×)',
    value: `${rate(runners).toFixed(1)} | ${rate(inProcess).toFixed(1)}`,
    note: `${(rate(runners) / rate(inProcess)).toFixed(2)}×; in process not applied: ${inProcess.notApplied.length}`,
  });
  print({ name: '  orchestration overhead, runner jobs', value: percentiles(jobs.map((s) => s.overhead)) });
  print({ name: '  orchestration overhead, in process', value: percentiles(local.map((s) => s.overhead)) });
  print({ name: '  sent → seen, runner jobs | in process (p50)', value: `${quantile(jobs.map((s) => s.latency), 0.5).toFixed(0)} ms | ${quantile(local.map((s) => s.latency), 0.5).toFixed(0)} ms` });
  print({
    name: '  host CPU per run, runner jobs | in process',
    value: runners.cpuMs === undefined || inProcess.cpuMs === undefined ? 'n/a' : `${(runners.cpuMs / runners.timelines.length).toFixed(1)} ms | ${(inProcess.cpuMs / inProcess.timelines.length).toFixed(1)} ms`,
    note: 'the host processes only; the agents are child processes of their own',
  });
}

/** Both rounds of runner jobs against the engine in process: each round's ratio, and both rounds' runs over their time. */
function reportRounds(runners: readonly Measured[], inProcess: readonly Measured[], print: (row: Row) => void): void {
  const rate = (ms: readonly Measured[]) => ms.reduce((runs, m) => runs + m.timelines.length, 0) / (ms.reduce((wall, m) => wall + m.wallToFinished, 0) / 1000);
  const perRound = runners.map((m, i) => (rate([m]) / rate([inProcess[i] as Measured])).toFixed(2));
  print({
    name: 'runs/s, both rounds (A B B A): runner jobs | in process (target ≥ 0.7×)',
    value: `${rate(runners).toFixed(1)} | ${rate(inProcess).toFixed(1)}`,
    note: `${(rate(runners) / rate(inProcess)).toFixed(2)}×; per round ${perRound.map((r) => `${r}×`).join(', ')}`,
  });
}

/** The same load with dynamic concurrency off, in the same run: the rows that it changes, and ratios. */
function reportBaseline(dynamic: Measured, baseline: Measured, client: BenchClient, print: (row: Row) => void): void {
  const on = splits(dynamic.timelines);
  const off = splits(baseline.timelines);
  const count = baseline.timelines.length;
  const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  print({
    name: 'baseline, dynamic concurrency off: runs/s to the last run finished',
    value: (count / (baseline.wallToFinished / 1000)).toFixed(1),
    note: `dynamic concurrency on: ${ratio(dynamic.timelines.length / dynamic.wallToFinished, count / baseline.wallToFinished)} of it; not applied: ${baseline.notApplied.length}`,
  });
  print({
    name: '  baseline: sent → ProvisioningApplied seen',
    value: percentiles(off.map((s) => s.latency)),
    note: `on / off p50: ${ratio(quantile(on.map((s) => s.latency), 0.5), quantile(off.map((s) => s.latency), 0.5))}`,
  });
  print({ name: '  baseline: sent → run recorded (queue, intake)', value: percentiles(off.map((s) => s.intake)) });
  print({
    name: '  baseline: orchestration overhead',
    value: percentiles(off.map((s) => s.overhead)),
    note: `on / off p50: ${ratio(quantile(on.map((s) => s.overhead), 0.5), quantile(off.map((s) => s.overhead), 0.5))}`,
  });
  print({
    name: '  baseline: host CPU per run',
    value: baseline.cpuMs === undefined ? 'n/a' : `${(baseline.cpuMs / count).toFixed(1)} ms`,
    ...(baseline.cpuMs === undefined ? {} : { note: `${((baseline.cpuMs / baseline.wallToFinished) * 100).toFixed(0)} % of one core while the runs ran` }),
  });
  print({ name: '  baseline: non-2xx answers or failed topic reads to the bench', value: String(client.failures.length) });
}

export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

export function percentiles(values: readonly number[]): string {
  if (values.length === 0) return 'none';
  return `p50 ${quantile(values, 0.5).toFixed(0)} ms, p95 ${quantile(values, 0.95).toFixed(0)} ms`;
}

function pct(fraction: number): string {
  return `${(fraction * 100).toFixed(1)} %`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `work` over `items`, at most `limit` at a time, results in order. */
async function mapLimit<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index] as T);
      }
    }),
  );
  return results;
}
