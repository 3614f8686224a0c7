import { setMaxListeners } from 'node:events';
import type { TokenCredential } from '@azure/identity';
import type { AppsV1Api, ConfigurationOptions, CoreV1Api, KubeConfig, V1ListMeta } from '@kubernetes/client-node';
import type { ProvisioningTarget } from '../platform/config/setting-schemas';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { JsonValue } from './drift';
import { URN_ANNOTATION, type ObservationScope, type ObservedResource, type Observer } from './observer';
import { problemError } from '../platform/errors/catalogue';
import { InventoryErrors } from './errors';

/** `@kubernetes/client-node`, loaded on first use. */
export type KubernetesSdk = typeof import('@kubernetes/client-node');

/**
 * The scope of a Microsoft Entra token for an AKS API server: the AKS AAD server application, one application id
 * for every AKS cluster with Entra integration (kubelogin's `--server-id`).
 */
export const AKS_TOKEN_SCOPE = '6dae42f8-4368-4678-94ff-3960e28e3630/.default';

/**
 * How one target's cluster is reached, and with which credential: an AKS API server with an Entra token of the
 * target's observer identity, or a kubeconfig file configured for that target alone.
 */
export type KubernetesCluster =
  | { readonly auth: 'entra'; readonly server: string; readonly certificateAuthorityData?: string; readonly observerClientId?: string }
  | { readonly auth: 'kubeconfig'; readonly path: string; readonly context?: string };

/**
 * The cluster of each target that has one (RuntimeCloud__Targets `kubernetes`), by target id: a target's
 * `kubernetes.kubeconfig`, else, for an `aks-cluster` target, its API server (`kubernetes.server`, else `endpoint`)
 * with an Entra token of its `observerClientId`. A target with neither has no cluster: nothing is observed there.
 */
export function kubernetesClusters(targets: readonly ProvisioningTarget[]): ReadonlyMap<string, KubernetesCluster> {
  const clusters = new Map<string, KubernetesCluster>();
  for (const target of targets) {
    const settings = target.kubernetes;
    const server = settings?.server ?? target.endpoint;
    if (settings?.kubeconfig) {
      clusters.set(target.id, { auth: 'kubeconfig', path: settings.kubeconfig.path, ...(settings.kubeconfig.context ? { context: settings.kubeconfig.context } : {}) });
    } else if (target.kind === 'aks-cluster' && server) {
      clusters.set(target.id, {
        auth: 'entra',
        server,
        ...(settings?.certificateAuthorityData ? { certificateAuthorityData: settings.certificateAuthorityData } : {}),
        ...(target.observerClientId ? { observerClientId: target.observerClientId } : {}),
      });
    }
  }
  return clusters;
}

export interface KubernetesObserverOptions {
  /**
   * The cluster of each target, by target id (`kubernetesClusters(config.targets)`). An environment is read in its
   * target's cluster with that target's credential, never another's; a target not listed is not observed.
   * @example createKubernetesObserver({ clusters: new Map([['aks-prod-we', { auth: 'entra', server: 'https://aks-prod-we.hcp.westeurope.azmk8s.io:443', certificateAuthorityData: 'LS0t…', observerClientId: '…' }]]) })
   */
  readonly clusters: ReadonlyMap<string, KubernetesCluster>;
  /**
   * The Entra credential of an observer identity, asked once per target. Default: `ManagedIdentityCredential` with
   * the client id, or `DefaultAzureCredential` (the developer's login locally) for a target without one.
   */
  readonly credential?: (observerClientId: string | undefined) => TokenCredential | Promise<TokenCredential>;
  /** Items asked for per list request; a namespace with more is read in several pages of one consistent snapshot. */
  readonly pageSize?: number;
}

/** The workload kinds observed, with their Pulumi Kubernetes type tokens, so observed types match desired ones. */
export const KUBERNETES_TYPES = {
  Deployment: 'kubernetes:apps/v1:Deployment',
  StatefulSet: 'kubernetes:apps/v1:StatefulSet',
  DaemonSet: 'kubernetes:apps/v1:DaemonSet',
  Service: 'kubernetes:core/v1:Service',
} as const;
export type KubernetesKind = keyof typeof KUBERNETES_TYPES;
const KINDS = Object.keys(KUBERNETES_TYPES) as KubernetesKind[];

