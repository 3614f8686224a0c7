/**
 * RuntimeCloudHost on Azure: a Function App (Node 20, Functions v4) with a system-assigned identity, and what it
 * runs on: Service Bus (promotions queue, events topic, both with duplicate detection), Azure SQL (Entra-only
 * authentication, the app's identity as a database user), a storage account (Table storage for observed inventory,
 * AzureWebJobsStorage for timers and the Durable task hub) and Application Insights.
 *
 * App settings are exactly the keys of shared/platform/config/config.ts. Secrets are not settings: the app reaches
 * SQL, Storage and Service Bus with its managed identity (role assignments below).
 */
import * as pulumi from '@pulumi/pulumi';
import * as insights from '@pulumi/azure-native/applicationinsights';
import * as authorization from '@pulumi/azure-native/authorization';
import * as resources from '@pulumi/azure-native/resources';
import * as servicebus from '@pulumi/azure-native/servicebus';
import * as sql from '@pulumi/azure-native/sql';
import * as storage from '@pulumi/azure-native/storage';
import * as web from '@pulumi/azure-native/web';

const config = new pulumi.Config();
const prefix = config.get('prefix') ?? 'rch';
/** Entra group (object id) that administers the SQL server; the app itself never holds a SQL password. */
const sqlAdminGroupId = config.require('sqlAdminGroupObjectId');
const sqlAdminGroupName = config.get('sqlAdminGroupName') ?? 'runtime-cloud-sql-admins';
const issuer = config.require('authIssuer');
const audience = config.require('authAudience');
const jwksUrl = config.require('authJwksUrl');
const targets = config.getObject<unknown[]>('targets') ?? [];
const enabledModules = config.get('enabledModules') ?? 'provisioning,inventory,capacity';

const client = authorization.getClientConfigOutput();
const group = new resources.ResourceGroup(`${prefix}-runtime-cloud`);

const account = new storage.StorageAccount(`${prefix}store`, {
  resourceGroupName: group.name,
  sku: { name: storage.SkuName.Standard_ZRS },
  kind: storage.Kind.StorageV2,
  minimumTlsVersion: storage.MinimumTlsVersion.TLS1_2,
  allowBlobPublicAccess: false,
});

const bus = new servicebus.Namespace(`${prefix}-bus`, {
  resourceGroupName: group.name,
  sku: { name: servicebus.SkuName.Standard, tier: servicebus.SkuTier.Standard },
  disableLocalAuth: true,
});
new servicebus.Queue('runtime-cloud-promotions', {
  queueName: 'runtime-cloud-promotions',
  resourceGroupName: group.name,
  namespaceName: bus.name,
  requiresDuplicateDetection: true,
  duplicateDetectionHistoryTimeWindow: 'P1D',
  maxDeliveryCount: 10,
  lockDuration: 'PT1M',
  deadLetteringOnMessageExpiration: true,
});
const events = new servicebus.Topic('runtime-cloud-events', {
  topicName: 'runtime-cloud-events',
  resourceGroupName: group.name,
  namespaceName: bus.name,
  requiresDuplicateDetection: true,
  duplicateDetectionHistoryTimeWindow: 'P1D',
  supportOrdering: true,
});
// The provisioning module's own subscription (function poolResizeIntake): pool resizes become provisioning runs.
const provisioningSubscription = new servicebus.Subscription('runtime-cloud-events-provisioning', {
  subscriptionName: 'provisioning',
  resourceGroupName: group.name,
  namespaceName: bus.name,
  topicName: events.name,
  maxDeliveryCount: 10,
  lockDuration: 'PT1M',
  deadLetteringOnMessageExpiration: true,
});
// Replaces the subscription's default rule (every message): only PoolResizeRequested, by the relay's `type` property.
new servicebus.Rule('runtime-cloud-events-provisioning-filter', {
  ruleName: '$Default',
  resourceGroupName: group.name,
  namespaceName: bus.name,
  topicName: events.name,
  subscriptionName: provisioningSubscription.name,
  filterType: servicebus.FilterType.CorrelationFilter,
  correlationFilter: { properties: { type: 'PoolResizeRequested' } },
});

