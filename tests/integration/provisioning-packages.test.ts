import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePromotion, type ExampleRepository } from '../../local/example-repository';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { randomIds } from '../../shared/platform/time/clock';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { TestRepository } from '../support/git-repositories';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { provisioningExample, sendToPromotions, writeExampleReferences } from '../support/provisioning';

/**
 * Packages are the installation's, end to end on a local host with runner agents: two tenants with the same project
 * (`demo-app`), stack (`development`) and environment promote programs that use what the installation does not
 * allow (a command resource in a Main.yaml; an explicit aws provider, an aws bucket and an invoke of
 * `command:local:run` in Pulumi.yaml). Each run fails PROVISIONING.PACKAGE_NOT_ALLOWED naming type, file and line,
 * with no runner job dispatched, while the other tenant's allowed program on the same names is planned and applied.
 */
const A = 'demo-team';
const B = 'tenant-b';
const admin = { roles: ['PlatformAdmin'], subject: 'platform-admin' };
const operatorA = { tenant: A, roles: ['Operator'], subject: 'operator-a' };
const operatorB = { tenant: B, roles: ['Operator'], subject: 'operator-b' };
const PROJECT = 'name: demo-app\nruntime: yaml\n';
/** Allowed on the local host: its cloud's package, and std, whose functions its engine computes. */
const ALLOWED = `${PROJECT}variables:\n  size:\n    fn::invoke: { function: std:abs, arguments: { input: -3 }, return: result }\nresources:\n  assets:\n    type: local:storage:Bucket\n    properties:\n      name: assets\n      size: \${size}\n`;
/** A's refused program: in a Main.yaml, the command resource's type on line 7. */
const COMMAND_MAIN = 'resources:\n  assets:\n    type: local:storage:Bucket\n    properties:\n      name: assets\n  run:\n    type: command:local:Command\n    properties:\n      create: cat /proc/self/environ\n';
/** B's refused program: the provider on line 5, the bucket on line 10, the invoke's function on line 14. */
const AWS_PROGRAM = [
  'name: demo-app',
  'runtime: yaml',
  'resources:',
  '  aws:',
  '    type: pulumi:providers:aws',
  '    properties:',
  '      region: eu-west-1',
  '  assets:',
  '    # the same resource name as the allowed program',
  '    type: aws:s3:Bucket',
  '    options: { provider: "${aws}" }',
  'variables:',
  '  whoami:',
  '    fn::invoke: { function: command:local:run, arguments: { command: id }, return: stdout }',
  '',
].join('\n');

interface RunBody {
  runId: string;
  promotionId: string;
  tenant: string;
  state: string;
  error?: { code: string; message: string };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`packages are the installation's, two tenants with the same names (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ExampleRepository;
    const repositories: Record<string, TestRepository> = {};
    let cloud: LocalCloud;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-packages-'));
      // The product's path and the local host's own package list: plans and applies as runner jobs on its agents.
      host = await startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS }, depsOverrides: database.overrides });
      example = (await provisioningExample(root, host.stateDir, 0)).repository;
      writeExampleReferences(host.stateDir);
      for (const tenant of [A, B]) repositories[tenant] = await TestRepository.init(join(host.stateDir, 'repos', tenant));
      const created = await host.fetch(`/runtime-cloud/tenants/${B}`, { method: 'PUT', body: JSON.stringify({ edition: 'team' }), claims: admin });
      expect(created.status).toBeLessThan(300);
      cloud = createLocalCloud({ store: host.host.deps.sql, clock: host.host.deps.clock, ids: randomIds });
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    let sent = 0;
    /** Commits `files` to the tenant's repository and promotes them to the same project, stack and environment. */
    async function promoted(tenant: string, files: Record<string, string | null>, operator: object): Promise<RunBody> {
      const repository = repositories[tenant]!;
      const commit = await repository.commit({ 'app/Pulumi.development.yaml': 'config: {}\n', ...files });
      const promotion: PromotionApproved = {
        ...examplePromotion('development', example),
        promotionId: `packages-${dialect}-${++sent}`,
        tenantId: tenant,
        desiredState: { repository: pathToFileURL(repository.dir).href, commit, path: 'app', stack: 'development' },
      };
      await sendToPromotions(host, promotion, promotion.promotionId);
      const runs = async () => ((await (await host.fetch('/runtime-cloud/runs?limit=1000', { claims: operator })).json()) as { items: RunBody[] }).items;
      return eventually(async () => {
        const run = (await runs()).find((r) => r.promotionId === promotion.promotionId);
        return run && ['applied', 'failed', 'rejected'].includes(run.state) ? run : undefined;
      });
    }
    const jobsOf = (runId: string) => provisioningDb(host.host.deps.sql.db).selectFrom('provisioning_runner_jobs').select(['kind']).where('run_id', '=', runId).execute();
    const resourcesOf = async (tenant: string) => (await cloud.list('local')).filter((r) => r.scope === tenant).map((r) => `${r.type} ${String(r.properties.name)}`);

    it('when one tenant promotes a command resource and the other an allowed program on the same names, then only the first fails PACKAGE_NOT_ALLOWED, with no runner job, naming type, file and line', async () => {
      // Act
      const refused = await promoted(A, { 'app/Pulumi.yaml': PROJECT, 'app/Main.yaml': COMMAND_MAIN }, operatorA);
      const allowed = await promoted(B, { 'app/Pulumi.yaml': ALLOWED }, operatorB);

      // Assert
      expect(refused).toMatchObject({ tenant: A, state: 'failed', error: { code: 'PROVISIONING.PACKAGE_NOT_ALLOWED' } });
      expect(refused.error?.message).toContain('Main.yaml:7: command:local:Command is of package command');
      expect(await jobsOf(refused.runId)).toEqual([]);
      expect(allowed).toMatchObject({ tenant: B, state: 'applied' });
      expect((await jobsOf(allowed.runId)).map((j) => j.kind).sort()).toEqual(['apply', 'plan']);
      expect(await resourcesOf(A)).toEqual([]);
      expect(await resourcesOf(B)).toEqual(['local:storage:Bucket assets']);
    });

    it('when the other tenant then promotes an aws provider, an aws bucket and an invoke of command:local:run on the same names, then it fails naming each, no job runs, and its resources stay', async () => {
      // Act
      const refused = await promoted(B, { 'app/Pulumi.yaml': AWS_PROGRAM }, operatorB);
      const allowed = await promoted(A, { 'app/Pulumi.yaml': ALLOWED, 'app/Main.yaml': null }, operatorA);

      // Assert
      expect(refused).toMatchObject({ tenant: B, state: 'failed', error: { code: 'PROVISIONING.PACKAGE_NOT_ALLOWED' } });
      for (const named of ['Pulumi.yaml:5: pulumi:providers:aws', 'Pulumi.yaml:10: aws:s3:Bucket', 'Pulumi.yaml:14: command:local:run']) expect(refused.error?.message).toContain(named);
      expect(await jobsOf(refused.runId)).toEqual([]);
      expect(await resourcesOf(B)).toEqual(['local:storage:Bucket assets']);
      expect(allowed).toMatchObject({ tenant: A, state: 'applied' });
      expect(await resourcesOf(A)).toEqual(['local:storage:Bucket assets']);
    });
  });
}
