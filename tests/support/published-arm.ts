import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ResourceManagementClient } from '@azure/arm-resources';
import { createHttpHeaders, type HttpClient, type PipelineRequest, type PipelineResponse } from '@azure/core-rest-pipeline';
import type { TokenCredential } from '@azure/identity';
import { createArmObserver } from '../../shared/inventory/arm-observer.adapter';
import type { JsonValue } from '../../shared/inventory/drift';
import type { Observer } from '../../shared/inventory/observer';

/**
 * ARM as Microsoft published it, for the ARM observer's tests: the REST API's own examples (x-ms-examples of
 * Azure/azure-rest-api-specs) for the GETs by id, the Azure SDK teams' recordings of live ARM for the listings, and
 * Pulumi's recorded azure-native stack exports for the desired side (the published fixtures: docs/testing.md,
 * "Published fixtures"; read from there, never copied here). The real `@azure/arm-resources` SDK and core pipeline run
 * (URLs, paging, errors, deserialization); only the HTTP transport is replaced, and it answers with those files'
 * bodies.
 *
 * Two answers are not published and are made from the published ones, each said where it is made: ARM publishes no
 * listing of the groups the examples live in, so a group's listing is its examples' bodies without `properties`
 * (what `Resources_ListByResourceGroup` returns without `$expand`, as the Go recording shows); and no `Providers_Get`
 * answer is published beside the examples, so a provider registers, for each type, the api-version its example was
 * published for (`parameters["api-version"]`), and a GET by id with any other version fails the test.
 */
export const SHARED = join(__dirname, '..', '..', '..', 'shared', 'fixtures');
export const FILES = {
  webApp: 'arm/Microsoft.Web_sites.GetWebApp.json',
  plan: 'arm/Microsoft.Web_serverfarms.GetAppServicePlan.json',
  storage: 'arm/Microsoft.Storage_storageAccounts.StorageAccountGetProperties.json',
  serviceBus: 'arm/Microsoft.ServiceBus_namespaces.SBNameSpaceGet.json',
  identity: 'arm/Microsoft.ManagedIdentity_userAssignedIdentities.IdentityGet.json',
  insights: 'arm/Microsoft.Insights_components.ComponentsGet.json',
  sqlServer: 'arm/Microsoft.Sql_servers.ServerGet.json',
  database: 'arm/Microsoft.Sql_servers_databases.GetVCoreDatabase.json',
  goListing: 'arm/recordings/azure-sdk-for-go.TestResourcesClient_ListByResourceGroup.json',
  pythonListing: 'arm/recordings/azure-sdk-for-python.test_resources_list_by_resource_group.json',
  webStack: 'pulumi/pulumi-azure-native.upgrade-appservices-webapp.2.76.0.stack.json',
  storageStack: 'pulumi/pulumi-azure-native.upgrade-storage-blob.2.76.0.stack.json',
} as const;
export const present = Object.values(FILES).every((file) => existsSync(join(SHARED, file)));
if (!present) console.warn(`skipped: the published ARM examples, SDK recordings and Pulumi stack exports are not at ${SHARED} (the published fixtures: docs/testing.md)`);

const read = <T>(file: string): T => JSON.parse(readFileSync(join(SHARED, file), 'utf8')) as T;

