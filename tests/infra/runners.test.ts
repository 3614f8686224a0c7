import { beforeAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { stateNames, type AzureTarget } from '../../infra/targets';
import { normalArmId, resourceGroupId } from '../../shared/inventory/arm-resource';
import { parseConfig } from '../../shared/platform/config/config';
import { agentPoolOf, runnerTargetOf } from '../../shared/platform/config/targets';
import {
  API_APP_ROLE_IDS,
  API_PRINCIPAL_ID,
  APP_PRINCIPAL_ID,
  clientIdOf,
  field,
  GROUP_A,
  inventory,
  matchesSqlFilter,
  relayedPropertiesOf,
  principalIdOf,
  ROLE,
  roleOf,
  RUNNER_IMAGE,
  RUNNER_REGISTRY_ID,
  runInfra,
  SECRET_VALUES,
  SUBSCRIPTION_ID,
  TARGET_SUBSCRIPTIONS,
  TARGETS,
  TENANTS,
  text,
  validConfig,
  type Declared,
} from './infra-mocks';

/**
 * The runner agents of the infra program under Pulumi's mocks (./infra-mocks.ts), with two Azure targets `a` and `b`
 * (in two subscriptions; `b` in pool `pool-b` with 4 runners) serving the same three tenants (`a` groups contoso and
 * fabrikam in one agent pool) and an on-prem target `c`: a job and an identity per agent pool, each identity able to
 * change its own target and reach its own tenants' state only, and nothing the Function App can use able to change
 * any target.
 */

type TargetId = 'a' | 'b';
const SCOPES = {
  a: `/subscriptions/${TARGET_SUBSCRIPTIONS.a}/resourceGroups/rg-target-a`,
  b: `/subscriptions/${TARGET_SUBSCRIPTIONS.b}/resourceGroups/rg-target-b`,
};
/**
 * The agent pools the contract gives this config, written out rather than derived: target `a`'s group, then a pool
 * `<runnerPool>.<tenant>` for every tenant in no group.
 */
const POOLS: readonly { id: string; target: TargetId; tenants: readonly string[] }[] = [
  { id: 'a-shared', target: 'a', tenants: ['contoso', 'fabrikam'] },
  { id: 'a.northwind', target: 'a', tenants: ['northwind'] },
  { id: 'pool-b.contoso', target: 'b', tenants: ['contoso'] },
  { id: 'pool-b.fabrikam', target: 'b', tenants: ['fabrikam'] },
  { id: 'pool-b.northwind', target: 'b', tenants: ['northwind'] },
];

let declared: Declared[] = [];
let { all, one, byId } = inventory(declared);

beforeAll(async () => {
  ({ declared } = await runInfra(validConfig()));
  ({ all, one, byId } = inventory(declared));
});

const assignmentsOf = (principalId: string) => all('authorization:RoleAssignment').filter((a) => field(a, 'principalId') === principalId);
/** Whether a role at `scope` applies to `target`: the same scope, one above it, or one inside it. */
const covers = (scope: string, target: string) => {
  const [s, t] = [scope.toLowerCase().replace(/\/+$/, ''), target.toLowerCase()];
  return s === t || t.startsWith(`${s}/`) || s.startsWith(`${t}/`) || s === '';
};
/** `role @ scope`, the scope as `type/name` of a declared resource or else as written. */
const grantsOf = (principalId: string) =>
  assignmentsOf(principalId)
    .map((a) => {
      const scope = byId(field(a, 'scope'));
      return `${roleOf(a)} @ ${scope ? `${scope.type.replace('azure-native:', '')}/${scope.name}` : text(a, 'scope')}`;
    })
    .sort();
function envOf(job: Declared): Record<string, string> {
  const containers = field(job, 'template.containers') as { env: { name: string; value?: string }[] }[];
  expect(containers, job.name).toHaveLength(1);
  return Object.fromEntries(containers[0]!.env.map(({ name, value }) => [name, value ?? '']));
}
/** The job whose agents serve this pool (by the pool its container is told), and the identities it runs with. */
function poolOf(poolId: string) {
  const job = one('app:Job', (j) => envOf(j).RuntimeCloud__Runner__Pool === poolId);
  const identities = ((field(job, 'identity.userAssignedIdentities') as string[] | undefined) ?? []).map((id) => byId(id)!);
  // The agent acts with the identity its AZURE_CLIENT_ID names; the scale rule reads the bus with the other.
  const runner = identities.find((i) => clientIdOf(i.name) === envOf(job).AZURE_CLIENT_ID);
  const wakeups = byId(field(job, 'configuration.eventTriggerConfig.scale.rules.0.identity'));
  expect(runner, poolId).toBeDefined();
  expect(wakeups, poolId).toBeDefined();
  return { job, identities, runner: runner!, wakeups: wakeups!, subscription: text(job, 'configuration.eventTriggerConfig.scale.rules.0.metadata.subscriptionName') };
}
function stateOf(target: TargetId) {
  const names = stateNames('rch', 'test', TARGETS.find((t) => t.id === target) as unknown as AzureTarget);
  return { names, account: one('storage:StorageAccount', (s) => s.name === names.account), vault: one('keyvault:Vault', (v) => v.name === names.vault) };
}
/** The scope of a tenant's state container and of its key on a target, as role assignments name them. */
function tenantScopes(target: TargetId, tenant: string) {
  const { account, vault } = stateOf(target);
  return { container: `${account.id}/blobServices/default/containers/state-${tenant}`, key: `${vault.id}/keys/pulumi-${tenant}` };
}
/** Every pool identity (agent and scale rule), by principal id, with the pool it belongs to. */
interface PoolPrincipal {
  readonly pool: (typeof POOLS)[number];
  readonly kind: 'runner' | 'wakeups';
}
function poolPrincipals(): Map<string, PoolPrincipal> {
  return new Map(
    POOLS.flatMap((pool): [string, PoolPrincipal][] => {
      const { runner, wakeups } = poolOf(pool.id);
      return [
        [principalIdOf(runner.name), { pool, kind: 'runner' }],
        [principalIdOf(wakeups.name), { pool, kind: 'wakeups' }],
      ];
    }),
  );
}

describe('runner agents under Pulumi mocks', () => {
  it('when two Azure targets serve three tenants, then each agent pool (a group, or a tenant alone) gets an event-triggered Container Apps Job of its own, and the on-prem target none', () => {
    expect(all('app:Job').map((j) => envOf(j).RuntimeCloud__Runner__Pool).sort()).toEqual(POOLS.map((p) => p.id).sort());
    const names = all('app:Job').map((j) => j.name);
    expect(new Set(names).size).toBe(POOLS.length);
    for (const name of names) expect(name).toMatch(/^[a-z](?:[a-z0-9]|-(?=[a-z0-9])){0,31}$/);
    const environment = one('app:ManagedEnvironment');
    const namespace = one('servicebus:Namespace').name;
    for (const pool of POOLS) {
      const { job, runner, wakeups, identities } = poolOf(pool.id);
      expect(field(job, 'environmentId'), pool.id).toBe(environment.id);
      // Its own two identities: the one its agent acts with and the one its scale rule reads the bus with.
      expect(identities.map((i) => i.id).sort(), pool.id).toEqual([runner.id, wakeups.id].sort());
      expect(runner.id, pool.id).not.toBe(wakeups.id);
      expect(field(job, 'identity.type'), pool.id).toBe('UserAssigned');
      expect(field(job, 'configuration.triggerType'), pool.id).toBe('Event');
      expect(field(job, 'configuration.replicaTimeout'), pool.id).toBeGreaterThanOrEqual(4 * 60 * 60);
      // The platform never runs an apply a second time: the host decides.
      expect(field(job, 'configuration.replicaRetryLimit'), pool.id).toBe(0);
      expect(field(job, 'configuration.eventTriggerConfig'), pool.id).toMatchObject({ parallelism: 1, replicaCompletionCount: 1, scale: { minExecutions: 0, maxExecutions: pool.target === 'a' ? 2 : 4 } });
      const rules = field(job, 'configuration.eventTriggerConfig.scale.rules') as { metadata: { subscriptionName: string } }[];
      expect(rules, pool.id).toEqual([
        { name: 'runner-wakeups', type: 'azure-servicebus', metadata: { namespace, topicName: EVENTS_TOPIC, subscriptionName: rules[0]!.metadata.subscriptionName, messageCount: '1' }, identity: wakeups.id },
      ]);
      expect(field(job, 'configuration.registries'), pool.id).toEqual([{ server: 'rchimages.azurecr.io', identity: runner.id }]);
      expect(field(job, 'configuration'), pool.id).not.toHaveProperty('secrets');
      expect(field(job, 'template.containers.0.image'), pool.id).toBe(RUNNER_IMAGE);
    }
    // No identity serves two pools' jobs.
    const used = all('app:Job').flatMap((j) => field(j, 'identity.userAssignedIdentities') as string[]);
    expect(new Set(used).size).toBe(used.length);
    // Logs through Azure Monitor: the log-analytics destination would need the workspace's shared key.
    expect(field(environment, 'appLogsConfiguration')).toEqual({ destination: 'azure-monitor' });
  });

  it("when a job's container starts, then its environment names the host, its pool, its audience and its own identity, and nothing else (each job names its tenant's state)", () => {
    const app = one('web:WebApp');
    for (const pool of POOLS) {
      const { job, runner } = poolOf(pool.id);
      expect(envOf(job), pool.id).toEqual({
        RuntimeCloud__Runner__HostUrl: `https://${app.name}.azurewebsites.net`,
        RuntimeCloud__Runner__Pool: pool.id,
        RuntimeCloud__Runner__Audience: 'api://runtime-cloud',
        AZURE_CLIENT_ID: clientIdOf(runner.name),
        RuntimeCloud__Runner__Engine: 'pulumi',
        // One job per execution: a fresh container, so nothing a program leaves behind meets the next job.
        RuntimeCloud__Runner__OneJob: 'true',
      });
    }
  });

  it('when a job is declared, then no secret or connection of the host is in its environment', () => {
    const settings = appSettings();
    // Values of the host that name or reach its own stores: none belongs in a runner's environment.
    const hostValues = [
      settings.RuntimeCloud__Store__Connection!,
      settings.ServiceBusConnection__fullyQualifiedNamespace!,
      settings.AzureWebJobsStorage__accountName!,
      settings.RuntimeCloud__Tables__Connection!,
      settings.APPLICATIONINSIGHTS_CONNECTION_STRING!,
    ];
    for (const job of all('app:Job')) {
      const env = envOf(job);
      expect(Object.keys(env).filter((key) => /^ARM_|_SECRET$|PASSWORD|CONNECTION|SIGNING|_KEY$/i.test(key)), job.name).toEqual([]);
      for (const [key, value] of Object.entries(env)) {
        expect(value, `${job.name} ${key}`).not.toMatch(/AccountKey|Password|SharedAccessKey|client_secret|@Microsoft\.KeyVault/i);
        for (const secret of Object.values(SECRET_VALUES)) expect(value, `${job.name} ${key}`).not.toContain(secret);
        for (const hostValue of hostValues) expect(value, `${job.name} ${key}`).not.toContain(hostValue);
      }
      const containers = field(job, 'template.containers') as { env: { secretRef?: string }[] }[];
      expect(containers[0]!.env.filter((e) => e.secretRef !== undefined), job.name).toEqual([]);
    }
  });

  it("when roles are assigned to a pool's identity, then it may change its own target's resource group, use its own tenants' containers and keys and pull the image, nothing else: no role on the other target", () => {
    for (const pool of POOLS) {
      const { runner, wakeups, subscription } = poolOf(pool.id);
      const principal = principalIdOf(runner.name);
      expect(grantsOf(principal), pool.id).toEqual(
        [
          `contributor @ ${SCOPES[pool.target]}`,
          ...pool.tenants.flatMap((tenant) => [`storageBlobDataContributor @ ${tenantScopes(pool.target, tenant).container}`, `keyVaultCryptoUser @ ${tenantScopes(pool.target, tenant).key}`]),
          `acrPull @ ${RUNNER_REGISTRY_ID}`,
        ].sort(),
      );
      const contributor = assignmentsOf(principal).find((a) => roleOf(a) === 'contributor')!;
      expect(text(contributor, 'roleDefinitionId')).toMatch(new RegExp(`^/subscriptions/${TARGET_SUBSCRIPTIONS[pool.target]}/`));
      const other = pool.target === 'a' ? 'b' : 'a';
      expect(assignmentsOf(principal).filter((a) => covers(text(a, 'scope'), SCOPES[other])), `${pool.id} on ${other}`).toEqual([]);
      // The scale rule's identity receives its own pool's wake-ups and nothing else.
      expect(grantsOf(principalIdOf(wakeups.name)), pool.id).toEqual([`serviceBusDataReceiver @ servicebus:Subscription/${subscription}`]);
    }
  });

  it("when any role reaches into a target's state account or vault, then it is a pool identity of that target on a container or key of a tenant it serves, and each tenant's state is reached by its own pool alone", () => {
    const principals = poolPrincipals();
    const reached = new Map<string, string[]>();
    for (const target of ['a', 'b'] as const) {
      const { account, vault } = stateOf(target);
      const inside = all('authorization:RoleAssignment').filter((a) => [account.id, vault.id].some((id) => covers(text(a, 'scope'), id)));
      expect(inside.length, target).toBeGreaterThan(0);
      for (const a of inside) {
        const scope = text(a, 'scope');
        const owner = principals.get(text(a, 'principalId'));
        expect(owner?.kind, `${a.name}: a pool's agent identity`).toBe('runner');
        expect(owner!.pool.target, a.name).toBe(target);
        // Never the account or the vault as a whole: one tenant's container, or one tenant's key.
        const tenant = new RegExp(`^${account.id}/blobServices/default/containers/state-([a-z0-9-]+)$`).exec(scope)?.[1] ?? new RegExp(`^${vault.id}/keys/pulumi-([a-z0-9-]+)$`).exec(scope)?.[1];
        expect(tenant, `${a.name} @ ${scope}`).toBeDefined();
        expect(owner!.pool.tenants, `${a.name}: ${owner!.pool.id} reaches ${tenant}`).toContain(tenant);
        const key = `${target}/${tenant!}/${scope === tenantScopes(target, tenant!).container ? 'state' : 'key'}`;
        reached.set(key, [...(reached.get(key) ?? []), owner!.pool.id]);
      }
    }
    // Each tenant's container and key on each target: exactly one identity, its pool's (grouped tenants share theirs).
    const expected = new Map(POOLS.flatMap((pool) => pool.tenants.flatMap((tenant) => ['state', 'key'].map((what) => [`${pool.target}/${tenant}/${what}`, [pool.id]] as const))));
    expect(Object.fromEntries(reached)).toEqual(Object.fromEntries(expected));
    // And so no identity reaches two tenants' state but a group's, and none reaches a tenant on the other target.
    for (const pool of POOLS) {
      const tenantsReached = new Set([...reached].filter(([, pools]) => pools.includes(pool.id)).map(([key]) => key.split('/').slice(0, 2).join('/')));
      expect([...tenantsReached].sort(), pool.id).toEqual(pool.tenants.map((t) => `${pool.target}/${t}`).sort());
    }
  });

  it("when roles are assigned to pool identities, then none reaches the host's SQL server or database, its Service Bus namespace, queue or topic, its storage account or vault, its resource group or subscription", () => {
    const host = [
      one('sql:Server').id,
      one('sql:Database').id,
      one('servicebus:Namespace').id,
      one('servicebus:Queue').id,
      one('servicebus:Topic').id,
      ...['provisioning', 'inventory'].map((name) => one('servicebus:Subscription', (s) => s.name === name).id),
      one('storage:StorageAccount', (s) => s.name === 'rchstore').id,
      one('keyvault:Vault', (v) => v.name === 'rch-kv').id,
      one('resources:ResourceGroup').id,
      `/subscriptions/${SUBSCRIPTION_ID}/resourceGroups/${one('resources:ResourceGroup').name}`,
    ];
    const principals = poolPrincipals();
    expect(principals.size).toBe(POOLS.length * 2);
    for (const principal of principals.keys()) {
      for (const a of assignmentsOf(principal)) {
        for (const id of host) expect(covers(text(a, 'scope'), id), `${a.name} @ ${text(a, 'scope')} reaches ${id}`).toBe(false);
        // Nothing at the deployment's subscription, which holds all of the host's resources.
        expect(text(a, 'scope').toLowerCase().replace(/\/+$/, ''), a.name).not.toBe(`/subscriptions/${SUBSCRIPTION_ID}`);
      }
      // The agent never reads the bus: only the scale rule's identity has a Service Bus role.
      if (principals.get(principal)!.kind === 'runner') expect(assignmentsOf(principal).filter((a) => roleOf(a).startsWith('serviceBus')), principal).toEqual([]);
    }
  });

  it("when the host maps agents' Entra client ids to pools, then every pool's agent identity is there with its own pool, and no other identity", () => {
    const { iac } = parseConfig(appSettings());
    expect(iac.agents).toEqual(Object.fromEntries(POOLS.map((pool) => [clientIdOf(poolOf(pool.id).runner.name), pool.id])));
  });

  it("when Entra issues an agent's token, then it carries the host API's agent app role: each pool's agent identity is assigned it, and no other identity any app role", () => {
    const assignments = declared.filter((r) => r.type === 'azuread:index/appRoleAssignment:AppRoleAssignment');
    const agentRole = API_APP_ROLE_IDS['factory.runner.agent'];

    expect(assignments.map((a) => [a.inputs.principalObjectId, a.inputs.appRoleId, a.inputs.resourceObjectId]).sort()).toEqual(
      POOLS.map((pool) => [principalIdOf(poolOf(pool.id).runner.name), agentRole, API_PRINCIPAL_ID]).sort(),
    );
  });

  it("when the host reads RuntimeCloud__Targets, then it parses, carries target a's group, and the contract's default-pool rule over it gives exactly the pools deployed", () => {
    const config = parseConfig(appSettings());
    const raw = JSON.parse(appSettings().RuntimeCloud__Targets!) as { id: string; runnerPools?: { id: string; tenants: string[] }[] }[];
    expect(raw.map((t) => [t.id, t.runnerPools])).toEqual([
      ['a', [GROUP_A]],
      ['b', undefined],
      ['c', undefined],
    ]);
    // The host's own rule (agentPoolOf): each tenant's pool on each target, with the tenants that pool serves.
    const hostPools = (['a', 'b'] as const).flatMap((id) => {
      const runner = runnerTargetOf(config.targets.find((t) => t.id === id)!);
      const ids = [...new Set(TENANTS.map((tenant) => agentPoolOf(runner, tenant)))];
      return ids.map((pool) => ({ id: pool, target: id, tenants: TENANTS.filter((tenant) => agentPoolOf(runner, tenant) === pool) }));
    });
    expect(hostPools).toEqual(POOLS);
    expect(all('app:Job').map((j) => envOf(j).RuntimeCloud__Runner__Pool).sort()).toEqual(hostPools.map((p) => p.id).sort());
  });

  it('when roles are assigned to an observer identity, then it is Reader on its own target only', () => {
    for (const target of ['a', 'b'] as const) {
      expect(grantsOf(principalIdOf(`observer-${target}`)), target).toEqual([`reader @ ${SCOPES[target]}`]);
    }
  });

  it("when the app's targets setting names a target's observer identity, then that identity is Reader on exactly the resource group the ARM observer lists, with the Reader role of the target's subscription", () => {
    // The drift scans' view: RuntimeCloud__Targets as the Function App gets it (scope and observer client id).
    const azureTargets = (JSON.parse(appSettings().RuntimeCloud__Targets!) as { id: string; scope?: { subscriptionId: string; resourceGroup: string }; observerClientId?: string }[]).filter((t) => t.scope);
    expect(azureTargets.map((t) => t.id)).toEqual(['a', 'b']);
    for (const target of azureTargets) {
      const observer = all('managedidentity:UserAssignedIdentity').find((i) => clientIdOf(i.name) === target.observerClientId);
      expect(observer, target.id).toBeDefined();
      const assignments = assignmentsOf(principalIdOf(observer!.name));
      expect(assignments, target.id).toHaveLength(1);
      expect(normalArmId(text(assignments[0]!, 'scope')), target.id).toBe(resourceGroupId(target.scope!.subscriptionId, target.scope!.resourceGroup));
      expect(text(assignments[0]!, 'roleDefinitionId')).toBe(`/subscriptions/${target.scope!.subscriptionId}/providers/Microsoft.Authorization/roleDefinitions/${ROLE.reader}`);
    }
  });

  it('when the Function App can use an identity, then none of its roles on any target scope is other than Reader', () => {
    const app = one('web:WebApp');
    const userAssigned = (field(app, 'identity.userAssignedIdentities') as string[] | undefined) ?? [];
    const usable = [APP_PRINCIPAL_ID, ...userAssigned.map((id) => principalIdOf(byId(id)!.name))];
    // Exactly the system-assigned identity and the observers: a pool's identity is never the app's.
    expect(usable.sort()).toEqual([APP_PRINCIPAL_ID, principalIdOf('observer-a'), principalIdOf('observer-b')].sort());
    const onTargets = all('authorization:RoleAssignment').filter(
      (a) => usable.includes(text(a, 'principalId')) && Object.values(SCOPES).some((scope) => covers(text(a, 'scope'), scope)),
    );
    expect(onTargets.length).toBeGreaterThan(0);
    for (const a of onTargets) expect(roleOf(a), `${a.name} @ ${text(a, 'scope')}`).toBe('reader');
  });

  it("when a pool's subscription is declared, then its filter passes that pool's job wake-ups only (not those of the same tenant's pool on the other target)", () => {
    const relayed = EVENT_TYPES.map((type) => relayedPropertiesOf(type));
    for (const { id: pool } of POOLS) {
      const name = poolOf(pool).subscription;
      const subscription = one('servicebus:Subscription', (s) => s.name === name);
      expect(field(subscription, 'topicName'), pool).toBe(EVENTS_TOPIC);
      const rule = one('servicebus:DefaultRule', (r) => field(r, 'subscriptionName') === name);
      expect(field(rule, 'filterType')).toBe('SqlFilter');
      const expression = text(rule, 'sqlFilter.sqlExpression');
      // The wake-up as the outbox relay really sends it: a RunnerJobDispatched event whose subject is the pool.
      expect(matchesSqlFilter(expression, relayedPropertiesOf('RunnerJobDispatched', pool)), `${pool}: its own, relayed`).toBe(true);
      expect(matchesSqlFilter(expression, { type: 'RunnerJobDispatched', pool }), `${pool}: its own`).toBe(true);
      for (const other of POOLS.filter((p) => p.id !== pool)) {
        expect(matchesSqlFilter(expression, { type: 'RunnerJobDispatched', pool: other.id }), `${pool}: ${other.id}'s`).toBe(false);
      }
      expect(matchesSqlFilter(expression, { type: 'RunnerJobDispatched' }), `${pool}: no pool`).toBe(false);
      expect(matchesSqlFilter(expression, { type: 'ProvisioningApplied', pool }), `${pool}: another type`).toBe(false);
      // Every event type as relayed without a pool, RunnerJobDispatched included.
      for (const properties of relayed) expect(matchesSqlFilter(expression, properties), `${pool}: ${String(properties.type)}`).toBe(false);
    }
    // One rule per subscription: the host's two and one per pool, none for the on-prem target.
    const pools = POOLS.map((p) => poolOf(p.id).subscription);
    expect(all('servicebus:DefaultRule').map((r) => field(r, 'subscriptionName')).sort()).toEqual(['inventory', 'provisioning', ...pools].sort());
    expect(new Set(pools).size).toBe(POOLS.length);
  });

  it("when a target's state is declared, then its account is Entra-only and versioned, its vault RBAC with purge protection, each tenant has its own container and key there, and the names fit Azure's limits", () => {
    for (const target of ['a', 'b'] as const) {
      const { names, account, vault } = stateOf(target);
      expect(names.account).toMatch(/^[a-z0-9]{3,24}$/);
      expect(names.vault).toMatch(/^[a-z][a-z0-9-]{1,22}[a-z0-9]$/);
      expect(account.inputs, target).toMatchObject({ minimumTlsVersion: 'TLS1_2', allowSharedKeyAccess: false, allowBlobPublicAccess: false, defaultToOAuthAuthentication: true });
      const blobs = one('storage:BlobServiceProperties', (b) => field(b, 'accountName') === account.name);
      expect(blobs.inputs, target).toMatchObject({ isVersioningEnabled: true, deleteRetentionPolicy: { enabled: true } });
      expect(field(vault, 'properties'), target).toMatchObject({ enableRbacAuthorization: true, enableSoftDelete: true, enablePurgeProtection: true });
      // The names the target's backend gives each tenant (`state-{tenant}`, `pulumi-{tenant}`): made here, not by the agents.
      const containers = all('storage:BlobContainer').filter((c) => field(c, 'accountName') === account.name);
      expect(containers.map((c) => c.name).sort(), target).toEqual(TENANTS.map((t) => `state-${t}`));
      for (const c of containers) expect(field(c, 'publicAccess'), c.name).toBe('None');
      const keys = all('keyvault:Key').filter((k) => field(k, 'vaultName') === vault.name);
      expect(keys.map((k) => k.name).sort(), target).toEqual(TENANTS.map((t) => `pulumi-${t}`));
      for (const k of keys) expect(field(k, 'properties'), k.name).toEqual({ kty: 'RSA', keySize: 3072, keyOps: ['encrypt', 'decrypt'] });
    }
    expect(stateOf('a').names.account).not.toBe(stateOf('b').names.account);
  });
});

/** The app settings as the Function App gets them (the WebAppApplicationSettings of the app). */
function appSettings(): Record<string, string> {
  return field(one('web:WebAppApplicationSettings'), 'properties') as Record<string, string>;
}