/** The API version each kind is read in (the items of a list carry none). */
const API_VERSIONS: Record<KubernetesKind, string> = { Deployment: 'apps/v1', StatefulSet: 'apps/v1', DaemonSet: 'apps/v1', Service: 'v1' };

/** One listed object, as the SDK deserializes it or as the API server returns it. */
export interface KubernetesObject {
  readonly metadata?: {
    readonly name?: string;
    readonly namespace?: string;
    readonly labels?: { readonly [key: string]: string };
    readonly annotations?: { readonly [key: string]: string };
  };
  readonly spec?: object;
}

interface KubernetesList {
  readonly items: readonly KubernetesObject[];
  readonly metadata?: V1ListMeta;
}

interface Clients {
  readonly sdk: KubernetesSdk;
  readonly apps: AppsV1Api;
  readonly core: CoreV1Api;
}

/** The clients of one target for one observation (an Entra token is asked for each, from the target's credential, which caches it). */
type Connect = (signal: AbortSignal) => Promise<Clients>;

/**
 * Observes workloads in Kubernetes: the Deployments, StatefulSets, DaemonSets and Services of every namespace in
 * `scope.kubernetes.namespaces`, in the cluster of the environment's target (`scope.target`) and with that target's
 * credential. Every list is read to its last page before anything is returned; one failed request fails the whole
 * observation (`INVENTORY.TARGET_UNREACHABLE`) and cancels the others.
 */
export function createKubernetesObserver(options: KubernetesObserverOptions): Observer {
  const pageSize = options.pageSize ?? 500;
  const credentialOf = options.credential ?? defaultCredential;
  const connections = new Map<string, Promise<Connect>>();
  // The SDKs are loaded on first use, not at module load: a host configured with another observer never pays for
  // them at cold start. A connection that failed to be made is made again on the next observation.
  const connectionOf = (target: string, cluster: KubernetesCluster): Promise<Connect> => {
    let connection = connections.get(target);
    if (!connection) {
      connection = connect(cluster, credentialOf);
      connections.set(target, connection);
      connection.catch(() => connections.delete(target));
    }
    return connection;
  };

  return {
    name: 'kubernetes',
    async observe(scope, { signal }) {
      const namespaces = scope.kubernetes?.namespaces;
      if (!namespaces) {
        throw problemError(InventoryErrors.scopeIncomplete, `environment ${scope.environmentId} names no Kubernetes namespaces to observe`, {
          observer: 'kubernetes',
          environmentId: scope.environmentId,
        });
      }
      const cluster = options.clusters.get(scope.target);
      if (!cluster) {
        throw problemError(InventoryErrors.scopeIncomplete, `target ${scope.target} of environment ${scope.environmentId} has no Kubernetes cluster configured (RuntimeCloud__Targets: kubernetes)`, {
          observer: 'kubernetes',
          environmentId: scope.environmentId,
          target: scope.target,
        });
      }
      if (signal.aborted) throw observeTimeout(scope);
      // Cancels the requests still running when one fails, as well as on the scan's timeout.
      const failed = new AbortController();
      const cancel = AbortSignal.any([signal, failed.signal]);
      // Every request in flight listens to it: four kinds per namespace, at once.
      setMaxListeners(0, cancel);
      let sdk: KubernetesSdk | undefined;
      try {
        const loaded = await (await connectionOf(scope.target, cluster))(cancel);
        sdk = loaded.sdk;
        const lists = await Promise.all(
          namespaces.flatMap((namespace) => KINDS.map((kind) => listAll(loaded, kind, namespace, pageSize, cancel))),
        );
        return lists.flat();
      } catch (thrown) {
        failed.abort();
        if (signal.aborted) throw observeTimeout(scope);
        throw kubernetesFailure(thrown, scope, sdk);
      }
    },
  };
}