export type JsonObject = { readonly [key: string]: JsonValue };
/** An x-ms-example file: the request's parameters and the answers. */
export interface Example {
  readonly parameters: Record<string, string>;
  readonly responses: { readonly 200: { readonly body: JsonObject & { readonly id: string; readonly name: string; readonly type: string; readonly location: string } } };
}
const example = (name: keyof typeof FILES): Example => read<Example>(FILES[name]);
export const bodyOf = (name: keyof typeof FILES) => example(name).responses[200].body;
/** One entry of an Azure SDK test-proxy recording. */
interface RecordedEntry {
  readonly RequestMethod: string;
  readonly RequestUri: string;
  readonly StatusCode: number;
  readonly ResponseBody: unknown;
}
/** The recorded answer to the recording's GET of a group's resources, and the group it listed. */
export function recordedListing(name: 'goListing' | 'pythonListing'): { subscriptionId: string; resourceGroup: string; body: unknown } {
  const entry = read<{ Entries: RecordedEntry[] }>(FILES[name]).Entries.find((e) => e.RequestMethod === 'GET' && /\/resources\?/.test(e.RequestUri))!;
  const [, subscriptionId, resourceGroup] = /\/subscriptions\/([^/]+)\/resourceGroups\/([^/]+)\/resources/i.exec(new URL(entry.RequestUri).pathname)!;
  return { subscriptionId: subscriptionId!, resourceGroup: resourceGroup!, body: entry.ResponseBody };
}
/** A resource of a Pulumi stack export (`pulumi stack export`, version 3). */
export interface StackResource {
  readonly urn: string;
  readonly type: string;
  readonly id?: string;
  readonly inputs?: JsonObject;
  readonly outputs?: JsonObject;
}
export const stackResources = (name: 'webStack' | 'storageStack') => read<{ deployment: { resources: StackResource[] } }>(FILES[name]).deployment.resources;
export const inputsOf = (name: 'webStack' | 'storageStack', type: string): JsonObject => stackResources(name).find((r) => r.type === type)!.inputs!;

/** The group a published id lives in. */
export function groupOf(id: string): { subscriptionId: string; resourceGroup: string } {
  const [, subscriptionId, resourceGroup] = /^\/subscriptions\/([^/]+)\/resourceGroups\/([^/]+)/i.exec(id)!;
  return { subscriptionId: subscriptionId!, resourceGroup: resourceGroup! };
}

// ---- the published ARM, behind the SDK's transport ------------------------------------------------------------

export interface Group {
  readonly subscriptionId: string;
  readonly resourceGroup: string;
  /** The listing's body: a recording's, or `listingOf` the examples in it. */
  readonly listing: unknown;
}
export interface Asked {
  readonly method: string;
  readonly path: string;
  readonly apiVersion: string | null;
}

/** A group's listing made of its examples (see the file comment): each body without `properties`. */
export function listingOf(...names: (keyof typeof FILES)[]): unknown {
  return {
    value: names.map((name) => {
      const { properties: _properties, ...listed } = bodyOf(name);
      return listed;
    }),
  };
}

