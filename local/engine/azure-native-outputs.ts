import { autoName, configString, drawnUuid, resourceUuid, type Derive, type Inputs, type OutputContext, type OutputModel } from './output-model';
import type { JsonObject, JsonValue } from '../../shared/platform/iac/iac-values';

/**
 * azure-native's computed outputs for the resource types programs use most. Each type's ARM path is the provider's
 * (`reports/tokenPaths.json` of pulumi/pulumi-azure-native: token → path template); a path parameter is the input
 * of the same name, `{subscriptionId}` the stack's `azure-native:subscriptionId` (else one drawn for the tenant, so
 * two tenants' ids never meet). The last parameter is the resource's name: when the program does not give it,
 * azure-native auto-names it as the recorded stacks show (`rg` → `rgc5b4011e`, `servicePlan` → `servicePlan5739a54b`:
 * the program's name and eight hex digits), or copies the program's name where the schema says `autoname: copy`
 * (a Blob: `index.html`). Outputs: `name`, `id` (the ARM id), `type` (the ARM type), `location` (the input, else
 * `azure-native:location`), and the few endpoints a name implies (`primaryEndpoints`, `hostName`, `loginServer`, ...).
 */

interface AzureType {
  /** The ARM path template, as tokenPaths.json has it. */
  readonly path: string;
  /** How the name parameter is filled when not given (default `random`); `none`: the path's last part is literal. */
  readonly autoname?: 'random' | 'copy' | 'none';
  /** A resource of the provider's own, not ARM's (a Blob): no ARM `type` output (a Blob's `type` is its blob type). */
  readonly custom?: true;
  /** Outputs besides name, id, type and location. */
  readonly extra?: Readonly<Record<string, Derive>>;
}

const RG = '/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}';
const STORAGE = `${RG}/providers/Microsoft.Storage/storageAccounts/{accountName}`;
const NETWORK = `${RG}/providers/Microsoft.Network`;
const WEB = `${RG}/providers/Microsoft.Web`;

/** An endpoint of a named service: `https://<name>.<suffix>/` style values, from the resource's own name. */
const fromName = (make: (name: string) => JsonValue): Derive => (inputs, context) => {
  const name = nameOf(inputs, context);
  return name === undefined ? undefined : make(name);
};

