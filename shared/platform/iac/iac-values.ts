import { AppError } from '../errors/app-error';

/**
 * The values an IaC program is made of (config, resource properties, outputs), the two markers a plan carries in
 * place of values it must not or cannot know, property paths, and canonical JSON. Pure: no I/O.
 */

export type JsonValue = null | boolean | number | string | readonly JsonValue[] | JsonObject;
export type JsonObject = { readonly [key: string]: JsonValue };

/**
 * A value that lives elsewhere and is resolved only inside apply ("configuration and secrets stay where they live
 * and are referenced at apply time"): `{ secretRef: "<Secret Broker reference>" }` or
 * `{ configRef: "<Config Platform key>" }`, an object with exactly that one string member, written as a config
 * value in `Pulumi.<stack>.yaml` (or inline as a property value). Plans, receipts and stack state carry this
 * object verbatim, never the value it stands for.
 *
 * BREAKING-CHANGE SHAPE: stack files in Git and stored plans and states use it; changing it breaks them.
 */
export type ValueReference = { readonly secretRef: string } | { readonly configRef: string };

/**
 * A value known only during apply: an output (the `id`) of a resource that the same apply creates or replaces,
 * or anything computed from one. `expression` is the interpolation it stands for (`${net.id}`). It is spelled
 * with the `fn::` prefix that Pulumi YAML reserves for functions, so no literal property can be mistaken for it.
 *
 * BREAKING-CHANGE SHAPE: stored plans carry it and their digests cover it.
 */
export type ComputedValue = { readonly 'fn::computed': string };

export const COMPUTED_KEY = 'fn::computed';

export function computed(expression: string): ComputedValue {
  return { [COMPUTED_KEY]: expression };
}

export function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The reference when `value` has the reference shape, else undefined. */
export function asValueReference(value: unknown): ValueReference | undefined {
  if (!isPlainObject(value)) return undefined;
  const keys = Object.keys(value);
  if (keys.length !== 1) return undefined;
  const ref = value.secretRef ?? value.configRef;
  return typeof ref === 'string' && (keys[0] === 'secretRef' || keys[0] === 'configRef') ? (value as ValueReference) : undefined;
}

export function isComputed(value: unknown): value is ComputedValue {
  return isPlainObject(value) && Object.keys(value).length === 1 && typeof value[COMPUTED_KEY] === 'string';
}

/**
 * What a runner writes in place of a secret value it holds no reference for, as Pulumi prints one: the `pulumi`
 * runner, whose engine has resolved `{ secretRef }` config into secrets by the time its events show a resource,
 * gives every secret-valued input and output as this text (pulumi-mapping.ts).
 */
export const SECRET_MASK = '[secret]';

export function isSecretMask(value: unknown): boolean {
  return value === SECRET_MASK;
}

/**
 * A value the desired state does not hold: a reference, a computed marker or a masked secret (whichever runner
 * wrote it). It stands for what the target holds there, which no plan, state, receipt, observed inventory row,
 * view, finding or event may carry: diffs and path reads treat it as one leaf, a refresh and inventory keep the
 * marker in place of whatever the target holds at that path (also when that is an object or an array) and do not
 * compare it. This is the one list of such forms; inventory uses it too (shared/inventory/environment.ts). A
 * program's literal "[secret]" counts as the mask: hiding a value wins over comparing it.
 */
export function isOpaque(value: unknown): boolean {
  return asValueReference(value) !== undefined || isComputed(value) || isSecretMask(value);
}

/** Every reference inside `value`, depth first. */
export function collectReferences(value: JsonValue, into: ValueReference[] = []): ValueReference[] {
  const reference = asValueReference(value);
  if (reference) into.push(reference);
  else if (Array.isArray(value)) for (const item of value as readonly JsonValue[]) collectReferences(item, into);
  else if (isPlainObject(value)) for (const item of Object.values(value)) collectReferences(item, into);
  return into;
}

/** A stable text for a reference, used as a map key when resolving. */
export function referenceKey(reference: ValueReference): string {
  return 'secretRef' in reference ? `secretRef:${reference.secretRef}` : `configRef:${reference.configRef}`;
}

/**
 * JSON with object keys sorted at every depth and no whitespace: equal values always give equal text, which is
 * what a digest over a plan needs.
 */
