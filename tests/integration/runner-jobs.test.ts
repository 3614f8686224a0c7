import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localComponents } from '../../local/components';
import { examplePromotion } from '../../local/example-repository';
import { LocalRunnerAgents } from '../../local/runner-agents';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { getStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { TestRepository } from '../support/git-repositories';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { ownPool } from '../support/runner-agents';
import { SkippingClock } from '../support/skipping-clock';
import { provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';

/**
 * Plans and applies run in runner jobs (issue 17), on a local host as a user runs it: its agents are child
 * processes that claim the jobs of the local cloud's pool over HTTP with a pool credential, and hold nothing of the
 * host. A job's calls are accepted only with its token, while it runs under its stack lock; an apply whose runner is
 * killed fails with a receipt and is never applied again; a plan whose runner is lost is made again.
 */
const TENANT = 'demo-team';
const POOL = ownPool(TENANT);
const operator = { tenant: TENANT, roles: ['Operator'], subject: 'operator' };

interface RunBody {
  runId: string;
  promotionId: string;
  state: string;
  error?: { code: string; message: string };
  waitingFor?: { kind: string; pool?: string; position?: number };
  planReceipt?: { runner: { name: string; agent?: string; jobId?: string }; refreshed?: boolean; plan: { counts: Record<string, number> } };
  applyReceipt?: { runner: { agent?: string; jobId?: string }; result: { status: string; resources: { status: string }[] }; runnerLost?: { log: string } };
}

/** A project of `count` buckets: an apply long enough to kill its runner in the middle. */
function bucketsProgram(count: number): string {
  const resources = Array.from({ length: count }, (_, i) => `  bucket${i}:\n    type: local:storage:Bucket\n    properties:\n      name: slow-${i}\n`).join('');
  return `name: slow-app\nruntime: yaml\nresources:\n${resources}`;
}

async function startHost(database: TestDatabase, settings: Record<string, string>, clock: SkippingClock, components = localComponents()): Promise<TestHost> {
  return startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS, ...settings }, depsOverrides: { ...database.overrides, clock }, components });
}

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner jobs on the local host's agents (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    let slow: TestRepository;
    let slowCommit: string;
    const agents = new LocalRunnerAgents();
    // The real clock, skipped ahead where a test waits for a killed agent's job lease to lapse.
    const clock = new SkippingClock();

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-runners-'));
      const components = localComponents().filter((c) => !(c instanceof LocalRunnerAgents));
      host = await startHost(database, { RuntimeCloud__Runners__LeaseSeconds: '5' }, clock, [...components, agents]);
      example = await provisioningExample(root, host.stateDir, 0);
      writeExampleReferences(host.stateDir);
      slow = await TestRepository.init(join(host.stateDir, 'repos', 'slow'));
      slowCommit = await slow.commit({ 'app/Pulumi.yaml': bucketsProgram(200), 'app/Pulumi.slow.yaml': 'config: {}\n' });
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    const getJson = async <T>(path: string, claims: object = operator): Promise<T> => {
      const response = await host.fetch(path, { claims });
      expect(response.status, path).toBe(200);
      return (await response.json()) as T;
    };
    let sent = 0;
    async function promote(promotion: PromotionApproved): Promise<string> {
      await sendToPromotions(host, promotion, `runner-${++sent}`);
      return (await eventually(async () => (await getJson<{ items: RunBody[] }>('/runtime-cloud/runs?limit=1000')).items.find((r) => r.promotionId === promotion.promotionId))).runId;
    }
    const runOf = (runId: string) => getJson<RunBody>(`/runtime-cloud/runs/${runId}`);
    const ended = (runId: string, timeout = 30_000) =>
      eventually(async () => {
        const run = await runOf(runId);
        return ['applied', 'failed', 'rejected'].includes(run.state) ? run : undefined;
      }, timeout);
    const slowPromotion = (): PromotionApproved => ({
      ...examplePromotion('development', example.repository),
      environment: { id: 'env-slow', name: 'slow', tier: 'development' },
      desiredState: { repository: pathToFileURL(slow.dir).href, commit: slowCommit, path: 'app', stack: 'slow' },
    });

    it('when a promotion comes, then an agent of the local pool plans it and an agent applies it, each receipt naming its agent and job', async () => {
      // Act
      const run = await ended(await promote(examplePromotion('development', example.repository)));

      // Assert
      expect(run).toMatchObject({ state: 'applied', planReceipt: { runner: { name: 'local', agent: expect.stringMatching(/^local-[12]\./) }, plan: { counts: { create: 3 } } } });
      expect(run.applyReceipt?.runner).toMatchObject({ agent: expect.stringMatching(/^local-[12]\./), jobId: expect.stringMatching(/^job_/) });
      expect(run.applyReceipt?.runner.jobId).not.toBe(run.planReceipt?.runner.jobId);
      const pools = await getJson<{ items: { pool: string; agentsOnline: number; jobsRunning: number; jobsWaiting: number }[] }>('/runtime-cloud/runner-pools');
      // The tenant's own agent pool, started by the host on its first job; its jobs' leases are of the capacity pool.
      expect(pools.items).toEqual([{ pool: POOL, target: 'local', engine: 'local', capacityPool: 'local-runner', tenants: [TENANT], agentsOnline: 2, jobsRunning: 0, jobsWaiting: 0 }]);
      const listed = await getJson<{ items: { agent: string; online: boolean }[] }>(`/runtime-cloud/runner-pools/${POOL}/agents`);
      expect(listed.items.map((a) => [a.agent.replace(/\..*/, ''), a.online])).toEqual([
        ['local-1', true],
        ['local-2', true],
      ]);
      // Named after their host (its name and process), so local hosts sharing a store do not share agent names.
      expect(listed.items.map((a) => a.agent)).toEqual(agents.agents().map((a) => a.agent).sort());
      expect(listed.items[0]?.agent).toMatch(new RegExp(`^local-1\\.[A-Za-z0-9-]+\\.${process.pid}$`));
      const targets = await getJson<{ targets: { id: string; runners?: { pool: string; agentsOnline: number } }[] }>('/runtime-cloud/meta/targets');
      expect(targets.targets[0]).toMatchObject({ id: 'local', runners: { pool: 'local-runner', agentsOnline: 2 } });
    });

    it("when an agent's process is read, then it holds nothing of the host: no store, table or bus setting, no state dir, and its credential opens only its own pool's jobs, no other tenant's", async () => {
      // Arrange
      const running = agents.agents();
      expect(running).toHaveLength(2);

      for (const { pid } of running) {
        // Act
        const environ = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
        const cwd = fs.readlinkSync(`/proc/${pid}/cwd`);

        // Assert
        expect(environ.filter((e) => /^(RuntimeCloud__(Store|Tables|Local|Auth)|ServiceBus|AzureWebJobs|APPLICATIONINSIGHTS)/.test(e))).toEqual([]);
        expect(environ.join('\n')).not.toContain(host.stateDir);
        expect(environ.join('\n')).not.toContain(database.settings.RuntimeCloud__Store__Connection ?? 'no-connection');
        expect(cwd.startsWith(host.stateDir)).toBe(false);
        // Long-lived: the host wakes their claims itself and starts again an agent that exits.
        expect(environ).toContain('RuntimeCloud__Runner__IdleSeconds=0');
        const credential = environ.find((e) => e.startsWith('RuntimeCloud__Runner__Credential='))?.split('=')[1] ?? '';
        const runs = await fetch(new URL('/runtime-cloud/runs', host.url), { headers: { authorization: `Bearer ${credential}` } });
        expect(runs.status).toBe(403);
        for (const other of ['prod-runner', 'local-runner', ownPool('other-team')]) {
          const otherPool = await fetch(new URL(`/runtime-cloud/runner-pools/${other}/claim`, host.url), { method: 'POST', headers: { authorization: `Bearer ${credential}`, 'content-type': 'application/json' }, body: '{"agent":"x"}' });
          expect(otherPool.status, other).toBe(403);
        }
      }
    });

    it('when the runner of an apply is killed in the middle, then the run fails RUNNER_LOST with a receipt of what it changed, the stack is free, and the next plan refreshes first', async () => {
      // Arrange: the apply of 200 buckets is under way on one agent.
      const runId = await promote(slowPromotion());
      const db = provisioningDb(host.host.deps.sql.db);
      const job = await eventually(async () => {
        const row = await db.selectFrom('provisioning_runner_jobs').selectAll().where('run_id', '=', runId).where('kind', '=', 'apply').where('state', '=', 'running').executeTakeFirst();
        return row && row.log.includes('created') ? row : undefined;
      });
      const victim = agents.agents().find((a) => a.agent === job.agent);

      // Act: the agent is killed, and its job's lease lapses: the clock skips the wait (a renewal that reaches the
      // host after this read leaves the rest of it to real time).
      process.kill(victim!.pid!, 'SIGKILL');
      const { lease_expires_at: leaseExpiresAt } = await db.selectFrom('provisioning_runner_jobs').select('lease_expires_at').where('id', '=', job.id).executeTakeFirstOrThrow();
      clock.skipPast(leaseExpiresAt ?? 0);
      const run = await ended(runId, 40_000);

      // Assert
      expect(run.state).toBe('failed');
      expect(run.error?.code).toBe('PROVISIONING.RUNNER_LOST');
      expect(run.applyReceipt?.runnerLost?.log).toContain('created local:storage:Bucket');
      expect(new Set(run.applyReceipt?.result.resources.map((r) => r.status))).toEqual(new Set(['unknown']));
      expect(await getStackLock(db, { tenant: TENANT, project: 'slow-app', stack: 'slow' })).toBeUndefined();
      const after = await db.selectFrom('provisioning_runner_jobs').select(['state']).where('run_id', '=', runId).where('kind', '=', 'apply').execute();
      // Never a second apply: one apply job, lost.
      expect(after).toEqual([{ state: 'lost' }]);
      const next = await ended(await promote(slowPromotion()), 60_000);
      expect(next.planReceipt?.refreshed).toBe(true);
      expect(next.state).toBe('applied');
    }, 120_000);

    it("when another tenant's promotion comes, then the host starts agents of that tenant's own pool, each holding that pool's credential only, and they apply it", async () => {
      // Arrange
      const other = 'other-team';
      const created = await host.fetch(`/runtime-cloud/tenants/${other}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ edition: 'team' }), claims: { roles: ['PlatformAdmin'] } });
      expect(created.status).toBeLessThan(300);

      // Act
      await sendToPromotions(host, { ...examplePromotion('development', example.repository), tenantId: other }, `runner-${++sent}`);
      const run = await eventually(async () => {
        const found = (await getJson<{ items: RunBody[] }>('/runtime-cloud/runs?limit=1000', { tenant: other, roles: ['Operator'], subject: 'operator-other' })).items[0];
        return found && ['applied', 'failed'].includes(found.state) ? found : undefined;
      }, 60_000);

      // Assert
      expect(run.state).toBe('applied');
      const byPool = agents.agents().filter((a) => a.pool === ownPool(other));
      expect(byPool.map((a) => a.agent.replace(/\..*/, '')).sort()).toEqual(['local-1', 'local-2']);
      for (const { pid } of byPool) {
        const environ = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
        const credential = environ.find((e) => e.startsWith('RuntimeCloud__Runner__Credential='))?.split('=')[1] ?? '';
        const claims = JSON.parse(Buffer.from(credential.split('.')[1] ?? '', 'base64url').toString()) as { runner_pool?: string };
        expect(environ).toContain(`RuntimeCloud__Runner__Pool=${ownPool(other)}`);
        expect(claims.runner_pool).toBe(ownPool(other));
      }
      expect(new Set(agents.agents().map((a) => a.pool))).toEqual(new Set([POOL, ownPool(other)]));
    }, 90_000);
  });
}
