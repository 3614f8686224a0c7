import type { EngineEvent, OpMap, OpType, OutputMap } from '@pulumi/pulumi/automation';
import { AppError } from '../errors/app-error';
import { computed, formatPath, isPlainObject, isSecretMask, parsePath, SECRET_MASK, type JsonObject, type JsonValue } from './iac-values';
import type { StepOp } from './plan';

/**
 * What the Pulumi engine reports, mapped onto this host's plan and apply receipts (plan.ts), so a run planned by
 * the `pulumi` runner reads exactly like one planned by the local engine. Pure: recorded engine events, the saved
 * update plan and the command summaries in; a `Plan` or an `ApplyResult` out. No I/O.
 * This file holds what both share (values, ops, URNs, events); pulumi-plan-mapping.ts makes the `Plan` of a preview,
 * pulumi-apply-mapping.ts the `ApplyResult` of an up.
 *
 * Sources (types of `@pulumi/pulumi/automation`):
 * - `EngineEvent` (events.d.ts), as `onEvent` receives them: `resourcePreEvent` / `resOutputsEvent`
 *   (`StepEventMetadata`: op, urn, type, old/new `StepEventStateMetadata`, `diffs`, `keys`, `detailedDiff`),
 *   `resOpFailedEvent`, `diagnosticEvent`, `policyEvent`, `summaryEvent`.
 * - `PreviewResult.changeSummary` and `UpResult.summary` / `UpResult.outputs` (stack.d.ts: `OpMap`,
 *   `UpdateSummary`, `OutputMap`).
 * - The update plan file `pulumi preview --save-plan` writes (Pulumi's `apitype.DeploymentPlanV1`:
 *   `resourcePlans[urn] = { goal: { type, name, protect, dependencies, parent, ... }, steps: [op, ...] }`).
 *
 * Pulumi ops onto ours (one step per resource, i.e. per URN; `STEP_OPS` of plan.ts):
 *
 * | Pulumi op(s) of one URN                                  | step    | why                                        |
 * | -------------------------------------------------------- | ------- | ------------------------------------------ |
 * | `create`                                                 | create  |                                            |
 * | `update`                                                 | update  |                                            |
 * | `same`                                                   | same    |                                            |
 * | `delete`                                                 | delete  |                                            |
 * | `replace`, `create-replacement`, `delete-replaced`       | replace | Pulumi reports one replacement as 2–3 steps of one URN; a receipt shows the resource once |
 * | `import-replacement`, `remove-pending-replace`           | replace | parts of a replacement (the second finishes one a failed delete-before-replace left) |
 * | `import`                                                 | create  | the resource enters the stack: nothing is created in the target, but a reviewer sees a new resource |
 * | `read`, `read-replacement`, `refresh`                    | same    | reading a resource changes nothing in the target |
 * | `discard`, `discard-replaced`                            | delete  | a read resource leaves the stack; nothing is deleted in the target, but a removal is over-reported rather than hidden (a delete asks for approval) |
 *
 * When one URN has several ops the strongest wins: replace > create > delete > update > same. An op this
 * table does not know (a newer Pulumi) is a plan error, `IAC.UNSUPPORTED_STEP`: guessing could hide a change.
 *
 * Apply results carry each resource's inputs after the step as the `up`'s events show them (`ResourceResult.inputs`,
 * masked like everything else): unlike the local engine, whose state keeps the `{ secretRef }` / `{ configRef }`
 * references, Pulumi has resolved them to secret values by then, so they read `[secret]`.
 *
 * Values: a secret (Pulumi's secret signature object, whatever it carries: `ciphertext` — which engine events
 * blind to `[secret]` — or `plaintext`), at any depth and whatever it wraps (text, a whole object), becomes the
 * string `[secret]` (iac-values.ts `SECRET_MASK`, which inventory holds as opaque like a `{ secretRef }`); a value
 * unknown during preview (Pulumi's unknown sentinel) becomes a computed marker `{ "fn::computed": "pulumi:unknown" }`.
 * Stack outputs after an `up` are masked where the up's events mark a secret, at any depth, not only where
 * `UpResult.outputs` flags one: that map is read with `--show-secrets` and flags an output only when all of it is
 * secret (an object output with one secret member comes unflagged, in plaintext); and an output holding a resolved
 * reference value is masked whole. So no secret value, nor its ciphertext, reaches a plan, a receipt, an event or
 * an error.
 *
 * Order: events arrive in whatever order Pulumi's parallel step executor runs them, so steps are put in a
 * canonical order (the digest must not depend on timing): dependency order (the plan file's `dependencies` and
 * `parent`), ties by URN; then deletes, by URN (Pulumi orders the deletes it carries out itself).
 */

