import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { HttpRequest, InvocationContext } from '@azure/functions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { provideRuntime } from '../../functions/runtime';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { createDeps, type Deps } from '../../shared/deps';
import { parseConfig } from '../../shared/platform/config/config';
import { runHealthChecks } from '../../shared/platform/health/health';

/**
 * Health of the host as infra deploys it to Azure (infra/index.ts app settings): the Pulumi engine, runner jobs, an
 * Azure target. The Function App has no Pulumi CLI, so health must not ask one: a `pulumi` on the PATH that records
 * each call shows whether it was run. The runner pools' check stands for the engine. Remote repositories are fetched
 * into a writable folder of the instance, not the app's (read-only when it runs from a package).
 */
describe('health of the host composed as in Azure', () => {
  const root = mkdtempSync(join(tmpdir(), 'rch-azure-health-'));
  const calls = join(root, 'pulumi-calls');
  let tables: RunningTableServer;
  let target: Server;
  let targetUrl: string;
  const savedPath = process.env.PATH;

  beforeAll(async () => {
    // A CLI that answers like `pulumi version` and leaves a trace of every call.
    const bin = join(root, 'bin');
    const cli = join(bin, 'pulumi');
    mkdirSync(bin);
    writeFileSync(cli, `#!/bin/sh\necho "$@" >> '${calls}'\necho v3.276.0\n`);
    chmodSync(cli, 0o755);
    process.env.PATH = `${bin}${delimiter}${savedPath ?? ''}`;
    tables = await startTableServer();
    // The Azure target's endpoint: any HTTP answer means reachable.
    target = createServer((_request, response) => response.writeHead(401).end());
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}/`;
  });
  afterAll(async () => {
    process.env.PATH = savedPath;
    await tables?.close();
    await new Promise((resolve) => target?.close(resolve));
    rmSync(root, { recursive: true, force: true });
  });

  const azureSettings = (execution: 'runner-jobs' | 'in-process') => ({
    RuntimeCloud__IaC__Runner: 'pulumi',
    RuntimeCloud__IaC__Execution: execution,
    RuntimeCloud__Store__Connection: join(mkdtempSync(join(root, 'store-')), 'runtime-cloud.sqlite'),
    RuntimeCloud__Tables__Connection: tables.connectionString,
    // Azure's bus: nothing here answers for it, and its inbox-lag checks say so (they are not what this file checks).
    ServiceBusConnection__fullyQualifiedNamespace: 'rch-health.servicebus.windows.net',
    RuntimeCloud__Targets: JSON.stringify([
      {
        id: 'prod-we',
        kind: 'azure-subscription',
        name: 'Production West Europe',
        endpoint: targetUrl,
        scope: { subscriptionId: '00000000-0000-0000-0000-000000000001', resourceGroup: 'rg-prod' },
        backend: { url: 'azblob://state-{tenant}?storage_account=stprod' },
      },
    ]),
  });

  async function healthOf(deps: Deps) {
    try {
      return await runHealthChecks(deps.healthChecks);
    } finally {
      await deps.close();
    }
  }

  it('when plans and applies run in runner jobs, then health runs no CLI and has no engine check: the runner pools stand for the engine', async () => {
    // Arrange
    rmSync(calls, { force: true });
    const deps = await createDeps(parseConfig(azureSettings('runner-jobs')), { jwks: { keys: [] } });

    // Act
    const report = await healthOf(deps);

    // Assert
    const byName = new Map(report.checks.map((c) => [c.name, c]));
    expect(byName.has('iac-runner')).toBe(false);
    expect(deps.iac).toBeUndefined();
    expect(byName.get('runner-pools')).toMatchObject({ status: 'healthy', details: { pools: [] } });
    expect(byName.get('targets')).toMatchObject({ status: 'healthy' });
    expect(existsSync(calls)).toBe(false);
    // Remote repositories are fetched to the instance's temporary folder, which it can write, never the app's folder.
    expect(byName.get('git-cache')).toMatchObject({ status: 'healthy', details: { folder: join(tmpdir(), 'runtime-cloud-git-cache') } });
  });

  it('when the Git cache folder cannot be written, then its check says so, naming the folder', async () => {
    // Arrange: a folder below a file cannot be made, whoever runs the test.
    const file = join(root, 'not-a-folder');
    writeFileSync(file, '');
    const folder = join(file, 'git-cache');
    const deps = await createDeps(parseConfig({ ...azureSettings('runner-jobs'), RuntimeCloud__Provisioning__GitCacheDir: folder }), { jwks: { keys: [] } });

    // Act
    const report = await healthOf(deps);

    // Assert
    const check = report.checks.find((c) => c.name === 'git-cache');
    expect(check).toMatchObject({ status: 'unhealthy', error: expect.stringContaining(folder) });
  });

  it('when the targets are asked for, then the engine is named as running in runner jobs, and no CLI is asked its version', async () => {
    // Arrange: the function app on these deps, and a caller with the scope.
    rmSync(calls, { force: true });
    const keys = await ensureLocalKeys(join(root, 'keys'));
    const config = parseConfig(azureSettings('runner-jobs'));
    const deps = await createDeps(config, { jwks: keys.jwks });
    provideRuntime({ config, deps });
    const { runtimeCloudTargets } = await import('../../functions/host/targets.js');
    const token = await issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, scopes: ['factory.meta.read'] });

    // Act
    const response = await runtimeCloudTargets(
      new HttpRequest({ method: 'GET', url: 'http://localhost/runtime-cloud/meta/targets', headers: { authorization: `Bearer ${token}` } }),
      new InvocationContext({ functionName: 'RuntimeCloudTargets' }),
    ).finally(() => deps.close());

    // Assert
    expect(response.status).toBe(200);
    expect((response.jsonBody as { iacRunner: unknown }).iacRunner).toEqual({ name: 'pulumi', version: null, runsIn: 'runner-jobs' });
    expect(existsSync(calls)).toBe(false);
  });

  it('when the engine runs in the host (in process), then its check asks the CLI for its version', async () => {
    // Arrange: the control of the test above, showing that a call of the CLI would be seen.
    rmSync(calls, { force: true });
    const deps = await createDeps(parseConfig(azureSettings('in-process')), { jwks: { keys: [] }, inProcessEngine: true });

    // Act
    const report = await healthOf(deps);

    // Assert
    expect(report.checks.find((c) => c.name === 'iac-runner')).toMatchObject({ status: 'healthy', details: { runner: 'pulumi', version: 'pulumi v3.276.0' } });
    expect(existsSync(calls)).toBe(true);
  });
});