async function connect(cluster: KubernetesCluster, credentialOf: NonNullable<KubernetesObserverOptions['credential']>): Promise<Connect> {
  const sdk = await import('@kubernetes/client-node');
  const clientsOf = (config: KubeConfig): Clients => ({ sdk, apps: config.makeApiClient(sdk.AppsV1Api), core: config.makeApiClient(sdk.CoreV1Api) });
  if (cluster.auth === 'kubeconfig') {
    // Read at each observation, so a rotated file is used from the next scan on.
    return async () => {
      const config = new sdk.KubeConfig();
      config.loadFromFile(cluster.path);
      if (cluster.context !== undefined) {
        if (!config.getContextObject(cluster.context)) {
          throw problemError(InventoryErrors.scopeIncomplete, `the kubeconfig ${cluster.path} has no context ${cluster.context}`, { observer: 'kubernetes' });
        }
        config.setCurrentContext(cluster.context);
      }
      return clientsOf(config);
    };
  }
  const credential = await credentialOf(cluster.observerClientId);
  return async (signal) => {
    const token = await credential.getToken(AKS_TOKEN_SCOPE, { abortSignal: signal });
    if (!token) throw problemError(InventoryErrors.targetUnreachable, 'no Microsoft Entra token for the AKS API server', { observer: 'kubernetes' });
    const config = new sdk.KubeConfig();
    config.loadFromOptions({
      clusters: [{ name: 'target', server: cluster.server, caData: cluster.certificateAuthorityData, skipTLSVerify: false }],
      users: [{ name: 'observer', token: token.token }],
      contexts: [{ name: 'target', cluster: 'target', user: 'observer' }],
      currentContext: 'target',
    });
    return clientsOf(config);
  };
}

async function defaultCredential(observerClientId: string | undefined): Promise<TokenCredential> {
  const { DefaultAzureCredential, ManagedIdentityCredential } = await import('@azure/identity');
  return observerClientId ? new ManagedIdentityCredential({ clientId: observerClientId }) : new DefaultAzureCredential();
}

/**
 * A listed object as observed: the urn from the `runtime-cloud.connectsoft.io/urn` annotation, else
 * `k8s:<namespace>/<kind>/<name>`; the Pulumi type token; id `<namespace>/<name>` (as Pulumi's Kubernetes provider
 * gives it); properties `apiVersion` and `kind` (which the items of a list do not carry), `metadata` (name,
 * namespace, labels, annotations) and `spec`, as JSON. Left out: `status`; the
 * `kubectl.kubernetes.io/last-applied-configuration` annotation (a copy of a manifest, whose values may be secret
 * where the desired state holds a reference); and the server's bookkeeping in the metadata embedded in the spec
 * (`creationTimestamp`, `managedFields`, `resourceVersion`, `uid`, `generation`, `selfLink`) and the `status` of
 * embedded objects (a StatefulSet's volume claim templates).
 */
export function kubernetesObjectToObserved(kind: KubernetesKind, object: KubernetesObject, listedNamespace?: string): ObservedResource {
  const name = object.metadata?.name;
  const namespace = object.metadata?.namespace ?? listedNamespace;
  if (!name || !namespace) throw new Error(`Kubernetes listed a ${kind} without a name or a namespace: ${JSON.stringify({ name, namespace })}`);
  const metadata: { [key: string]: JsonValue } = { name, namespace };
  if (object.metadata?.labels) metadata.labels = asJson(object.metadata.labels);
  const annotations = Object.entries(object.metadata?.annotations ?? {}).filter(([key]) => key !== LAST_APPLIED);
  if (annotations.length > 0) metadata.annotations = Object.fromEntries(annotations);
  const properties: { [key: string]: JsonValue } = { apiVersion: API_VERSIONS[kind], kind, metadata };
  if (object.spec) properties.spec = withoutServerFields(asJson(object.spec));
  return {
    urn: object.metadata?.annotations?.[URN_ANNOTATION] ?? `k8s:${namespace}/${kind}/${name}`,
    type: KUBERNETES_TYPES[kind],
    id: `${namespace}/${name}`,
    properties,
  };
}

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

async function listAll(clients: Clients, kind: KubernetesKind, namespace: string, pageSize: number, signal: AbortSignal): Promise<ObservedResource[]> {
  const observed: ObservedResource[] = [];
  const options = cancelledBy(clients.sdk, signal);
  let token: string | undefined;
  do {
    const page = await listPage(clients, kind, { namespace, limit: pageSize, ...(token ? { _continue: token } : {}) }, options);
    for (const item of page.items) observed.push(kubernetesObjectToObserved(kind, item, namespace));
    // The API server answers a continued list from the first page's snapshot, so the pages add up to one list.
    token = page.metadata?._continue || undefined;
  } while (token);
  return observed;
}

function listPage(
  { apps, core }: Clients,
  kind: KubernetesKind,
  request: { namespace: string; limit: number; _continue?: string },
  options: ConfigurationOptions,
): Promise<KubernetesList> {
  switch (kind) {
    case 'Deployment':
      return apps.listNamespacedDeployment(request, options);
    case 'StatefulSet':
      return apps.listNamespacedStatefulSet(request, options);
    case 'DaemonSet':
      return apps.listNamespacedDaemonSet(request, options);
    case 'Service':
      return core.listNamespacedService(request, options);
  }
}