/** The member that marks a Pulumi signature object, and the signature of a secret (`resource.SecretSig`). */
export const PULUMI_SIG_KEY = '4dabf18193072939515e22adb298388d';

export const PULUMI_SECRET_SIG = '1b47061264138c4ac30d75fd1eb44270';

/** How Pulumi serializes a value unknown during preview (`computedValuePlaceholder`, `UnknownStringValue`). */
export const PULUMI_UNKNOWN = '04da6b54-80e4-46f7-96ec-b56ff0331ba9';

/** What a secret value is replaced with, as Pulumi prints it: the mask every reader of values knows (iac-values.ts). */
export { SECRET_MASK };
/** The expression of a computed marker standing for a Pulumi unknown. */
export const PULUMI_UNKNOWN_EXPRESSION = 'pulumi:unknown';

const STACK_TYPE = 'pulumi:pulumi:Stack';

// ---------------------------------------------------------------------------------------------------------------
// Values

/**
 * A Pulumi value as this host carries it: secrets masked, unknowns as computed markers, non-finite numbers as
 * null; undefined for undefined (so an absent member stays absent).
 */
export function maskValue(value: unknown): JsonValue | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value === 'boolean') return value;
  if (typeof value === 'string') return value === PULUMI_UNKNOWN ? computed(PULUMI_UNKNOWN_EXPRESSION) : value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (Array.isArray(value)) return value.map((item) => maskValue(item) ?? null);
  if (typeof value === 'object') {
    const record = value as Record<string, unknown>;
    if (record[PULUMI_SIG_KEY] === PULUMI_SECRET_SIG) return SECRET_MASK;
    const out: Record<string, JsonValue> = {};
    for (const [key, item] of Object.entries(record)) {
      const masked = maskValue(item);
      if (masked !== undefined) out[key] = masked;
    }
    return out;
  }
  return null;
}

export function maskObject(value: unknown): JsonObject {
  const masked = maskValue(value);
  return isPlainObject(masked) ? masked : {};
}

/**
 * Stack outputs of `UpResult.outputs`, secrets masked. The Automation API reads that map with `--show-secrets` and
 * flags an output `secret` only when its whole masked value is `[secret]`, so an output with a secret inside it
 * comes unflagged, in plaintext. So each output is `[secret]` where it is flagged, where the up's events show it
 * (`shown`: the stack resource's outputs, masked at any depth by `maskValue`) as `[secret]`, at any depth, and
 * wherever what is left still holds one of the `resolved` reference values; else its value.
 */
export function maskOutputs(outputs: OutputMap | undefined, shown: JsonObject = {}, resolved: readonly string[] = []): JsonObject {
  const out: Record<string, JsonValue> = {};
  for (const key of Object.keys(outputs ?? {}).sort()) {
    const output = (outputs as OutputMap)[key];
    if (!output) continue;
    const value = maskedLike(maskValue(output.value) ?? null, shown[key]);
    out[key] = output.secret || holdsResolved(value, resolved) ? SECRET_MASK : value;
  }
  return out;
}

/** `value` with `[secret]` wherever `shown` (the same value as engine events carry it) has it. */
function maskedLike(value: JsonValue, shown: JsonValue | undefined): JsonValue {
  if (isSecretMask(shown)) return SECRET_MASK;
  if (Array.isArray(value) && Array.isArray(shown)) {
    const marks: readonly JsonValue[] = shown;
    return (value as readonly JsonValue[]).map((item, i) => maskedLike(item, marks[i]));
  }
  if (isPlainObject(value) && isPlainObject(shown)) {
    return Object.fromEntries(Object.entries(value).map(([k, item]) => [k, maskedLike(item, Object.hasOwn(shown, k) ? shown[k] : undefined)]));
  }
  return value;
}

/** Whether any text inside `value` contains one of `resolved`. */
function holdsResolved(value: JsonValue, resolved: readonly string[]): boolean {
  if (typeof value === 'string') return resolved.some((secret) => secret.length > 0 && value.includes(secret));
  if (Array.isArray(value)) return (value as readonly JsonValue[]).some((item) => holdsResolved(item, resolved));
  return isPlainObject(value) && Object.values(value).some((item) => holdsResolved(item, resolved));
}

/** `text` with every occurrence of each of `secrets` replaced by `[secret]` (longest first). */
export function redact(text: string, secrets: readonly string[]): string {
  let result = text;
  for (const secret of [...secrets].filter((s) => s.length > 0).sort((a, b) => b.length - a.length)) {
    result = result.split(secret).join(SECRET_MASK);
  }
  return result;
}

