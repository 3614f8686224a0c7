import { createHash } from 'node:crypto';
import type { JsonValue } from '../../shared/platform/iac/iac-values';

/**
 * What a provider's computed outputs are made of (computed-outputs.ts; one file per provider family:
 * azure-native-outputs.ts, kubernetes-outputs.ts, public-cloud-outputs.ts): the context, the inputs as a rule reads
 * them, and the values drawn for a resource.
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

/** The inputs as a rule reads them: a value not known yet (at plan) stops the output it is read for (`NotYetKnown`). */
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

/** Thrown by `Inputs.string` for a value not known yet: the output it was read for is computed. */
export class NotYetKnown extends Error {}
