import { createRequire } from 'node:module';
import { join } from 'node:path';
import { expect } from 'vitest';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { toOutgoingMessage } from '../../shared/platform/bus/outbox-relay.service';

/**
 * Runs the Pulumi program of infra/ in-process under Pulumi's runtime mocks (`pulumi.runtime.setMocks`) and records
 * every resource it declares with its resolved inputs. No Azure and no `pulumi` CLI: what Azure would accept or do
 * with these inputs is out of reach here (infra/README.md). One run per test file: the Pulumi runtime is
 * process-wide, and vitest gives each file its own process.
 */

const INFRA = join(__dirname, '..', '..', 'infra');
// The program's own copy of the SDK (infra/node_modules after `cd infra && npm install`, else the root's): mocks set
// on another copy would never see its resources.
const pulumi = createRequire(join(INFRA, 'index.ts'))('@pulumi/pulumi') as typeof import('@pulumi/pulumi');

export const PROJECT = 'runtime-cloud-host';
export const SUBSCRIPTION_ID = '00000000-0000-4000-8000-000000000001';
export const TENANT_ID = '00000000-0000-4000-8000-000000000002';
export const APP_PRINCIPAL_ID = '00000000-0000-4000-8000-0000000000aa';
export const SQL_ADMIN_GROUP = '00000000-0000-4000-8000-0000000000bb';
/** The values of the seed's secrets, as Pulumi config secrets. */
export const SECRET_VALUES = { runtimeCloudSql: 'sql-secret-value-1', messagingTransport: 'bus-secret-value-3' };
export const ROTATED_ON = { 'runtime-cloud-sql': '2026-11-02', 'messaging-transport': '2026-10-15' };
/**
 * Two Azure targets in two subscriptions (`b` with its own pool id and size) serving the same three tenants, `a`
 * with two of them grouped in one agent pool, and a customer-hosted target.
 */
export const TARGET_SUBSCRIPTIONS = { a: '00000000-0000-4000-8000-00000000000a', b: '00000000-0000-4000-8000-00000000000b' };
/** The customer-hosted target's own state backend and secrets provider, per tenant. */
export const ON_PREM_BACKEND = { url: 's3://dc-pulumi-state/{tenant}', secretsProvider: 'hashivault://pulumi-{tenant}' };
/** How drift scans reach the customer-hosted target's cluster: a kubeconfig of its own. */
export const ON_PREM_CLUSTER = { kubeconfig: { path: '/mnt/secrets/dc-observer.kubeconfig', context: 'dc-reader' } };
export const TENANTS = ['contoso', 'fabrikam', 'northwind'] as const;
/** Target `a`'s one explicit group: contoso and fabrikam share an agent pool there (and only there). */
export const GROUP_A = { id: 'a-shared', tenants: ['contoso', 'fabrikam'] };
export const TARGETS = [
  { id: 'a', kind: 'azure-subscription', name: 'Target A', location: 'westeurope', scope: { subscriptionId: TARGET_SUBSCRIPTIONS.a, resourceGroup: 'rg-target-a' }, tenants: TENANTS, runnerPools: [GROUP_A] },
  { id: 'b', kind: 'azure-subscription', name: 'Target B', location: 'northeurope', scope: { subscriptionId: TARGET_SUBSCRIPTIONS.b, resourceGroup: 'rg-target-b' }, pool: 'pool-b', runners: { max: 4 }, tenants: TENANTS },
  { id: 'c', kind: 'on-prem', name: 'Datacenter', endpoint: 'https://dc.example.test', backend: ON_PREM_BACKEND, kubernetes: ON_PREM_CLUSTER },
];
/** The host API's service principal (object id) and the ids of its app roles, as Entra answers a lookup by client id. */
export const API_PRINCIPAL_ID = '00000000-0000-4000-8000-0000000000ee';
export const API_APP_ROLE_IDS = { 'factory.runner.agent': '00000000-0000-4000-8000-0000000000a1', 'factory.runtime.read': '00000000-0000-4000-8000-0000000000a2' };
/** Each tenant's repositories, and the client id of the console that acts for contoso. */
export const SOURCES = { contoso: [{ prefix: 'https://dev.azure.com/contoso/platform/' }], '*': [{ prefix: 'https://github.com/connectsoft/shared-infra.git' }] };
export const CLIENTS = { '7f3e1c2a-0000-4000-8000-000000000001': 'contoso' };
export const RUNNER_REGISTRY_ID = `/subscriptions/${SUBSCRIPTION_ID}/resourceGroups/rg-images/providers/Microsoft.ContainerRegistry/registries/rchimages`;
export const RUNNER_IMAGE = 'rchimages.azurecr.io/runtime-cloud-runner:2026.12.1';

