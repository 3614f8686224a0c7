import { beforeAll, describe, expect, it } from 'vitest';
import { functionsWithTrigger, triggerOf } from '../../local/functions-core/registry';
import { EVENT_TYPES, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { toOutgoingMessage } from '../../shared/platform/bus/outbox-relay.service';
import { parseConfig, settingKeys } from '../../shared/platform/config/config';
import { APP_PRINCIPAL_ID, field, ROTATED_ON, runInfra, SECRET_VALUES, SQL_ADMIN_GROUP, SUBSCRIPTION_ID, TARGETS, TENANT_ID, text, validConfig, type Declared } from './infra-mocks';

/**
 * The Pulumi program of infra/ run under Pulumi's runtime mocks (./infra-mocks.ts), its resources checked against
 * the seed and against what the app itself registers and reads.
 */

/** Built-in role ids, written out here rather than taken from the program, so that a wrong id in either fails. */
const ROLE = {
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe',
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88',
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3',
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0',
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39',
  keyVaultSecretsUser: '4633458b-17de-408a-b874-0445c86b69e6',
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb',
} as const;
const DAY = 24 * 60 * 60;

let declared: Declared[] = [];

function all(type: string): Declared[] {
  return declared.filter((r) => r.type === `azure-native:${type}`);
}
function one(type: string, predicate: (r: Declared) => boolean = () => true): Declared {
  const found = all(type).filter(predicate);
  expect(found, `exactly one ${type}`).toHaveLength(1);
  return found[0]!;
}
function byId(id: unknown): Declared | undefined {
  return declared.find((r) => r.id === id);
}

beforeAll(async () => {
  ({ declared } = await runInfra(validConfig()));
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
    ]) {
      expect(kinds, kind).toContain(`azure-native:${kind}`);
    }
  });

  it('when the Function App is declared, then it runs Node 22 on a Linux plan with a system-assigned identity, 2 to 6 instances', () => {
    const app = one('web:WebApp');
    expect(field(app, 'kind')).toBe('functionapp,linux');
    expect(field(app, 'reserved')).toBe(true);
    expect(field(app, 'siteConfig.linuxFxVersion')).toBe('Node|22');
    expect(field(app, 'siteConfig.alwaysOn')).toBe(true);
    expect(field(app, 'identity')).toEqual({ type: 'SystemAssigned' });
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
    const account = one('storage:StorageAccount');
    const bus = one('servicebus:Namespace');
    const server = one('sql:Server');
    const database = one('sql:Database');

    expect(config.store).toEqual({ dialect: 'mssql', connection: `Server=tcp:${server.name}.database.windows.net,1433;Database=${database.name}` });
    expect(config.tables.connection).toBe(`https://${account.name}.table.core.windows.net`);
    expect(config.serviceBus.connection).toBe(`${bus.name}.servicebus.windows.net`);
    expect(config.iac.runner).toBe('pulumi');
    expect(config.host.enabledModules).toEqual(['provisioning', 'inventory', 'capacity']);
    expect(config.targets).toEqual(TARGETS);
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

  it('when the app settings are listed, then each is a key the app or its host reads, and none holds a secret in plain text', () => {
    const settings = appSettings();
    const vault = one('keyvault:Vault');
    const platform = [
      'FUNCTIONS_EXTENSION_VERSION',
      'AzureWebJobsStorage__accountName',
      'APPLICATIONINSIGHTS_CONNECTION_STRING',
      'APPLICATIONINSIGHTS_AUTHENTICATION_STRING',
      // The Azure credentials of the IaC runner, read by the `pulumi` CLI it starts.
      'ARM_CLIENT_ID',
      'ARM_TENANT_ID',
      'ARM_CLIENT_SECRET',
    ];
    for (const key of Object.keys(settings)) {
      expect([...settingKeys, ...platform], key).toContain(key);
    }
    for (const [key, value] of Object.entries(settings)) {
      expect(value, key).not.toMatch(/AccountKey=|SharedAccessKey|Password=|Pwd=|client_secret/i);
      for (const secret of Object.values(SECRET_VALUES)) expect(value, key).not.toContain(secret);
    }
    expect(settings.ARM_CLIENT_SECRET).toBe(`@Microsoft.KeyVault(VaultName=${vault.name};SecretName=iac-runner-identity)`);
    expect(field(one('web:WebAppApplicationSettings'), 'name')).toBe(one('web:WebApp').name);
  });

  it('when the promotions queue is declared, then it has duplicate detection, dead-lettering on expiration and a max delivery count', () => {
    const queue = one('servicebus:Queue');
    expect(queue.name).toBe('runtime-cloud-promotions');
    expect(queue.inputs).toMatchObject({ requiresDuplicateDetection: true, deadLetteringOnMessageExpiration: true, maxDeliveryCount: 10 });
    expect(field(queue, 'duplicateDetectionHistoryTimeWindow')).toMatch(/^P/);
    expect(field(queue, 'defaultMessageTimeToLive')).toMatch(/^P/);

    const topic = one('servicebus:Topic');
    expect(topic.name).toBe(EVENTS_TOPIC);
    expect(field(topic, 'requiresDuplicateDetection')).toBe(true);
    expect(field(topic, 'duplicateDetectionHistoryTimeWindow')).toMatch(/^P/);
    expect(field(one('servicebus:Namespace'), 'disableLocalAuth')).toBe(true);
  });

  it('when the events topic is declared, then each subscription lets through exactly the event types its module handles', () => {
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

  it("when the Key Vault is declared, then it holds the seed's secrets, each expiring one rotation period after it was set", () => {
    const vault = one('keyvault:Vault');
    expect(field(vault, 'properties')).toMatchObject({ enableRbacAuthorization: true, enablePurgeProtection: true, enableSoftDelete: true });
    const periods = { 'runtime-cloud-sql': 90, 'iac-runner-identity': 30, 'messaging-transport': 90 } as const;
    const values = { 'runtime-cloud-sql': SECRET_VALUES.runtimeCloudSql, 'iac-runner-identity': SECRET_VALUES.iacRunnerIdentity, 'messaging-transport': SECRET_VALUES.messagingTransport };
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

  it("when roles are assigned, then each names the Function App's identity and a data-plane role at the narrowest scope", () => {
    const assignments = all('authorization:RoleAssignment');
    for (const a of assignments) {
      expect(field(a, 'principalId'), a.name).toBe(APP_PRINCIPAL_ID);
      expect(field(a, 'principalType'), a.name).toBe('ServicePrincipal');
      expect(field(a, 'roleDefinitionId'), a.name).toMatch(new RegExp(`^/subscriptions/${SUBSCRIPTION_ID}/providers/Microsoft.Authorization/roleDefinitions/[0-9a-f-]{36}$`));
    }
    const granted = assignments.map((a) => {
      const scope = byId(field(a, 'scope'));
      const role = Object.entries(ROLE).find(([, id]) => text(a, 'roleDefinitionId').endsWith(`/${id}`))?.[0] ?? text(a, 'roleDefinitionId');
      return `${role} @ ${scope ? `${scope.type.replace('azure-native:', '')}/${scope.name}` : `unknown scope ${text(a, 'scope')}`}`;
    });
    const account = one('storage:StorageAccount').name;
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
        'keyVaultSecretsUser @ keyvault:Secret/iac-runner-identity',
        `monitoringMetricsPublisher @ applicationinsights:Component/${telemetry}`,
      ].sort(),
    );
  });

  it('when anything that takes a TLS version is declared, then it accepts TLS 1.2 at least, over HTTPS only', () => {
    expect(one('storage:StorageAccount').inputs).toMatchObject({ minimumTlsVersion: 'TLS1_2', enableHttpsTrafficOnly: true });
    expect(field(one('servicebus:Namespace'), 'minimumTlsVersion')).toBe('1.2');
    expect(field(one('sql:Server'), 'minimalTlsVersion')).toBe('1.2');
    const app = one('web:WebApp');
    expect(field(app, 'httpsOnly')).toBe(true);
    expect(field(app, 'siteConfig')).toMatchObject({ minTlsVersion: '1.2', scmMinTlsVersion: '1.2', ftpsState: 'Disabled' });
  });

  it('when the stores and telemetry are declared, then none accepts a shared key or local auth, only Entra', () => {
    expect(one('storage:StorageAccount').inputs).toMatchObject({ allowSharedKeyAccess: false, defaultToOAuthAuthentication: true, allowBlobPublicAccess: false });
    // Consistent with the account: the host reaches its storage by identity, never by a connection string.
    expect(appSettings()).toHaveProperty('AzureWebJobsStorage__accountName');
    expect(field(one('servicebus:Namespace'), 'disableLocalAuth')).toBe(true);
    expect(field(one('sql:Server'), 'administrators.azureADOnlyAuthentication')).toBe(true);
    expect(field(one('applicationinsights:Component'), 'disableLocalAuth')).toBe(true);
    expect(field(one('operationalinsights:Workspace'), 'features.disableLocalAuth')).toBe(true);
    expect(field(one('keyvault:Vault'), 'properties.enableRbacAuthorization')).toBe(true);
    expect(field(one('keyvault:Vault'), 'properties')).not.toHaveProperty('accessPolicies');
  });

  it('when network access is declared, then public endpoints are on only as a VNet-less app needs them, and SQL lets in Azure services only', () => {
    // Deliberate, not defaults: without a virtual network the app reaches each of these over its public endpoint.
    expect(field(one('storage:StorageAccount'), 'publicNetworkAccess')).toBe('Enabled');
    expect(field(one('servicebus:Namespace'), 'publicNetworkAccess')).toBe('Enabled');
    expect(field(one('sql:Server'), 'publicNetworkAccess')).toBe('Enabled');
    expect(field(one('keyvault:Vault'), 'properties.publicNetworkAccess')).toBe('Enabled');
    expect(field(one('web:WebApp'), 'publicNetworkAccess')).toBe('Enabled');
    expect(one('applicationinsights:Component').inputs).toMatchObject({ publicNetworkAccessForIngestion: 'Enabled', publicNetworkAccessForQuery: 'Enabled' });
    // Anonymous reads of blobs stay off whatever the network allows.
    expect(field(one('storage:StorageAccount'), 'allowBlobPublicAccess')).toBe(false);

    const rules = all('sql:FirewallRule');
    expect(rules.map((r) => [r.name, field(r, 'serverName'), field(r, 'startIpAddress'), field(r, 'endIpAddress')])).toEqual([
      ['AllowAllWindowsAzureIps', one('sql:Server').name, '0.0.0.0', '0.0.0.0'],
    ]);
  });

  it('when the deployment is declared, then each service, database, vault and storage service sends its logs and metrics to the workspace, once', () => {
    const workspace = one('operationalinsights:Workspace');
    const account = one('storage:StorageAccount');
    const withLogs = [
      one('web:WebApp').id,
      one('servicebus:Namespace').id,
      one('sql:Database').id,
      one('keyvault:Vault').id,
      ...['blobServices', 'queueServices', 'tableServices'].map((service) => `${account.id}/${service}/default`),
    ];
    const settings = all('monitor:DiagnosticSetting');
    for (const setting of settings) {
      expect(field(setting, 'workspaceId'), setting.name).toBe(workspace.id);
      const metrics = field(setting, 'metrics') as { enabled?: boolean }[];
      expect(metrics.length, setting.name).toBeGreaterThan(0);
      expect(metrics.every((m) => m.enabled === true), setting.name).toBe(true);
    }
    expect(settings.map((s) => field(s, 'resourceUri')).sort()).toEqual([...withLogs, account.id].sort());

    for (const target of withLogs) {
      const setting = one('monitor:DiagnosticSetting', (s) => field(s, 'resourceUri') === target);
      expect(field(setting, 'logs'), target).toEqual([{ categoryGroup: 'allLogs', enabled: true }]);
    }
    // The account itself has metrics only: Azure keeps a storage account's resource logs on its services.
    const accountSetting = one('monitor:DiagnosticSetting', (s) => field(s, 'resourceUri') === account.id);
    expect(field(accountSetting, 'metrics')).toEqual([{ category: 'Transaction', enabled: true }]);
    // Metric categories are per resource type; `AllMetrics` does not exist for SQL databases or storage.
    const metricsOf = (id: string) => (field(one('monitor:DiagnosticSetting', (s) => field(s, 'resourceUri') === id), 'metrics') as { category?: string }[]).map((m) => m.category);
    expect(metricsOf(one('sql:Database').id)).toEqual(['Basic', 'InstanceAndAppAdvanced']);
    expect(metricsOf(`${account.id}/blobServices/default`)).toEqual(['Transaction']);
    expect(metricsOf(one('keyvault:Vault').id)).toEqual(['AllMetrics']);
  });

  it('when the app registers its Service Bus triggers, then each one has its entity, its identity connection and a receive role', async () => {
    const settings = appSettings();
    const { provideRuntime } = await import('../../functions/runtime.js');
    provideRuntime({ config: parseConfig(settings), deps: new Promise(() => undefined) });
    await import('../../functions/index.js');
    const triggers = functionsWithTrigger('serviceBusTrigger').map(triggerOf);
    expect(triggers.length).toBeGreaterThanOrEqual(3);
    const receivers = all('authorization:RoleAssignment').filter((a) => text(a, 'roleDefinitionId').endsWith(ROLE.serviceBusDataReceiver));
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
});

/** The app settings as the Function App gets them (the WebAppApplicationSettings of the app). */
function appSettings(): Record<string, string> {
  return field(one('web:WebAppApplicationSettings'), 'properties') as Record<string, string>;
}

/** The application properties the outbox relay puts on a message of this event type. */
function relayedPropertiesOf(type: string): Record<string, unknown> {
  const payload = JSON.stringify({ specversion: '1.0', id: `evt-${type}`, source: '/runtime-cloud', type, time: '2026-12-01T00:00:00Z', datacontenttype: 'application/json', data: {} });
  const message = toOutgoingMessage({ seq: 1, eventId: `evt-${type}`, topic: EVENTS_TOPIC, correlationId: null, payload, attempts: 0 });
  return message.applicationProperties ?? {};
}

/**
 * Evaluates the two forms of Service Bus SQL filter the program uses, `user.p = 'v'` and `user.p IN ('a', 'b')`,
 * against a message's application properties. Any other form throws, so a filter written differently fails here
 * until this evaluator learns it.
 */
function matchesSqlFilter(expression: string, properties: Record<string, unknown>): boolean {
  const equals = /^(?:user\.)?(\w+)\s*=\s*'([^']*)'$/.exec(expression.trim());
  if (equals) return properties[equals[1]!] === equals[2];
  const within = /^(?:user\.)?(\w+)\s+IN\s*\(([^)]*)\)$/i.exec(expression.trim());
  if (within) {
    const values = within[2]!.split(',').map((v) => /^\s*'([^']*)'\s*$/.exec(v)?.[1]);
    if (values.some((v) => v === undefined)) throw new Error(`unsupported filter: ${expression}`);
    return values.includes(properties[within[1]!] as string);
  }
  throw new Error(`unsupported filter: ${expression}`);
}
