import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePromotion } from '../../local/example-repository';
import { runJob } from '../../runner/agent';
import { createLocalCloud } from '../../local/cloud/local-cloud';
import { randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { ownPool, testAgent } from '../support/runner-agents';
import { provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { localEngineFor } from '../../local/runner-agent';
import { jobTargetClient } from '../../local/cloud/job-target-client';

/**
 * A job's `adopt` call (the local engine's `import`): a resource of the job's tenant becomes one of the job's stack,
 * so the stack's reads (and inventory's scans) find it. The test is the agent, speaking the protocol over HTTP.
 */
for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner job adopt (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-adopt-'));
      host = await startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS, RuntimeCloud__Local__Runners: '0' }, depsOverrides: database.overrides });
      example = await provisioningExample(root, host.stateDir, 1);
      writeExampleReferences(host.stateDir);
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    it("when a job adopts a resource of its tenant into its stack, then the resource takes the stack's urn; another tenant's resource or a urn of another stack is refused", async () => {
      // Arrange
      const { client } = await testAgent(host, ownPool('demo-team'));
      await sendToPromotions(host, examplePromotion('development', example.repository), 'adopt-1');
      // A plan job changes nothing: the test plans as an agent would, and speaks for the apply job.
      const plan = await eventually(() => client.claim('test-agent', 0));
      await runJob({ client, engineFor: localEngineFor, agent: 'test-agent', workRoot: join(root, 'work') }, plan, () => undefined);
      const claimed = await eventually(() => client.claim('test-agent', 0), 30_000);
      const { target, stack } = claimed.job;
      const cloud = createLocalCloud({ store: host.host.deps.sql, clock: host.host.deps.clock, ids: randomIds });
      const legacy = await cloud.create(target, { scope: stack.tenant, urn: 'urn:pulumi:legacy::ops::local:storage:Bucket::old', type: 'local:storage:Bucket', properties: { tier: 'hot' } });
      const foreign = await cloud.create(target, { scope: 'another-tenant', urn: 'urn:pulumi:legacy::ops::local:storage:Bucket::old', type: 'local:storage:Bucket', properties: { tier: 'hot' } });
      const urn = `urn:pulumi:${stack.stack}::${stack.project}::local:storage:Bucket::logs`;
      const job = client.job(claimed);
      const { cloud: jobCloud } = jobTargetClient(claimed, job);
      // As an agent does before its first change: the host records that the apply begins.
      await job.heartbeat({ log: [], applyBegins: true });

      // Act
      const adopted = await jobCloud.adopt(target, legacy.id, urn);
      const otherTenant = await jobCloud.adopt(target, foreign.id, urn).catch((e: unknown) => e);
      const otherStack = await jobCloud.adopt(target, legacy.id, 'urn:pulumi:prod::ops::local:storage:Bucket::logs').catch((e: unknown) => e);

      // Assert
      expect(adopted).toMatchObject({ id: legacy.id, urn, properties: { tier: 'hot' } });
      expect((await cloud.listStack(target, stack)).map((r) => r.id)).toContain(legacy.id);
      expect(otherTenant).toMatchObject({ code: 'LOCAL_CLOUD.NOT_FOUND' });
      expect(otherStack).toMatchObject({ code: 'RUNNER.CALL_REFUSED' });
      expect((await cloud.get(target, foreign.id))?.urn).toBe('urn:pulumi:legacy::ops::local:storage:Bucket::old');
    }, 60_000);
  });
}
