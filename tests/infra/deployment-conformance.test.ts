import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ensureExampleRepository, examplePromotion, type ExampleRepository } from '../../local/example-repository';
import { LOCAL_PACKAGES } from '../../local/local-packages';
import { createTestDatabase, skipDialect, type TestDatabase } from '../support/databases';
import { startTestHost, type TestHost } from '../support/local-host';
import { API_APP_ROLE_IDS, API_PRINCIPAL_ID, clientIdOf, field, inventory, principalIdOf, ROTATED_ON, runInfra, SECRET_VALUES, SQL_ADMIN_GROUP, TENANT_ID, type Declared } from './infra-mocks';

/**
 * Deployment conformance: the settings infra/ gives the Function App and each runner job (and the identities and app
 * roles it assigns them) run the product. The infra program runs under Pulumi's mocks; the local host starts with
 * exactly the app settings it wrote, and the runner agents start with exactly each job's environment, except what
 * cannot exist here: `APP_SWAPS` and `JOB_SWAPS` below, one row per setting with the reason. A setting a row swaps
 * must be there to swap, and every other setting infra writes is passed as it is. Then the example's development
 * promotion is applied, and its production promotion waits for approval and applies after a second person approves.
 */

/** The example's tenant, another tenant with the same environments, and the deployment's Git host. */
const TENANT = 'demo-team';
const OTHER = 'contoso';
const REPOSITORY = `https://dev.azure.com/${TENANT}/platform/_git/desired-state`;
/** The console application a tenant's people sign in to (the deployment's `clients`), and two of its people. */
const CONSOLE = '5d0c4a61-0000-4000-8000-00000000c0de';
const REQUESTER = { oid: '00000000-0000-4000-8000-00000000a11c', tid: TENANT_ID };
const APPROVER = { oid: '00000000-0000-4000-8000-000000000b0b', tid: TENANT_ID };
const personOf = (user: { oid: string; tid: string }) => `${user.tid}/${user.oid}`;

/** A stack's configuration as an operator sets it for this deployment (infra/README.md, "Deploy to Azure"). */
function deploymentConfig(): Record<string, string> {
  return {
    sqlAdminGroupObjectId: SQL_ADMIN_GROUP,
    authIssuer: `https://login.microsoftonline.com/${TENANT_ID}/v2.0`,
    authAudience: '3c1d2f00-0000-4000-8000-0000000000a9',
    authJwksUrl: `https://login.microsoftonline.com/${TENANT_ID}/discovery/v2.0/keys`,
    targets: JSON.stringify([
      {
        id: 'prod-we',
        kind: 'azure-subscription',
        name: 'Production West Europe',
        location: 'westeurope',
        scope: { subscriptionId: '00000000-0000-4000-8000-0000000000f1', resourceGroup: 'rg-apps' },
        runners: { max: 2 },
        tenants: [TENANT, OTHER],
      },
    ]),
    runnerImage: 'rchimages.azurecr.io/runtime-cloud-runner:2026.12.1',
    runnerRegistryId: '/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/rg-images/providers/Microsoft.ContainerRegistry/registries/rchimages',
    secretsRotatedOn: JSON.stringify(ROTATED_ON),
    sources: JSON.stringify({ [TENANT]: [{ prefix: REPOSITORY }], [OTHER]: [{ prefix: `https://dev.azure.com/${OTHER}/platform/` }] }),
    clients: JSON.stringify({ [CONSOLE]: TENANT }),
    governanceEndpoint: 'https://governance.factory.example',
    controlPlaneEndpoint: 'https://control-plane.factory.example',
    knowledgeEndpoint: 'https://knowledge.factory.example',
    configPlatformEndpoint: 'https://config.factory.example',
    deliveryEndpoint: 'https://delivery.factory.example',
    ...SECRET_VALUES,
  };
}

/** What one swap does with the value infra wrote: the value the local host gets instead, or undefined to leave it out. */
interface Swap {
  readonly why: string;
  readonly local: (deployed: string, here: Here) => string | undefined;
}
/** What exists only here: the example repository, the T-SQL shadow database, the local host. */
interface Here {
  readonly repository: ExampleRepository;
  readonly database: TestDatabase;
  readonly hostUrl?: URL;
}

const functionsHost = 'the Functions host reads it, not the app; here the local host is the Functions host';
const peer = 'the external service cannot be reached from here: the local host starts its stand-in, which speaks the same protocol and accepts the audience infra wrote';

