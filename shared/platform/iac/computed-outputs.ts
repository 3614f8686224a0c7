import { createHash } from 'node:crypto';
import { azureNativeModel } from './azure-native-outputs';
import { computed, isPlainObject, type JsonObject, type JsonValue } from './iac-values';
import { kubernetesModel } from './kubernetes-outputs';
import { publicCloudModel } from './public-cloud-outputs';

/**
 * The outputs a cloud provider computes and programs read (`${resourceGroup.name}`, `${deployment.metadata.name}`,
 * `${account.primaryEndpoints.web}`), emulated for the local cloud from the providers' published schemas and the
 * values they are seen to give (../shared/fixtures): names auto-named as each provider names them, ARM ids, the
 * endpoints a name implies. Each value is a function of the stack's tenant, the resource's urn, its inputs and the
 * stack's config only: the same inputs give the same outputs at plan and at apply, so a re-plan shows nothing new,
 * and two tenants with the same names get their own (another random suffix, another subscription id).
 *
 * An output a modelled type does not compute is refused by name (plan.ts `unknownOutput`), never left undefined.
 */

/** What an output is derived from besides the inputs. */
export interface OutputContext {
  /** The stack's tenant: seeds every drawn value, so two tenants never draw alike. */
  readonly tenant: string;
  readonly urn: string;
  /** The resource's name in the program (the urn's last part): auto-names start with it. */
  readonly name: string;
  /** The stack's config (`azure-native:location`, `aws:region`, ...). */
  readonly config: ReadonlyMap<string, JsonValue>;
}

/** The inputs as a rule reads them: a value not known yet (at plan) stops the output it is read for. */
export interface Inputs {
  /** The input at `path` (dot-separated), as it is: undefined when absent. */
  value(path: string): JsonValue | undefined;
  /** The input at `path` as a string, undefined when absent; one not known yet makes the output computed. */
  string(path: string): string | undefined;
}

/** One computed output: its value from the inputs and context, or undefined when the provider leaves it unset. */
export type Derive = (inputs: Inputs, context: OutputContext) => JsonValue | undefined;

/** What the emulation knows of one type: its computed outputs by top-level name. */
export interface OutputModel {
  readonly outputs: Readonly<Record<string, Derive>>;
  /** The outputs the provider's schema marks secret: masked wherever values are shown. */
  readonly secret?: readonly string[];
}

/** The model of `type`, or undefined when no provider's outputs are emulated for it. */
export function outputModelOf(type: string): OutputModel | undefined {
  return azureNativeModel(type) ?? kubernetesModel(type) ?? publicCloudModel(type);
}

/** The names of the outputs the emulation computes for `type` (empty when none). */
export function computedOutputNames(type: string): string[] {
  return Object.keys(outputModelOf(type)?.outputs ?? {}).sort();
}

/** The computed outputs of `type` its provider marks secret. */
export function computedSecretNames(type: string): readonly string[] {
  return outputModelOf(type)?.secret ?? [];
}

/** Thrown by `Inputs.string` for a value not known yet: the output it was read for is computed. */
class NotYetKnown extends Error {}

/**
 * `outputs` (the resource's inputs and id, and what an emulated provider drew) with the computed outputs of its
 * type added: each one known when its inputs are, else a computed value (`${name.output}`) the apply will know.
 */
export function withComputedOutputs(type: string, outputs: JsonObject, context: OutputContext): JsonObject {
  const model = outputModelOf(type);
  if (!model) return outputs;
  const inputs = readerOf(outputs);
  const added: Record<string, JsonValue> = {};
  for (const [name, derive] of Object.entries(model.outputs)) {
    try {
      const value = derive(inputs, context);
      if (value !== undefined) added[name] = value;
    } catch (thrown) {
      if (!(thrown instanceof NotYetKnown)) throw thrown;
      added[name] = computed(`\${${context.name}.${name}}`);
    }
  }
  return { ...outputs, ...added };
}

function readerOf(outputs: JsonObject): Inputs {
  const value = (path: string): JsonValue | undefined => {
    let at: JsonValue | undefined = outputs;
    for (const key of path.split('.')) at = isPlainObject(at) && Object.hasOwn(at, key) ? at[key] : undefined;
    return at;
  };
  return {
    value,
    string(path) {
      const found = value(path);
      if (found === undefined || found === null) return undefined;
      if (typeof found === 'string') return found;
      if (typeof found === 'number' || typeof found === 'boolean') return String(found);
      // A computed value, a secret's reference or a mask: not a name the output can be made of yet.
      throw new NotYetKnown(path);
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Drawn values: a function of the tenant, the urn and a purpose, so the same resource always draws the same.

function digest(context: OutputContext, purpose: string): Buffer {
  return createHash('sha256').update(`${purpose}\0${context.tenant}\0${context.urn}`).digest();
}

/** `length` lower-case hex digits drawn for the resource (what Pulumi's `NewUniqueHex` appends to a name). */
export function drawnHex(context: OutputContext, purpose: string, length = 8): string {
  return digest(context, purpose).toString('hex').slice(0, length);
}

/** A UUID (version 4 layout) drawn for `seed` under `purpose`: the same seed gives the same UUID. */
export function drawnUuid(seed: string, purpose: string): string {
  const bytes = createHash('sha256').update(`${purpose}\0${seed}`).digest().subarray(0, 16);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x40;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** The resource's UUID for `purpose` (a Kubernetes uid, an identity's principal id). */
export function resourceUuid(context: OutputContext, purpose: string): string {
  return drawnUuid(`${context.tenant}\0${context.urn}`, purpose);
}

/** The auto-name Pulumi gives `context.name` with `separator` and eight drawn hex digits (`rg` → `rgc5b4011e`). */
export function autoName(context: OutputContext, separator = ''): string {
  return `${context.name}${separator}${drawnHex(context, 'autoname')}`;
}

/** A string config value of the stack (`azure-native:location`), or undefined. */
export function configString(context: OutputContext, key: string): string | undefined {
  const value = context.config.get(key);
  return typeof value === 'string' ? value : undefined;
}

/** The computed outputs of `type` that `outputs` holds (kept across a refresh: the target does not hold them). */
export function keptComputedOutputs(type: string, outputs: JsonObject): JsonObject {
  const names = computedOutputNames(type);
  return Object.fromEntries(names.filter((name) => outputs[name] !== undefined).map((name) => [name, outputs[name] as JsonValue]));
}
