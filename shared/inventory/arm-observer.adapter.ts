import type { GenericResourceExpanded, ResourcesListByResourceGroupOptionalParams } from '@azure/arm-resources';
import type { TokenCredential } from '@azure/identity';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { JsonValue } from './drift';
import { URN_TAG, type ObservationScope, type ObservedResource, type Observer } from './observer';

/** The one call the observer makes; `ResourceManagementClient` of `@azure/arm-resources` has it. */
export interface ArmResourcesClient {
  readonly resources: {
    listByResourceGroup(resourceGroupName: string, options?: ResourcesListByResourceGroupOptionalParams): { byPage(): AsyncIterable<readonly GenericResourceExpanded[]> };
  };
}

export interface ArmObserverOptions {
  /**
   * Makes the client of one subscription for one observer identity; it is asked once per pair. Default: a
   * `ResourceManagementClient` signed in as the target's observer identity (`ManagedIdentityCredential` with its
   * client id), or, for a scope without one, `DefaultAzureCredential` (the developer's login locally). Tests pass a
   * client whose HTTP transport answers with recorded responses, because Azure cannot be reached from a test run.
   * @example createArmObserver({ client: (subscriptionId) => new ResourceManagementClient(credential, subscriptionId) })
   */
  readonly client?: (subscriptionId: string, observerClientId: string | undefined) => ArmResourcesClient | Promise<ArmResourcesClient>;
}

/** What ARM's generic resource list gives of a resource, as the SDK deserializes it or as the REST API returns it. */
export interface ArmGenericResource {
  readonly id?: string;
  readonly type?: string;
  readonly location?: string;
  readonly sku?: object;
  readonly kind?: string;
  readonly tags?: { readonly [name: string]: string };
  readonly properties?: object;
}

/** Asks ARM for these too; the mapping leaves them out, they are there for whoever reads the raw listing. */
const EXPAND = 'createdTime,changedTime,provisioningState';

/**
 * Observes a resource group through Azure Resource Manager: every resource of `scope.azure.resourceGroup`, or, with
 * `scope.azure.tags`, those carrying all of the tags. Pages are read to the end before anything is returned; a
 * failed page fails the whole observation (`INVENTORY.TARGET_UNREACHABLE`), never a partial list.
 */
export function createArmObserver(options: ArmObserverOptions = {}): Observer {
  const clientFor = options.client ? cachedPerSubscription(options.client) : defaultClients();
  return {
    name: 'azure-resource-manager',
    async observe(scope, { signal }) {
      const azure = scope.azure;
      if (!azure) {
        throw new AppError('INVENTORY.SCOPE_INCOMPLETE', 'validation', `environment ${scope.environmentId} names no Azure resource group to observe`, {
          observer: 'azure-resource-manager',
          environmentId: scope.environmentId,
        });
      }
      if (signal.aborted) throw observeTimeout(scope);
      const observed: ObservedResource[] = [];
      try {
        const client = await clientFor(azure.subscriptionId, scope.observerClientId);
        // No server-side `$filter` by tag: ARM takes one tag there and then leaves every resource's tags out of the
        // answer, which would lose the urn tag. The tags are checked here instead.
        const pages = client.resources.listByResourceGroup(azure.resourceGroup, { expand: EXPAND, abortSignal: signal }).byPage();
        for await (const page of pages) {
          if (signal.aborted) throw observeTimeout(scope);
          for (const resource of page) {
            if (resourceCarriesTags(resource, azure.tags ?? {})) observed.push(armResourceToObserved(resource));
          }
        }
      } catch (thrown) {
        if (signal.aborted) throw observeTimeout(scope);
        throw armFailure(thrown, scope.environmentId, azure);
      }
      return observed;
    },
  };
}

/**
 * A listed resource as observed: the urn from the `runtime-cloud-urn` tag, else `arm:<lower-cased id>` (ARM ids are
 * case-insensitive); the ARM type (`Microsoft.Web/sites`); properties `location`, `sku`, `kind`, `tags` and
 * `properties` where present, as JSON (dates as ISO strings, undefined dropped).
 */
export function armResourceToObserved(resource: ArmGenericResource): ObservedResource {
  const { id, type } = resource;
  if (!id || !type) throw new Error(`ARM listed a resource without an id or a type: ${JSON.stringify({ id, type })}`);
  const properties = asJsonObject({ location: resource.location, sku: resource.sku, kind: resource.kind, tags: resource.tags, properties: resource.properties });
  return { urn: tagValue(resource.tags, URN_TAG) ?? `arm:${id.toLowerCase()}`, type, id, properties };
}

/** True when the resource carries every tag with its value. Tag names compare case-insensitively, as in ARM; values exactly. */
export function resourceCarriesTags(resource: Pick<ArmGenericResource, 'tags'>, tags: { readonly [name: string]: string }): boolean {
  return Object.entries(tags).every(([name, value]) => tagValue(resource.tags, name) === value);
}

function tagValue(tags: ArmGenericResource['tags'], name: string): string | undefined {
  if (!tags) return undefined;
  if (Object.hasOwn(tags, name)) return tags[name];
  const lower = name.toLowerCase();
  const key = Object.keys(tags).find((k) => k.toLowerCase() === lower);
  return key === undefined ? undefined : tags[key];
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
  const { statusCode, code } = error as { statusCode?: unknown; code?: unknown };
  const systemError = typeof code === 'string' && /^E[A-Z_]+$/.test(code);
  if (!UNREACHABLE_ERROR_NAMES.has(error.name) && !systemError) return error;
  const status = typeof statusCode === 'number' ? statusCode : undefined;
  return new AppError(
    'INVENTORY.TARGET_UNREACHABLE',
    'unavailable',
    `the resource group ${azure.resourceGroup} of subscription ${azure.subscriptionId} could not be read${status === undefined ? '' : ` (HTTP ${status})`}`,
    {
      observer: 'azure-resource-manager',
      environmentId,
      subscriptionId: azure.subscriptionId,
      resourceGroup: azure.resourceGroup,
      ...(status === undefined ? {} : { status }),
      // ARM's error code (`AuthorizationFailed`, `ResourceGroupNotFound`), the pipeline's (`REQUEST_SEND_ERROR`) or the system's.
      ...(typeof code === 'string' ? { code } : {}),
      // Without either (a credential that could not sign in), the kind of error.
      ...(status === undefined && typeof code !== 'string' ? { error: error.name } : {}),
    },
  );
}

function observeTimeout(scope: ObservationScope): AppError {
  return new AppError('INVENTORY.OBSERVE_TIMEOUT', 'unavailable', `observing resource group ${scope.azure?.resourceGroup} ran past the scan's timeout`, {
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
