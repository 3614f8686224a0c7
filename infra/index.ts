/**
 * RuntimeCloudHost on Azure: a Linux Function App (Functions v4, Node 22, system-assigned identity) and what it runs
 * on — a storage account (host storage, Durable task hub, observed inventory in Tables), Service Bus (the promotions
 * queue, the events topic and its filtered subscriptions), Azure SQL with Entra-only authentication, Application
 * Insights over Log Analytics, and a Key Vault holding the seed's secrets with their rotation periods. Beside it, per
 * `azure-subscription` target, the runner agents that plan and apply there (./runners.ts).
 *
 * What always holds:
 * - No secret is an app setting. The app reaches Storage, Service Bus, SQL and Application Insights with its
 *   system-assigned identity, and runs no IaC engine: plans and applies run in runner jobs with the target's own
 *   identity, so the app holds no IaC credential.
 * - The app's system-assigned identity has data-plane roles only, each at the narrowest scope that works. The only
 *   other identities it can use are the targets' observers, each Reader on its own target. No identity the app can
 *   use holds a role that can change a target.
 * - Everything that lets a TLS version be set takes 1.2 at least; nothing accepts a shared key or local auth where
 *   Azure offers Entra instead.
 * - Public network access is on, deliberately: the app has no virtual network, so it reaches Storage, Service Bus,
 *   SQL, Key Vault and Application Insights over their public endpoints (infra/README.md, "Left for later").
 * - The Function App, the Service Bus namespace, the SQL database, the Key Vault and the storage account (with its
 *   blob, queue and table services) send their logs and metrics to the Log Analytics workspace.
 * - Entity names are the app's own (shared/platform/bus, functions/*): tests/infra/deployment.test.ts checks them
 *   against the app's registrations under Pulumi's mocks.
 */
import * as pulumi from '@pulumi/pulumi';
import * as azuread from '@pulumi/azuread';
import * as insights from '@pulumi/azure-native/applicationinsights';
import * as authorization from '@pulumi/azure-native/authorization';
import * as keyvault from '@pulumi/azure-native/keyvault';
import * as monitor from '@pulumi/azure-native/monitor';
import * as operationalinsights from '@pulumi/azure-native/operationalinsights';
import * as resources from '@pulumi/azure-native/resources';
import * as servicebus from '@pulumi/azure-native/servicebus';
import * as sql from '@pulumi/azure-native/sql';
import * as storage from '@pulumi/azure-native/storage';
import * as web from '@pulumi/azure-native/web';
import { assignRole, type Role } from './roles';
import { AGENT_ROLE, ENTRA_ONLY_STORAGE, runnerEnvironment, targetBackend, targetObserver, targetRunners, type DeployedPool, type RunnerContext } from './runners';
import { isAzureTarget, parseClients, parseRunnerImage, parseSources, parseTargets, stateNames, type RunnerImage, type Target } from './targets';

/**
 * The seed's secrets (design page, Security) and their rotation periods; `configKey` is the Pulumi config secret
 * holding the value. In this topology SQL and Service Bus are reached with the managed identity: SQL accepts only
 * Entra tokens and the namespace has local (SAS) auth disabled, so both are held for the seed's other topologies
 * (hybrid, on-prem) and nothing in Azure is granted to read them. The seed's third, `iac-runner-identity`, has no
 * place here: runners act with per-target managed identities, which have no secret to hold or rotate.
 */
const SEED_SECRETS = [
  { name: 'runtime-cloud-sql', rotationDays: 90, configKey: 'runtimeCloudSql' },
  { name: 'messaging-transport', rotationDays: 90, configKey: 'messagingTransport' },
] as const;

/** The seed's replicas (2–6) as the plan's instance count and autoscale bounds. */
const REPLICAS = { minimum: 2, maximum: 6 };

/** Names the app uses: shared/platform/bus/queue.ts, shared/platform/bus/events.ts, functions/*-intake.ts. */
const PROMOTIONS_QUEUE = 'runtime-cloud-promotions';
const EVENTS_TOPIC = 'runtime-cloud-events';
/**
 * Each subscription of the events topic and the event types it takes, by the `type` application property that the
 * outbox relay sets on every message (shared/platform/bus/outbox-relay.service.ts).
 */