const TYPES: Readonly<Record<string, AzureType>> = {
  'azure-native:resources:ResourceGroup': { path: RG },
  'azure-native:storage:StorageAccount': {
    path: STORAGE,
    extra: {
      // As StorageAccounts_GetProperties gives them (arm/Microsoft.Storage_storageAccounts.*.json).
      primaryEndpoints: fromName((n) => Object.fromEntries(['blob', 'dfs', 'file', 'queue', 'table', 'web'].map((s) => [s, `https://${n}.${s}.core.windows.net/`]))),
      primaryLocation: (inputs, context) => locationOf(inputs, context),
      statusOfPrimary: () => 'available',
    },
  },
  'azure-native:storage:BlobContainer': { path: `${STORAGE}/blobServices/default/containers/{containerName}` },
  'azure-native:storage:Blob': {
    path: `${STORAGE}/blobServices/default/containers/{containerName}/blobs/{blobName}`,
    autoname: 'copy',
    custom: true,
    extra: { url: (inputs, context) => blobUrl(inputs, context) },
  },
  'azure-native:storage:StorageAccountStaticWebsite': {
    path: `${STORAGE}/staticWebsite`,
    autoname: 'none',
    custom: true,
    // The container Azure serves a static website from.
    extra: { containerName: () => '$web' },
  },
  'azure-native:web:AppServicePlan': { path: `${WEB}/serverfarms/{name}` },
  'azure-native:web:WebApp': { path: `${WEB}/sites/{name}`, extra: { defaultHostName: fromName((n) => `${n}.azurewebsites.net`) } },
  'azure-native:web:KubeEnvironment': { path: `${WEB}/kubeEnvironments/{name}` },
  'azure-native:web:ContainerApp': { path: `${WEB}/containerApps/{name}` },
  'azure-native:network:VirtualNetwork': { path: `${NETWORK}/virtualNetworks/{virtualNetworkName}` },
  'azure-native:network:Subnet': { path: `${NETWORK}/virtualNetworks/{virtualNetworkName}/subnets/{subnetName}` },
  'azure-native:network:NetworkSecurityGroup': { path: `${NETWORK}/networkSecurityGroups/{networkSecurityGroupName}` },
  'azure-native:network:NetworkInterface': { path: `${NETWORK}/networkInterfaces/{networkInterfaceName}` },
  'azure-native:network:PublicIPAddress': { path: `${NETWORK}/publicIPAddresses/{publicIpAddressName}` },
  'azure-native:compute:VirtualMachine': { path: `${RG}/providers/Microsoft.Compute/virtualMachines/{vmName}` },
  'azure-native:containerservice:ManagedCluster': { path: `${RG}/providers/Microsoft.ContainerService/managedClusters/{resourceName}` },
  'azure-native:containerregistry:Registry': {
    path: `${RG}/providers/Microsoft.ContainerRegistry/registries/{registryName}`,
    extra: { loginServer: fromName((n) => `${n.toLowerCase()}.azurecr.io`) },
  },
  'azure-native:cdn:Profile': { path: `${RG}/providers/Microsoft.Cdn/profiles/{profileName}` },
  'azure-native:cdn:Endpoint': {
    path: `${RG}/providers/Microsoft.Cdn/profiles/{profileName}/endpoints/{endpointName}`,
    extra: { hostName: fromName((n) => `${n}.azureedge.net`) },
  },
  'azure-native:operationalinsights:Workspace': {
    path: `${RG}/providers/Microsoft.OperationalInsights/workspaces/{workspaceName}`,
    extra: { customerId: (_, context) => resourceUuid(context, 'customerId') },
  },
  'azure-native:insights:Component': {
    path: `${RG}/providers/Microsoft.Insights/components/{resourceName}`,
    extra: {
      appId: (_, context) => resourceUuid(context, 'appId'),
      instrumentationKey: (_, context) => resourceUuid(context, 'instrumentationKey'),
      connectionString: (_, context) => `InstrumentationKey=${resourceUuid(context, 'instrumentationKey')}`,
    },
  },
  'azure-native:managedidentity:UserAssignedIdentity': {
    path: `${RG}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{resourceName}`,
    extra: {
      clientId: (_, context) => resourceUuid(context, 'clientId'),
      principalId: (_, context) => resourceUuid(context, 'principalId'),
      tenantId: (_, context) => tenantIdOf(context),
    },
  },
  'azure-native:keyvault:Vault': {
    path: `${RG}/providers/Microsoft.KeyVault/vaults/{vaultName}`,
    extra: {
      properties: (inputs, context) => {
        const name = nameOf(inputs, context);
        const given = inputs.value('properties');
        return name === undefined ? undefined : { ...(isObject(given) ? given : {}), vaultUri: `https://${name}.vault.azure.net` };
      },
    },
  },
  'azure-native:sql:Server': {
    path: `${RG}/providers/Microsoft.Sql/servers/{serverName}`,
    extra: { fullyQualifiedDomainName: fromName((n) => `${n}.database.windows.net`) },
  },
  'azure-native:sql:Database': { path: `${RG}/providers/Microsoft.Sql/servers/{serverName}/databases/{databaseName}` },
  'azure-native:servicebus:Namespace': {
    path: `${RG}/providers/Microsoft.ServiceBus/namespaces/{namespaceName}`,
    extra: { serviceBusEndpoint: fromName((n) => `https://${n}.servicebus.windows.net:443/`) },
  },
  'azure-native:servicebus:Queue': { path: `${RG}/providers/Microsoft.ServiceBus/namespaces/{namespaceName}/queues/{queueName}` },
  'azure-native:servicebus:Topic': { path: `${RG}/providers/Microsoft.ServiceBus/namespaces/{namespaceName}/topics/{topicName}` },
  'azure-native:app:ManagedEnvironment': { path: `${RG}/providers/Microsoft.App/managedEnvironments/{environmentName}` },
  'azure-native:app:ContainerApp': { path: `${RG}/providers/Microsoft.App/containerApps/{containerAppName}` },
};

