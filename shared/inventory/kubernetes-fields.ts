import type { JsonValue, PathSegment, PropertyComparison, PropertyDifference } from './drift';

/**
 * How a Kubernetes resource is compared with its desired manifest: as server-side apply sees it. Pure.
 *
 * The API server fills in what a manifest leaves out (defaults such as `strategy`, `revisionHistoryLimit`,
 * `clusterIP`, `imagePullPolicy`), and other field managers (controllers, webhooks, `kubectl`, a service mesh) add
 * fields and list items of their own. Applying the manifest again changes none of those, so none of them is drift.
 * Only the fields the desired manifest sets are compared:
 * - a map or struct by the desired keys, recursively; keys only the cluster has are not looked at. An empty map or
 *   list (kubectl writes `annotations: {}`) sets nothing, and the API does not return an empty one, so it matches
 *   an absent field;
 * - a list the API merges by key (an associative list, `x-kubernetes-list-type: map`) item by item, each desired
 *   item with the observed item of the same key (`LIST_MAP_KEYS`), wherever it is in the list; items only the cluster
 *   has (an injected sidecar, another manager's port) are not looked at. A desired item with no observed item of its
 *   key is a finding at the desired item's index;
 * - any other list is atomic: one value, whose length and order must be the desired ones; a different length is one
 *   finding with both lists. Inside an element, as everywhere, only what the manifest sets is compared, so what the
 *   server adds to the elements (a StatefulSet's volume claim templates get `kind`, `apiVersion` and `volumeMode`)
 *   is not drift;
 * - scalars by value; resource quantities (`cpu: "0.5"` and `500m`, `memory: 102400Ki` and `100Mi`) by the amount
 *   they stand for, as the API stores a quantity in its canonical form, not as it was written.
 *
 * A finding's path is the desired manifest's (`spec.template.spec.containers.0.image`: the first desired container),
 * as ignore rules and Pulumi's `ignoreChanges` write it.
 *
 * The live object's `managedFields` are not consulted. The desired state is the one last applied, and after an apply
 * our field manager owns exactly the fields the manifest sets, so ownership tells nothing the manifest does not;
 * and a field that another manager took over by changing its value is still a value that re-applying would change
 * back (gitops-engine's server-side-apply diff, pkg/diff/diff.go `structuredMergeDiff`, applies with force for the
 * same reason), so it stays drift.
 */

type JsonObject = { readonly [key: string]: JsonValue };

/** The key fields of the associative list at a field path (object keys only, no list positions); undefined: not one. */
export type ListKeys = (fieldPath: readonly string[]) => readonly string[] | undefined;

/** The key fields of the associative lists in a container (`Container`, `EphemeralContainerCommon`). */
const CONTAINER_LISTS: Readonly<Record<string, readonly string[]>> = {
  ports: ['containerPort', 'protocol'],
  env: ['name'],
  volumeMounts: ['mountPath'],
  volumeDevices: ['devicePath'],
  'resources.claims': ['name'],
};

/** The key fields of the associative lists in a `PodSpec`. */
const POD_SPEC_LISTS: Readonly<Record<string, readonly string[]>> = {
  containers: ['name'],
  initContainers: ['name'],
  ephemeralContainers: ['name'],
  volumes: ['name'],
  imagePullSecrets: ['name'],
  hostAliases: ['ip'],
  topologySpreadConstraints: ['topologyKey', 'whenUnsatisfiable'],
  schedulingGates: ['name'],
  resourceClaims: ['name'],
  'resources.claims': ['name'],
};

function podTemplateLists(podSpec: string): Record<string, readonly string[]> {
  const lists: Record<string, readonly string[]> = {};
  for (const [list, keys] of Object.entries(POD_SPEC_LISTS)) lists[`${podSpec}.${list}`] = keys;
  for (const containers of ['containers', 'initContainers', 'ephemeralContainers']) {
    for (const [list, keys] of Object.entries(CONTAINER_LISTS)) lists[`${podSpec}.${containers}.${list}`] = keys;
  }
  return lists;
}