/** Each app setting infra writes that cannot work here, and what the local host gets instead. */
const APP_SWAPS: Readonly<Record<string, Swap>> = {
  FUNCTIONS_EXTENSION_VERSION: { why: functionsHost, local: () => undefined },
  FUNCTIONS_WORKER_RUNTIME: { why: functionsHost, local: () => undefined },
  AzureWebJobsStorage__accountName: { why: `${functionsHost}; the local host keeps timers and the Durable task hub in its store`, local: () => undefined },
  ServiceBusConnection__fullyQualifiedNamespace: { why: 'Service Bus cannot run here: the local host binds the same queue and topic names to its embedded bus', local: () => undefined },
  APPLICATIONINSIGHTS_CONNECTION_STRING: { why: 'Application Insights cannot be reached: telemetry stays in the process', local: () => undefined },
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: { why: 'Application Insights cannot be reached', local: () => undefined },
  RuntimeCloud__Store__Connection: {
    why: 'Azure SQL cannot run here: the T-SQL shadow on PostgreSQL takes the Azure SQL paths (the dialect stays mssql) and checks each statement against a T-SQL grammar',
    local: (_, here) => here.database.settings.RuntimeCloud__Store__Connection,
  },
  RuntimeCloud__Tables__Connection: { why: 'Azure Table storage cannot be reached: the local host starts its Azurite table server', local: () => undefined },
  RuntimeCloud__Outbox__Bodies__Connection: { why: 'Azure Blob storage cannot be reached: the local host starts its Azurite blob server for claim-checked event bodies', local: () => undefined },
  RuntimeCloud__Auth__JwksUrl: { why: "Entra's keys cannot be reached: the local issuer signs every token with the issuer and audience infra wrote", local: () => undefined },
  RuntimeCloud__IaC__Runner: { why: 'the Pulumi CLI cannot run here: the local engine plans and applies in the same runner jobs', local: () => 'local' },
  RuntimeCloud__Targets: {
    why: 'no Azure subscription, managed identity or Blob state backend here: each Azure target becomes a local cloud target with the same id, name, location and agent pools',
    local: (deployed) => JSON.stringify((JSON.parse(deployed) as Record<string, unknown>[]).map(localTarget)),
  },
  RuntimeCloud__Provisioning__Sources: {
    why: 'no Git host here: a rule that names the deployment repository names the example repository on disk instead; every tenant keeps its own rules',
    local: (deployed, here) => deployed.replaceAll(JSON.stringify(REPOSITORY).slice(1, -1), here.repository.url),
  },
  RuntimeCloud__Governance__Endpoint: { why: peer, local: () => undefined },
  RuntimeCloud__ControlPlane__Endpoint: { why: peer, local: () => undefined },
  RuntimeCloud__Knowledge__Endpoint: { why: peer, local: () => undefined },
  RuntimeCloud__ConfigPlatform__Endpoint: { why: peer, local: () => undefined },
  RuntimeCloud__Delivery__Endpoint: { why: peer, local: () => undefined },
};
/** Settings infra does not write that the local host needs here. */
const APP_ADDITIONS: Readonly<Record<string, { readonly value: string; readonly why: string }>> = {
  RuntimeCloud__Provisioning__Packages: { value: LOCAL_PACKAGES, why: "the deployment's default packages, and the local engine's own (its programs use the local cloud's package)" },
  RuntimeCloud__IaC__Execution: { value: 'runner-jobs', why: "the product's default, said here because the test hosts' default is in process" },
  RuntimeCloud__Local__Runners: { value: '0', why: "the agents are the runner jobs' below, not the local host's own" },
  RuntimeCloud__Capacity__SeedFile: {
    value: 'none',
    why: "the local host's bundled seed is not the deployment's: in Azure nothing seeds capacity, the operator makes the runner pool, editions and tenants through the admin API (`operatorSetUp`, as the README's runbook says)",
  },
};

/**
 * What the README's runbook has the operator do once the deployment is up, through the admin API: each target's
 * runner capacity pool (its `runnerPool`), the editions and the tenants.
 */
const OPERATOR_SET_UP: readonly { readonly path: string; readonly body: unknown }[] = [
  { path: '/runtime-cloud/editions/team', body: { limits: { runner: { maxUnits: 2, maxTtlSeconds: 300 } } } },
  { path: '/runtime-cloud/pools/prod-we', body: { kind: 'runner', target: 'prod-we', capacity: 4 } },
  { path: `/runtime-cloud/tenants/${TENANT}`, body: { edition: 'team' } },
  { path: `/runtime-cloud/tenants/${OTHER}`, body: { edition: 'team' } },
];