/** Pulumi's color markup (`<{%reset%}>`) and ANSI escapes removed, whitespace trimmed. */
export function plainMessage(message: string): string {
  return message.replace(/<\{%[^%]*%\}>/g, '').replace(/\u001b\[[0-9;]*[A-Za-z]/g, '').trim();
}

/** Pulumi's property paths (`tags.env`, `rules[0].port`, `tags["a.b"]`) in this host's spelling, where parseable. */
export function normalizePath(path: string): string {
  const segments = parsePath(path);
  return segments ? formatPath(segments) : path;
}

// ---------------------------------------------------------------------------------------------------------------
// Ops

const REPLACE_FAMILY: ReadonlySet<string> = new Set(['replace', 'create-replacement', 'delete-replaced', 'import-replacement', 'remove-pending-replace']);

const OP_MAP: Readonly<Record<OpType, StepOp>> = {
  create: 'create',
  update: 'update',
  same: 'same',
  delete: 'delete',
  replace: 'replace',
  'create-replacement': 'replace',
  'delete-replaced': 'replace',
  'import-replacement': 'replace',
  'remove-pending-replace': 'replace',
  import: 'create',
  read: 'same',
  'read-replacement': 'same',
  refresh: 'same',
  discard: 'delete',
  'discard-replaced': 'delete',
};

const STRENGTH: Readonly<Record<StepOp, number>> = { replace: 4, create: 3, delete: 2, update: 1, same: 0 };

/** Our op for one Pulumi op (see the table above); `IAC.UNSUPPORTED_STEP` for an op it does not know. */
export function stepOpOf(op: string, urn = ''): StepOp {
  const mapped = Object.hasOwn(OP_MAP, op) ? OP_MAP[op as OpType] : undefined;
  if (!mapped) {
    throw new AppError('IAC.UNSUPPORTED_STEP', 'unprocessable', `the pulumi engine reported a step this host does not know: ${op}`, { op, urn });
  }
  return mapped;
}

/** The one step of a URN that Pulumi reported with `ops` (the strongest; see the table above). */
export function collapseOps(ops: readonly string[], urn = ''): StepOp {
  let result: StepOp = 'same';
  for (const op of ops) {
    const mapped = stepOpOf(op, urn);
    if (STRENGTH[mapped] > STRENGTH[result]) result = mapped;
  }
  return result;
}

/**
 * A change summary (`PreviewResult.changeSummary`, `SummaryEvent.resourceChanges`, `UpdateSummary.resourceChanges`)
 * in our ops. A replacement counts once, under `replace` (its `create-replacement` / `delete-replaced` halves
 * are not counted again).
 */
export function countsFromChangeSummary(summary: OpMap | undefined): Record<StepOp, number> {
  const counts: Record<StepOp, number> = { create: 0, update: 0, replace: 0, delete: 0, same: 0 };
  for (const [op, count] of Object.entries(summary ?? {})) {
    if (typeof count !== 'number' || (REPLACE_FAMILY.has(op) && op !== 'replace')) continue;
    counts[stepOpOf(op)] += count;
  }
  return counts;
}

// ---------------------------------------------------------------------------------------------------------------
// URNs

/** `urn:pulumi:<stack>::<project>::<qualified type>::<name>`: the name (which may itself hold `::`). */
export function urnName(urn: string): string {
  const parts = urn.split('::');
  return parts.length >= 4 ? parts.slice(3).join('::') : urn;
}

/** The resource type in a URN: the last `$`-separated part of its qualified type. */
export function urnType(urn: string): string {
  const qualified = urn.split('::')[2] ?? '';
  return qualified.split('$').pop() ?? qualified;
}

/**
 * The outputs the program registered on its stack resource: its last outputs event's; without one, its pre event's
 * (Pulumi's recorded preview yaml-text-change, where only the outputs change, has nothing else of them).
 */
export function stackOutputsOf(events: readonly EngineEvent[]): JsonObject {
  const last = (kind: 'resOutputsEvent' | 'resourcePreEvent') =>
    events.map((e) => e[kind]?.metadata).findLast((md) => md?.type === STACK_TYPE && md.new?.outputs)?.new?.outputs;
  return maskObject(last('resOutputsEvent') ?? last('resourcePreEvent') ?? {});
}

// ---------------------------------------------------------------------------------------------------------------
// Events

/**
 * Events in the order the engine emitted them (`sequence`): the Automation API reads them from a log file that may
 * deliver them out of order. Events without a sequence keep their place.
 */
export function inSequence(events: readonly EngineEvent[]): EngineEvent[] {
  return events
    .map((event, index) => ({ event, index }))
    .sort((a, b) => (a.event.sequence ?? a.index) - (b.event.sequence ?? b.index) || a.index - b.index)
    .map(({ event }) => event);
}
