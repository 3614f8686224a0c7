import { beforeAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { stateNames, type AzureTarget } from '../../infra/targets';
import { normalArmId, resourceGroupId } from '../../shared/inventory/arm-resource';
import {
  APP_PRINCIPAL_ID,
  clientIdOf,
  field,
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
  TARGET_SUBSCRIPTIONS,
  TARGETS,
  text,
  validConfig,
  type Declared,
} from './infra-mocks';

/**
 * The runner agents of the infra program under Pulumi's mocks (./infra-mocks.ts), with two Azure targets `a` and `b`
 * (in two subscriptions; `b` in pool `pool-b` with 4 runners) and an on-prem target `c`: a job per Azure target, each
 * runner identity able to change its own target only, and nothing the Function App can use able to change any.
 */

const SCOPES = {
  a: `/subscriptions/${TARGET_SUBSCRIPTIONS.a}/resourceGroups/rg-target-a`,
  b: `/subscriptions/${TARGET_SUBSCRIPTIONS.b}/resourceGroups/rg-target-b`,
};
const POOLS = { a: 'a', b: 'pool-b' };

let declared: Declared[] = [];
let { all, one, byId } = inventory(declared);

beforeAll(async () => {
  ({ declared } = await runInfra(validConfig()));
  ({ all, one, byId } = inventory(declared));
});

const identity = (name: string) => one('managedidentity:UserAssignedIdentity', (i) => i.name === name);
const job = (target: 'a' | 'b') => one('app:Job', (j) => j.name === `runner-${target}`);
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
function envOf(target: 'a' | 'b'): Record<string, string> {
  const containers = field(job(target), 'template.containers') as { env: { name: string; value?: string }[] }[];
  expect(containers).toHaveLength(1);
  return Object.fromEntries(containers[0]!.env.map(({ name, value }) => [name, value ?? '']));
}
function stateOf(target: 'a' | 'b') {
  const names = stateNames('rch', 'test', TARGETS.find((t) => t.id === target) as unknown as AzureTarget);
  return {
    names,
    account: one('storage:StorageAccount', (s) => s.name === names.account),
    vault: one('keyvault:Vault', (v) => v.name === names.vault),
    subscription: one('servicebus:Subscription', (s) => s.name === `runner-${POOLS[target]}`),
  };
}

describe('runner agents under Pulumi mocks', () => {
  it('when two Azure targets are configured, then each gets an event-triggered Container Apps Job woken by its pool\'s subscription, and the on-prem target none', () => {
    expect(all('app:Job').map((j) => j.name).sort()).toEqual(['runner-a', 'runner-b']);
    const environment = one('app:ManagedEnvironment');
    const namespace = one('servicebus:Namespace').name;
    for (const [target, max] of [['a', 2], ['b', 4]] as const) {
      const j = job(target);
      const runner = identity(`runner-${target}`);
      expect(field(j, 'environmentId'), target).toBe(environment.id);
      expect(field(j, 'identity'), target).toEqual({ type: 'UserAssigned', userAssignedIdentities: [runner.id] });
      expect(field(j, 'configuration.triggerType'), target).toBe('Event');
      expect(field(j, 'configuration.replicaTimeout'), target).toBeGreaterThanOrEqual(4 * 60 * 60);
      // The platform never runs an apply a second time: the host decides.
      expect(field(j, 'configuration.replicaRetryLimit'), target).toBe(0);
      expect(field(j, 'configuration.eventTriggerConfig'), target).toMatchObject({ parallelism: 1, replicaCompletionCount: 1, scale: { minExecutions: 0, maxExecutions: max } });
      expect(field(j, 'configuration.eventTriggerConfig.scale.rules'), target).toEqual([
        {
          name: 'runner-wakeups',
          type: 'azure-servicebus',
          metadata: { namespace, topicName: EVENTS_TOPIC, subscriptionName: `runner-${POOLS[target]}`, messageCount: '1' },
          identity: runner.id,
        },
      ]);
      expect(field(j, 'configuration.registries'), target).toEqual([{ server: 'rchimages.azurecr.io', identity: runner.id }]);
      expect(field(j, 'configuration'), target).not.toHaveProperty('secrets');
      expect(field(j, 'template.containers.0.image'), target).toBe(RUNNER_IMAGE);
    }
    // Logs through Azure Monitor: the log-analytics destination would need the workspace's shared key.
    expect(field(environment, 'appLogsConfiguration')).toEqual({ destination: 'azure-monitor' });
  });

  it("when a job's container starts, then its environment names the host, its pool, its audience and its own identity, and nothing else (each job names its tenant's state)", () => {
    const app = one('web:WebApp');
    for (const target of ['a', 'b'] as const) {
      expect(envOf(target), target).toEqual({
        RuntimeCloud__Runner__HostUrl: `https://${app.name}.azurewebsites.net`,
        RuntimeCloud__Runner__Pool: POOLS[target],
        RuntimeCloud__Runner__Audience: 'api://runtime-cloud',
        AZURE_CLIENT_ID: clientIdOf(`runner-${target}`),
        RuntimeCloud__Runner__Engine: 'pulumi',
        RuntimeCloud__Runner__OneJob: 'true',
      });
    }
  });

  it('when a job is declared, then no secret or connection of the host is in its environment', () => {
    const settings = field(one('web:WebAppApplicationSettings'), 'properties') as Record<string, string>;
    // Values of the host that name or reach its own stores: none belongs in a runner's environment.
    const hostValues = [
      settings.RuntimeCloud__Store__Connection!,
      settings.ServiceBusConnection__fullyQualifiedNamespace!,
      settings.AzureWebJobsStorage__accountName!,
      settings.RuntimeCloud__Tables__Connection!,
      settings.APPLICATIONINSIGHTS_CONNECTION_STRING!,
    ];
    for (const target of ['a', 'b'] as const) {
      const env = envOf(target);
      expect(Object.keys(env).filter((key) => /^ARM_|_SECRET$|PASSWORD|CONNECTION|SIGNING|_KEY$/i.test(key)), target).toEqual([]);
      for (const [key, value] of Object.entries(env)) {
        expect(value, `${target} ${key}`).not.toMatch(/AccountKey|Password|SharedAccessKey|client_secret|@Microsoft\.KeyVault/i);
        for (const secret of Object.values(SECRET_VALUES)) expect(value, `${target} ${key}`).not.toContain(secret);
        for (const hostValue of hostValues) expect(value, `${target} ${key}`).not.toContain(hostValue);
      }
      const containers = field(job(target), 'template.containers') as { env: { secretRef?: string }[] }[];
      expect(containers[0]!.env.filter((e) => e.secretRef !== undefined), target).toEqual([]);
    }
  });

  it("when roles are assigned to a runner identity, then it may change its own target's resource group and nothing else: no role on the other target", () => {
    const registry = RUNNER_REGISTRY_ID;
    for (const [target, other] of [['a', 'b'], ['b', 'a']] as const) {
      const { account, vault, subscription } = stateOf(target);
      const principal = principalIdOf(`runner-${target}`);
      expect(grantsOf(principal), target).toEqual(
        [
          `contributor @ ${SCOPES[target]}`,
          `storageBlobDataContributor @ storage:StorageAccount/${account.name}`,
          `keyVaultCryptoOfficer @ keyvault:Vault/${vault.name}`,
          `serviceBusDataReceiver @ servicebus:Subscription/${subscription.name}`,
          `acrPull @ ${registry}`,
        ].sort(),
      );
      const contributor = assignmentsOf(principal).find((a) => roleOf(a) === 'contributor')!;
      expect(text(contributor, 'roleDefinitionId')).toMatch(new RegExp(`^/subscriptions/${TARGET_SUBSCRIPTIONS[target]}/`));
      expect(assignmentsOf(principal).filter((a) => covers(text(a, 'scope'), SCOPES[other])), `${target} on ${other}`).toEqual([]);
    }
  });

  it('when roles are assigned to an observer identity, then it is Reader on its own target only', () => {
    for (const target of ['a', 'b'] as const) {
      expect(grantsOf(principalIdOf(`observer-${target}`)), target).toEqual([`reader @ ${SCOPES[target]}`]);
    }
  });

  it("when the app's targets setting names a target's observer identity, then that identity is Reader on exactly the resource group the ARM observer lists, with the Reader role of the target's subscription", () => {
    // The drift scans' view: RuntimeCloud__Targets as the Function App gets it (scope and observer client id).
    const settings = field(one('web:WebAppApplicationSettings'), 'properties') as Record<string, string>;
    const azureTargets = (JSON.parse(settings.RuntimeCloud__Targets!) as { id: string; scope?: { subscriptionId: string; resourceGroup: string }; observerClientId?: string }[]).filter((t) => t.scope);
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
    // Exactly the system-assigned identity and the observers: a runner identity is never the app's.
    expect(usable.sort()).toEqual([APP_PRINCIPAL_ID, principalIdOf('observer-a'), principalIdOf('observer-b')].sort());
    const onTargets = all('authorization:RoleAssignment').filter(
      (a) => usable.includes(text(a, 'principalId')) && Object.values(SCOPES).some((scope) => covers(text(a, 'scope'), scope)),
    );
    expect(onTargets.length).toBeGreaterThan(0);
    for (const a of onTargets) expect(roleOf(a), `${a.name} @ ${text(a, 'scope')}`).toBe('reader');
  });

  it("when a pool's subscription is declared, then its filter passes that pool's job wake-ups only", () => {
    const rules = all('servicebus:DefaultRule');
    const relayed = EVENT_TYPES.map((type) => relayedPropertiesOf(type));
    for (const [target, pool] of Object.entries(POOLS)) {
      const subscription = one('servicebus:Subscription', (s) => s.name === `runner-${pool}`);
      expect(field(subscription, 'topicName'), pool).toBe(EVENTS_TOPIC);
      const rule = one('servicebus:DefaultRule', (r) => field(r, 'subscriptionName') === `runner-${pool}`);
      expect(field(rule, 'filterType')).toBe('SqlFilter');
      const expression = text(rule, 'sqlFilter.sqlExpression');
      // The wake-up as the outbox relay really sends it: a RunnerJobDispatched event whose subject is the pool.
      expect(matchesSqlFilter(expression, relayedPropertiesOf('RunnerJobDispatched', pool)), `${target}: its own, relayed`).toBe(true);
      expect(matchesSqlFilter(expression, { type: 'RunnerJobDispatched', pool }), `${target}: its own`).toBe(true);
      for (const otherPool of Object.values(POOLS).filter((p) => p !== pool)) {
        expect(matchesSqlFilter(expression, { type: 'RunnerJobDispatched', pool: otherPool }), `${target}: ${otherPool}'s`).toBe(false);
      }
      expect(matchesSqlFilter(expression, { type: 'RunnerJobDispatched' }), `${target}: no pool`).toBe(false);
      expect(matchesSqlFilter(expression, { type: 'ProvisioningApplied', pool }), `${target}: another type`).toBe(false);
      // Every event type as relayed without a pool, RunnerJobDispatched included.
      for (const properties of relayed) expect(matchesSqlFilter(expression, properties), `${target}: ${String(properties.type)}`).toBe(false);
    }
    // One rule per subscription: the host's two and one per pool, no pool for the on-prem target.
    expect(rules.map((r) => field(r, 'subscriptionName')).sort()).toEqual(['inventory', 'provisioning', 'runner-a', 'runner-pool-b']);
  });

  it("when a target's state is declared, then its account is Entra-only and versioned, its vault RBAC with purge protection, and their names fit Azure's limits", () => {
    for (const target of ['a', 'b'] as const) {
      const { names, account, vault } = stateOf(target);
      expect(names.account).toMatch(/^[a-z0-9]{3,24}$/);
      expect(names.vault).toMatch(/^[a-z][a-z0-9-]{1,22}[a-z0-9]$/);
      expect(account.inputs, target).toMatchObject({ minimumTlsVersion: 'TLS1_2', allowSharedKeyAccess: false, allowBlobPublicAccess: false, defaultToOAuthAuthentication: true });
      const blobs = one('storage:BlobServiceProperties', (b) => field(b, 'accountName') === account.name);
      expect(blobs.inputs, target).toMatchObject({ isVersioningEnabled: true, deleteRetentionPolicy: { enabled: true } });
      expect(field(vault, 'properties'), target).toMatchObject({ enableRbacAuthorization: true, enableSoftDelete: true, enablePurgeProtection: true });
    }
    expect(stateOf('a').names.account).not.toBe(stateOf('b').names.account);
    // Tenants come after this program ran: their keys are the agents' to make, one per tenant.
    expect(all('keyvault:Key').filter((k) => [stateOf('a').names.vault, stateOf('b').names.vault].includes(text(k, 'vaultName')))).toEqual([]);
  });
});
