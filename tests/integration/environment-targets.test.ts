import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runJob } from '../../runner/agent';
import type { HostClient } from '../../runner/host-client';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { ownPool, testAgent, type TestAgent } from '../support/runner-agents';
import { aStackPromotion, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { localEngineFor } from '../../local/runner-agent';

/**
 * Environments live on targets (issue 17): the ControlPlaneApi's environment names its target, else the
 * `RuntimeCloud__Targets` rules decide; the first run binds it. A run's jobs go to its tenant's agent pool on that target, its
 * resources are made there, and the drift scan looks there. A later promotion putting the environment elsewhere is
 * refused (`PROVISIONING.TARGET_MISMATCH`), one naming a target the installation does not have too
 * (`PROVISIONING.UNKNOWN_TARGET`). The test is the agent of both pools, speaking the protocol over HTTP.
 */
const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator' };
const B = 'tenant-b';
const operatorB = { tenant: B, roles: ['Operator'], subject: 'operator-b' };
const TARGETS = [
  { id: 'local', kind: 'local-cloud', name: 'Local cloud', location: 'local', runnerPool: 'local-runner' },
  { id: 'edge', kind: 'local-cloud', name: 'Edge', location: 'edge', runnerPool: 'edge-runner', environments: [{ tier: 'staging' }] },
  // A customer-hosted target: its agents keep each tenant's state and key where its backend says.
  {
    id: 'dc',
    kind: 'on-prem',
    name: 'Datacenter',
    runnerPool: 'dc-runner',
    environments: [{ environment: 'env-dc' }],
    backend: { url: 's3://dc-pulumi/{tenant}?region=eu-1', secretsProvider: 'hashivault://pulumi-{tenant}' },
  },
];

interface RunBody {
  runId: string;
  state: string;
  error?: { code: string; message: string };
  waitingFor?: { kind: string; pool?: string };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`environments on their targets (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    const agents = new Map<string, Promise<TestAgent>>();
    /** The test as an agent of the agent pool (one credential per pool). */
    const agentOf = async (pool: string): Promise<HostClient> => {
      if (!agents.has(pool)) agents.set(pool, testAgent(host, pool));
      return (await agents.get(pool)!).client;
    };
    let promotions = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-targets-'));
      host = await startTestHost({
        settings: { ...database.settings, ...RUNNER_JOBS, RuntimeCloud__Local__Runners: '0', RuntimeCloud__Targets: JSON.stringify(TARGETS) },
        depsOverrides: database.overrides,
      });
      example = await provisioningExample(root, host.stateDir, 4);
      writeExampleReferences(host.stateDir);
      // The control plane puts env-cp-edge on the edge target; the other environments are the rules'.
      setControlPlane([{ id: 'env-cp-edge', target: 'edge' }, { id: 'env-rules-local' }, { id: 'env-rules-edge', tier: 'staging' }, { id: 'env-nowhere', target: 'nowhere' }]);
      const admin = { roles: ['PlatformAdmin'] };
      for (const [name, target] of [['edge-runner', 'edge'], ['dc-runner', 'dc']]) {
        const pool = await host.fetch(`/runtime-cloud/pools/${name}`, { method: 'PUT', claims: admin, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'runner', target, capacity: 2 }) });
        expect(pool.status).toBe(201);
      }
      const tenantB = await host.fetch(`/runtime-cloud/tenants/${B}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ edition: 'team' }), claims: admin });
      expect(tenantB.status).toBeLessThan(300);
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    function setControlPlane(environments: object[]): void {
      fs.writeFileSync(join(host.stateDir, 'control-plane.json'), JSON.stringify({ environments }));
    }
    /** Sends a development promotion; answers its run once it waits for a runner or was refused. */
    async function promote(environmentId: string, stack: string, environment?: { name: string; tier: string }, as = operator): Promise<RunBody> {
      const promotion = aStackPromotion(example.repository, 'development', { stack, environmentId, overrides: { tenantId: as.tenant } });
      await sendToPromotions(host, environment ? { ...promotion, environment: { id: environmentId, ...environment } } : promotion, `targets-${++promotions}`);
      return eventually(async () => {
        const runs = (await (await host.fetch(`/runtime-cloud/runs?environment=${environmentId}`, { claims: as })).json()) as { items: (RunBody & { promotionId: string })[] };
        const run = runs.items.find((r) => r.promotionId === promotion.promotionId);
        return run && (run.waitingFor?.kind === 'runner' || run.state === 'rejected') ? run : undefined;
      });
    }
    /** Runs the run's plan and apply jobs as an agent of the tenant's own pool on the target of `capacityPool`; answers the run as it ended. */
    async function runOn(capacityPool: string, runId: string, as = operator): Promise<RunBody> {
      const pool = ownPool(as.tenant, capacityPool);
      const client = await agentOf(pool);
      for (const kind of ['plan', 'apply']) {
        const claimed = await eventually(() => client.claim(`${pool}-agent`, 0), 20_000);
        expect([claimed.job.runId, claimed.job.kind]).toEqual([runId, kind]);
        await runJob({ client, engineFor: localEngineFor, agent: `${pool}-agent`, workRoot: join(root, 'work') }, claimed, () => undefined);
      }
      return eventually(async () => {
        const body = (await (await host.fetch(`/runtime-cloud/runs/${runId}`, { claims: as })).json()) as RunBody;
        return body.state === 'applied' || body.state === 'failed' ? body : undefined;
      });
    }
    /**
     * A completed scan of the environment, once inventory has heard of its apply (`SpecificationApplied`). A scan that
     * overlapped that event is skipped (the desired state changed under it), and asked again.
     */
    const scan = (environmentId: string, as = operator) =>
      eventually(async () => {
        const response = await host.fetch(`/runtime-cloud/environments/${environmentId}/scan`, { method: 'POST', claims: as });
        if (response.status === 404) return undefined;
        const body = (await response.json()) as { outcome: string; reason?: string; driftStatus?: string };
        return body.outcome === 'skipped' && body.reason === 'the desired state changed during the scan' ? undefined : body;
      });

    it("when the control plane names an environment's target, then its jobs go to that target's pool, its resources are made there and its scan looks there", async () => {
      // Act
      const run = await promote('env-cp-edge', 'development-1');
      const applied = await runOn('edge-runner', run.runId);
      const scanned = await scan('env-cp-edge');

      // Assert
      expect(run.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool('demo-team', 'edge-runner') });
      expect(applied.state).toBe('applied');
      expect(scanned).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    });

    it('when the control plane names no target, then the rules decide: the first target, or the one whose rule matches the tier', async () => {
      // Act
      const local = await promote('env-rules-local', 'development-2');
      await runOn('local-runner', local.runId);
      const staging = await promote('env-rules-edge', 'development-3', { name: 'staging', tier: 'staging' });

      // Assert
      expect(local.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool('demo-team', 'local-runner') });
      expect(staging.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool('demo-team', 'edge-runner') });
      expect((await runOn('edge-runner', staging.runId)).state).toBe('applied');
      expect(await scan('env-rules-local')).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    });

    it('when a later promotion would put a bound environment on another target, or on one the installation lacks, then it is refused with a reason', async () => {
      // Arrange: env-rules-local was bound to local by its first run; now the control plane says edge.
      setControlPlane([{ id: 'env-rules-local', target: 'edge' }, { id: 'env-nowhere', target: 'nowhere' }]);

      // Act
      const moved = await promote('env-rules-local', 'development-2');
      const nowhere = await promote('env-nowhere', 'development-4');

      // Assert
      expect(moved).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.TARGET_MISMATCH' } });
      expect(moved.error?.message).toContain('lives on target local');
      expect(nowhere).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.UNKNOWN_TARGET' } });
    });

    it("when another tenant has an environment of the same id and stack, then each lives on its own target: neither's binding, jobs or scan is the other's", async () => {
      // Arrange: tenant A's env-cp-edge is bound to edge (the first test); tenant B's of the same id is the rules'.
      setControlPlane([{ id: 'env-cp-edge', tenant: B }, { id: 'env-cp-edge', target: 'edge' }]);

      // Act
      const runB = await promote('env-cp-edge', 'development-1', undefined, operatorB);
      const appliedB = await runOn('local-runner', runB.runId, operatorB);
      const runA = await promote('env-cp-edge', 'development-1');
      const appliedA = await runOn('edge-runner', runA.runId);

      // Assert
      expect(runB.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool(B, 'local-runner') });
      expect(appliedB.state).toBe('applied');
      expect(runA.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool('demo-team', 'edge-runner') });
      expect(appliedA.state).toBe('applied');
      expect(await scan('env-cp-edge', operatorB)).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
      expect(await scan('env-cp-edge')).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    });

    it("when two tenants' environments of the same id and stack live on a customer-hosted target, then each job names its own tenant's state backend and secrets key", async () => {
      // Arrange
      setControlPlane([{ id: 'env-dc' }, { id: 'env-dc', tenant: B }]);

      // Act: each run's plan job, claimed by the target's agent, which fails it (no Pulumi engine here).
      const backends: Record<string, unknown> = {};
      for (const as of [operator, operatorB]) {
        const run = await promote('env-dc', 'development-1', undefined, as);
        expect(run.waitingFor).toMatchObject({ kind: 'runner', pool: ownPool(as.tenant, 'dc-runner') });
        const client = await agentOf(ownPool(as.tenant, 'dc-runner'));
        const claimed = await eventually(() => client.claim('dc-agent', 0), 20_000);
        expect([claimed.job.runId, claimed.job.stack.tenant, claimed.job.engine]).toEqual([run.runId, as.tenant, 'pulumi']);
        backends[as.tenant] = claimed.job.backend;
        const engineFor = () => {
          throw new Error('no Pulumi engine in this test');
        };
        await runJob({ client, agent: 'dc-agent', workRoot: join(root, 'work'), engineFor }, claimed, () => undefined);
      }

      // Assert
      expect(backends).toEqual({
        'demo-team': { url: 's3://dc-pulumi/demo-team?region=eu-1', secretsProvider: 'hashivault://pulumi-demo-team' },
        [B]: { url: `s3://dc-pulumi/${B}?region=eu-1`, secretsProvider: `hashivault://pulumi-${B}` },
      });
    });

    it("when a tenant's id cannot be a segment of the target's backend URL, then its promotion there is refused with why, before any job", async () => {
      // Arrange: `..` in an s3:// or file:// URL would name another tenant's state.
      const odd = { tenant: 'odd..tenant', roles: ['Operator'], subject: 'operator-odd' };
      const created = await host.fetch(`/runtime-cloud/tenants/${odd.tenant}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ edition: 'team' }), claims: { roles: ['PlatformAdmin'] } });
      expect(created.status).toBe(201);
      setControlPlane([{ id: 'env-dc', tenant: odd.tenant }]);

      // Act
      const run = await promote('env-dc', 'development-1', undefined, odd);

      // Assert
      expect(run).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.TENANT_NOT_ADDRESSABLE', message: expect.stringContaining('"odd..tenant" cannot name a state location or key') } });
      const jobs = await provisioningDb(host.host.deps.sql.db).selectFrom('provisioning_runner_jobs').select('id').where('tenant_id', '=', odd.tenant).execute();
      expect(jobs).toEqual([]);
    });
  });
}
