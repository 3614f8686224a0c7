import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import { expect } from 'vitest';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { parseConfig } from '../../shared/platform/config/config';
import { startChildHost, type RunningChild } from './child-process';
import { aStackPromotion, provisioningExample, writeExampleReferences, type ProvisioningExample } from './provisioning';
import { TERMINAL_EVENT_TYPES } from './topic-events';

/**
 * The crash-point drive (issue 19, "every step boundary is a crash point"): a local host in a child process, on a
 * file SQLite store, armed with every crash point of a run (shared/platform/faults/crash-points.ts). Promotions are
 * sent one at a time; each run crashes at most once, at the first point on its path that has not fired (its host or
 * one of its agents SIGKILLs itself there), and the host is started again whenever it died. The drive goes on until
 * every point fired, and fails when a run ends with points left that it did not reach.
 */
export interface CrashDrive {
  /** Host settings besides the crash points: the IaC execution, the agents. */
  readonly settings: Readonly<Record<string, string>>;
  readonly hostPoints: readonly string[];
  readonly agentPoints?: readonly string[];
  /**
   * Starts the i-th run and answers which events are its own: by default a promotion of the example onto a stack of
   * its own. (A pool resize or a reconciliation starts its run otherwise; its steps after are a promotion's.)
   */
  readonly startRun?: (i: number, drive: DriveContext) => Promise<(event: TopicMessage) => boolean>;
  /** Done once before the runs, on the armed host: it must reach no point (a pool's stack applied first). */
  readonly setup?: (drive: DriveContext) => Promise<void>;
}

/** What a drive's own steps use: the host's API as a platform admin, the example, and the runs' end. */
export interface DriveContext {
  /** Calls the host as a platform admin, or (`bearer`) as whoever the token names. */
  readonly call: (method: string, path: string, body?: unknown, bearer?: string) => Promise<unknown>;
  /** A token of the host's issuer for these claims. */
  readonly token: (claims: object) => Promise<string>;
  /** Calls `step` until it is answered, starting the host again when it died meanwhile (a client retrying a lost answer). */
  readonly again: <T>(step: () => Promise<T>) => Promise<T>;
  readonly example: ProvisioningExample;
  /** Waits for a run that is to reach no point to end. */
  readonly ended: (mine: (event: TopicMessage) => boolean) => Promise<void>;
}

export interface CrashedRun {
  readonly runId: string;
  /** The point the run crashed at, if one fired for it. */
  readonly point?: string;
  /** Its terminal events (exactly one is expected) and every event of the run. */
  readonly terminal: readonly TopicMessage[];
  readonly eventIds: readonly string[];
  /** The run as GET /runtime-cloud/runs/{id} answers it at the end. */
  readonly view: RunView;
  /** How many applies the local cloud recorded for the run's stack and plan. */
  readonly applies: number;
  /**
   * Its apply job's agent was a child of a host that crashed (the local host's agents go with it): the run lost its
   * runner by that crash, not by one of its own.
   */
  readonly runnerDiedWithHost: boolean;
}

export interface CrashReport {
  readonly runs: readonly CrashedRun[];
  /** Host starts, and the hosts that died at a point (the rest of the crashes are agents'). */
  readonly hostStarts: number;
  readonly hostCrashes: number;
  readonly fired: ReadonlyMap<string, string>;
}

export interface TopicMessage {
  readonly messageId: string;
  readonly body: {
    readonly type: string;
    readonly data: { readonly promotionId?: string; readonly runId?: string; readonly code?: string; readonly poolResize?: { readonly toCapacity?: number } };
  };
}

export interface RunView {
  readonly id: string;
  readonly state: string;
  readonly stack: string;
  readonly planDigest?: string;
  readonly planReceipt?: unknown;
  readonly applyReceipt?: { readonly result?: { readonly status?: string; readonly error?: { readonly code?: string } }; readonly runnerLost?: { readonly agent?: string } };
}

/** Leases and locks short enough that a dead host's work is taken over in about a second (a runner job's in 5 s, its least). */
export const FAST_RECOVERY = {
  RuntimeCloud__Local__QueueLockSeconds: '1',
  RuntimeCloud__Local__DurableLeaseSeconds: '1',
  RuntimeCloud__Runners__LeaseSeconds: '5',
  RuntimeCloud__Outbox__ClaimSeconds: '2',
};
const RUN_TIMEOUT_MS = 60_000;

