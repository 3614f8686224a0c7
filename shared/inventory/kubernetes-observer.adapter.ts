import type { AppsV1Api, ConfigurationOptions, CoreV1Api, KubeConfig, V1ListMeta } from '@kubernetes/client-node';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { JsonValue } from './drift';
import { URN_ANNOTATION, type ObservationScope, type ObservedResource, type Observer } from './observer';

/** `@kubernetes/client-node`, loaded on first use. */
export type KubernetesSdk = typeof import('@kubernetes/client-node');

export interface KubernetesObserverOptions {
  /**
   * The cluster and credentials to use, made from the SDK once, on the first observation. Default:
   * `loadFromDefault()` (`KUBECONFIG`, `~/.kube/config`, or the pod's service account in a cluster).
   * @example createKubernetesObserver({ kubeConfig: (k8s) => { const kc = new k8s.KubeConfig(); kc.loadFromFile('/etc/rch/kubeconfig'); return kc; } })
   */
  readonly kubeConfig?: (sdk: KubernetesSdk) => KubeConfig;
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

/**
 * Observes workloads in Kubernetes: the Deployments, StatefulSets, DaemonSets and Services of every namespace in
 * `scope.kubernetes.namespaces`. Every list is read to its last page before anything is returned; one failed
 * request fails the whole observation (`INVENTORY.TARGET_UNREACHABLE`) and cancels the others.
 */
export function createKubernetesObserver(options: KubernetesObserverOptions = {}): Observer {
  const pageSize = options.pageSize ?? 500;
  const loadKubeConfig = options.kubeConfig ?? defaultKubeConfig;
  let loading: Promise<Clients> | undefined;
  // The SDK is loaded on first use, not at module load: a host configured with another observer never pays for it
  // at cold start. A failed load is tried again on the next observation.
  const clients = (): Promise<Clients> => {
    if (!loading) {
      loading = import('@kubernetes/client-node').then((sdk) => {
        const config = loadKubeConfig(sdk);
        return { sdk, apps: config.makeApiClient(sdk.AppsV1Api), core: config.makeApiClient(sdk.CoreV1Api) };
      });
      loading.catch(() => (loading = undefined));
    }
    return loading;
  };

  return {
    name: 'kubernetes',
    async observe(scope, { signal }) {
      const namespaces = scope.kubernetes?.namespaces;
      if (!namespaces) {
        throw new AppError('INVENTORY.SCOPE_INCOMPLETE', 'validation', `environment ${scope.environmentId} names no Kubernetes namespaces to observe`, {
          observer: 'kubernetes',
          environmentId: scope.environmentId,
        });
      }
      if (signal.aborted) throw observeTimeout(scope);
      // Cancels the requests still running when one fails, as well as on the scan's timeout.
      const failed = new AbortController();
      const cancel = AbortSignal.any([signal, failed.signal]);
      let sdk: KubernetesSdk | undefined;
      try {
        const loaded = await clients();
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

/**
 * A listed object as observed: the urn from the `runtime-cloud.connectsoft.io/urn` annotation, else
 * `k8s:<namespace>/<kind>/<name>`; the Pulumi type token; id `<namespace>/<name>` (as Pulumi's Kubernetes provider
 * gives it); properties `metadata` (name, namespace, labels) and `spec`, as JSON. Left out: `status`, annotations
 * (mostly written by tools and controllers), and the server's bookkeeping in the metadata embedded in the spec
 * (`creationTimestamp`, `managedFields`, `resourceVersion`, `uid`, `generation`, `selfLink`) and the `status` of
 * embedded objects (a StatefulSet's volume claim templates).
 */
export function kubernetesObjectToObserved(kind: KubernetesKind, object: KubernetesObject, listedNamespace?: string): ObservedResource {
  const name = object.metadata?.name;
  const namespace = object.metadata?.namespace ?? listedNamespace;
  if (!name || !namespace) throw new Error(`Kubernetes listed a ${kind} without a name or a namespace: ${JSON.stringify({ name, namespace })}`);
  const metadata: { [key: string]: JsonValue } = { name, namespace };
  if (object.metadata?.labels) metadata.labels = asJson(object.metadata.labels);
  const properties: { [key: string]: JsonValue } = { metadata };
  if (object.spec) properties.spec = withoutServerFields(asJson(object.spec));
  return {
    urn: object.metadata?.annotations?.[URN_ANNOTATION] ?? `k8s:${namespace}/${kind}/${name}`,
    type: KUBERNETES_TYPES[kind],
    id: `${namespace}/${name}`,
    properties,
  };
}

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

function defaultKubeConfig(sdk: KubernetesSdk): KubeConfig {
  const config = new sdk.KubeConfig();
  config.loadFromDefault();
  return config;
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

function kubernetesFailure(thrown: unknown, scope: ObservationScope, sdk: KubernetesSdk | undefined): Error {
  const error = ensureError(thrown);
  if (error instanceof AppError) return error;
  const where = { observer: 'kubernetes', environmentId: scope.environmentId, namespaces: scope.kubernetes?.namespaces ?? [] };
  if (sdk && error instanceof sdk.ApiException) {
    const status = error.code;
    return new AppError('INVENTORY.TARGET_UNREACHABLE', 'unavailable', `the Kubernetes API answered HTTP ${status}`, {
      ...where,
      status,
      ...statusReason(error.body),
    });
  }
  const { code } = error as { code?: unknown };
  // node-fetch's FetchError (refused, reset, DNS, TLS) and system errors carry the system's code.
  if (error.name === 'FetchError' || (typeof code === 'string' && /^E[A-Z_]+$/.test(code))) {
    return new AppError('INVENTORY.TARGET_UNREACHABLE', 'unavailable', 'the Kubernetes API could not be reached', {
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
  return new AppError('INVENTORY.OBSERVE_TIMEOUT', 'unavailable', `observing the Kubernetes namespaces of ${scope.environmentId} ran past the scan's timeout`, {
    observer: 'kubernetes',
    environmentId: scope.environmentId,
    namespaces: scope.kubernetes?.namespaces ?? [],
  });
}
