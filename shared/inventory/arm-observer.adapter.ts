import type {
  GenericResource,
  GenericResourceExpanded,
  ProvidersGetOptionalParams,
  ProvidersGetResponse,
  ResourcesGetByIdOptionalParams,
  ResourcesListByResourceGroupOptionalParams,
} from '@azure/arm-resources';
import type { TokenCredential } from '@azure/identity';
import { AppError, ensureError } from '../platform/errors/app-error';
import { apiVersionOfToken, isInGroup, newestApiVersion, normalArmId, observedAsDesired, parseArmId, resourceGroupId, type ArmId } from './arm-resource';
import type { JsonValue } from './drift';
import type { DesiredResource, ObservationScope, ObservedResource, Observer } from './observer';
import { problemError } from '../platform/errors/catalogue';
import { InventoryErrors } from './errors';

/** The calls the observer makes; `ResourceManagementClient` of `@azure/arm-resources` has them. */
export interface ArmResourcesClient {
  /** The client's own api-version of Microsoft.Resources: a resource group is read with it. */
  readonly apiVersion: string;
  readonly resources: {
    listByResourceGroup(resourceGroupName: string, options?: ResourcesListByResourceGroupOptionalParams): { byPage(): AsyncIterable<readonly GenericResourceExpanded[]> };
    getById(resourceId: string, apiVersion: string, options?: ResourcesGetByIdOptionalParams): Promise<GenericResource>;
  };
  readonly providers: {
    get(resourceProviderNamespace: string, options?: ProvidersGetOptionalParams): Promise<ProvidersGetResponse>;
  };
}

export interface ArmObserverOptions {
  /**
   * Makes the client of one subscription for one observer identity; it is asked once per pair. Default: a
   * `ResourceManagementClient` signed in as the target's observer identity (`ManagedIdentityCredential` with its
   * client id), or, for a scope without one, `DefaultAzureCredential` (the developer's login locally). Tests pass a
   * client whose HTTP transport answers with published responses, because Azure cannot be reached from a test run.
   * @example createArmObserver({ client: (subscriptionId) => new ResourceManagementClient(credential, subscriptionId) })
   */
  readonly client?: (subscriptionId: string, observerClientId: string | undefined) => ArmResourcesClient | Promise<ArmResourcesClient>;
  /**
   * How many managed resources are read at once. Default 8.
   * @example createArmObserver({ reads: 4 })
   */
  readonly reads?: number;
}

/**
 * Observes a resource group through Azure Resource Manager, against the environment's desired resources
 * (`scope.desired`, each with the ARM id its stack state gives it):
 *
 * 1. The group is listed (`Resources_ListByResourceGroup`, every page): what is there. The listing has no
 *    properties; a listed resource that no desired resource has (ids compared as arm-resource.ts says) is
 *    unmanaged, with the type its id names (and, with `scope.azure.tags`, only if it carries those tags).
 * 2. Each desired resource in the group (the group itself included) is read by its id (`Resources_GetById`) with
 *    the api-version of its azure-native token when the token is versioned, else the newest stable one its provider
 *    registers for the type (`Providers_Get`, once per namespace and observation); the group itself with the SDK's
 *    own Microsoft.Resources version. This reaches the resources the listing leaves out (proxy resources such as a
 *    blob container). A 404 means it is missing; its answer, in the program's terms (`observedAsDesired`), is its
 *    observation, under the desired urn and type: the id it matched by names the same ARM type.
 *
 * A desired resource without an ARM id in the group (the stack, a Pulumi provider, a resource in another group or at
 * subscription scope) is not this observer's (`reaches`): the target's observer identity is Reader on the group
 * only. Anything else that fails (a listing page, a provider, a read) fails the whole observation
 * (`INVENTORY.TARGET_UNREACHABLE`), never a partial answer.
 */