/** The model of an azure-native type, or undefined for another package or a type not listed here. */
export function azureNativeModel(type: string): OutputModel | undefined {
  const azure = Object.hasOwn(TYPES, type) ? TYPES[type] : undefined;
  if (!azure) return undefined;
  const outputs: Record<string, Derive> = {
    id: (inputs, context) => armId(azure, inputs, context),
    ...(azure.custom ? {} : { type: () => armType(azure.path) }),
    location: (inputs, context) => (type === 'azure-native:resources:ResourceGroup' || inputs.value('location') !== undefined ? locationOf(inputs, context) : undefined),
    ...(azure.autoname === 'none' ? {} : { name: (inputs: Inputs, context: OutputContext) => nameOf(inputs, context) }),
    ...azure.extra,
  };
  return { outputs };
}

/** The ARM id: the path with every parameter filled, or undefined while one has no value. */
function armId(azure: AzureType, inputs: Inputs, context: OutputContext): string | undefined {
  const last = nameParameter(azure.path);
  let missing = false;
  const id = azure.path.replace(/\{(\w+)\}/g, (_, parameter: string) => {
    const value =
      parameter === 'subscriptionId'
        ? subscriptionOf(context)
        : parameter === last && azure.autoname !== 'none'
          ? nameOf(inputs, context, azure)
          : inputs.string(parameter);
    if (value === undefined) missing = true;
    return value ?? '';
  });
  return missing ? undefined : id;
}

/** The resource's name: its name parameter's input, else the auto-name. */
function nameOf(inputs: Inputs, context: OutputContext, azure: AzureType | undefined = typeByContext(context)): string | undefined {
  if (!azure) return undefined;
  const given = inputs.string(nameParameter(azure.path));
  if (given !== undefined) return given;
  return azure.autoname === 'copy' ? context.name : autoName(context);
}

/** The type a context's urn names (`...::azure-native:storage:StorageAccount::name`). */
function typeByContext(context: OutputContext): AzureType | undefined {
  const type = context.urn.split('::')[2]?.split('$').pop();
  return type !== undefined && Object.hasOwn(TYPES, type) ? TYPES[type] : undefined;
}

function nameParameter(path: string): string {
  return /\{(\w+)\}$/.exec(path)?.[1] ?? '';
}

/** The ARM type from the path: the namespace after the last `providers`, then every other segment. */
export function armType(path: string): string {
  const segments = path.split('/').filter((s) => s !== '');
  const at = segments.lastIndexOf('providers');
  if (at < 0) return 'Microsoft.Resources/resourceGroups';
  const [namespace, ...rest] = segments.slice(at + 1);
  return [namespace, ...rest.filter((_, i) => i % 2 === 0)].join('/');
}

function locationOf(inputs: Inputs, context: OutputContext): string | undefined {
  return inputs.string('location') ?? configString(context, 'azure-native:location');
}

/** The stack's subscription: its `azure-native:subscriptionId`, else one drawn for the tenant. */
export function subscriptionOf(context: OutputContext): string {
  return configString(context, 'azure-native:subscriptionId') ?? drawnUuid(context.tenant, 'azure-subscription');
}

function tenantIdOf(context: OutputContext): string {
  return configString(context, 'azure-native:tenantId') ?? drawnUuid(context.tenant, 'azure-tenant');
}

function blobUrl(inputs: Inputs, context: OutputContext): string | undefined {
  const account = inputs.string('accountName');
  const container = inputs.string('containerName');
  const blob = nameOf(inputs, context);
  return account === undefined || container === undefined || blob === undefined ? undefined : `https://${account}.blob.core.windows.net/${container}/${blob}`;
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
