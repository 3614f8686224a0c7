import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EPOCH_SPAN } from '../../shared/platform/sql/store-epoch';
import { eventually } from '../support/eventually';
import { runCli, startChildHost, type RunningChild } from '../support/child-process';

/**
 * Store lost (the seed: restore from backup, RPO 15 min; leases expire and are re-granted), on a real host process
 * and a real SQLite file: the store is backed up while the host serves lease traffic, the traffic goes on (leases
 * granted after the backup), the host stops, the old backup is restored and a new host starts on it, and the same
 * clients keep acquiring, renewing and releasing throughout. The history of every answer is then checked: fencing
 * tokens strictly increase per pool across the restore, and at no instant do leases the server answered as held
 * exceed the pool's capacity.
 */
const TTL_SECONDS = 15;
const CAPACITY = 4;
const POOL = 'pool-x';
const SEED = {
  editions: { quick: { limits: { attempt: { maxUnits: CAPACITY, maxTtlSeconds: TTL_SECONDS } } } },
  tenants: { 'tenant-a': { edition: 'quick' }, 'tenant-b': { edition: 'quick' } },
  pools: { [POOL]: { kind: 'attempt', target: 'local', capacity: CAPACITY } },
};
/** No agents, no runner leases: the history is the clients' alone. */
const SETTINGS = { RuntimeCloud__IaC__Execution: 'in-process', RuntimeCloud__Local__Runners: '0' };

/** One answer of the host, with when it was asked and answered (ms). */
interface Answer {
  readonly op: 'acquire' | 'renew' | 'release';
  readonly tenant: string;
  readonly lease?: string;
  readonly token?: number;
  readonly status: number;
  readonly code?: string;
  readonly invokedAt: number;
  readonly completedAt: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('runtime-cloud backup and restore (real host processes, a real SQLite file, live lease traffic)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-restore-'));
  const seedFile = join(stateDir, 'seed.json');
  writeFileSync(seedFile, JSON.stringify(SEED));
  const env = { ...SETTINGS, RuntimeCloud__Capacity__SeedFile: seedFile };
  let host: RunningChild | undefined;
  afterAll(async () => {
    await host?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('when an old backup is restored under live lease traffic, then tokens grow per pool across it, no pool is ever over capacity, lost leases re-register in the window and grants resume after it', async () => {
    host = await startChildHost(stateDir, env);
    let base = host.url;
    const tokens: Record<string, string> = {};
    for (const tenant of ['tenant-a', 'tenant-b']) {
      const issued = await runCli(['token', '--state-dir', stateDir, '--tenant', tenant, '--scope', 'factory.capacity.lease', '--scope', 'factory.runtime.read', '--scope', 'factory.health.read']);
      tokens[tenant] = issued.stdout.trim();
    }
    const answers: Answer[] = [];
    let running = true;

    /** Sends one request and records its answer; a host that is down answers nothing, and the client tries again. */
    async function send(op: Answer['op'], tenant: string, path: string, init: RequestInit, lease?: string): Promise<{ status: number; body: Record<string, unknown> } | undefined> {
      const invokedAt = Date.now();
      let response: Response;
      try {
        const headers = { ...(init.headers as Record<string, string>), authorization: `Bearer ${tokens[tenant]}`, 'content-type': 'application/json' };
        response = await fetch(new URL(path, base), { ...init, headers });
      } catch {
        return undefined;
      }
      const text = await response.text();
      const body = (text ? JSON.parse(text) : {}) as Record<string, unknown>;
      const token = typeof body.fencingToken === 'number' ? body.fencingToken : undefined;
      answers.push({ op, tenant, ...(lease ?? body.leaseId ? { lease: lease ?? (body.leaseId as string) } : {}), ...(token !== undefined ? { token } : {}), status: response.status, ...(typeof body.code === 'string' ? { code: body.code } : {}), invokedAt, completedAt: Date.now() });
      if (response.status === 503) expect(response.headers.get('retry-after')).toMatch(/^\d+$/);
      return { status: response.status, body };
    }

    /** A holder: acquires a lease, renews it about once a second (saying what it holds), releases it after five. */
    async function worker(tenant: string, holder: string): Promise<void> {
      while (running) {
        const granted = await send('acquire', tenant, '/runtime-cloud/leases', { method: 'POST', body: JSON.stringify({ kind: 'attempt', units: 1, ttlSeconds: TTL_SECONDS, holder, pool: POOL }) });
        if (granted?.status !== 201) {
          await sleep(200);
          continue;
        }
        const id = granted.body.leaseId as string;
        const fencingToken = granted.body.fencingToken as number;
        const renewBody = JSON.stringify({ fencingToken, ttlSeconds: TTL_SECONDS, lease: { kind: 'attempt', pool: POOL, units: 1, holder } });
        let held = true;
        for (let renewal = 0; held && running && renewal < 5; renewal++) {
          await sleep(1_000);
          // While the host is down the holder keeps trying at its own pace (its lease outlives the outage), so
          // holders that would come back first are not what keeps new grants from overlapping their leases.
          let answer: Awaited<ReturnType<typeof send>>;
          while (!(answer = await send('renew', tenant, `/runtime-cloud/leases/${id}/renew`, { method: 'POST', body: renewBody }, id)) && running) await sleep(1_000);
          held = answer?.status === 200;
        }
        if (held) await send('release', tenant, `/runtime-cloud/leases/${id}`, { method: 'DELETE', headers: { 'fencing-token': String(fencingToken) } }, id);
      }
    }

    const grants = () => answers.filter((a) => a.op === 'acquire' && a.status === 201);
    const workers = ['a1', 'a2', 'a3', 'b1', 'b2', 'b3'].map((h) => worker(h.startsWith('a') ? 'tenant-a' : 'tenant-b', h));
    try {
      await eventually(async () => (grants().length >= 6 ? true : undefined), 60_000);
      const backupFile = join(stateDir, 'old.sqlite');
      const backup = await runCli(['backup', '--state-dir', stateDir, '--to', backupFile]);
      expect(backup).toMatchObject({ code: 0, stdout: `${backupFile}\n` });
      const backedUpAt = Date.now();
      // The backup grows old: every lease it holds has ended (its holders released it, or it expired), and the
      // leases held now were granted after it, so the restored store will not know them.
      const oldAt = backedUpAt + (TTL_SECONDS + 1) * 1000;
      await eventually(async () => (grants().filter((g) => g.invokedAt > oldAt).length >= 3 ? true : undefined), 60_000);

      const refused = await runCli(['restore', '--state-dir', stateDir, '--from', backupFile]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/a host is running on .* stop it before restoring/);

      await host.stop();
      host = undefined;
      const restored = await runCli(['restore', '--state-dir', stateDir, '--from', backupFile]);
      expect(restored.code).toBe(0);
      expect(restored.stdout).toMatch(/store epoch 1; the replaced store is kept as .*before-restore/);
      expect(readdirSync(stateDir).some((f) => f.includes('.before-restore-'))).toBe(true);
      expect(existsSync(join(stateDir, 'runtime-cloud.sqlite.restoring'))).toBe(false);

      host = await startChildHost(stateDir, env);
      const restartedAt = Date.now();
      base = host.url;
      expect(host.output()).toMatch(/the store was restored \(epoch 1\): 0 environments are stale until re-scanned; capacity recovers until/);
      const health = (await (await fetch(new URL('/runtime-cloud/health', base), { headers: { authorization: `Bearer ${tokens['tenant-a']}` } })).json()) as { checks: { name: string; status: string }[] };
      expect(health.checks.find((c) => c.name === 'store-recovery')).toMatchObject({ status: 'degraded', details: { epoch: 1 } });
      // Grants wait out the window (one TTL), then resume.
      await eventually(async () => (grants().filter((g) => g.invokedAt > restartedAt).length >= 6 ? true : undefined), 90_000);
      running = false;
      await Promise.all(workers);

      expect(tokensGoingBackwards(grants())).toEqual([]);
      expect(overCapacity(answers)).toEqual([]);
      const after = answers.filter((a) => a.invokedAt > restartedAt);
      expect(after.filter((a) => a.op === 'acquire' && a.status === 503 && a.code === 'CAPACITY.RECOVERING').length).toBeGreaterThan(0);
      const lost = new Set(grants().filter((g) => g.invokedAt > backedUpAt && g.completedAt < restartedAt).map((g) => g.lease));
      const reRegistered = after.filter((a) => a.op === 'renew' && a.status === 200 && lost.has(a.lease));
      expect(reRegistered.length).toBeGreaterThan(0);
      expect(grants().filter((g) => g.invokedAt > restartedAt).every((g) => (g.token ?? 0) >= EPOCH_SPAN)).toBe(true);
    } finally {
      running = false;
      await Promise.all(workers);
    }
  }, 240_000);
});