/** Each environment variable of a runner job that cannot work here. */
const JOB_SWAPS: Readonly<Record<string, Swap>> = {
  RuntimeCloud__Runner__HostUrl: { why: "the Function App's address → the local host's", local: (_, here) => here.hostUrl?.toString() },
  RuntimeCloud__Runner__Engine: { why: 'the Pulumi CLI cannot run here: the local engine', local: () => 'local' },
  ...Object.fromEntries(
    ['Namespace', 'Topic', 'Subscription', 'ClientId'].map((part) => [
      `RuntimeCloud__Runner__Wakeups__${part}`,
      {
        why: "Service Bus cannot run here, and the local host publishes no wake-ups: this test starts the job's next execution when one ends, as the job's scale rule starts one per wake-up (tests/integration/runner-wakeups.test.ts takes wake-ups from the AMQP peer)",
        local: () => undefined,
      },
    ]),
  ),
  AZURE_CLIENT_ID: {
    why: "no managed identity here: the local issuer signs the agent's token (RuntimeCloud__Runner__Credential) for this client id with the app roles infra assigned to it",
    local: () => undefined,
  },
};

function localTarget(target: Record<string, unknown>): Record<string, unknown> {
  if (target.kind !== 'azure-subscription') throw new Error(`the conformance deployment has Azure targets only (got ${String(target.kind)})`);
  const { id, name, location, runnerPool, runnerPools } = target;
  return { id, kind: 'local-cloud', name, location, runnerPool, ...(runnerPools !== undefined ? { runnerPools } : {}) };
}

/** `deployed` with each swap applied; a swap whose setting infra did not write fails, as the product would. */
function swapped(deployed: Readonly<Record<string, string>>, swaps: Readonly<Record<string, Swap>>, here: Here): Record<string, string> {
  const missing = Object.keys(swaps).filter((key) => !(key in deployed));
  if (missing.length > 0) throw new Error(`infra does not write ${missing.join(', ')}`);
  const settings: Record<string, string> = {};
  for (const [key, value] of Object.entries(deployed)) {
    const local = key in swaps ? swaps[key]!.local(value, here) : value;
    if (local !== undefined) settings[key] = local;
  }
  return settings;
}

/** A runner job as deployed: its environment and the app roles of the identity it runs as. */
interface DeployedJob {
  readonly name: string;
  readonly env: Readonly<Record<string, string>>;
  readonly appRoles: readonly string[];
}

function deployedJobs(declared: readonly Declared[]): DeployedJob[] {
  const { all } = inventory(declared);
  const identities = all('managedidentity:UserAssignedIdentity');
  const roleNames = new Map(Object.entries(API_APP_ROLE_IDS).map(([value, id]) => [id, value]));
  const assignments = declared.filter((r) => r.type === 'azuread:index/appRoleAssignment:AppRoleAssignment');
  return all('app:Job').map((job) => {
    const containers = field(job, 'template.containers') as { env: { name: string; value: string }[] }[];
    const env = Object.fromEntries(containers[0]!.env.map(({ name, value }) => [name, value]));
    const identity = identities.find((i) => clientIdOf(i.logicalName) === env.AZURE_CLIENT_ID);
    const appRoles = assignments
      .filter((a) => identity !== undefined && a.inputs.principalObjectId === principalIdOf(identity.logicalName) && a.inputs.resourceObjectId === API_PRINCIPAL_ID)
      .map((a) => roleNames.get(a.inputs.appRoleId as string) ?? String(a.inputs.appRoleId));
    return { name: job.name, env, appRoles };
  });
}

interface RunBody {
  runId: string;
  promotionId: string;
  state: string;
  planDigest?: string;
  error?: { code: string; message: string };
}