export function canonicalJson(value: JsonValue): string {
  if (Array.isArray(value)) return `[${(value as readonly JsonValue[]).map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    // Absent and undefined members are the same member: JSON has no undefined.
    const keys = Object.keys(value)
      .filter((k) => value[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k] as JsonValue)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function jsonEqual(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return canonicalJson(a) === canonicalJson(b);
}

// ---------------------------------------------------------------------------------------------------------------
// Property paths: `tags.env`, `rules[0].port`, `labels["app.kubernetes.io/name"]` (Pulumi's syntax). The same
// syntax names changed properties in plans, `ignoreChanges` entries, and the member accesses of `${...}`.

export type PathSegment = string | number;

/**
 * The largest array index a path may name, in both syntaxes: Pulumi's (`rules[10000]`) and ignore rules'
 * (`rules.10000`). A path past it is refused where it is read (a project's `ignoreChanges` and interpolations,
 * an ignore rule), so no index a message or a program names can make this host build an array that long. Writes
 * never pad an array in any case (`writePath`).
 */
export const MAX_PATH_INDEX = 10_000;

const IDENTIFIER = /^[A-Za-z_][\w-]*$/;

export function formatPath(segments: readonly PathSegment[]): string {
  let text = '';
  for (const segment of segments) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else if (IDENTIFIER.test(segment)) text += text === '' ? segment : `.${segment}`;
    else text += `[${JSON.stringify(segment)}]`;
  }
  return text;
}

/**
 * Parses a property path. `rootPattern` lets the first segment be more than an identifier (a config key with its
 * namespace, `aws:region`). Returns undefined when the text is not a path, or names an index past `MAX_PATH_INDEX`.
 */
export function parsePath(text: string, rootPattern: RegExp = /^[A-Za-z_][\w-]*/): PathSegment[] | undefined {
  const root = rootPattern.exec(text);
  if (!root) return undefined;
  const segments: PathSegment[] = [root[0]];
  let rest = text.slice(root[0].length);
  while (rest.length > 0) {
    const member = /^\.([A-Za-z_][\w-]*)/.exec(rest) ?? /^\[(\d+)\]/.exec(rest) ?? /^\[("(?:[^"\\]|\\.)*")\]/.exec(rest);
    if (!member?.[1]) return undefined;
    const raw = member[1];
    const segment = rest.startsWith('.') ? raw : raw.startsWith('"') ? (JSON.parse(raw) as string) : Number(raw);
    if (typeof segment === 'number' && segment > MAX_PATH_INDEX) return undefined;
    segments.push(segment);
    rest = rest.slice(member[0].length);
  }
  return segments;
}

/**
 * Why `path` is not an ignore-rule path, or undefined. Ignore rules (inventory's, shared/inventory/drift.ts, and
 * the held rules plans keep, plan.ts `HeldIgnoreRule`) write a path as dot-separated property names, where an
 * all-digit name is an array index (where the resource holds an array) and may not pass `MAX_PATH_INDEX`, and `*`
 * may only come last (`tags.*`) or alone. Every place that records or applies such a rule asks this one function.
 */
export function ignorePathProblem(path: string): string | undefined {
  const segments = path.split('.');
  if (segments.some((s) => s === '')) return 'path must be dot-separated property names';
  if (segments.slice(0, -1).includes('*')) return 'path may use * only as its last segment';
  const index = segments.find((s) => /^\d+$/.test(s) && Number(s) > MAX_PATH_INDEX);
  if (index !== undefined) return `path may name array indexes up to ${MAX_PATH_INDEX} only, not ${index.length > 20 ? `${index.slice(0, 20)}...` : index}`;
  return undefined;
}

/** The value at `segments` inside `value`, or undefined when there is none. */
export function readPath(value: JsonValue, segments: readonly PathSegment[]): JsonValue | undefined {
  let current: JsonValue | undefined = value;
  for (const segment of segments) {
    if (current === undefined || isOpaque(current)) return undefined;
    if (typeof segment === 'number') current = Array.isArray(current) ? (current as readonly JsonValue[])[segment] : undefined;
    else current = isPlainObject(current) && Object.hasOwn(current, segment) ? current[segment] : undefined;
  }
  return current;
}

const UNCHANGED = Symbol('unchanged');

/**
 * A copy of `target` where the value at `segments` is `value` (or removed when `value` is undefined). Missing
 * objects on the way are created. An array is never padded: a write at an index past its end (or into a missing
 * array, past 0) changes nothing, as a removal of a path that is not there changes nothing: there is no element
 * there to keep or to drop.
 */
export function writePath(target: JsonValue, segments: readonly PathSegment[], value: JsonValue | undefined): JsonValue {
  const written = writeAt(target, segments, value);
  return written === UNCHANGED ? target : (written ?? null);
}

/** `target` undefined: nothing is there. Returns undefined to remove, UNCHANGED when there is nothing to do. */
function writeAt(target: JsonValue | undefined, segments: readonly PathSegment[], value: JsonValue | undefined): JsonValue | undefined | typeof UNCHANGED {
  const [head, ...rest] = segments;
  if (head === undefined) return value;
  if (typeof head === 'number') {
    const array: readonly JsonValue[] = Array.isArray(target) ? target : [];
    if (head > array.length || (head === array.length && value === undefined)) return UNCHANGED;
    const child = rest.length === 0 ? value : writeAt(array[head], rest, value);
    if (child === UNCHANGED) return UNCHANGED;
    const copy = [...array];
    if (child === undefined) copy.splice(head, 1);
    else copy[head] = child;
    return copy;
  }
  const object: JsonObject = isPlainObject(target) && !isOpaque(target) ? target : {};
  const present = Object.hasOwn(object, head);
  if (!present && value === undefined) return UNCHANGED;
  const child = rest.length === 0 ? value : writeAt(present ? object[head] : undefined, rest, value);
  if (child === UNCHANGED) return UNCHANGED;
  const copy: Record<string, JsonValue> = { ...object };
  if (child === undefined) delete copy[head];
  else copy[head] = child;
  return copy;
}

/**
 * Checks that a parsed document holds only JSON values (YAML also has `.inf`, `.nan`), so everything downstream
 * can rely on JSON. `where` names the document in the error.
 */
export function assertJson(value: unknown, where: string, path: readonly PathSegment[] = []): asserts value is JsonValue {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (Number.isFinite(value)) return;
    throw invalidProject(`${where}: ${formatPath(path) || '(document)'} is not a finite number`, { path: formatPath(path) });
  }
  if (Array.isArray(value)) {
    value.forEach((item, i) => assertJson(item, where, [...path, i]));
    return;
  }
  if (isPlainObject(value)) {
    for (const [k, v] of Object.entries(value)) assertJson(v, where, [...path, k]);
    return;
  }
  throw invalidProject(`${where}: ${formatPath(path) || '(document)'} is not a JSON value`, { path: formatPath(path) });
}

export function invalidProject(message: string, details: Record<string, unknown> = {}): AppError {
  return new AppError('IAC.INVALID_PROJECT', 'validation', message, details);
}

/**
 * `IAC.UNSUPPORTED`: the program uses a construct the local engine does not implement (a function, a resource
 * option, an invoke of a provider function it cannot call), so the plan fails naming it rather than planning
 * something other than what was written. `path` is where the construct is; the file and line are attached where
 * the error passes out of the program's parsing or evaluation (pulumi-yaml-source.ts `withLocation`).
 */
export function unsupported(construct: string, path: string, details: Record<string, unknown> = {}): AppError {
  return new AppError('IAC.UNSUPPORTED', 'validation', `${path}: ${construct} is not supported by the local engine`, { ...details, construct, path });
}

// ---------------------------------------------------------------------------------------------------------------
// Pulumi's special values, in the shape its SDKs put them on the wire (sdk/go/common/resource/sig): an object whose
// signature key names what it is. Assets and archives are resource inputs like any other value: a plan carries them
// as these objects, and equal ones diff as equal.

/** The key that marks one of Pulumi's special values inside an object. */
export const SIG_KEY = '4dabf18193072939515e22adb298388d';
/** An asset: `{ [SIG_KEY]: ASSET_SIG, text | path | uri }`. */
export const ASSET_SIG = 'c44067f5952c0a294b673a41bacd8c17';
/** An archive: `{ [SIG_KEY]: ARCHIVE_SIG, assets | path | uri }`. */
export const ARCHIVE_SIG = '0def7320c3a5731c473e5ecbe6d01bc7';
/** A secret: `{ [SIG_KEY]: SECRET_SIG, value }`. */
export const SECRET_SIG = '1b47061264138c4ac30d75fd1eb44270';

export function asset(kind: 'text' | 'path' | 'uri', value: string): JsonObject {
  return { [SIG_KEY]: ASSET_SIG, [kind]: value };
}

export function archive(kind: 'assets' | 'path' | 'uri', value: string | JsonObject): JsonObject {
  return { [SIG_KEY]: ARCHIVE_SIG, [kind]: value };
}

/**
 * A value the program marked secret (`fn::secret`), as Pulumi's wire shape. It lives only inside the evaluation of
 * a program: resource inputs get the plain value (the value is in the program's text already, and the target needs
 * it), and stack outputs show `SECRET_MASK` in its place, as the `pulumi` runner shows a secret output.
 */
export function secretValue(value: JsonValue): JsonObject {
  return { [SIG_KEY]: SECRET_SIG, value };
}

export function isSecretValue(value: unknown): value is { readonly value: JsonValue } {
  return isPlainObject(value) && value[SIG_KEY] === SECRET_SIG && Object.keys(value).length === 2 && 'value' in value;
}

/** `value` with every secret marker replaced by what it holds (`mask` undefined) or by `mask`. */
export function replaceSecrets(value: JsonValue, mask?: JsonValue): JsonValue {
  if (isSecretValue(value)) return mask ?? replaceSecrets(value.value);
  if (Array.isArray(value)) return (value as readonly JsonValue[]).map((v) => replaceSecrets(v, mask));
  if (isPlainObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, replaceSecrets(v, mask)]));
  return value;
}

/** Whether `value` holds a computed value anywhere. */
export function containsComputed(value: JsonValue): boolean {
  if (isComputed(value)) return true;
  if (Array.isArray(value)) return (value as readonly JsonValue[]).some(containsComputed);
  if (isPlainObject(value)) return Object.values(value).some(containsComputed);
  return false;
}