const TOPIC_SUBSCRIPTIONS = [
  { name: 'provisioning', sqlExpression: "user.type = 'PoolResizeRequested'" },
  { name: 'inventory', sqlExpression: "user.type IN ('SpecificationApplied', 'ProvisioningApplied', 'ProvisioningFailed')" },
] as const;

/** Built-in policy definitions (Key Vault, data plane) assigned on the vault with effect Deny. */
const POLICIES = {
  secretsMustExpire: '98728c90-32c7-4049-8429-847dc0f4fe37',
  secretsMaximumValidity: '342e8053-e12e-4c44-be01-c3c2f318400f',
} as const;

const config = new pulumi.Config();
const prefix = config.get('prefix') ?? 'rch';
/** Entra group (object id) that administers the SQL server; nobody holds a SQL password. */
const sqlAdminGroupId = config.require('sqlAdminGroupObjectId');
const sqlAdminGroupName = config.get('sqlAdminGroupName') ?? 'runtime-cloud-sql-admins';
const issuer = config.require('authIssuer');
const audience = config.require('authAudience');
const jwksUrl = config.require('authJwksUrl');
/**
 * The client id of the host API's Entra application (whose service principal holds the app roles agents are
 * assigned); default the token audience, which for a v2 API registration is its client id.
 */
const apiClientId = config.get('authApiClientId') ?? audience;
/**
 * The operator console's Entra sign-in (docs/deploy-to-azure.md): its registration's client id, the authority
 * (`https://login.microsoftonline.com/<directory id>`) and the API scope it asks for. Unset: the console offers no sign-in.
 */
const consoleSettings: Record<string, string> = config.get('consoleClientId')
  ? {
      RuntimeCloud__Console__ClientId: config.require('consoleClientId'),
      RuntimeCloud__Console__Authority: config.get('consoleAuthority') ?? '',
      RuntimeCloud__Console__ApiScope: config.require('consoleApiScope'),
    }
  : {};
/**
 * By tenant id (or `*` for every tenant), the Git repositories its promotions may name (`RuntimeCloud__Provisioning__Sources`):
 * the host refuses every other source before fetching anything, and allows nothing unless listed here.
 */
const sources = parseSources(config.requireObject<unknown>('sources'));
/**
 * Client application ids of the callers that act for one tenant (a tenant's console or pipeline) → that tenant
 * (`RuntimeCloud__Auth__Clients`): Entra's tokens carry no tenant of ours, so this is how a tenant's caller is bound.
 */
const clients = parseClients(config.getObject<unknown>('clients') ?? {});
/** Where environments' infrastructure lives, and for Azure targets the scope their runners may change (./targets.ts). */
const targets = parseTargets(config.requireObject<unknown>('targets'));
const azureTargets = targets.filter(isAzureTarget);
/** The runner agents' image and its registry: required once an Azure target exists. */
const runnerImage = parseRunnerImage(config.get('runnerImage'), config.get('runnerRegistryId'), targets);
const enabledModules = config.get('enabledModules') ?? 'provisioning,inventory,capacity';
const inventoryScopes = config.getObject<Record<string, unknown>>('inventoryScopes') ?? {};
const configPlatformEndpoint = config.get('configPlatformEndpoint');
/**
 * The external services the host calls (contracts/README.md), `https://` base URLs, and the token audiences they
 * accept where they are not the defaults (`<service>Audience`). Unset: the host reports the service unhealthy
 * and fails every call to it as unavailable.
 */
const peerSettings: Record<string, string> = {};
for (const [key, setting] of [
  ['governance', 'Governance'],
  ['controlPlane', 'ControlPlane'],
  ['knowledge', 'Knowledge'],
  ['configPlatform', 'ConfigPlatform'],
  ['delivery', 'Delivery'],
] as const) {
  const endpoint = key === 'configPlatform' ? configPlatformEndpoint : config.get(`${key}Endpoint`);
  const audience = config.get(`${key}Audience`);
  if (endpoint) peerSettings[`RuntimeCloud__${setting}__Endpoint`] = endpoint;
  if (audience) peerSettings[`RuntimeCloud__${setting}__Audience`] = audience;
}
/** The day each seed secret's current value was set (YYYY-MM-DD): its expiry is that day plus its rotation period. */
const secretsRotatedOn = config.requireObject<Record<string, string>>('secretsRotatedOn');