/** The namespace and type below it of a published id, read here on its own (not with the code under test). */
function typeOfPublished(id: string): { namespace: string; resourceType: string } {
  const [namespace, ...rest] = id.split(/\/providers\//i).pop()!.split('/');
  return { namespace: namespace!, resourceType: rest.filter((_, i) => i % 2 === 0).join('/') };
}

/**
 * ARM as published: each group's listing, a provider registering its examples' api-versions, each example's body
 * for a GET of its id (ARM ids are case-insensitive) with its api-version, and the examples' 404 (no body) for any
 * other id. `refuse` answers a path with a status instead (no body: ARM's error bodies are not published here).
 */
export function publishedArm(groups: readonly Group[], examples: readonly (keyof typeof FILES)[], refuse: Record<string, number> = {}) {
  const asked: Asked[] = [];
  const bodies = examples.map((name) => ({ version: example(name).parameters['api-version']!, body: bodyOf(name) }));
  const httpClient: HttpClient = {
    async sendRequest(request) {
      const url = new URL(request.url);
      const path = decodeURIComponent(url.pathname);
      const apiVersion = url.searchParams.get('api-version');
      asked.push({ method: request.method, path, apiVersion });
      const refused = Object.entries(refuse).find(([p]) => p.toLowerCase() === path.toLowerCase());
      if (refused) return respond(request, refused[1], undefined);
      const group = groups.find((g) => `/subscriptions/${g.subscriptionId}/resourceGroups/${g.resourceGroup}/resources`.toLowerCase() === path.toLowerCase());
      if (group) return respond(request, 200, group.listing);
      const provider = /^\/subscriptions\/[^/]+\/providers\/([^/]+)$/i.exec(path);
      if (provider) {
        const namespace = provider[1]!;
        const types = bodies.filter((b) => typeOfPublished(b.body.id).namespace.toLowerCase() === namespace.toLowerCase());
        return respond(request, 200, { namespace, resourceTypes: types.map((b) => ({ resourceType: typeOfPublished(b.body.id).resourceType, apiVersions: [b.version] })) });
      }
      const found = bodies.find((b) => b.body.id.toLowerCase() === path.toLowerCase());
      if (!found) return respond(request, 404, undefined);
      if (found.version !== apiVersion) throw new Error(`${path} is published for api-version ${found.version}, asked with ${apiVersion}`);
      return respond(request, 200, found.body);
    },
  };
  return { httpClient, asked };
}

function respond(request: PipelineRequest, status: number, body: unknown): PipelineResponse {
  return { request, status, headers: createHttpHeaders({ 'content-type': 'application/json; charset=utf-8' }), ...(body === undefined ? {} : { bodyAsText: JSON.stringify(body) }) };
}

export const TOKEN: TokenCredential = { getToken: async () => ({ token: 'published', expiresOnTimestamp: Date.now() + 3_600_000 }) };

export function armObserver(httpClient: HttpClient, credential: TokenCredential = TOKEN): Observer {
  // No retries: a 429 or 503 is answered as the last attempt would be.
  return createArmObserver({ client: (subscriptionId) => new ResourceManagementClient(credential, subscriptionId, { httpClient, retryOptions: { maxRetries: 0 } }) });
}

// ---- the desired side ---------------------------------------------------------------------------------------

/** A resource as a program declares it and the stack state records it. */
export interface Declared {
  readonly name: string;
  readonly type: string;
  /** The ARM id the stack state records for it. */
  readonly id?: string;
  readonly inputs: JsonObject;
}

/** The urn of a resource of stack `dev` of project `app`. */
export const urnOf = (r: { name: string; type: string }) => `urn:pulumi:dev::app::${r.type}::${r.name}`;

/**
 * The web app and its plan of Microsoft's examples (group testrg123), as a Pulumi program declares them: the
 * WebApp's inputs as the recorded stack holds them (`__createBeforeDelete`, `kind`, `location`, `name`,
 * `resourceGroupName`, `serverFarmId`), pointed at the example's site, plus settings a program sets; the plan with
 * its sku. The site's `location` is the canonical name where ARM shows the display name (the plan's the display
 * name), and the plan's id in the site's `serverFarmId` is spelt with `resourcegroups` where ARM spells `resourceGroups`.
 */
export function webAppDeclared(overrides: JsonObject = {}, type = 'azure-native:web:WebApp'): Declared {
  const site = bodyOf('webApp');
  const { resourceGroup } = groupOf(site.id);
  const serverFarmId = (site.properties as { readonly serverFarmId: string }).serverFarmId.replace('/resourceGroups/', '/resourcegroups/');
  return {
    name: 'site',
    type,
    id: site.id,
    inputs: {
      ...inputsOf('webStack', 'azure-native:web:WebApp'),
      name: site.name,
      resourceGroupName: resourceGroup,
      location: 'eastus',
      serverFarmId,
      httpsOnly: false,
      clientAffinityEnabled: true,
      siteConfig: {
        alwaysOn: false,
        minTlsVersion: '1.2',
        ftpsState: 'AllAllowed',
        http20Enabled: false,
        virtualApplications: [{ virtualPath: '/', physicalPath: 'site\\wwwroot' }],
      },
      ...overrides,
    },
  };
}
export function planDeclared(): Declared {
  const plan = bodyOf('plan');
  return {
    name: 'plan',
    type: 'azure-native:web:AppServicePlan',
    id: plan.id,
    inputs: { name: plan.name, resourceGroupName: groupOf(plan.id).resourceGroup, kind: 'app', location: 'East US', sku: { name: 'P1', tier: 'Premium', capacity: 1 } },
  };
}
export const webGroup = (): Group => ({ ...groupOf(bodyOf('webApp').id), listing: listingOf('webApp', 'plan') });