/**
 * The associative lists of the kinds the Kubernetes observer reads, by kind and field path, with their
 * `x-kubernetes-list-map-keys`. Taken from the API's Go types, whose `+listType=map` / `+listMapKey=…` markers the
 * OpenAPI's `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` are generated from: k8s.io/api `core/v1/types.go`
 * (PodSpec, Container, EphemeralContainerCommon, ResourceRequirements, ServiceSpec) and `apps/v1/types.go`, read at
 * kubernetes/api commit 10b39a39bcee995dfe7cd5e8e7b922be5e46f1e2. Every other list of these kinds is atomic
 * (`+listType=atomic` or no list type): `args`, `command`, `envFrom`, `tolerations`, `resizePolicy`,
 * `volumeClaimTemplates`, `clusterIPs`, `ipFamilies`, selectors' `matchExpressions`. Status lists are never compared.
 */
const LIST_MAP_KEYS: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>> = {
  Deployment: podTemplateLists('spec.template.spec'),
  StatefulSet: podTemplateLists('spec.template.spec'),
  DaemonSet: podTemplateLists('spec.template.spec'),
  Service: { 'spec.ports': ['port', 'protocol'] },
};

/**
 * Key fields the API defaults before it merges: `ContainerPort.protocol` and `ServicePort.protocol` are
 * `+default="TCP"`, so a desired port without a protocol is the TCP one (the live `managedFields` of
 * gitops-engine's ssd-deploy-with-manual-apply fixture key such a port `{"containerPort":80,"protocol":"TCP"}`).
 */
const KEY_DEFAULTS: Readonly<Record<string, JsonValue>> = { protocol: 'TCP' };

const KUBERNETES_TYPE = /^kubernetes:[^:]+:([A-Za-z0-9]+)$/;

/** The associative lists of a Pulumi Kubernetes type (`kubernetes:apps/v1:Deployment`); undefined for any other type. */
export function kubernetesListKeys(type: string): ListKeys | undefined {
  const kind = KUBERNETES_TYPE.exec(type)?.[1];
  if (kind === undefined) return undefined;
  const lists = Object.hasOwn(LIST_MAP_KEYS, kind) ? LIST_MAP_KEYS[kind]! : {};
  return (fieldPath) => {
    const path = fieldPath.join('.');
    return Object.hasOwn(lists, path) ? lists[path] : undefined;
  };
}

/** The comparison of a Kubernetes type (any `kubernetes:` type token), for `diffResources`; undefined for any other type. */
export function manifestComparison(type: string): PropertyComparison | undefined {
  const listKeys = kubernetesListKeys(type);
  return listKeys && ((desired, observed) => diffManifest(desired, observed, listKeys));
}

/** The differences between what a desired manifest sets and the observed object there (see the module comment). */
export function diffManifest(desired: JsonObject, observed: JsonObject, listKeys: ListKeys): PropertyDifference[] {
  const out: PropertyDifference[] = [];
  compare(desired, observed, [], [], listKeys, out);
  return out;
}

/** True when two items of an associative list have the same key (a key field the API defaults counts as that default). */
export function sameListMapKey(a: JsonValue, b: JsonValue, keys: readonly string[]): boolean {
  if (!isObject(a) || !isObject(b)) return false;
  return keys.every((key) => keyValue(a, key) === keyValue(b, key));
}

function keyValue(item: JsonObject, key: string): JsonValue | undefined {
  return Object.hasOwn(item, key) ? item[key] : KEY_DEFAULTS[key];
}