const client = authorization.getClientConfigOutput();
const group = new resources.ResourceGroup(`${prefix}-runtime-cloud`);

// Storage: host storage (AzureWebJobsStorage: timers, Durable task hub) and the observed inventory (Tables). Shared
// keys are off: every client uses Entra. That is also why the plan is Dedicated, not Elastic Premium: Elastic Premium
// needs an Azure Files content share, which only takes an account-key connection string.
const account = new storage.StorageAccount(`${prefix}store`, { resourceGroupName: group.name, ...ENTRA_ONLY_STORAGE });

// Service Bus: Standard (topics), Entra only.
const bus = new servicebus.Namespace(`${prefix}-bus`, {
  resourceGroupName: group.name,
  sku: { name: servicebus.SkuName.Standard, tier: servicebus.SkuTier.Standard },
  minimumTlsVersion: servicebus.TlsVersion.TlsVersion_1_2,
  disableLocalAuth: true,
  // No virtual network (and private endpoints need Premium): reached over the public endpoint, with Entra.
  publicNetworkAccess: servicebus.PublicNetworkAccess.Enabled,
});
// PromotionApproved from DeliveryHost: messageId-based duplicate detection, a bounded number of deliveries, and
// expired or undeliverable messages kept in the dead-letter queue rather than dropped.
const promotions = new servicebus.Queue(PROMOTIONS_QUEUE, {
  queueName: PROMOTIONS_QUEUE,
  resourceGroupName: group.name,
  namespaceName: bus.name,
  requiresDuplicateDetection: true,
  duplicateDetectionHistoryTimeWindow: 'P1D',
  maxDeliveryCount: 10,
  lockDuration: 'PT1M',
  defaultMessageTimeToLive: 'P14D',
  deadLetteringOnMessageExpiration: true,
});
// Outbound events: messageId = event id, so a republish by the relay is dropped by duplicate detection.
const events = new servicebus.Topic(EVENTS_TOPIC, {
  topicName: EVENTS_TOPIC,
  resourceGroupName: group.name,
  namespaceName: bus.name,
  requiresDuplicateDetection: true,
  duplicateDetectionHistoryTimeWindow: 'P1D',
  defaultMessageTimeToLive: 'P14D',
  supportOrdering: true,
});
/** A subscription of the events topic that passes only what `sqlExpression` selects. */
function topicSubscription(name: string, sqlExpression: string): servicebus.Subscription {
  const subscription = new servicebus.Subscription(`${EVENTS_TOPIC}-${name}`, {
    subscriptionName: name,
    resourceGroupName: group.name,
    namespaceName: bus.name,
    topicName: events.name,
    maxDeliveryCount: 10,
    lockDuration: 'PT1M',
    defaultMessageTimeToLive: 'P14D',
    deadLetteringOnMessageExpiration: true,
    deadLetteringOnFilterEvaluationExceptions: true,
  });
  // The `$Default` rule Azure creates with every subscription passes every message; this replaces its filter
  // rather than adding a rule beside it (rules are OR-ed, so an added rule would filter nothing).
  new servicebus.DefaultRule(`${EVENTS_TOPIC}-${name}-filter`, {
    resourceGroupName: group.name,
    namespaceName: bus.name,
    topicName: events.name,
    subscriptionName: subscription.name,
    filterType: servicebus.FilterType.SqlFilter,
    sqlFilter: { sqlExpression },
  });
  return subscription;
}
const subscriptions = TOPIC_SUBSCRIPTIONS.map(({ name, sqlExpression }) => ({ name, subscription: topicSubscription(name, sqlExpression) }));