/**
 * Per-request options that hand the signal to the HTTP request, so an abort cancels it rather than leaving it
 * running. The object API takes observable-style middleware (the SDK's `Observable`), not promise-style.
 */
function cancelledBy(sdk: KubernetesSdk, signal: AbortSignal): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (context) => {
          context.setSignal(signal);
          return new sdk.Observable(Promise.resolve(context));
        },
        post: (context) => new sdk.Observable(Promise.resolve(context)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}

const SERVER_METADATA = new Set(['creationTimestamp', 'managedFields', 'resourceVersion', 'uid', 'generation', 'selfLink']);

/** The spec without what the server writes into the objects embedded in it (pod and volume claim templates). */
function withoutServerFields(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(withoutServerFields);
  if (value === null || typeof value !== 'object') return value;
  const object = value as { readonly [key: string]: JsonValue };
  const embedded = Object.hasOwn(object, 'metadata') && Object.hasOwn(object, 'spec');
  const result: { [key: string]: JsonValue } = {};
  for (const [key, member] of Object.entries(object)) {
    if (embedded && key === 'status') continue;
    if (key === 'metadata' && member !== null && typeof member === 'object' && !Array.isArray(member)) {
      const kept = Object.entries(member as { readonly [key: string]: JsonValue }).filter(([k]) => !SERVER_METADATA.has(k));
      // `{ creationTimestamp: null }` is all the server gives a template without labels: nothing was declared there.
      if (kept.length > 0) result[key] = Object.fromEntries(kept.map(([k, v]) => [k, withoutServerFields(v)]));
      continue;
    }
    result[key] = withoutServerFields(member);
  }
  return result;
}

function asJson(value: object): JsonValue {
  // A JSON round trip is exactly "JSON values only": Dates become ISO strings, undefined members disappear.
  return JSON.parse(JSON.stringify(value)) as JsonValue;
}

/** What @azure/identity throws when it cannot get a token: the cluster could not be read. */
const CREDENTIAL_ERRORS = new Set(['CredentialUnavailableError', 'AuthenticationError', 'AggregateAuthenticationError', 'AuthenticationRequiredError']);

function kubernetesFailure(thrown: unknown, scope: ObservationScope, sdk: KubernetesSdk | undefined): Error {
  const error = ensureError(thrown);
  if (error instanceof AppError) return error;
  const where = { observer: 'kubernetes', environmentId: scope.environmentId, target: scope.target, namespaces: scope.kubernetes?.namespaces ?? [] };
  if (CREDENTIAL_ERRORS.has(error.name)) {
    return problemError(InventoryErrors.targetUnreachable, `no Microsoft Entra token for the cluster of target ${scope.target}: ${error.message}`, where);
  }
  if (sdk && error instanceof sdk.ApiException) {
    const status = error.code;
    return problemError(InventoryErrors.targetUnreachable, `the Kubernetes API answered HTTP ${status}`, {
      ...where,
      status,
      ...statusReason(error.body),
    });
  }
  const { code } = error as { code?: unknown };
  // node-fetch's FetchError (refused, reset, DNS, TLS) and system errors carry the system's code.
  if (error.name === 'FetchError' || (typeof code === 'string' && /^E[A-Z_]+$/.test(code))) {
    return problemError(InventoryErrors.targetUnreachable, 'the Kubernetes API could not be reached', {
      ...where,
      ...(typeof code === 'string' ? { code } : {}),
    });
  }
  return error;
}

/** The `reason` of a Kubernetes `Status` answer (`Forbidden`, `NotFound`, `Expired`), when the body is one. */
function statusReason(body: unknown): { reason?: string } {
  try {
    const status = (typeof body === 'string' ? JSON.parse(body) : body) as { kind?: unknown; reason?: unknown } | null;
    return status?.kind === 'Status' && typeof status.reason === 'string' ? { reason: status.reason } : {};
  } catch {
    return {};
  }
}

function observeTimeout(scope: ObservationScope): AppError {
  return problemError(InventoryErrors.observeTimeout, `observing the Kubernetes namespaces of ${scope.environmentId} ran past the scan's timeout`, {
    observer: 'kubernetes',
    environmentId: scope.environmentId,
    namespaces: scope.kubernetes?.namespaces ?? [],
  });
}