/** A stack's configuration that deploys: keys without the project prefix, values as `pulumi config set` stores them. */
export function validConfig(): Record<string, string> {
  return {
    sqlAdminGroupObjectId: SQL_ADMIN_GROUP,
    authIssuer: 'https://login.example.test/issuer',
    authAudience: 'api://runtime-cloud',
    authJwksUrl: 'https://login.example.test/keys',
    targets: JSON.stringify(TARGETS),
    runnerImage: RUNNER_IMAGE,
    runnerRegistryId: RUNNER_REGISTRY_ID,
    secretsRotatedOn: JSON.stringify(ROTATED_ON),
    sources: JSON.stringify(SOURCES),
    clients: JSON.stringify(CLIENTS),
    governanceEndpoint: 'https://governance.example.test',
    controlPlaneEndpoint: 'https://control-plane.example.test',
    knowledgeEndpoint: 'https://knowledge.example.test',
    knowledgeAudience: 'api://knowledge-example',
    configPlatformEndpoint: 'https://config.example.test',
    deliveryEndpoint: 'https://delivery.example.test',
    ...SECRET_VALUES,
  };
}

export interface Declared {
  readonly type: string;
  /** The physical name: its own `<kind>Name` input, else its logical name (the mocks do no auto-naming). */
  readonly name: string;
  /** The name the program gave it (with its type, what makes its URN). */
  readonly logicalName: string;
  readonly id: string;
  /** Inputs with secrets revealed. */
  readonly inputs: Readonly<Record<string, unknown>>;
  /** Paths of the inputs that the program passed as secrets. */
  readonly secretPaths: readonly string[];
}

export type InfraProgram = typeof import('../../infra/index.js');

/**
 * Runs the program with `config` (the secret keys of `SECRET_VALUES` are set as secrets). Resolves once every
 * resource registration has been answered; rejects with the program's own error when it fails.
 */
export async function runInfra(config: Record<string, string>): Promise<{ declared: Declared[]; program: InfraProgram }> {
  const secretKeys = Object.keys(SECRET_VALUES).filter((key) => key in config);
  pulumi.runtime.setAllConfig(
    Object.fromEntries(Object.entries(config).map(([key, value]) => [`${PROJECT}:${key}`, value])),
    secretKeys.map((key) => `${PROJECT}:${key}`),
  );
  const declared: Declared[] = [];
  await pulumi.runtime.setMocks(
    {
      newResource({ type, name, inputs }) {
        const id = `/mock/${type}/${name}`;
        const secretPaths: string[] = [];
        const revealed = reveal(inputs, '', secretPaths) as Record<string, unknown>;
        const physical = physicalName(type, revealed, name);
        declared.push({ type, name: physical, logicalName: name, id, inputs: revealed, secretPaths });
        const state: Record<string, unknown> = { ...inputs, name: revealed.name ?? physical };
        if (type === 'azure-native:web:WebApp') {
          // Azure fills in the principal of a system-assigned identity, and only when one is asked for.
          const identity = revealed.identity as { type?: string } | undefined;
          if (identity?.type?.split(',').some((t) => t.trim() === 'SystemAssigned')) state.identity = { ...identity, principalId: APP_PRINCIPAL_ID, tenantId: TENANT_ID };
          state.defaultHostName = `${physical}.azurewebsites.net`;
        }
        if (type === 'azure-native:managedidentity:UserAssignedIdentity') {
          state.principalId = principalIdOf(name);
          state.clientId = clientIdOf(name);
        }
        if (type === 'azure-native:sql:Server') state.fullyQualifiedDomainName = `${physical}.database.windows.net`;
        if (type === 'azure-native:applicationinsights:Component') {
          state.connectionString = 'InstrumentationKey=00000000-0000-4000-8000-0000000000dd;IngestionEndpoint=https://westeurope-0.in.applicationinsights.azure.com/';
        }
        return { id, state };
      },
      call({ token, inputs }) {
        if (token === 'azure-native:authorization:getClientConfig') {
          return { clientId: 'deployer', objectId: 'deployer-object', subscriptionId: SUBSCRIPTION_ID, tenantId: TENANT_ID };
        }
        if (token === 'azuread:index/getServicePrincipal:getServicePrincipal') {
          // Entra finds the API's service principal by the client id the program asks for; any other id finds none.
          if (inputs.clientId !== config.authApiClientId && inputs.clientId !== config.authAudience) throw new Error(`no service principal has client id ${String(inputs.clientId)}`);
          return { clientId: inputs.clientId, objectId: API_PRINCIPAL_ID, appRoleIds: API_APP_ROLE_IDS };
        }
        throw new Error(`unexpected call ${token}`);
      },
    },
    PROJECT,
    'test',
  );
  const program = await import('../../infra/index.js');
  await Promise.all([program.functionAppName, program.sqlUserToCreate, program.keyVaultName].map((o) => valueOf(o)));
  // Every registration is in flight by now; this waits for the mocks to have answered all of them.
  await pulumi.runtime.disconnect();
  return { declared, program };
}

/** The principal (object) id Azure gives the user-assigned identity of this logical name, under these mocks. */
export function principalIdOf(identityName: string): string {
  return `principal-of-${identityName}`;
}
/** Its client id, under these mocks. */
export function clientIdOf(identityName: string): string {
  return `client-of-${identityName}`;
}

function valueOf<T>(output: import('@pulumi/pulumi').Output<T>): Promise<T> {
  return new Promise((resolve) => output.apply((value) => resolve(value)));
}