// Azure SQL: Entra-only authentication, an Entra group as administrator; the app is a contained database user
// (see `sqlUserToCreate`).
const sqlServer = new sql.Server(`${prefix}-sql`, {
  resourceGroupName: group.name,
  version: '12.0',
  minimalTlsVersion: '1.2',
  // No virtual network: the public endpoint stays on, and the firewall below lets in Azure services only.
  publicNetworkAccess: sql.ServerPublicNetworkAccessFlag.Enabled,
  administrators: {
    administratorType: sql.AdministratorType.ActiveDirectory,
    azureADOnlyAuthentication: true,
    login: sqlAdminGroupName,
    sid: sqlAdminGroupId,
    tenantId: client.tenantId,
    principalType: sql.PrincipalType.Group,
  },
});
// 0.0.0.0–0.0.0.0 is Azure's "allow Azure services": the Function App has no virtual network here, so its outbound
// addresses are not fixed. Authentication stays Entra-only.
new sql.FirewallRule('allow-azure-services', {
  firewallRuleName: 'AllowAllWindowsAzureIps',
  resourceGroupName: group.name,
  serverName: sqlServer.name,
  startIpAddress: '0.0.0.0',
  endIpAddress: '0.0.0.0',
});
const database = new sql.Database('runtimecloud', {
  databaseName: 'runtimecloud',
  resourceGroupName: group.name,
  serverName: sqlServer.name,
  sku: { name: 'GP_S_Gen5_2', tier: 'GeneralPurpose' },
  autoPauseDelay: -1,
  minCapacity: 0.5,
  requestedBackupStorageRedundancy: sql.BackupStorageRedundancy.Zone,
});

// Application Insights on a Log Analytics workspace; local (instrumentation key) auth is off, the app sends with
// its identity (APPLICATIONINSIGHTS_AUTHENTICATION_STRING). Nothing writes to the workspace with its shared keys
// either: Application Insights and the diagnostic settings below go through Azure Monitor.
const logs = new operationalinsights.Workspace(`${prefix}-logs`, {
  resourceGroupName: group.name,
  sku: { name: operationalinsights.WorkspaceSkuNameEnum.PerGB2018 },
  retentionInDays: 30,
  features: { disableLocalAuth: true },
});
const telemetry = new insights.Component(`${prefix}-insights`, {
  resourceGroupName: group.name,
  kind: 'web',
  applicationType: insights.ApplicationType.Web,
  workspaceResourceId: logs.id,
  ingestionMode: insights.IngestionMode.LogAnalytics,
  disableLocalAuth: true,
  // No virtual network: the app sends telemetry to the public ingestion endpoint.
  publicNetworkAccessForIngestion: insights.PublicNetworkAccessType.Enabled,
  publicNetworkAccessForQuery: insights.PublicNetworkAccessType.Enabled,
});

// Key Vault: RBAC (no access policies), soft delete and purge protection. It has no TLS setting: the platform accepts
// TLS 1.2 and later only. Public network access stays on because App Service resolves the Key Vault reference over
// the public endpoint (no virtual network here); RBAC decides who reads what.
const vault = new keyvault.Vault(`${prefix}-kv`, {
  resourceGroupName: group.name,
  properties: {
    tenantId: client.tenantId,
    sku: { family: keyvault.SkuFamily.A, name: keyvault.SkuName.Standard },
    enableRbacAuthorization: true,
    enableSoftDelete: true,
    softDeleteRetentionInDays: 90,
    enablePurgeProtection: true,
    publicNetworkAccess: 'Enabled',
  },
});
for (const seed of SEED_SECRETS) {
  const { notBefore, expires, rotatedOn } = validityOf(seed.name, seed.rotationDays);
  new keyvault.Secret(seed.name, {
    secretName: seed.name,
    resourceGroupName: group.name,
    vaultName: vault.name,
    properties: { value: config.requireSecret(seed.configKey), attributes: { enabled: true, notBefore, expires } },
    tags: { 'rotation-period': `P${seed.rotationDays}D`, 'rotated-on': rotatedOn },
  });
}
// Enforced on the data plane: every secret version written to this vault must expire, within the longest rotation
// period of the seed. A rotation by hand (`az keyvault secret set` without --expires) is refused.
const longestRotation = Math.max(...SEED_SECRETS.map((s) => s.rotationDays));
new authorization.PolicyAssignment('kv-secrets-must-expire', {
  scope: vault.id,
  displayName: 'RuntimeCloudHost secrets must have an expiration date',
  policyDefinitionId: `/providers/Microsoft.Authorization/policyDefinitions/${POLICIES.secretsMustExpire}`,
  parameters: { effect: { value: 'Deny' } },
});
new authorization.PolicyAssignment('kv-secrets-max-validity', {
  scope: vault.id,
  displayName: `RuntimeCloudHost secrets are valid at most ${longestRotation} days`,
  policyDefinitionId: `/providers/Microsoft.Authorization/policyDefinitions/${POLICIES.secretsMaximumValidity}`,
  parameters: { maximumValidityInDays: { value: longestRotation }, effect: { value: 'Deny' } },
});