export function createArmObserver(options: ArmObserverOptions = {}): Observer {
  const clientFor = options.client ? cachedPerSubscription(options.client) : defaultClients();
  const reads = options.reads ?? 8;
  return {
    name: 'azure-resource-manager',
    reaches(scope, resource) {
      return scope.azure !== undefined && managedIn(scope.azure, resource) !== undefined;
    },
    async observe(scope, { signal }) {
      const azure = scope.azure;
      if (!azure) {
        throw problemError(InventoryErrors.scopeIncomplete, `environment ${scope.environmentId} names no Azure resource group to observe`, {
          observer: 'azure-resource-manager',
          environmentId: scope.environmentId,
        });
      }
      if (signal.aborted) throw observeTimeout(scope);
      const managed = (scope.desired ?? []).flatMap((resource) => {
        const arm = managedIn(azure, resource);
        return arm ? [{ resource, id: resource.id!, arm }] : [];
      });
      const managedIds = new Set(managed.map((m) => normalArmId(m.id)));
      try {
        const client = await clientFor(azure.subscriptionId, scope.observerClientId);
        const unmanaged: ObservedResource[] = [];
        // No server-side `$filter` by tag: ARM takes one tag there and then leaves every resource's tags out of the
        // answer. The tags are checked here instead.
        for await (const page of client.resources.listByResourceGroup(azure.resourceGroup, { abortSignal: signal }).byPage()) {
          if (signal.aborted) throw observeTimeout(scope);
          for (const listed of page) {
            if (!listed.id || managedIds.has(normalArmId(listed.id)) || !resourceCarriesTags(listed, azure.tags ?? {})) continue;
            unmanaged.push(listedToObserved(listed));
          }
        }
        const versionOf = apiVersions(client, signal, (type) =>
          problemError(InventoryErrors.targetUnreachable, `the resources of type ${type} in resource group ${azure.resourceGroup} cannot be read: its provider registers no api-version for it`, {
            observer: 'azure-resource-manager',
            environmentId: scope.environmentId,
            subscriptionId: azure.subscriptionId,
            resourceGroup: azure.resourceGroup,
            resourceType: type,
          }),
        );
        const read = await inBatches(managed, reads, async ({ resource, id, arm }) => {
          const apiVersion = arm.namespace.toLowerCase() === 'microsoft.resources' && arm.resourceType.toLowerCase() === 'resourcegroups' ? client.apiVersion : await versionOf(resource.type, arm);
          const answer = await readById(client, id, apiVersion, signal);
          return answer && managedToObserved(resource, id, answer);
        });
        return [...read.filter((r): r is ObservedResource => r !== undefined), ...unmanaged];
      } catch (thrown) {
        if (signal.aborted) throw observeTimeout(scope);
        throw armFailure(thrown, scope.environmentId, azure);
      }
    },
  };
}

/** The ARM id of a desired resource when it lives in the scope's group (or is the group), else undefined. */
function managedIn(azure: NonNullable<ObservationScope['azure']>, resource: DesiredResource): ArmId | undefined {
  const arm = resource.id === undefined ? undefined : parseArmId(resource.id);
  return arm && isInGroup(resource.id!, resourceGroupId(azure.subscriptionId, azure.resourceGroup)) ? arm : undefined;
}

/** The resource as ARM answers a GET by id, or undefined when ARM says it is not there (404). */
async function readById(client: ArmResourcesClient, id: string, apiVersion: string, signal: AbortSignal): Promise<{ readonly [key: string]: JsonValue } | undefined> {
  try {
    // Without its leading slash: the SDK puts one before the id already.
    return asJsonObject(await client.resources.getById(id.replace(/^\/+/, ''), apiVersion, { abortSignal: signal }));
  } catch (thrown) {
    if ((ensureError(thrown) as { statusCode?: unknown }).statusCode === 404) return undefined;
    throw thrown;
  }
}

/**
 * The api-version of each desired resource's type: its token's, else the newest stable one its provider registers
 * (`newestApiVersion`), each provider asked once. A type the provider does not register cannot be read.
 */
function apiVersions(client: ArmResourcesClient, signal: AbortSignal, unregistered: (type: string) => AppError) {
  const providers = new Map<string, Promise<ProvidersGetResponse>>();
  return async (token: string, arm: ArmId): Promise<string> => {
    const fromToken = apiVersionOfToken(token);
    if (fromToken) return fromToken;
    const key = arm.namespace.toLowerCase();
    let provider = providers.get(key);
    if (!provider) {
      provider = client.providers.get(arm.namespace, { abortSignal: signal });
      providers.set(key, provider);
    }
    const wanted = arm.resourceType.toLowerCase();
    const registered = (await provider).resourceTypes?.find((t) => t.resourceType?.toLowerCase() === wanted);
    const version = newestApiVersion(registered?.apiVersions ?? []);
    if (version) return version;
    throw unregistered(arm.type);
  };
}

/** The items, at most `size` at once; the first failure fails it all (the others still settle). */
async function inBatches<T, R>(items: readonly T[], size: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += size) {
    const settled = await Promise.allSettled(items.slice(i, i + size).map(work));
    for (const outcome of settled) {
      if (outcome.status === 'rejected') throw outcome.reason;
      results.push(outcome.value);
    }
  }
  return results;
}

function managedToObserved(resource: DesiredResource, id: string, answer: { readonly [key: string]: JsonValue }): ObservedResource {
  const { properties, uncompared } = observedAsDesired(resource.properties, answer);
  return { urn: resource.urn, type: resource.type, id: typeof answer.id === 'string' ? answer.id : id, properties, ...(uncompared.length > 0 ? { uncompared } : {}) };
}

/**
 * A listed resource no desired resource has: urn `arm:<id as compared>`, the type its id names, and what the listing
 * shows of it (inventory keeps none of an unmanaged resource's values).
 */
export function listedToObserved(resource: GenericResourceExpanded): ObservedResource {
  const id = resource.id!;
  const type = parseArmId(id)?.type ?? resource.type ?? 'unknown';
  return { urn: `arm:${normalArmId(id)}`, type, id, properties: asJsonObject({ location: resource.location, sku: resource.sku, kind: resource.kind, tags: resource.tags }) };
}