const sqlServer = new sql.Server(`${prefix}-sql`, {
  resourceGroupName: group.name,
  minimalTlsVersion: '1.2',
  administrators: {
    administratorType: sql.AdministratorType.ActiveDirectory,
    azureADOnlyAuthentication: true,
    login: sqlAdminGroupName,
    sid: sqlAdminGroupId,
    tenantId: client.tenantId,
    principalType: sql.PrincipalType.Group,
  },
});
const database = new sql.Database('runtimecloud', {
  databaseName: 'runtimecloud',
  resourceGroupName: group.name,
  serverName: sqlServer.name,
  sku: { name: 'GP_S_Gen5_2', tier: 'GeneralPurpose' },
  autoPauseDelay: -1,
  requestedBackupStorageRedundancy: sql.BackupStorageRedundancy.Zone,
});

const telemetry = new insights.Component(`${prefix}-insights`, {
  resourceGroupName: group.name,
  kind: 'web',
  applicationType: insights.ApplicationType.Web,
});

const plan = new web.AppServicePlan(`${prefix}-plan`, {
  resourceGroupName: group.name,
  kind: 'elastic',
  reserved: true,
  sku: { name: 'EP1', tier: 'ElasticPremium' },
  maximumElasticWorkerCount: 6,
});

const app = new web.WebApp(`${prefix}-runtime-cloud`, {
  resourceGroupName: group.name,
  serverFarmId: plan.id,
  kind: 'functionapp,linux',
  httpsOnly: true,
  identity: { type: web.ManagedServiceIdentityType.SystemAssigned },
  siteConfig: {
    linuxFxVersion: 'Node|20',
    minimumElasticInstanceCount: 2,
    ftpsState: web.FtpsState.Disabled,
    appSettings: [
      { name: 'FUNCTIONS_EXTENSION_VERSION', value: '~4' },
      { name: 'FUNCTIONS_WORKER_RUNTIME', value: 'node' },
      { name: 'AzureWebJobsStorage__accountName', value: account.name },
      { name: 'ServiceBusConnection__fullyQualifiedNamespace', value: pulumi.interpolate`${bus.name}.servicebus.windows.net` },
      { name: 'APPLICATIONINSIGHTS_CONNECTION_STRING', value: telemetry.connectionString },
      { name: 'RuntimeCloud__Host__EnabledModules', value: enabledModules },
      { name: 'RuntimeCloud__IaC__Runner', value: 'pulumi' },
      { name: 'OrleansMessaging__ServiceName', value: 'runtime-cloud' },
      { name: 'RuntimeCloud__Store__Dialect', value: 'mssql' },
      {
        name: 'RuntimeCloud__Store__Connection',
        value: pulumi.interpolate`Server=tcp:${sqlServer.fullyQualifiedDomainName},1433;Database=${database.name}`,
      },
      { name: 'RuntimeCloud__Tables__Connection', value: pulumi.interpolate`https://${account.name}.table.core.windows.net` },
      { name: 'RuntimeCloud__Auth__Issuer', value: issuer },
      { name: 'RuntimeCloud__Auth__Audience', value: audience },
      { name: 'RuntimeCloud__Auth__JwksUrl', value: jwksUrl },
      { name: 'RuntimeCloud__Targets', value: JSON.stringify(targets) },
    ],
  },
});

/** Built-in role definition ids (documented by Azure, stable across tenants). */
const ROLES = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b',
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3',
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88',
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419',
};
const principalId = app.identity.apply((identity) => identity?.principalId ?? '');
const grant = (name: string, scope: pulumi.Input<string>, role: string) =>
  new authorization.RoleAssignment(name, {
    scope,
    principalId,
    principalType: authorization.PrincipalType.ServicePrincipal,
    roleDefinitionId: pulumi.interpolate`/subscriptions/${client.subscriptionId}/providers/Microsoft.Authorization/roleDefinitions/${role}`,
  });
grant('app-blob', account.id, ROLES.storageBlobDataOwner);
grant('app-tables', account.id, ROLES.storageTableDataContributor);
grant('app-queues', account.id, ROLES.storageQueueDataContributor);
grant('app-bus', bus.id, ROLES.serviceBusDataOwner);

export const functionAppName = app.name;
export const functionAppUrl = pulumi.interpolate`https://${app.defaultHostName}/runtime-cloud/health`;
export const sqlServerName = sqlServer.fullyQualifiedDomainName;
/** Run once as the SQL admin group: CREATE USER [<functionAppName>] FROM EXTERNAL PROVIDER; ALTER ROLE db_owner ADD MEMBER […]. */
export const sqlUserToCreate = app.name;