// The key lease certificates are signed with (docs/capacity.md, "Lease certificates"): EC P-256, sign and verify only,
// its private part never leaving the vault. The rotation policy makes a new version every 90 days; the host publishes
// it at once and signs with it 5 minutes later, and the previous versions verify until they expire after a year.
const leaseCertificateKey = new keyvault.Key(
  'lease-certificates',
  {
    resourceGroupName: group.name,
    vaultName: vault.name,
    keyName: 'lease-certificates',
    properties: {
      kty: keyvault.JsonWebKeyType.EC,
      curveName: keyvault.JsonWebKeyCurveName.P_256,
      keyOps: [keyvault.JsonWebKeyOperation.Sign, keyvault.JsonWebKeyOperation.Verify],
      rotationPolicy: {
        lifetimeActions: [{ trigger: { timeAfterCreate: 'P90D' }, action: { type: keyvault.KeyRotationPolicyActionType.Rotate } }],
        attributes: { expiryTime: 'P1Y' },
      },
    },
  },
  { retainOnDelete: true },
);

// The Function App: a Dedicated Linux plan at the seed's replica count, autoscaled within the seed's range.
const plan = new web.AppServicePlan(`${prefix}-plan`, {
  resourceGroupName: group.name,
  kind: 'linux',
  reserved: true,
  sku: { name: 'P1v3', tier: 'PremiumV3', capacity: REPLICAS.minimum },
});
const cpuRule = (direction: 'Increase' | 'Decrease', operator: 'GreaterThan' | 'LessThan', threshold: number) => ({
  metricTrigger: {
    metricName: 'CpuPercentage',
    metricNamespace: 'microsoft.web/serverfarms',
    metricResourceUri: plan.id,
    timeGrain: 'PT1M',
    statistic: monitor.MetricStatisticType.Average,
    timeWindow: 'PT10M',
    timeAggregation: monitor.TimeAggregationType.Average,
    operator,
    threshold,
  },
  scaleAction: { direction, type: monitor.ScaleType.ChangeCount, value: '1', cooldown: 'PT5M' },
});
new monitor.AutoscaleSetting(`${prefix}-plan-autoscale`, {
  resourceGroupName: group.name,
  targetResourceUri: plan.id,
  enabled: true,
  profiles: [
    {
      name: 'seed-replicas',
      capacity: { minimum: String(REPLICAS.minimum), maximum: String(REPLICAS.maximum), default: String(REPLICAS.minimum) },
      rules: [cpuRule('Increase', 'GreaterThan', 70), cpuRule('Decrease', 'LessThan', 30)],
    },
  ],
});

// Each Azure target's observer identity, assigned to the app (drift scans read with it, by client id). The runner
// identities are per agent pool and assigned to their pool's job only (./runners.ts).
const observers = new Map(azureTargets.map((t) => [t.id, targetObserver(t, group.name)]));
const observerIds = [...observers.values()].map((observer) => observer.id);

