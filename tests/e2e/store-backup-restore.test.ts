import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EPOCH_SPAN } from '../../shared/platform/sql/store-epoch';
import { eventually } from '../support/eventually';
import { runCli, startChildHost, type RunningChild } from '../support/child-process';
import { checkLeaseHistory, heldLease, historyCounts, LeaseHistory, type LeaseSend } from '../support/lease-history';

/**
 * Store lost (the seed: restore from backup, RPO 15 min; leases expire and are re-granted), on a real host process
 * and a real SQLite file: the store is backed up while the host serves lease traffic, the traffic goes on (leases
 * granted after the backup), the host stops, the old backup is restored and a new host starts on it, and the same
 * clients keep acquiring, renewing and releasing throughout. The recorded lease history is then checked
 * (tests/support/lease-history.ts): fencing tokens strictly increase per pool across the restore, at no instant do
 * leases certainly held exceed the pool's capacity, and no holder whose lease certainly expired is answered ok.
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
    // What each lease holds, sent with every renew: after the restore it re-registers the leases the store lost.
    const holdings = new Map<string, { kind: string; pool: string; units: number; holder: string }>();
    const sendAs =
      (tenant: string): LeaseSend =>
      async (method, path, body) => {
        const leaseId = /^\/runtime-cloud\/leases\/([^/]+)\/renew$/.exec(path)?.[1];
        const sent = leaseId !== undefined ? { ...body, lease: holdings.get(decodeURIComponent(leaseId)) } : body;
        const response = await fetch(new URL(path, base), {
          method,
          headers: { authorization: `Bearer ${tokens[tenant]}`, 'content-type': 'application/json' },
          ...(sent !== undefined ? { body: JSON.stringify(sent) } : {}),
        });
        if (response.status === 503) expect(response.headers.get('retry-after')).toMatch(/^\d+$/);
        const text = await response.text();
        return { status: response.status, json: text ? (JSON.parse(text) as unknown) : {} };
      };
    const histories = ['tenant-a', 'tenant-b'].map((tenant) => new LeaseHistory(tenant, sendAs(tenant)));
    let running = true;

    /**
     * A holder: acquires a lease, renews it about once a second, releases it after five renewals. While the host is
     * down it keeps trying at its own pace (its lease outlives the outage), so holders that would come back first
     * are not what keeps new grants from overlapping their leases.
     */
    async function worker(history: LeaseHistory, holder: string): Promise<void> {
      while (running) {
        const grant = await history.acquire({ kind: 'attempt', units: 1, ttlSeconds: TTL_SECONDS, holder, pool: POOL });
        if (grant.outcome !== 'ok') {
          await sleep(200);
          continue;
        }
        const lease = heldLease(grant);
        holdings.set(lease.leaseId, { kind: 'attempt', pool: POOL, units: 1, holder });
        let held = true;
        for (let renewal = 0; held && running && renewal < 5; renewal++) {
          await sleep(1_000);
          let renewed = await history.renew(lease, TTL_SECONDS);
          while (renewed.status === undefined && running) {
            await sleep(1_000);
            renewed = await history.renew(lease, TTL_SECONDS);
          }
          held = renewed.outcome === 'ok';
        }
        if (held) await history.release(lease);
      }
    }

    const operations = () => histories.flatMap((h) => h.operations);
    const grants = () => operations().filter((o) => o.op === 'acquire' && o.outcome === 'ok');
    const workers = histories.flatMap((history) => ['w1', 'w2', 'w3'].map((holder) => worker(history, holder)));
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

      const stoppedAt = Date.now();
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

      const history = operations();
      console.log(`store-backup-restore lease history: ${historyCounts(history)}`);
      expect(checkLeaseHistory(history, { poolCapacity: { [POOL]: CAPACITY } })).toEqual([]);
      const after = history.filter((o) => o.invokedAt > restartedAt);
      expect(after.filter((o) => o.op === 'acquire' && o.status === 503 && o.code === 'CAPACITY.RECOVERING').length).toBeGreaterThan(0);
      const lost = new Set(grants().filter((g) => g.invokedAt > backedUpAt && g.completedAt! < stoppedAt).map((g) => g.leaseId));
      expect(after.filter((o) => o.op === 'renew' && o.outcome === 'ok' && lost.has(o.leaseId)).length).toBeGreaterThan(0);
      expect(grants().filter((g) => g.invokedAt > restartedAt).every((g) => (g.fencingToken ?? 0) >= EPOCH_SPAN)).toBe(true);
    } finally {
      running = false;
      await Promise.all(workers);
    }
  }, 240_000);
});
