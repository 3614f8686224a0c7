import { azureNativeModel } from './azure-native-outputs';
import { computed, isPlainObject, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { kubernetesModel } from './kubernetes-outputs';
import { NotYetKnown, type Inputs, type OutputContext, type OutputModel } from './output-model';
import { publicCloudModel } from './public-cloud-outputs';

export type { OutputContext } from './output-model';

/**
 * The outputs a cloud provider computes and programs read (`${resourceGroup.name}`, `${deployment.metadata.name}`,
 * `${account.primaryEndpoints.web}`), emulated for the local cloud from the providers' published schemas and the
 * values they are seen to give (the published fixtures: docs/testing.md, "Published fixtures"): names auto-named as each provider names them, ARM ids, the
 * endpoints a name implies. Each value is a function of the stack's tenant, the resource's urn, its inputs and the
 * stack's config only: the same inputs give the same outputs at plan and at apply, so a re-plan shows nothing new,
 * and two tenants with the same names get their own (another random suffix, another subscription id).
 *
 * An output a modelled type does not compute is refused by name (plan.ts `unknownOutput`), never left undefined.
 */

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

/** The computed outputs of `type` that `outputs` holds (kept across a refresh: the target does not hold them). */
export function keptComputedOutputs(type: string, outputs: JsonObject): JsonObject {
  const names = computedOutputNames(type);
  return Object.fromEntries(names.filter((name) => outputs[name] !== undefined).map((name) => [name, outputs[name] as JsonValue]));
}
