import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePromotion } from '../../local/example-repository';
import { eventually } from '../support/eventually';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { ownPool, testAgent } from '../support/runner-agents';
import { provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';

/**
 * Health checks each agent pool (a tenant's own, or a configured group): a pool with jobs waiting and no agent online to claim them degrades the
 * host (an idle event-driven pool has no agent and is healthy); an agent's claim brings it back.
 */
const POOL = ownPool('demo-team');

interface HealthBody {
  status: string;
  checks: { name: string; status: string; error?: string; details?: { pools?: { pool: string; agentsOnline: number; jobsWaiting: number }[] } }[];
}

describe('health of the runner pools', () => {
  let host: TestHost;
  let root: string;
  let example: ProvisioningExample;

  beforeAll(async () => {
    // Runner jobs, but no agents of the host's own: the test is the agent.
    host = await startTestHost({ settings: { ...RUNNER_JOBS, RuntimeCloud__Local__Runners: '0' } });
    root = fs.mkdtempSync(join(tmpdir(), 'rch-pool-health-'));
    example = await provisioningExample(root, host.stateDir, 0);
    writeExampleReferences(host.stateDir);
  });
  afterAll(async () => {
    await host?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  const poolCheck = async () => {
    const body = (await (await host.fetch('/runtime-cloud/health', { claims: { scopes: ['factory.health.read'] } })).json()) as HealthBody;
    return body.checks.find((c) => c.name === 'runner-pools');
  };

  it('when no job waits, then an idle pool without agents is healthy; when one waits with no agent online, then degraded; once an agent claims it, healthy', async () => {
    const idle = await poolCheck();
    await sendToPromotions(host, examplePromotion('development', example.repository), 'pool-health-1');
    const stuck = await eventually(async () => {
      const check = await poolCheck();
      return check?.status === 'degraded' ? check : undefined;
    });
    const claimed = await (await testAgent(host, POOL)).client.claim('agent-1', 0);
    const after = await poolCheck();

    // No tenant's pool exists before its first job (and no group is configured).
    expect(idle).toMatchObject({ status: 'healthy', details: { pools: [] } });
    expect(stuck).toMatchObject({ error: `jobs wait with no agent online: ${POOL}`, details: { pools: [{ pool: POOL, agentsOnline: 0, jobsWaiting: 1 }] } });
    expect(claimed?.job.kind).toBe('plan');
    expect(after).toMatchObject({ status: 'healthy', details: { pools: [{ pool: POOL, agentsOnline: 1, jobsWaiting: 0 }] } });
  });
});