/** The input at a dotted path (`siteConfig.linuxFxVersion`, `profiles.0.capacity`). */
export function field(resource: Declared, path: string): unknown {
  return path
    .split('.')
    .reduce<unknown>((value, key) => (value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined), resource.inputs);
}

/** Built-in role ids, written out here rather than taken from the program, so that a wrong id in either fails. */
export const ROLE = {
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe',
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88',
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3',
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0',
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39',
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb',
  keyVaultCryptoUser: '12338af0-0e69-4776-bea7-57ae8d297424',
  acrPull: '7f951dda-4ed3-4680-a7ca-43fe172d538d',
  contributor: 'b24988ac-6180-42a0-ab88-20f7382dd24c',
  reader: 'acdd72a7-3385-48ef-bd42-f606fba81ae7',
} as const;

/** Lookups over what one run declared. */
export function inventory(declared: readonly Declared[]) {
  const all = (type: string) => declared.filter((r) => r.type === `azure-native:${type}`);
  return {
    all,
    /** The one resource of this type (and predicate); anything else fails the test. */
    one: (type: string, predicate: (r: Declared) => boolean = () => true): Declared => {
      const found = all(type).filter(predicate);
      expect(found, `exactly one ${type}`).toHaveLength(1);
      return found[0]!;
    },
    byId: (id: unknown) => declared.find((r) => r.id === id),
  };
}

/** The role an assignment grants, by its name in `ROLE` (or its raw id when it is none of those). */
export function roleOf(assignment: Declared): string {
  const id = text(assignment, 'roleDefinitionId');
  return Object.entries(ROLE).find(([, role]) => id.endsWith(`/${role}`))?.[0] ?? id;
}

/**
 * Evaluates the forms of Service Bus SQL filter the program uses, `user.p = 'v'`, `user.p IN ('a', 'b')` and terms of
 * those joined by AND, against a message's application properties. Any other form throws, so a filter written
 * differently fails here until this evaluator learns it.
 */
export function matchesSqlFilter(expression: string, properties: Record<string, unknown>): boolean {
  return expression
    .trim()
    .split(/\s+AND\s+/i)
    .every((term) => matchesTerm(term, properties, expression));
}

function matchesTerm(term: string, properties: Record<string, unknown>, expression: string): boolean {
  const equals = /^(?:user\.)?(\w+)\s*=\s*'([^']*)'$/.exec(term.trim());
  if (equals) return properties[equals[1]!] === equals[2];
  const within = /^(?:user\.)?(\w+)\s+IN\s*\(([^)]*)\)$/i.exec(term.trim());
  if (within) {
    const values = within[2]!.split(',').map((v) => /^\s*'([^']*)'\s*$/.exec(v)?.[1]);
    if (values.some((v) => v === undefined)) throw new Error(`unsupported filter: ${expression}`);
    return values.includes(properties[within[1]!] as string);
  }
  throw new Error(`unsupported filter: ${expression}`);
}

/** The application properties the outbox relay puts on a message of this event type (and subject). */
export function relayedPropertiesOf(type: string, subject?: string): Record<string, unknown> {
  const payload = JSON.stringify({ specversion: '1.0', id: `evt-${type}`, source: '/runtime-cloud', type, ...(subject !== undefined ? { subject } : {}), time: '2026-12-01T00:00:00Z', datacontenttype: 'application/json', data: {} });
  const message = toOutgoingMessage({ seq: 1, eventId: `evt-${type}`, topic: EVENTS_TOPIC, correlationId: null, payload, attempts: 0 });
  return message.applicationProperties ?? {};
}

/** A string input; anything else fails the test. */
export function text(resource: Declared, path: string): string {
  const value = field(resource, path);
  expect(typeof value, `${resource.name}.${path}`).toBe('string');
  return value as string;
}

/** `value` with Pulumi's secret wrappers removed; the path of each wrapper is pushed to `secretPaths`. */
function reveal(value: unknown, path: string, secretPaths: string[]): unknown {
  if (Array.isArray(value)) return value.map((v, i) => reveal(v, `${path}[${i}]`, secretPaths));
  if (value === null || typeof value !== 'object') return value;
  const record = value as Record<string, unknown>;
  if (record[pulumi.runtime.specialSigKey] === pulumi.runtime.specialSecretSig) {
    secretPaths.push(path);
    return reveal(record.value, path, secretPaths);
  }
  return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, reveal(v, path ? `${path}.${k}` : k, secretPaths)]));
}

function physicalName(type: string, inputs: Readonly<Record<string, unknown>>, logicalName: string): string {
  const kind = type.split(':').pop() ?? '';
  // A storage account's own name input is `accountName`, a blob container's `containerName`.
  const named: Record<string, string> = { 'azure-native:storage:StorageAccount': 'accountName', 'azure-native:storage:BlobContainer': 'containerName' };
  const own = inputs[named[type] ?? `${kind.charAt(0).toLowerCase()}${kind.slice(1)}Name`];
  return typeof own === 'string' ? own : logicalName;
}
