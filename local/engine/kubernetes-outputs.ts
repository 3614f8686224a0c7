import { autoName, drawnHex, resourceUuid, type Derive, type Inputs, type OutputContext, type OutputModel } from './output-model';
import { isComputed, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';

/**
 * pulumi-kubernetes' computed outputs of a Kubernetes object (`kubernetes:<group>/<version>:<Kind>`): `apiVersion`
 * and `kind` as the API gives them (`core/v1` is `v1`), and `metadata` with `name` (given, else from `generateName`
 * with five characters as the API server draws them, else auto-named as the provider's `AssignNameIfAutonamable`
 * names it: the program's name, `-` and eight hex digits, annotated `pulumi.com/autonamed: "true"`), `namespace`
 * (given, else `default`, for a namespaced kind) and `uid`. A helm.sh/v3 Release's `name` is auto-named the same
 * way (`assignNameIfAutonameable`), its `namespace` `default` when not given. `status` and what a controller sets
 * (`spec.clusterIP`, a load balancer's address) are not emulated: a reference to them is refused by name.
 */

/** Kinds that live in no namespace (the Kubernetes API's cluster-scoped resources). */
const CLUSTER_SCOPED = new Set([
  'Namespace',
  'Node',
  'PersistentVolume',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
  'StorageClass',
  'PriorityClass',
  'IngressClass',
  'RuntimeClass',
  'CSIDriver',
  'CSINode',
  'VolumeAttachment',
  'APIService',
  'MutatingWebhookConfiguration',
  'ValidatingWebhookConfiguration',
  'ValidatingAdmissionPolicy',
  'ValidatingAdmissionPolicyBinding',
  'CertificateSigningRequest',
  'FlowSchema',
  'PriorityLevelConfiguration',
  'TokenReview',
  'SelfSubjectAccessReview',
  'SelfSubjectRulesReview',
  'SubjectAccessReview',
  'ComponentStatus',
]);

/** Types of the package that are not one Kubernetes object (components, lists, charts): none of these. */
const NOT_OBJECTS = /^kubernetes:(yaml|yaml\/v2|kustomize|kustomize\/v2|helm\.sh\/v3:Chart|helm\.sh\/v4)(:|$)|List$/;

/** The characters the API server draws a `generateName` suffix from (apimachinery's `util/rand`). */
const GENERATE_NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

/** The model of a Kubernetes object type or a helm Release, or undefined for anything else. */
export function kubernetesModel(type: string): OutputModel | undefined {
  if (type === 'kubernetes:helm.sh/v3:Release') return { outputs: RELEASE };
  const match = /^kubernetes:([\w.-]+)\/(v[\w]+):(\w+)$/.exec(type);
  if (!match || NOT_OBJECTS.test(type)) return undefined;
  const [, group, version, kind] = match as unknown as [string, string, string, string];
  const apiVersion = group === 'core' ? version : `${group}/${version}`;
  return {
    outputs: {
      apiVersion: () => apiVersion,
      kind: () => kind,
      metadata: (inputs, context) => metadataOf(inputs, context, !CLUSTER_SCOPED.has(kind)),
    },
  };
}

const RELEASE: Readonly<Record<string, Derive>> = {
  name: (inputs, context) => knownOr(inputs.value('name'), () => autoName(context, '-')),
  namespace: (inputs) => knownOr(inputs.value('namespace'), () => 'default'),
};

function metadataOf(inputs: Inputs, context: OutputContext, namespaced: boolean): JsonObject {
  const given = inputs.value('metadata');
  const metadata: JsonObject = typeof given === 'object' && given !== null && !Array.isArray(given) ? (given as JsonObject) : {};
  const generateName = metadata.generateName;
  let autonamed = false;
  const name = knownOr(metadata.name, () => {
    if (typeof generateName === 'string' && generateName !== '') return `${generateName}${generatedSuffix(context)}`;
    if (isComputed(generateName)) return generateName;
    autonamed = true;
    return autoName(context, '-');
  });
  const annotations = metadata.annotations;
  return {
    ...metadata,
    name,
    ...(namespaced ? { namespace: knownOr(metadata.namespace, () => 'default') } : {}),
    uid: resourceUuid(context, 'uid'),
    ...(autonamed ? { annotations: { ...(typeof annotations === 'object' && annotations !== null && !Array.isArray(annotations) ? annotations : {}), 'pulumi.com/autonamed': 'true' } } : {}),
  };
}

/** The given value (a computed one stays computed), or the default when none was given. */
function knownOr(value: JsonValue | undefined, fallback: () => JsonValue): JsonValue {
  return value === undefined || value === null || value === '' ? fallback() : value;
}

/** Five characters drawn for the resource from the API server's alphabet. */
function generatedSuffix(context: OutputContext): string {
  const hex = drawnHex(context, 'generateName', 10);
  let out = '';
  for (let i = 0; i < 5; i++) out += GENERATE_NAME_ALPHABET[parseInt(hex.slice(i * 2, i * 2 + 2), 16) % GENERATE_NAME_ALPHABET.length];
  return out;
}