describe.skipIf(skipDialect('mssql'))('the deployment infra describes, run with its own settings', () => {
  let declared: Declared[];
  let database: TestDatabase;
  let host: TestHost;
  let repository: ExampleRepository;
  let jobs: DeployedJob[];
  const executions = new Set<ChildProcess>();
  /** What the executions wrote, shown when a run does not end as expected. */
  const agentOutput: string[] = [];
  const workRoot = mkdtempSync(join(tmpdir(), 'rch-conformance-'));
  let stopping = false;

  beforeAll(async () => {
    ({ declared } = await runInfra(deploymentConfig()));
    jobs = deployedJobs(declared);
    database = await createTestDatabase('mssql');
    // The example repository lives in a folder of its own: the host's state dir is made by the host.
    repository = await ensureExampleRepository(join(workRoot, 'git'));
    const appSettings = field(inventory(declared).one('web:WebAppApplicationSettings'), 'properties') as Record<string, string>;
    const settings = { ...swapped(appSettings, APP_SWAPS, { repository, database }), ...Object.fromEntries(Object.entries(APP_ADDITIONS).map(([key, { value }]) => [key, value])) };
    host = await startTestHost({ settings, depsOverrides: database.overrides });
    // The ControlPlaneApi's stand-in answers from this file: the tiers, approvers and target of the tenant's environments.
    writeFileSync(
      join(host.stateDir, 'control-plane.json'),
      JSON.stringify({
        environments: [
          { id: 'env-demo-development', tenant: TENANT, name: 'development', tier: 'development', target: 'prod-we' },
          { id: 'env-demo-production', tenant: TENANT, name: 'production', tier: 'production', approvers: [personOf(REQUESTER), personOf(APPROVER)], target: 'prod-we' },
        ],
      }),
    );
    // The DeliveryHost's stand-in answers from this file: the example's release, pinned to its desired state.
    const pinned = (environment: 'development' | 'production') => examplePromotion(environment, repository);
    writeFileSync(
      join(host.stateDir, 'delivery.json'),
      JSON.stringify({ releases: [{ tenant: TENANT, ...pinned('development').release, repository: repository.url, commit: repository.commit, path: pinned('development').desiredState.path }] }),
    );
    const admin = await host.token({ roles: ['PlatformAdmin'] });
    for (const { path, body } of OPERATOR_SET_UP) expect([200, 201], path).toContain((await call(path, admin, body, 'PUT')).status);
    for (const job of jobs) await execute(job);
  }, 120_000);

  afterAll(async () => {
    stopping = true;
    await Promise.all([...executions].map((child) => new Promise((done) => (child.exitCode !== null ? done(undefined) : (child.once('exit', done), child.kill('SIGTERM'))))));
    await host?.stop();
    await database?.drop();
    rmSync(workRoot, { recursive: true, force: true });
  });

  /**
   * One execution of a runner job, as Container Apps starts it: the job's environment with `JOB_SWAPS` applied, a
   * fresh working directory, and the token its identity would get. When it exits (one job, then it ends), the next
   * execution starts, as the job's scale rule starts one per wake-up.
   */
  async function execute(job: DeployedJob): Promise<void> {
    if (stopping) return;
    const credential = await host.token({ client: job.env.AZURE_CLIENT_ID, roles: job.appRoles, subject: `managed-identity-${job.name}` });
    const id = `${job.name}-${executions.size}-${Date.now()}`;
    const child = spawn(process.execPath, ['--require', require.resolve('tsx/cjs'), resolve(__dirname, '../../local/runner-agent.ts')], {
      cwd: workRoot,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: workRoot,
        ...swapped(job.env, JOB_SWAPS, { repository, database, hostUrl: host.url }),
        RuntimeCloud__Runner__Credential: credential,
        RuntimeCloud__Runner__Agent: id,
        RuntimeCloud__Runner__WorkDir: join(workRoot, 'executions', id),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (chunk: Buffer) => agentOutput.push(...chunk.toString().split('\n').filter((line) => line.length > 0).map((line) => `${id}: ${line}`));
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    executions.add(child);
    child.once('exit', () => {
      executions.delete(child);
      void execute(job);
    });
  }

  async function call(path: string, bearer: string, body?: unknown, method = body === undefined ? 'GET' : 'POST'): Promise<{ status: number; json: Record<string, unknown> }> {
    const response = await fetch(new URL(path, host.url), {
      method,
      headers: { authorization: `Bearer ${bearer}` },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: response.status, json: (await response.json()) as Record<string, unknown> };
  }

  /** A person of the tenant, signed in to its console: a delegated token whose tenant comes from the deployment's `clients`. */
  const person = (user: { oid: string; tid: string }) => host.token({ user, client: CONSOLE, roles: ['Operator'], scopes: ['factory.runtime.read', 'factory.provisioning.operate'] });

  async function promote(environment: 'development' | 'production'): Promise<string> {
    const promotion = { ...examplePromotion(environment, repository), requestedBy: personOf(REQUESTER) };
    const admin = await host.token({ roles: ['PlatformAdmin'] });
    const sent = await call('/runtime-cloud/local/queues/runtime-cloud-promotions/messages', admin, { body: promotion });
    expect(sent.status).toBe(201);
    return promotion.promotionId;
  }

  async function runOf(promotionId: string, states: readonly string[]): Promise<RunBody> {
    const reader = await person(APPROVER);
    return vi.waitFor(
      async () => {
        const page = await call('/runtime-cloud/runs?limit=1000', reader);
        const run = (page.json.items as RunBody[] | undefined)?.find((r) => r.promotionId === promotionId);
        if (!run || !states.includes(run.state)) {
          // What the host knows of the runner pools says why a run waits (no agent, a job unclaimed).
          const pools = await call('/runtime-cloud/runner-pools', await host.token({ roles: ['PlatformAdmin'] }));
          throw new Error(`run of ${promotionId}: ${run ? `${run.state} ${JSON.stringify(run.error ?? {})}` : 'not taken in yet'}; runner pools: ${JSON.stringify(pools.json)}; agents: ${agentOutput.slice(-10).join('\n')}`);
        }
        return run;
      },
      { timeout: 60_000, interval: 100 },
    );
  }

  it('when the swaps are listed, then each names a setting infra writes and says why it cannot work here', () => {
    for (const [key, swap] of Object.entries({ ...APP_SWAPS, ...JOB_SWAPS })) expect(swap.why.length, key).toBeGreaterThan(20);
    expect(jobs.map((j) => j.env.RuntimeCloud__Runner__Pool).sort()).toEqual([`prod-we.${OTHER}`, `prod-we.${TENANT}`]);
    for (const job of jobs) expect(job.appRoles, job.name).toEqual(['factory.runner.agent']);
  });

  it('when the example development promotion is sent, then its run applies on the tenant\'s own runner job and ProvisioningApplied is published', async () => {
    const promotionId = await promote('development');

    const run = await runOf(promotionId, ['applied', 'failed', 'rejected']);

    expect(run).toMatchObject({ state: 'applied' });
    const admin = await host.token({ roles: ['PlatformAdmin'] });
    const published = await vi.waitFor(
      async () => {
        const page = await call('/runtime-cloud/local/topics/runtime-cloud-events/messages?after=0', admin);
        const found = (page.json.items as { correlationId: string | null; body: { type: string } }[]).filter((m) => m.correlationId === run.runId).map((m) => m.body.type);
        if (!found.includes('ProvisioningApplied')) throw new Error(`published for the run: ${found.join(', ')}`);
        return found;
      },
      { timeout: 15_000, interval: 200 },
    );
    expect(published).toContain('ProvisioningApplied');
    // The DeliveryHost is told how the run ended, besides the event (the reports go out every five seconds).
    const reports = await vi.waitFor(
      async () => {
        const page = await call(`/runtime-cloud/local/external-services/delivery/reports?tenant=${TENANT}&runId=${run.runId}`, admin);
        const items = page.json.items as { outcome: string }[];
        if (items.length === 0) throw new Error(`run ${run.runId} not reported yet`);
        return items;
      },
      { timeout: 20_000, interval: 200 },
    );
    expect(reports).toEqual([expect.objectContaining({ outcome: 'applied' })]);
  }, 120_000);

  it('when the example production promotion is sent, then it waits for approval, its requester cannot approve it, and it applies after a second person approves', async () => {
    const promotionId = await promote('production');
    const waiting = await runOf(promotionId, ['awaiting-approval', 'applied', 'failed', 'rejected']);
    expect(waiting.state).toBe('awaiting-approval');
    const planDigest = waiting.planDigest ?? '';

    const self = await call(`/runtime-cloud/runs/${waiting.runId}/approve`, await person(REQUESTER), { planDigest });
    const approved = await call(`/runtime-cloud/runs/${waiting.runId}/approve`, await person(APPROVER), { planDigest, comment: 'read the plan' });
    const run = await runOf(promotionId, ['applied', 'failed']);

    expect(self).toMatchObject({ status: 403, json: { code: 'PROVISIONING.SELF_APPROVAL' } });
    expect(approved.status).toBe(200);
    expect(run.state).toBe('applied');
  }, 180_000);
});