/** True when the resource carries every tag with its value. Tag names compare case-insensitively, as in ARM; values exactly. */
export function resourceCarriesTags(resource: { readonly tags?: unknown }, tags: { readonly [name: string]: string }): boolean {
  const carried = resource.tags !== null && typeof resource.tags === 'object' ? (resource.tags as Record<string, unknown>) : {};
  return Object.entries(tags).every(([name, value]) => {
    const key = Object.hasOwn(carried, name) ? name : Object.keys(carried).find((k) => k.toLowerCase() === name.toLowerCase());
    return key !== undefined && carried[key] === value;
  });
}

function asJsonObject(value: object): { readonly [key: string]: JsonValue } {
  // A JSON round trip is exactly "JSON values only": Dates become ISO strings, undefined members disappear.
  return JSON.parse(JSON.stringify(value)) as { readonly [key: string]: JsonValue };
}

/** Errors that mean the resource group could not be read: anything ARM or the network answered, or no credential. */
const UNREACHABLE_ERROR_NAMES = new Set(['RestError', 'CredentialUnavailableError', 'AuthenticationError', 'AggregateAuthenticationError', 'AuthenticationRequiredError']);

function armFailure(thrown: unknown, environmentId: string, azure: NonNullable<ObservationScope['azure']>): Error {
  const error = ensureError(thrown);
  if (error instanceof AppError) return error;
  const { statusCode, code, request } = error as { statusCode?: unknown; code?: unknown; request?: { url?: unknown } };
  const systemError = typeof code === 'string' && /^E[A-Z_]+$/.test(code);
  if (!UNREACHABLE_ERROR_NAMES.has(error.name) && !systemError) return error;
  const status = typeof statusCode === 'number' ? statusCode : undefined;
  // What was asked for when ARM refused: the listing, a provider or one resource (its path, without the query).
  const path = typeof request?.url === 'string' ? new URL(request.url).pathname : undefined;
  return problemError(InventoryErrors.targetUnreachable, `the resource group ${azure.resourceGroup} of subscription ${azure.subscriptionId} could not be read${status === undefined ? '' : ` (HTTP ${status}${path ? ` for ${path}` : ''})`}`,
    {
      observer: 'azure-resource-manager',
      environmentId,
      subscriptionId: azure.subscriptionId,
      resourceGroup: azure.resourceGroup,
      ...(status === undefined ? {} : { status }),
      ...(path === undefined ? {} : { path }),
      // ARM's error code (`AuthorizationFailed`, `ResourceGroupNotFound`), the pipeline's (`REQUEST_SEND_ERROR`) or the system's.
      ...(typeof code === 'string' ? { code } : {}),
      // Without either (a credential that could not sign in), the kind of error.
      ...(status === undefined && typeof code !== 'string' ? { error: error.name } : {}),
    },
  );
}

function observeTimeout(scope: ObservationScope): AppError {
  return problemError(InventoryErrors.observeTimeout, `observing resource group ${scope.azure?.resourceGroup} ran past the scan's timeout`, {
    observer: 'azure-resource-manager',
    environmentId: scope.environmentId,
    subscriptionId: scope.azure?.subscriptionId,
    resourceGroup: scope.azure?.resourceGroup,
  });
}

type ClientFor = (subscriptionId: string, observerClientId: string | undefined) => Promise<ArmResourcesClient>;

function cachedPerSubscription(make: NonNullable<ArmObserverOptions['client']>): ClientFor {
  const clients = new Map<string, Promise<ArmResourcesClient>>();
  return (subscriptionId, observerClientId) => {
    const key = `${observerClientId ?? ''}/${subscriptionId}`;
    let client = clients.get(key);
    if (!client) {
      client = Promise.resolve().then(() => make(subscriptionId, observerClientId));
      clients.set(key, client);
      // A client that could not be made is made again next time.
      client.catch(() => clients.delete(key));
    }
    return client;
  };
}

/**
 * The SDKs are loaded on first use, not at module load: a host configured with another observer never pays for
 * them at cold start. One credential per observer identity serves every subscription, so its token cache is shared.
 */
function defaultClients(): ClientFor {
  const credentials = new Map<string, TokenCredential>();
  return cachedPerSubscription(async (subscriptionId, observerClientId) => {
    const { ResourceManagementClient } = await import('@azure/arm-resources');
    return new ResourceManagementClient(await observerCredential(credentials, observerClientId), subscriptionId);
  });
}

/** The credential of a target's observer identity (a user-assigned managed identity), or the default one. */
export async function observerCredential(credentials: Map<string, TokenCredential>, observerClientId: string | undefined): Promise<TokenCredential> {
  const { DefaultAzureCredential, ManagedIdentityCredential } = await import('@azure/identity');
  const key = observerClientId ?? '';
  let credential = credentials.get(key);
  if (!credential) {
    credential = observerClientId ? new ManagedIdentityCredential({ clientId: observerClientId }) : new DefaultAzureCredential();
    credentials.set(key, credential);
  }
  return credential;
}
