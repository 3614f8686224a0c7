import { beforeAll, describe, expect, it } from 'vitest';
import { functionsWithTrigger, triggerOf } from '../../local/functions-core/registry';
import { EVENT_TYPES, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { stateNames, type AzureTarget } from '../../infra/targets';
import { parseConfig } from '../../shared/platform/config/config';
import { settingKeys } from '../../shared/platform/config/settings';
import { EVENT_SUBSCRIPTION_TYPES } from '../../local/bus/subscriptions';
import { QUEUE_DEFAULTS } from '../../shared/platform/bus/queue';
import {
  APP_PRINCIPAL_ID,
  CLIENTS,
  clientIdOf,
  field,
  GROUP_A,
  inventory,
  matchesSqlFilter,
  ON_PREM_BACKEND,
  ON_PREM_CLUSTER,
  relayedPropertiesOf,
  principalIdOf,
  ROLE,
  roleOf,
  ROTATED_ON,
  runInfra,
  SECRET_VALUES,
  SOURCES,
  SQL_ADMIN_GROUP,
  SUBSCRIPTION_ID,
  TARGETS,
  TENANT_ID,
  text,
  validConfig,
  type Declared,
} from './infra-mocks';

/**
 * The Pulumi program of infra/ run under Pulumi's runtime mocks (./infra-mocks.ts), its resources checked against
 * the seed and against what the app itself registers and reads.
 */

const DAY = 24 * 60 * 60;

let declared: Declared[] = [];
let { all, one, byId } = inventory(declared);

/** The host's own storage account and vault (the others hold the targets' Pulumi state: ./runners.test.ts). */
const hostStore = () => one('storage:StorageAccount', (r) => r.name === 'rchstore');
const hostVault = () => one('keyvault:Vault', (r) => r.name === 'rch-kv');
const stateStores = () => all('storage:StorageAccount').filter((r) => r.name !== 'rchstore');
const stateVaults = () => all('keyvault:Vault').filter((r) => r.name !== 'rch-kv');

beforeAll(async () => {
  ({ declared } = await runInfra(validConfig()));
  ({ all, one, byId } = inventory(declared));
});

describe('infra under Pulumi mocks', () => {
  it('when the program runs, then it declares every kind of resource the deployment needs', () => {
    const kinds = new Set(declared.map((r) => r.type));
    for (const kind of [
      'resources:ResourceGroup',
      'storage:StorageAccount',
      'servicebus:Namespace',
      'servicebus:Queue',
      'servicebus:Topic',
      'servicebus:Subscription',
      'servicebus:DefaultRule',
      'sql:Server',
      'sql:Database',
      'sql:FirewallRule',
      'web:AppServicePlan',
      'web:WebApp',
      'web:WebAppApplicationSettings',
      'monitor:AutoscaleSetting',
      'monitor:DiagnosticSetting',
      'operationalinsights:Workspace',
      'applicationinsights:Component',
      'keyvault:Vault',
      'keyvault:Secret',
      'authorization:RoleAssignment',
      'authorization:PolicyAssignment',
      'managedidentity:UserAssignedIdentity',
      'storage:BlobServiceProperties',
      'storage:BlobContainer',
      'keyvault:Key',
      'app:ManagedEnvironment',
      'app:Job',
    ]) {
      expect(kinds, kind).toContain(`azure-native:${kind}`);
    }
  });

  it('when the program runs, then it declares no type and name twice (the mocks would not refuse it, pulumi up would)', () => {
    const urns = declared.map((r) => `${r.type}::${r.logicalName}`);
    expect(urns.filter((urn, i) => urns.indexOf(urn) !== i)).toEqual([]);
  });

  it("when the Function App is declared, then it runs Node 22 on a Linux plan with its system-assigned identity and the targets' observers, 2 to 6 instances", () => {
    const app = one('web:WebApp');
    expect(field(app, 'kind')).toBe('functionapp,linux');
    expect(field(app, 'reserved')).toBe(true);
    expect(field(app, 'siteConfig.linuxFxVersion')).toBe('Node|22');
    expect(field(app, 'siteConfig.alwaysOn')).toBe(true);
    const observers = ['observer-a', 'observer-b'].map((name) => one('managedidentity:UserAssignedIdentity', (i) => i.name === name).id);
    expect(field(app, 'identity')).toEqual({ type: 'SystemAssigned, UserAssigned', userAssignedIdentities: observers });
    // A Key Vault reference added later resolves with the system-assigned identity, never an observer.
    expect(field(app, 'keyVaultReferenceIdentity')).toBe('SystemAssigned');
    expect(field(app, 'httpsOnly')).toBe(true);

    const plan = byId(field(app, 'serverFarmId'));
    expect(plan?.type).toBe('azure-native:web:AppServicePlan');
    expect(plan?.inputs).toMatchObject({ kind: 'linux', reserved: true, sku: { capacity: 2 } });
    const autoscale = one('monitor:AutoscaleSetting');
    expect(field(autoscale, 'targetResourceUri')).toBe(plan?.id);
    expect(field(autoscale, 'profiles')).toHaveLength(1);
    expect(field(autoscale, 'profiles.0.capacity')).toEqual({ minimum: '2', maximum: '6', default: '2' });
  });

  it('when the app settings are read by the app, then they parse into an Azure configuration with identity-based connections', () => {
    const settings = appSettings();
    const config = parseConfig(settings);
    const account = hostStore();
    const bus = one('servicebus:Namespace');
    const server = one('sql:Server');
    const database = one('sql:Database');

    expect(config.store).toEqual({ dialect: 'mssql', connection: `Server=tcp:${server.name}.database.windows.net,1433;Database=${database.name}` });
    expect(config.tables.connection).toBe(`https://${account.name}.table.core.windows.net`);
    expect(config.serviceBus.connection).toBe(`${bus.name}.servicebus.windows.net`);
    expect(config.iac.engine).toBe('pulumi');
    // The external services the host calls, with their audiences (the default unless the stack names another).
    expect(config.peers).toMatchObject({
      governance: { endpoint: 'https://governance.example.test', audience: 'api://connectsoft-governance' },
      controlPlane: { endpoint: 'https://control-plane.example.test' },
      knowledge: { endpoint: 'https://knowledge.example.test', audience: 'api://knowledge-example' },
      configPlatform: { endpoint: 'https://config.example.test' },
      delivery: { endpoint: 'https://delivery.example.test', audience: 'api://connectsoft-delivery' },
    });
    expect(config.host.enabledModules).toEqual(['provisioning', 'inventory', 'capacity']);
    // Drift scans read each target with its kind's observer: no one observer for the whole installation is written.
    expect(settings).not.toHaveProperty('RuntimeCloud__Inventory__Observer');
    expect(config.targets).toMatchObject(TARGETS.map(({ id, kind, name }) => ({ id, kind, name })));
    // Each target with its pool and its runners' backend (per tenant), and an Azure target with its scope and the
    // observer identity its drift scans use; its backend is its own state account and vault.
    const state = (target: 'a' | 'b') => {
      const names = stateNames('rch', 'test', TARGETS.find((t) => t.id === target) as unknown as AzureTarget);
      const [account, vault] = [one('storage:StorageAccount', (s) => s.name === names.account), one('keyvault:Vault', (v) => v.name === names.vault)];
      return { url: `azblob://state-{tenant}?storage_account=${account.name}`, secretsProvider: `azurekeyvault://${vault.name}.vault.azure.net/keys/pulumi-{tenant}` };
    };
    expect(JSON.parse(settings.RuntimeCloud__Targets!)).toEqual([
      { id: 'a', kind: 'azure-subscription', name: 'Target A', location: 'westeurope', runnerPool: 'a', runnerPools: [GROUP_A], scope: TARGETS[0]!.scope, observerClientId: clientIdOf('observer-a'), backend: state('a') },
      { id: 'b', kind: 'azure-subscription', name: 'Target B', location: 'northeurope', runnerPool: 'pool-b', scope: TARGETS[1]!.scope, observerClientId: clientIdOf('observer-b'), backend: state('b') },
      // A customer-hosted target's cluster is reached for drift scans as the target says (here a kubeconfig of its own).
      { id: 'c', kind: 'on-prem', name: 'Datacenter', endpoint: 'https://dc.example.test', runnerPool: 'c', backend: ON_PREM_BACKEND, kubernetes: ON_PREM_CLUSTER },
    ]);
    expect(config.targets.find((t) => t.id === 'c')?.kubernetes).toEqual(ON_PREM_CLUSTER);
    // What tenants may promote from and which callers act for which tenant, as the stack's config says.
    expect(config.provisioning.sources).toEqual(SOURCES);
    expect(config.auth.clients).toEqual(CLIENTS);
    expect(settings).toMatchObject({
      FUNCTIONS_EXTENSION_VERSION: '~4',
      FUNCTIONS_WORKER_RUNTIME: 'node',
      AzureWebJobsStorage__accountName: account.name,
      APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'Authorization=AAD',
    });
    // Identity-based, so neither the connection-string forms nor a local-only key is set.
    for (const key of ['AzureWebJobsStorage', 'ServiceBusConnection', 'RuntimeCloud__Local__StateDir', 'RuntimeCloud__Local__Port']) {
      expect(settings, key).not.toHaveProperty(key);
    }
  });

  it('when the app settings are listed, then each is a key the app or its host reads, none holds a secret, and no IaC credential is among them', () => {
    const settings = appSettings();
    const platform = ['FUNCTIONS_EXTENSION_VERSION', 'AzureWebJobsStorage__accountName', 'APPLICATIONINSIGHTS_CONNECTION_STRING', 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'];
    for (const key of Object.keys(settings)) {
      expect([...settingKeys, ...platform], key).toContain(key);
    }
    for (const [key, value] of Object.entries(settings)) {
      expect(value, key).not.toMatch(/AccountKey=|SharedAccessKey|Password=|Pwd=|client_secret/i);
      for (const secret of Object.values(SECRET_VALUES)) expect(value, key).not.toContain(secret);
    }
    // The host runs no engine: no Azure credential of an IaC runner, and no Key Vault reference to one.
    expect(Object.keys(settings).filter((key) => /^(ARM|AZURE)_/.test(key))).toEqual([]);
    expect(Object.values(settings).filter((value) => value.includes('@Microsoft.KeyVault'))).toEqual([]);
    expect(field(one('web:WebAppApplicationSettings'), 'name')).toBe(one('web:WebApp').name);
  });

  it('when the promotions queue is declared, then it has duplicate detection, dead-lettering on expiration and a max delivery count', () => {
    const queue = one('servicebus:Queue');
    expect(queue.name).toBe('runtime-cloud-promotions');
    // The intake knows a message's last delivery by this count (QUEUE_DEFAULTS): it must be the queue's own.
    expect(queue.inputs).toMatchObject({ requiresDuplicateDetection: true, deadLetteringOnMessageExpiration: true, maxDeliveryCount: QUEUE_DEFAULTS.maxDeliveryCount });
    expect(field(queue, 'duplicateDetectionHistoryTimeWindow')).toMatch(/^P/);
    expect(field(queue, 'defaultMessageTimeToLive')).toMatch(/^P/);

    const topic = one('servicebus:Topic');
    expect(topic.name).toBe(EVENTS_TOPIC);
    expect(field(topic, 'requiresDuplicateDetection')).toBe(true);
    expect(field(topic, 'duplicateDetectionHistoryTimeWindow')).toMatch(/^P/);
    expect(field(one('servicebus:Namespace'), 'disableLocalAuth')).toBe(true);
  });

  it("when the events topic is declared, then each of the host's subscriptions lets through exactly the event types its module handles", () => {
    const passing = (subscription: string) => {
      const sub = one('servicebus:Subscription', (s) => s.name === subscription);
      expect(field(sub, 'topicName')).toBe(EVENTS_TOPIC);
      expect(sub.inputs).toMatchObject({ deadLetteringOnMessageExpiration: true, maxDeliveryCount: 10 });
      const rule = one('servicebus:DefaultRule', (r) => field(r, 'subscriptionName') === subscription);
      expect(field(rule, 'filterType')).toBe('SqlFilter');
      return EVENT_TYPES.filter((type) => matchesSqlFilter(text(rule, 'sqlFilter.sqlExpression'), relayedPropertiesOf(type)));
    };
    expect(passing('provisioning')).toEqual(['PoolResizeRequested']);
    expect(passing('inventory').sort()).toEqual(['ProvisioningApplied', 'ProvisioningFailed', 'SpecificationApplied']);
    // The same filters as the embedded topic applies on the local host.
    for (const [subscription, types] of Object.entries(EVENT_SUBSCRIPTION_TYPES)) expect(passing(subscription).sort()).toEqual([...types].sort());
  });

  it('when the SQL server is declared, then it accepts Entra authentication only, with an Entra group as administrator', () => {
    const server = one('sql:Server');
    expect(field(server, 'administrators')).toEqual({
      administratorType: 'ActiveDirectory',
      azureADOnlyAuthentication: true,
      login: 'runtime-cloud-sql-admins',
      sid: SQL_ADMIN_GROUP,
      tenantId: TENANT_ID,
      principalType: 'Group',
    });
    expect(server.inputs).not.toHaveProperty('administratorLogin');
    expect(server.inputs).not.toHaveProperty('administratorLoginPassword');
    expect(field(one('sql:Database'), 'serverName')).toBe(server.name);
  });

  it("when the Key Vault is declared, then it holds the seed's secrets, each expiring one rotation period after it was set, and no IaC runner secret", () => {
    const vault = hostVault();
    expect(field(vault, 'properties')).toMatchObject({ enableRbacAuthorization: true, enablePurgeProtection: true, enableSoftDelete: true });
    const periods = { 'runtime-cloud-sql': 90, 'messaging-transport': 90 } as const;
    const values = { 'runtime-cloud-sql': SECRET_VALUES.runtimeCloudSql, 'messaging-transport': SECRET_VALUES.messagingTransport };
    expect(all('keyvault:Secret').map((s) => s.name).sort()).toEqual(Object.keys(periods).sort());
    for (const [name, days] of Object.entries(periods) as [keyof typeof periods, number][]) {
      const secret = one('keyvault:Secret', (s) => s.name === name);
      const notBefore = Date.parse(`${ROTATED_ON[name]}T00:00:00Z`) / 1000;
      expect(field(secret, 'vaultName')).toBe(vault.name);
      expect(field(secret, 'properties.attributes'), name).toEqual({ enabled: true, notBefore, expires: notBefore + days * DAY });
      expect(field(secret, 'properties.value'), name).toBe(values[name]);
      expect(secret.secretPaths, `${name}: the value stays a secret in the stack's state`).toContain('properties');
      expect(field(secret, 'tags'), name).toEqual({ 'rotation-period': `P${days}D`, 'rotated-on': ROTATED_ON[name] });
    }
    // New versions written by hand must expire too, within the longest period.
    const policies = all('authorization:PolicyAssignment');
    expect(policies.every((p) => field(p, 'scope') === vault.id)).toBe(true);
    expect(policies.map((p) => [text(p, 'policyDefinitionId').split('/').pop(), field(p, 'parameters')]).sort()).toEqual([
      ['342e8053-e12e-4c44-be01-c3c2f318400f', { maximumValidityInDays: { value: 90 }, effect: { value: 'Deny' } }],
      ['98728c90-32c7-4049-8429-847dc0f4fe37', { effect: { value: 'Deny' } }],
    ]);
  });

  it('when roles are assigned, then each names a declared identity, a built-in role and a role definition of the scope\'s own subscription', () => {
    const identities = new Set([APP_PRINCIPAL_ID, ...all('managedidentity:UserAssignedIdentity').map((i) => principalIdOf(i.name))]);
    for (const a of all('authorization:RoleAssignment')) {
      expect(identities, a.name).toContain(field(a, 'principalId'));
      expect(field(a, 'principalType'), a.name).toBe('ServicePrincipal');
      expect(Object.keys(ROLE), a.name).toContain(roleOf(a));
      // A target's scope names its own subscription; every resource of the deployment is in the deployment's.
      const scopeSubscription = /^\/subscriptions\/([^/]+)\//.exec(text(a, 'scope'))?.[1] ?? SUBSCRIPTION_ID;
      expect(text(a, 'roleDefinitionId'), a.name).toMatch(new RegExp(`^/subscriptions/${scopeSubscription}/providers/Microsoft.Authorization/roleDefinitions/[0-9a-f-]{36}$`));
    }
  });

  it("when roles are assigned to the Function App's system-assigned identity, then they are data-plane roles at the narrowest scope, none on a target", () => {
    const granted = all('authorization:RoleAssignment')
      .filter((a) => field(a, 'principalId') === APP_PRINCIPAL_ID)
      .map((a) => {
        const scope = byId(field(a, 'scope'));
        return `${roleOf(a)} @ ${scope ? `${scope.type.replace('azure-native:', '')}/${scope.name}` : `unknown scope ${text(a, 'scope')}`}`;
      });
    const account = hostStore().name;
    const telemetry = one('applicationinsights:Component').name;
    expect(granted.sort()).toEqual(
      [
        `storageBlobDataContributor @ storage:StorageAccount/${account}`,
        `storageQueueDataContributor @ storage:StorageAccount/${account}`,
        `storageTableDataContributor @ storage:StorageAccount/${account}`,
        'serviceBusDataReceiver @ servicebus:Queue/runtime-cloud-promotions',
        `serviceBusDataSender @ servicebus:Topic/${EVENTS_TOPIC}`,
        'serviceBusDataReceiver @ servicebus:Subscription/provisioning',
        'serviceBusDataReceiver @ servicebus:Subscription/inventory',
        `monitoringMetricsPublisher @ applicationinsights:Component/${telemetry}`,
        'keyVaultCryptoUser @ keyvault:Key/lease-certificates',
      ].sort(),
    );
  });

  it('when anything that takes a TLS version is declared, then it accepts TLS 1.2 at least, over HTTPS only', () => {
    const accounts = all('storage:StorageAccount');
    expect(accounts).toHaveLength(3);
    for (const account of accounts) expect(account.inputs, account.name).toMatchObject({ minimumTlsVersion: 'TLS1_2', enableHttpsTrafficOnly: true });
    expect(field(one('servicebus:Namespace'), 'minimumTlsVersion')).toBe('1.2');
    expect(field(one('sql:Server'), 'minimalTlsVersion')).toBe('1.2');
    const app = one('web:WebApp');
    expect(field(app, 'httpsOnly')).toBe(true);
    expect(field(app, 'siteConfig')).toMatchObject({ minTlsVersion: '1.2', scmMinTlsVersion: '1.2', ftpsState: 'Disabled' });
  });

  it('when the stores and telemetry are declared, then none accepts a shared key or local auth, only Entra', () => {
    for (const account of all('storage:StorageAccount')) {
      expect(account.inputs, account.name).toMatchObject({ allowSharedKeyAccess: false, defaultToOAuthAuthentication: true, allowBlobPublicAccess: false });
    }
    // Consistent with the account: the host reaches its storage by identity, never by a connection string.
    expect(appSettings()).toHaveProperty('AzureWebJobsStorage__accountName');
    expect(field(one('servicebus:Namespace'), 'disableLocalAuth')).toBe(true);
    expect(field(one('sql:Server'), 'administrators.azureADOnlyAuthentication')).toBe(true);
    expect(field(one('applicationinsights:Component'), 'disableLocalAuth')).toBe(true);
    expect(field(one('operationalinsights:Workspace'), 'features.disableLocalAuth')).toBe(true);
    for (const vault of all('keyvault:Vault')) {
      expect(field(vault, 'properties.enableRbacAuthorization'), vault.name).toBe(true);
      expect(field(vault, 'properties'), vault.name).not.toHaveProperty('accessPolicies');
    }
  });

  it('when network access is declared, then public endpoints are on only as a VNet-less app needs them, and SQL lets in Azure services only', () => {
    // Deliberate, not defaults: without a virtual network the app reaches each of these over its public endpoint.
    for (const account of all('storage:StorageAccount')) expect(field(account, 'publicNetworkAccess'), account.name).toBe('Enabled');
    expect(field(one('servicebus:Namespace'), 'publicNetworkAccess')).toBe('Enabled');
    expect(field(one('sql:Server'), 'publicNetworkAccess')).toBe('Enabled');
    for (const vault of all('keyvault:Vault')) expect(field(vault, 'properties.publicNetworkAccess'), vault.name).toBe('Enabled');
    expect(field(one('web:WebApp'), 'publicNetworkAccess')).toBe('Enabled');
    expect(one('applicationinsights:Component').inputs).toMatchObject({ publicNetworkAccessForIngestion: 'Enabled', publicNetworkAccessForQuery: 'Enabled' });
    // Anonymous reads of blobs stay off whatever the network allows.
    for (const account of all('storage:StorageAccount')) expect(field(account, 'allowBlobPublicAccess'), account.name).toBe(false);

    const rules = all('sql:FirewallRule');
    expect(rules.map((r) => [r.name, field(r, 'serverName'), field(r, 'startIpAddress'), field(r, 'endIpAddress')])).toEqual([
      ['AllowAllWindowsAzureIps', one('sql:Server').name, '0.0.0.0', '0.0.0.0'],
    ]);
  });

  it('when the deployment is declared, then each service, database, vault, storage service and the runners\' environment sends its logs and metrics to the workspace, once', () => {
    const workspace = one('operationalinsights:Workspace');
    const account = hostStore();
    const withLogs = [
      one('web:WebApp').id,
      one('servicebus:Namespace').id,
      one('sql:Database').id,
      hostVault().id,
      ...['blobServices', 'queueServices', 'tableServices'].map((service) => `${account.id}/${service}/default`),
      // The targets' state (Pulumi uses blobs only) and the Container Apps environment of the runner jobs.
      ...stateVaults().map((v) => v.id),
      ...stateStores().map((s) => `${s.id}/blobServices/default`),
      one('app:ManagedEnvironment').id,
    ];
    const metricsOnly = [account.id, ...stateStores().map((s) => s.id)];
    const settings = all('monitor:DiagnosticSetting');
    for (const setting of settings) {
      expect(field(setting, 'workspaceId'), setting.name).toBe(workspace.id);
      const metrics = field(setting, 'metrics') as { enabled?: boolean }[];
      expect(metrics.length, setting.name).toBeGreaterThan(0);
      expect(metrics.every((m) => m.enabled === true), setting.name).toBe(true);
    }
    expect(settings.map((s) => field(s, 'resourceUri')).sort()).toEqual([...withLogs, ...metricsOnly].sort());

    for (const target of withLogs) {
      const setting = one('monitor:DiagnosticSetting', (s) => field(s, 'resourceUri') === target);
      expect(field(setting, 'logs'), target).toEqual([{ categoryGroup: 'allLogs', enabled: true }]);
    }
    // The accounts themselves have metrics only: Azure keeps a storage account's resource logs on its services.
    for (const id of metricsOnly) {
      const accountSetting = one('monitor:DiagnosticSetting', (s) => field(s, 'resourceUri') === id);
      expect(field(accountSetting, 'metrics'), id).toEqual([{ category: 'Transaction', enabled: true }]);
      expect(accountSetting.inputs, id).not.toHaveProperty('logs');
    }
    // Metric categories are per resource type; `AllMetrics` does not exist for SQL databases or storage.
    const metricsOf = (id: string) => (field(one('monitor:DiagnosticSetting', (s) => field(s, 'resourceUri') === id), 'metrics') as { category?: string }[]).map((m) => m.category);
    expect(metricsOf(one('sql:Database').id)).toEqual(['Basic', 'InstanceAndAppAdvanced']);
    expect(metricsOf(`${account.id}/blobServices/default`)).toEqual(['Transaction']);
    expect(metricsOf(hostVault().id)).toEqual(['AllMetrics']);
  });

  it('when the app registers its Service Bus triggers, then each one has its entity, its identity connection and a receive role', async () => {
    const settings = appSettings();
    const { provideRuntime } = await import('../../functions/runtime.js');
    provideRuntime({ config: parseConfig(settings), deps: new Promise(() => undefined) });
    await import('../../functions/index.js');
    const triggers = functionsWithTrigger('serviceBusTrigger').map(triggerOf);
    expect(triggers.length).toBeGreaterThanOrEqual(3);
    const receivers = all('authorization:RoleAssignment').filter((a) => field(a, 'principalId') === APP_PRINCIPAL_ID && roleOf(a) === 'serviceBusDataReceiver');
    for (const trigger of triggers) {
      const connection = String(trigger.connection);
      expect(settings[`${connection}__fullyQualifiedNamespace`], connection).toBe(`${one('servicebus:Namespace').name}.servicebus.windows.net`);
      const entity =
        typeof trigger.queueName === 'string'
          ? one('servicebus:Queue', (q) => q.name === trigger.queueName)
          : one('servicebus:Subscription', (s) => s.name === trigger.subscriptionName && field(s, 'topicName') === trigger.topicName);
      expect(receivers.map((a) => field(a, 'scope')), `${entity.name}`).toContain(entity.id);
    }
  });

  it('when lease certificates are deployed, then the host signs with an EC P-256 key of its own vault that rotates, and the setting names it as the host parses it', () => {
    const key = all('keyvault:Key').find((k) => k.name === 'lease-certificates');
    expect(key?.inputs).toMatchObject({
      keyName: 'lease-certificates',
      properties: { kty: 'EC', curveName: 'P-256', keyOps: ['sign', 'verify'], rotationPolicy: { lifetimeActions: [{ trigger: { timeAfterCreate: 'P90D' }, action: { type: 'rotate' } }] } },
    });
    const setting = appSettings().RuntimeCloud__Capacity__CertificateKey;
    expect(setting).toMatch(/^https:\/\/[^/]+\.vault\.azure\.net\/keys\/lease-certificates$/);
    expect(parseConfig(appSettings()).capacity.certificateKey).toBe(setting);
  });
});

describe('infra: the console without a registration', () => {
  it('when no console registration is configured, then no console setting is written (the console offers no sign-in)', () => {
    expect(Object.keys(appSettings()).filter((name) => name.startsWith('RuntimeCloud__Console__'))).toEqual([]);
  });
});

/** The app settings as the Function App gets them (the WebAppApplicationSettings of the app). */
function appSettings(): Record<string, string> {
  return field(one('web:WebAppApplicationSettings'), 'properties') as Record<string, string>;
}