const app = new web.WebApp(`${prefix}-runtime-cloud`, {
  resourceGroupName: group.name,
  serverFarmId: plan.id,
  kind: 'functionapp,linux',
  reserved: true,
  httpsOnly: true,
  // The system-assigned identity stays the default one (DefaultAzureCredential and the identity-based connections
  // use it when no client id is named).
  identity:
    observerIds.length > 0
      ? { type: web.ManagedServiceIdentityType.SystemAssigned_UserAssigned, userAssignedIdentities: observerIds }
      : { type: web.ManagedServiceIdentityType.SystemAssigned },
  keyVaultReferenceIdentity: 'SystemAssigned',
  siteConfig: {
    // Node 20 left support in April 2026; the code stays runnable on 20 (the development machines).
    linuxFxVersion: 'Node|22',
    alwaysOn: true,
    http20Enabled: true,
    minTlsVersion: web.SupportedTlsVersions.SupportedTlsVersions_1_2,
    scmMinTlsVersion: web.SupportedTlsVersions.SupportedTlsVersions_1_2,
    ftpsState: web.FtpsState.Disabled,
  },
  // It serves the public HTTP API.
  publicNetworkAccess: 'Enabled',
});

// Role assignments of the app's system-assigned identity: data-plane roles only, each at the narrowest scope that
// works, all in the deployment's subscription. None is on a target.
const principalId = app.identity.apply((identity) => {
  if (!identity?.principalId) throw new Error('the Function App has no system-assigned identity');
  return identity.principalId;
});
const grant = (name: string, scope: pulumi.Input<string>, role: Role, description: string) =>
  assignRole(name, { principalId, scope, role, subscriptionId: client.subscriptionId, description });
const grants = [
  // Host storage and the Durable task hub create their containers, queues and tables at run time, and inventory
  // creates its tables on first use: the account is the narrowest scope that covers names not known here.
  grant('app-storage-blobs', account.id, 'storageBlobDataContributor', 'Functions host storage and Durable task hub: blobs; claim-checked event bodies'),
  grant('app-storage-queues', account.id, 'storageQueueDataContributor', 'Durable task hub: control and work-item queues'),
  grant('app-storage-tables', account.id, 'storageTableDataContributor', 'Durable task hub history; observed inventory'),
  grant('app-bus-promotions', promotions.id, 'serviceBusDataReceiver', 'promotionIntake: receives PromotionApproved'),
  // Also how the host dispatches runner jobs: it publishes a wake-up, it never starts an execution itself.
  grant('app-bus-events', events.id, 'serviceBusDataSender', 'outbox relay: publishes the events topic'),
  ...subscriptions.map(({ name, subscription }) => grant(`app-bus-${name}`, subscription.id, 'serviceBusDataReceiver', `the ${name} subscription's trigger`)),
  grant('app-telemetry', telemetry.id, 'monitoringMetricsPublisher', 'Application Insights ingestion with Entra'),
  grant('app-lease-certificates', leaseCertificateKey.id, 'keyVaultCryptoUser', 'lease certificates: reads the key versions and signs with them'),
];

// Diagnostic settings: the resource logs and platform metrics of everything that serves, holds or moves the app's
// data go to the workspace beside Application Insights. Logs by the `allLogs` category group, so that categories a
// service adds later are included. Metric categories differ by resource type: a SQL database names its own, storage
// has `Transaction`, the others `AllMetrics`. A storage account has no resource logs of its own, only its services
// do (blob, queue, table; Azure Files is not used).
const toWorkspace = (name: string, resourceUri: pulumi.Input<string>, { logs: withLogs, metrics }: { logs: boolean; metrics: readonly string[] }) =>
  new monitor.DiagnosticSetting(`${name}-diagnostics`, {
    name: 'to-log-analytics',
    resourceUri,
    workspaceId: logs.id,
    ...(withLogs ? { logs: [{ categoryGroup: 'allLogs', enabled: true }] } : {}),
    metrics: metrics.map((category) => ({ category, enabled: true })),
  });
toWorkspace('app', app.id, { logs: true, metrics: ['AllMetrics'] });
toWorkspace('bus', bus.id, { logs: true, metrics: ['AllMetrics'] });
toWorkspace('sql-runtimecloud', database.id, { logs: true, metrics: ['Basic', 'InstanceAndAppAdvanced'] });
toWorkspace('kv', vault.id, { logs: true, metrics: ['AllMetrics'] });
toWorkspace('store', account.id, { logs: false, metrics: ['Transaction'] });
for (const service of ['blobServices', 'queueServices', 'tableServices']) {
  toWorkspace(`store-${service}`, pulumi.interpolate`${account.id}/${service}/default`, { logs: true, metrics: ['Transaction'] });
}