export async function crashEveryPoint(drive: CrashDrive): Promise<CrashReport> {
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-crash-'));
  const stateDir = join(root, 'state');
  const markers = join(root, 'markers');
  fs.mkdirSync(markers, { recursive: true });
  const points = [...drive.hostPoints, ...(drive.agentPoints ?? [])];
  const example = await provisioningExample(root, stateDir, points.length + 1);
  writeExampleReferences(stateDir);
  const keys = await ensureLocalKeys(stateDir);
  const config = parseConfig({});
  const token = (claims: object) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
  const admin = await token({ roles: ['PlatformAdmin'] });
  const env = {
    ...FAST_RECOVERY,
    ...drive.settings,
    RuntimeCloud__Faults__CrashAt: drive.hostPoints.join(','),
    RuntimeCloud__Faults__AgentCrashAt: (drive.agentPoints ?? []).join(','),
    RuntimeCloud__Faults__CrashMarkers: markers,
  };
  let host: RunningChild | undefined;
  let hostStarts = 0;
  let hostCrashes = 0;
  /** The processes of the hosts that crashed: their agents (`local-N.<host>.<pid>`) died with them. */
  const crashedPids = new Set<number>();
  const call = async (method: string, path: string, body?: unknown, bearer = admin): Promise<unknown> => {
    if (!host) throw new Error('no host');
    const response = await fetch(new URL(path, host.url), {
      method,
      signal: AbortSignal.timeout(10_000),
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
    return response.status === 204 ? undefined : response.json();
  };
  const events = async (): Promise<TopicMessage[]> => ((await call('GET', '/runtime-cloud/local/topics/runtime-cloud-events/messages?after=0&limit=1000')) as { items: TopicMessage[] }).items;
  const ensureHost = async (): Promise<void> => {
    if (host && host.child.exitCode === null && host.child.signalCode === null) return;
    if (host) {
      if (host.child.signalCode !== 'SIGKILL') throw new Error(`the host exited ${host.child.exitCode ?? host.child.signalCode} without a crash point:\n${host.output().slice(-3000)}`);
      hostCrashes++;
      if (host.child.pid !== undefined) crashedPids.add(host.child.pid);
    }
    host = await startChildHost(stateDir, env);
    hostStarts++;
  };
  /** Waits until the run ended (true) or the host died (false). */
  const untilEndedOrDead = async (mine: (event: TopicMessage) => boolean): Promise<boolean> => {
    const deadline = Date.now() + RUN_TIMEOUT_MS;
    for (;;) {
      if (!host || host.child.exitCode !== null || host.child.signalCode !== null) return false;
      try {
        const terminal = (await events()).find((m) => TERMINAL_EVENT_TYPES.includes(m.body.type) && mine(m));
        // The event is published right after the commit that ends the run, before its orchestration has taken its
        // last steps (their crash points): the run has ended once its instance has too.
        if (terminal && (await instanceEnded(terminal.body.data.runId ?? ''))) return true;
      } catch {
        // The host is going down: the next look sees it dead.
      }
      if (Date.now() > deadline) throw new Error(`a run did not end in ${RUN_TIMEOUT_MS} ms:\n${host.output().slice(-3000)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const instanceEnded = async (instanceId: string): Promise<boolean> =>
    ['Completed', 'Failed', 'Terminated'].includes(((await call('GET', `/runtime-cloud/local/durable/instances/${instanceId}`)) as { runtimeStatus: string }).runtimeStatus);
  const fired = (): Map<string, string> =>
    new Map(
      fs
        .readdirSync(markers)
        .filter((f) => f.startsWith('point-'))
        .map((f) => [decodeURIComponent(f.slice('point-'.length)), fs.readFileSync(join(markers, f), 'utf8')]),
    );

  const context: DriveContext = {
    call,
    token,
    example,
    async again(step) {
      for (;;) {
        try {
          return await step();
        } catch (error) {
          // The answer was lost with the host: its exit is seen shortly after the connection closed.
          for (let looks = 0; looks < 40 && host && host.child.exitCode === null && host.child.signalCode === null; looks++) await new Promise((resolve) => setTimeout(resolve, 50));
          if (host && host.child.exitCode === null && host.child.signalCode === null) throw error;
          await ensureHost();
        }
      }
    },
    async ended(mine) {
      if (!(await untilEndedOrDead(mine))) throw new Error(`the host died in a run that was to reach no point:\n${host?.output().slice(-3000) ?? ''}`);
    },
  };
  const startRun = drive.startRun ?? startPromotion;
  const started: ((event: TopicMessage) => boolean)[] = [];
  try {
    await ensureHost();
    await drive.setup?.(context);
    while (fired().size < points.length) {
      if (started.length > points.length) throw new Error(`after ${started.length} runs these points never fired: ${points.filter((p) => !fired().has(p)).join(', ')}`);
      await ensureHost();
      const before = fired().size;
      const mine = await startRun(started.length, context);
      started.push(mine);
      // Until it ended, restarting the host each time it died; a run crashes once at most.
      while (!(await untilEndedOrDead(mine))) await ensureHost();
      if (fired().size === before) throw new Error(`run ${started.length} ended without reaching any of: ${points.filter((p) => !fired().has(p)).join(', ')}`);
    }
    await ensureHost();
    const all = await events();
    const byRun = new Map([...fired()].map(([point, subject]) => [subject, point]));
    const runs: CrashedRun[] = [];
    for (const mine of started) {
      const own = all.filter(mine);
      const runId = own.find((m) => m.body.data.runId)?.body.data.runId ?? '';
      const view = (await call('GET', `/runtime-cloud/runs/${runId}`)) as RunView;
      const point = byRun.get(runId);
      runs.push({
        runId,
        ...(point ? { point } : {}),
        terminal: own.filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type)),
        eventIds: own.map((m) => m.messageId),
        view,
        applies: 0,
        runnerDiedWithHost: [...crashedPids].some((pid) => view.applyReceipt?.runnerLost?.agent?.endsWith(`.${pid}`) === true),
      });
    }
    const report = { hostStarts, hostCrashes, fired: fired() };
    await host?.stop();
    host = undefined;
    const applies = appliesByStackAndPlan(join(stateDir, 'runtime-cloud.sqlite'));
    return { ...report, runs: runs.map((r) => ({ ...r, applies: applies.get(`${r.view.stack}\u0000${r.view.planDigest ?? ''}`) ?? 0 })) };
  } finally {
    await host?.stop('SIGKILL').catch(() => undefined);
    fs.rmSync(root, { recursive: true, force: true });
  }
}

/**
 * Every point fired, and each run ended with exactly one terminal event (the type and code `outcome` expects after
 * its point), its events under distinct ids, its plan and apply receipts, and one apply begun by the local cloud.
 * A run whose apply job's agent died with a crashed host after it began to apply (the crash came while the run had
 * already moved past its point, on a loaded machine) fails `RUNNER_LOST` instead, having applied at most once.
 */
export function expectEachRunEndedOnce(report: CrashReport, points: readonly string[], outcome: (point: string | undefined) => readonly [type: string, code: string | undefined]): void {
  expect([...report.fired.keys()].sort()).toEqual([...points].sort());
  for (const run of report.runs) {
    const what = `${run.point ?? 'no crash'} (${run.runId}, ended ${run.terminal.map((m) => `${m.body.type} ${m.body.data.code ?? ''}`).join(', ')}; ${run.view.state}, apply ${JSON.stringify(run.view.applyReceipt?.result ?? null).slice(0, 400)})`;
    expect(run.terminal, what).toHaveLength(1);
    expect(new Set(run.eventIds).size, what).toBe(run.eventIds.length);
    expect(run.view.planReceipt, what).toBeDefined();
    expect(run.view.applyReceipt, what).toBeDefined();
    if (run.runnerDiedWithHost) {
      expect(run.applies, what).toBeLessThanOrEqual(1);
      expect([what, run.terminal[0]?.body.type, run.terminal[0]?.body.data.code]).toEqual([what, 'ProvisioningFailed', 'PROVISIONING.RUNNER_LOST']);
      continue;
    }
    expect(run.applies, what).toBe(1);
    expect([what, run.terminal[0]?.body.type, run.terminal[0]?.body.data.code]).toEqual([what, ...outcome(run.point)]);
  }
}

/** The default run: a promotion of the example onto a stack and environment of its own. */
async function startPromotion(i: number, { call, example }: DriveContext): Promise<(event: TopicMessage) => boolean> {
  const promotion = aStackPromotion(example.repository, 'development', { stack: `development-${i + 1}`, environmentId: `env-crash-${i + 1}` });
  await call('POST', '/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { body: promotion, messageId: promotion.promotionId });
  return (event) => event.body.data.promotionId === promotion.promotionId;
}

/** The local cloud's record of the applies begun, counted by (qualified stack, plan digest). */
function appliesByStackAndPlan(file: string): Map<string, number> {
  const db = new Database(file, { readonly: true });
  try {
    const rows = db.prepare('select stack, plan_digest as planDigest, count(*) as n from local_cloud_applies group by stack, plan_digest').all() as { stack: string; planDigest: string; n: number }[];
    // The view's stack is the stack's own name; the record's is tenant/project/stack.
    return new Map(rows.map((r) => [`${r.stack.split('/').pop() ?? r.stack}\u0000${r.planDigest}`, r.n]));
  } finally {
    db.close();
  }
}
