import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { parseConfig } from '../../shared/platform/config/config';
import { startChildHost, type RunningChild } from './child-process';
import { aStackPromotion, provisioningExample, writeExampleReferences } from './provisioning';
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
}

export interface CrashedRun {
  readonly promotionId: string;
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
}

export interface CrashReport {
  readonly runs: readonly CrashedRun[];
  /** Host starts, and the hosts that died at a point (the rest of the crashes are agents'). */
  readonly hostStarts: number;
  readonly hostCrashes: number;
  readonly fired: ReadonlyMap<string, string>;
}

interface TopicMessage {
  readonly messageId: string;
  readonly body: { readonly type: string; readonly data: { readonly promotionId?: string; readonly runId?: string; readonly code?: string } };
}

export interface RunView {
  readonly id: string;
  readonly state: string;
  readonly stack: string;
  readonly planDigest?: string;
  readonly planReceipt?: unknown;
  readonly applyReceipt?: { readonly result?: { readonly status?: string; readonly error?: { readonly code?: string } } };
}

/** Leases and locks short enough that a dead host's work is taken over in seconds. */
const FAST_RECOVERY = { RuntimeCloud__Local__QueueLockSeconds: '2', RuntimeCloud__Local__DurableLeaseSeconds: '2', RuntimeCloud__Runners__LeaseSeconds: '5' };
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
  const admin = await issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, roles: ['PlatformAdmin'] });
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
  const call = async (method: string, path: string, body?: unknown): Promise<unknown> => {
    if (!host) throw new Error('no host');
    const response = await fetch(new URL(path, host.url), {
      method,
      signal: AbortSignal.timeout(10_000),
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
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
    }
    host = await startChildHost(stateDir, env);
    hostStarts++;
  };
  /** Waits until the promotion's run ended (true) or the host died (false). */
  const untilEndedOrDead = async (promotionId: string): Promise<boolean> => {
    const deadline = Date.now() + RUN_TIMEOUT_MS;
    for (;;) {
      if (!host || host.child.exitCode !== null || host.child.signalCode !== null) return false;
      try {
        const terminal = (await events()).find((m) => TERMINAL_EVENT_TYPES.includes(m.body.type) && m.body.data.promotionId === promotionId);
        // The event is published right after the commit that ends the run, before its orchestration has taken its
        // last steps (their crash points): the run has ended once its instance has too.
        if (terminal && (await instanceEnded(terminal.body.data.runId ?? ''))) return true;
      } catch {
        // The host is going down: the next look sees it dead.
      }
      if (Date.now() > deadline) throw new Error(`promotion ${promotionId} did not end in ${RUN_TIMEOUT_MS} ms:\n${host.output().slice(-3000)}`);
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

  const promotionIds: string[] = [];
  try {
    while (fired().size < points.length) {
      if (promotionIds.length > points.length) throw new Error(`after ${promotionIds.length} runs these points never fired: ${points.filter((p) => !fired().has(p)).join(', ')}`);
      await ensureHost();
      const promotion = aStackPromotion(example.repository, 'development', { stack: `development-${promotionIds.length + 1}`, environmentId: `env-crash-${promotionIds.length + 1}` });
      promotionIds.push(promotion.promotionId);
      const before = fired().size;
      await call('POST', '/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { body: promotion, messageId: promotion.promotionId });
      // Until it ended, restarting the host each time it died; a run crashes once at most.
      while (!(await untilEndedOrDead(promotion.promotionId))) await ensureHost();
      if (fired().size === before) throw new Error(`run of ${promotion.promotionId} ended without reaching any of: ${points.filter((p) => !fired().has(p)).join(', ')}`);
    }
    await ensureHost();
    const all = await events();
    const byRun = new Map([...fired()].map(([point, subject]) => [subject, point]));
    const runs: CrashedRun[] = [];
    const views: RunView[] = [];
    for (const promotionId of promotionIds) {
      const mine = all.filter((m) => m.body.data.promotionId === promotionId);
      const runId = mine.find((m) => m.body.data.runId)?.body.data.runId ?? '';
      const view = (await call('GET', `/runtime-cloud/runs/${runId}`)) as RunView;
      views.push(view);
      const point = byRun.get(runId);
      runs.push({
        promotionId,
        runId,
        ...(point ? { point } : {}),
        terminal: mine.filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type)),
        eventIds: mine.map((m) => m.messageId),
        view,
        applies: 0,
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