// Runner agents: one Container Apps environment, and per Azure target its state and per agent pool an identity and a
// job (./runners.ts). Targets of other kinds have customer-hosted agents that pull their jobs: nothing of theirs is
// deployed here.
const deployedPools = runnerImage === undefined ? [] : deployRunners(runnerImage);

/**
 * `RuntimeCloud__Targets` as the host reads it: each target with its runner pool and explicit pool groups (the host
 * derives each other tenant's default pool as this program does), and for an Azure target its scope and the client
 * id of its observer identity (the one drift scans of that target use).
 */
const targetsSetting = pulumi
  .all(targets.map((t) => (isAzureTarget(t) ? observers.get(t.id)!.clientId : undefined)))
  .apply((observerClientIds) => JSON.stringify(targets.map((t, i) => hostView(t, observerClientIds[i]))));

/**
 * `RuntimeCloud__Runners__Agents`: each agent pool's identity (client id) → its pool. An agent's Entra token carries
 * no pool: the host takes it from here, so an agent claims its own pool's jobs only.
 */
const agentsSetting = pulumi
  .all(deployedPools.map(({ identity }) => identity.clientId))
  .apply((clientIds) => JSON.stringify(Object.fromEntries(clientIds.map((clientId, i) => [clientId, deployedPools[i]!.pool.id]))));

// App settings: the keys of shared/platform/config/config.ts the app needs in Azure and the Functions host's own.
// Written after the role assignments, so that the identity-based connections resolve on the first start; declared
// after the runners, whose identities it names.
new web.WebAppApplicationSettings(
  `${prefix}-runtime-cloud-settings`,
  {
    name: app.name,
    resourceGroupName: group.name,
    properties: {
      FUNCTIONS_EXTENSION_VERSION: '~4',
      FUNCTIONS_WORKER_RUNTIME: 'node',
      AzureWebJobsStorage__accountName: account.name,
      ServiceBusConnection__fullyQualifiedNamespace: pulumi.interpolate`${bus.name}.servicebus.windows.net`,
      APPLICATIONINSIGHTS_CONNECTION_STRING: telemetry.connectionString,
      APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'Authorization=AAD',
      RuntimeCloud__Host__EnabledModules: enabledModules,
      // The engine of this installation's runner jobs; the host itself evaluates no program.
      RuntimeCloud__IaC__Runner: 'pulumi',
      OrleansMessaging__ServiceName: 'runtime-cloud',
      RuntimeCloud__Store__Dialect: 'mssql',
      RuntimeCloud__Store__Connection: pulumi.interpolate`Server=tcp:${sqlServer.fullyQualifiedDomainName},1433;Database=${database.name}`,
      RuntimeCloud__Tables__Connection: pulumi.interpolate`https://${account.name}.table.core.windows.net`,
      // Claim-checked event bodies (container runtime-cloud-event-bodies, made by the host on first use).
      RuntimeCloud__Outbox__Bodies__Connection: pulumi.interpolate`https://${account.name}.blob.core.windows.net`,
      RuntimeCloud__Auth__Issuer: issuer,
      RuntimeCloud__Auth__Audience: audience,
      RuntimeCloud__Auth__JwksUrl: jwksUrl,
      RuntimeCloud__Auth__Clients: JSON.stringify(clients),
      RuntimeCloud__Capacity__CertificateKey: pulumi.interpolate`https://${vault.name}.vault.azure.net/keys/${leaseCertificateKey.name}`,
      RuntimeCloud__Provisioning__Sources: JSON.stringify(sources),
      RuntimeCloud__Targets: targetsSetting,
      RuntimeCloud__Runners__Agents: agentsSetting,
      ...peerSettings,
      RuntimeCloud__Inventory__Scopes: JSON.stringify(inventoryScopes),
      ...consoleSettings,
    },
  },
  { dependsOn: grants },
);