/** Pairs of grants where one answered before the other was asked, yet got the larger token (one pool here). */
function tokensGoingBackwards(grants: readonly Answer[]): string[] {
  const wrong: string[] = [];
  for (const first of grants) {
    for (const second of grants) {
      if (first.completedAt < second.invokedAt && (first.token ?? 0) >= (second.token ?? 0)) wrong.push(`${first.lease} (${first.token}) then ${second.lease} (${second.token})`);
    }
  }
  return wrong;
}

/**
 * Instants at which more leases were certainly held than the pool has units, by the server's answers: a lease is
 * held from its grant's answer until its release was asked, a renew of it was refused, or its expiry as its last
 * granted or renewed request could have set it at the earliest (asked at + TTL).
 */
function overCapacity(answers: readonly Answer[]): string[] {
  const byLease = new Map<string, Answer[]>();
  for (const a of answers) if (a.lease) byLease.set(`${a.tenant}/${a.lease}`, [...(byLease.get(`${a.tenant}/${a.lease}`) ?? []), a]);
  const intervals: { lease: string; from: number; to: number }[] = [];
  for (const [lease, ops] of byLease) {
    const grant = ops.find((o) => o.op === 'acquire' && o.status === 201);
    if (!grant) continue;
    let lastOk = grant.invokedAt;
    let to = Number.POSITIVE_INFINITY;
    for (const op of ops.filter((o) => o !== grant).sort((x, y) => x.invokedAt - y.invokedAt)) {
      if (op.op === 'renew' && op.status === 200 && op.invokedAt < lastOk + TTL_SECONDS * 1000) lastOk = op.invokedAt;
      else if (op.op === 'renew') to = Math.min(to, op.completedAt);
      else if (op.op === 'release') to = Math.min(to, op.invokedAt);
    }
    intervals.push({ lease, from: grant.completedAt, to: Math.min(to, lastOk + TTL_SECONDS * 1000) });
  }
  const problems: string[] = [];
  for (const { from } of intervals) {
    const held = intervals.filter((i) => i.from <= from && from < i.to);
    if (held.length > CAPACITY) problems.push(`at ${new Date(from).toISOString()}: ${held.map((i) => i.lease).join(', ')}`);
  }
  return problems;
}