function compare(desired: JsonValue, observed: JsonValue | undefined, path: readonly PathSegment[], fieldPath: readonly string[], listKeys: ListKeys, out: PropertyDifference[]): void {
  if (isObject(desired)) {
    if (!isObject(observed)) return void out.push(difference(path, desired, observed));
    for (const key of Object.keys(desired)) {
      if (Object.hasOwn(observed, key)) compare(desired[key]!, observed[key], [...path, key], [...fieldPath, key], listKeys, out);
      else if (!isEmpty(desired[key]!)) out.push(difference([...path, key], desired[key]!, undefined));
    }
    return;
  }
  if (Array.isArray(desired)) {
    if (!Array.isArray(observed)) return void out.push(difference(path, desired, observed));
    const want: readonly JsonValue[] = desired;
    const seen: readonly JsonValue[] = observed;
    const keys = listKeys(fieldPath);
    if (keys) {
      want.forEach((item, i) => {
        const match = seen.find((candidate) => sameListMapKey(item, candidate, keys));
        if (match === undefined) out.push(difference([...path, i], item, undefined));
        else compare(item, match, [...path, i], fieldPath, listKeys, out);
      });
    } else if (want.length !== seen.length) {
      out.push(difference(path, desired, observed));
    } else {
      want.forEach((item, i) => compare(item, seen[i], [...path, i], fieldPath, listKeys, out));
    }
    return;
  }
  if (!sameScalar(desired, observed, fieldPath)) out.push(difference(path, desired, observed));
}

function sameScalar(desired: JsonValue, observed: JsonValue | undefined, fieldPath: readonly string[]): boolean {
  if (desired === observed) return true;
  if (observed === undefined || !isQuantityField(fieldPath)) return false;
  const a = quantity(desired);
  const b = quantity(observed);
  return a !== undefined && b !== undefined && a.numerator * b.denominator === b.numerator * a.denominator;
}

/**
 * Fields whose values are resource quantities in the kinds observed: the entries of a `ResourceList`
 * (`resources.limits`, `resources.requests`, a pod's `overhead`, a volume claim template's `resources`) and an
 * `emptyDir`'s `sizeLimit`.
 */
function isQuantityField(fieldPath: readonly string[]): boolean {
  const n = fieldPath.length;
  if (fieldPath[n - 1] === 'sizeLimit') return true;
  if (fieldPath[n - 2] === 'overhead') return true;
  return (fieldPath[n - 2] === 'limits' || fieldPath[n - 2] === 'requests') && fieldPath[n - 3] === 'resources';
}

const QUANTITY = /^([+-]?)(\d*)(?:\.(\d*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE])|[eE]([+-]?\d+))?$/;
const BINARY_POWER: Readonly<Record<string, number>> = { Ki: 1, Mi: 2, Gi: 3, Ti: 4, Pi: 5, Ei: 6 };
const DECIMAL_EXPONENT: Readonly<Record<string, number>> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };

/**
 * The exact amount a quantity (`resource.Quantity`'s `<number><suffix>`: binary `Ki`…`Ei`, decimal `n`…`E`, or an
 * exponent `e3`) stands for, as a fraction; undefined when the value is not a quantity.
 */
function quantity(value: JsonValue): { numerator: bigint; denominator: bigint } | undefined {
  const text = typeof value === 'number' ? String(value) : value;
  if (typeof text !== 'string') return undefined;
  const match = QUANTITY.exec(text);
  if (!match) return undefined;
  const [, sign, whole = '', fraction = '', binary, decimal, exponent] = match;
  const digits = whole + fraction;
  if (digits.length === 0) return undefined;
  const power10 = (decimal ? DECIMAL_EXPONENT[decimal]! : exponent ? Number(exponent) : 0) - fraction.length;
  const power2 = binary ? 10 * BINARY_POWER[binary]! : 0;
  // Far beyond any quantity the API accepts; also keeps `1e999999` from making a huge number.
  if (Math.abs(power10) > 64) return undefined;
  let numerator = BigInt(digits) * 2n ** BigInt(power2) * 10n ** BigInt(Math.max(0, power10));
  if (sign === '-') numerator = -numerator;
  return { numerator, denominator: 10n ** BigInt(Math.max(0, -power10)) };
}

function difference(path: readonly PathSegment[], desired: JsonValue, observed: JsonValue | undefined): PropertyDifference {
  return { path, desired, ...(observed !== undefined ? { observed } : {}) };
}

/** `{}` or `[]`: sets no field, and the API leaves an empty map or list out of what it returns (`omitempty`). */
function isEmpty(value: JsonValue): boolean {
  return Array.isArray(value) ? value.length === 0 : isObject(value) && Object.keys(value).length === 0;
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