function deployRunners(image: RunnerImage): DeployedPool[] {
  const environment = runnerEnvironment(`${prefix}-runners`, group.name, toWorkspace);
  const context: RunnerContext = {
    prefix,
    stack: pulumi.getStack(),
    resourceGroupName: group.name,
    subscriptionId: client.subscriptionId,
    tenantId: client.tenantId,
    busName: bus.name,
    topicName: EVENTS_TOPIC,
    subscribe: topicSubscription,
    environment,
    image,
    hostUrl: pulumi.interpolate`https://${app.defaultHostName}`,
    audience,
    api: hostApi(),
    diagnose: toWorkspace,
  };
  return azureTargets.flatMap((target) => targetRunners(target, context));
}

/**
 * The host API's service principal and the id of its `factory.runner.agent` app role, which each agent pool's identity
 * is assigned: an agent's token carries it in `roles`, and the host maps the token's client id to its pool.
 */
function hostApi(): RunnerContext['api'] {
  const principal = azuread.getServicePrincipalOutput({ clientId: apiClientId });
  return {
    objectId: principal.objectId,
    agentRoleId: principal.appRoleIds.apply((ids) => {
      const id = ids[AGENT_ROLE];
      if (!id) throw new Error(`the host API's Entra application (client id ${apiClientId}) has no app role ${AGENT_ROLE}: add it (allowed member types: Application) before deploying runners`);
      return id;
    }),
  };
}

/** A target as the host's `RuntimeCloud__Targets` carries it. */
function hostView(target: Target, observerClientId: string | undefined): Record<string, unknown> {
  const { id, kind, name, location, endpoint, pool } = target;
  return {
    id,
    kind,
    name,
    ...(location !== undefined ? { location } : {}),
    ...(endpoint !== undefined ? { endpoint } : {}),
    runnerPool: pool,
    ...(target.runnerPools.length > 0 ? { runnerPools: target.runnerPools.map(({ id, tenants }) => ({ id, tenants })) } : {}),
    ...(isAzureTarget(target)
      ? { scope: target.scope, observerClientId, backend: targetBackend(stateNames(prefix, pulumi.getStack(), target)) }
      : {
          backend: target.backend,
          // Its drift scans reach its cluster only as the target says, with its own credential (never one kubeconfig for all).
          ...(target.kubernetes ? { kubernetes: target.kubernetes } : {}),
          ...(target.observerClientId ? { observerClientId: target.observerClientId } : {}),
        }),
  };
}

/** Seconds since the epoch of a seed secret's rotation day, and of that day plus its rotation period. */
function validityOf(name: string, rotationDays: number): { notBefore: number; expires: number; rotatedOn: string } {
  const rotatedOn = secretsRotatedOn[name];
  const day = /^(\d{4})-(\d{2})-(\d{2})$/.exec(rotatedOn ?? '');
  const start = day ? Date.UTC(Number(day[1]), Number(day[2]) - 1, Number(day[3])) : Number.NaN;
  if (!day || !rotatedOn || new Date(start).toISOString().slice(0, 10) !== rotatedOn) {
    throw new Error(`config secretsRotatedOn.${name} must be the day its value was set, as YYYY-MM-DD (got ${JSON.stringify(rotatedOn)})`);
  }
  const notBefore = start / 1000;
  return { notBefore, expires: notBefore + rotationDays * 24 * 60 * 60, rotatedOn };
}

export const resourceGroupName = group.name;
export const functionAppName = app.name;
export const functionAppUrl = pulumi.interpolate`https://${app.defaultHostName}/runtime-cloud/health`;
export const keyVaultName = vault.name;
export const sqlServerName = sqlServer.fullyQualifiedDomainName;
/** The Container Apps Job of each agent pool of the Azure targets, by pool id. */
export const runnerJobNames = Object.fromEntries(deployedPools.map(({ pool, job }) => [pool.id, job.name]));
/**
 * Run once as a member of the SQL admin group, in the database: the app's identity becomes a contained user with what
 * the app needs (it migrates its schema on start, hence DDL). ARM cannot create database users.
 */
export const sqlUserToCreate = pulumi.interpolate`CREATE USER [${app.name}] FROM EXTERNAL PROVIDER; ALTER ROLE db_datareader ADD MEMBER [${app.name}]; ALTER ROLE db_datawriter ADD MEMBER [${app.name}]; ALTER ROLE db_ddladmin ADD MEMBER [${app.name}];`;
