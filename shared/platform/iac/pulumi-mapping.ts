import type { EngineEvent, OpMap, OpType, OutputMap, StepEventMetadata, UpdateSummary } from '@pulumi/pulumi/automation';
import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { canonicalJson, computed, formatPath, isPlainObject, isSecretMask, jsonEqual, parsePath, SECRET_MASK, type JsonObject, type JsonValue, type ValueReference } from './iac-values';
import { planCounts, planDigest, type ApplyError, type ApplyResult, type Plan, type PlanStep, type ResourceResult, type StepOp } from './plan';

/**
 * What the Pulumi engine reports, mapped onto this host's plan and apply receipts (plan.ts), so a run planned by
 * the `pulumi` runner reads exactly like one planned by the local engine. Pure: recorded engine events, the saved
 * update plan and the command summaries in; a `Plan` or an `ApplyResult` out. No I/O.
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

function maskObject(value: unknown): JsonObject {
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
// The update plan file

const goalSchema = z.looseObject({
  type: z.string().optional(),
  name: z.string().optional(),
  protect: z.boolean().optional(),
  parent: z.string().optional(),
  dependencies: z.array(z.string()).nullish(),
});
const resourcePlanSchema = z.looseObject({ goal: goalSchema.nullish(), steps: z.array(z.string()).nullish() });
const deploymentPlanSchema = z.looseObject({ resourcePlans: z.record(z.string(), resourcePlanSchema).nullish() });

/** The parts of Pulumi's update plan (`apitype.DeploymentPlanV1`) this host reads. */
export type PulumiUpdatePlan = z.infer<typeof deploymentPlanSchema>;

/**
 * Reads the update plan file's JSON (`DeploymentPlanV1`, or wrapped as `{ version, plan }`). Its `config` and the
 * goals' inputs are not read: they may hold secrets (encrypted).
 */
export function parseUpdatePlan(json: unknown): PulumiUpdatePlan {
  const unwrapped = isPlainObject(json) && typeof json.version === 'number' && isPlainObject(json.plan) ? json.plan : json;
  const parsed = deploymentPlanSchema.safeParse(unwrapped);
  if (!parsed.success) throw new AppError('IAC.PULUMI_PLAN_UNREADABLE', 'internal', 'the update plan pulumi saved is not one this host can read');
  return parsed.data;
}

/**
 * Why the update plan a plan carries (`Plan.updatePlan`) would let `up --plan` do what the plan's steps do not, or
 * undefined when it would not: every resource the update plan has operations for must be a step of the plan, and
 * each of its operations must map (the table above) to that step's op, or to `same`. Goals and inputs are not
 * compared: the steps' inputs are what the approver read, and Pulumi checks the goals against the program at `up`.
 */
export function updatePlanProblem(plan: Plan): string | undefined {
  if (plan.updatePlan === undefined) return undefined;
  let updatePlan: PulumiUpdatePlan;
  try {
    updatePlan = parseUpdatePlan(plan.updatePlan);
  } catch {
    return 'its update plan is not one of Pulumi\'s';
  }
  for (const [urn, resourcePlan] of Object.entries(updatePlan.resourcePlans ?? {})) {
    const ops = resourcePlan.steps ?? [];
    if (ops.length === 0) continue;
    const steps = plan.steps.filter((s) => s.urn === urn);
    if (steps.length === 0) return `its update plan has operations for ${urn}, which is no step of the plan`;
    for (const op of ops) {
      let mapped: StepOp;
      try {
        mapped = stepOpOf(op, urn);
      } catch {
        return `its update plan has the operation ${op} for ${urn}, which this host does not know`;
      }
      if (mapped !== 'same' && !steps.some((s) => s.op === mapped)) return `its update plan would ${op} ${urn}, where the plan's step is ${steps.map((s) => s.op).join(', ')}`;
    }
  }
  return undefined;
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

// ---------------------------------------------------------------------------------------------------------------
// Preview → Plan

/** What a `preview` with `plan: <path>` gave. */
export interface PreviewObservation {
  readonly stack: string;
  /** `name` of `Pulumi.yaml`. */
  readonly project: string;
  /** The stack's update version (`UpdateSummary.version` of its last update; 0: never updated). */
  readonly baseSerial: number;
  /** As `onEvent` received them. */
  readonly events: readonly EngineEvent[];
  /** The update plan file's content (`parseUpdatePlan`). */
  readonly updatePlan: PulumiUpdatePlan;
  /** `PreviewResult.changeSummary`. */
  readonly changeSummary: OpMap | undefined;
  /** The stack config values that are references (resolved only by apply). */
  readonly references: readonly ValueReference[];
}

interface Observed {
  readonly urn: string;
  readonly ops: string[];
  /** Step metadata of the resource's pre and outputs events, in sequence. */
  readonly metadata: StepEventMetadata[];
}

function observe(events: readonly EngineEvent[], updatePlan?: PulumiUpdatePlan): Map<string, Observed> {
  const byUrn = new Map<string, Observed>();
  const entry = (urn: string): Observed => {
    let observed = byUrn.get(urn);
    if (!observed) {
      observed = { urn, ops: [], metadata: [] };
      byUrn.set(urn, observed);
    }
    return observed;
  };
  for (const event of events) {
    const pre = event.resourcePreEvent?.metadata;
    if (pre) {
      entry(pre.urn).ops.push(pre.op);
      entry(pre.urn).metadata.push(pre);
    }
    const outputs = event.resOutputsEvent?.metadata;
    if (outputs) {
      entry(outputs.urn).ops.push(outputs.op);
      entry(outputs.urn).metadata.push(outputs);
    }
  }
  for (const [urn, plan] of Object.entries(updatePlan?.resourcePlans ?? {})) entry(urn).ops.push(...(plan.steps ?? []));
  return byUrn;
}

function changedPathsOf(metadata: readonly StepEventMetadata[], op: StepOp): string[] {
  if (op !== 'update' && op !== 'replace') return [];
  const paths = new Set<string>();
  for (const md of metadata) {
    const detailed = Object.keys(md.detailedDiff ?? {});
    // Without a detailed diff (providers that do not give one), the top-level keys that changed or force a replace.
    for (const path of detailed.length > 0 ? detailed : [...(md.diffs ?? []), ...(md.keys ?? [])]) paths.add(normalizePath(path));
  }
  return [...paths].sort();
}

/** The metadata whose `new` state is the resource after the step: the last event that has one. */
function latestNew(metadata: readonly StepEventMetadata[]): StepEventMetadata | undefined {
  return [...metadata].reverse().find((md) => md.new && md.op !== 'delete-replaced' && md.op !== 'delete');
}

function stepOf(observed: Observed, goal: z.infer<typeof goalSchema> | null | undefined): PlanStep {
  const { urn, metadata } = observed;
  const op = collapseOps(observed.ops, urn);
  const after = latestNew(metadata)?.new;
  const before = metadata.find((md) => md.old)?.old;
  const type = (op === 'delete' ? before?.type : after?.type) ?? metadata.at(-1)?.type ?? goal?.type ?? urnType(urn);
  const id = op === 'create' ? undefined : before?.id || undefined;
  const oldType = op === 'replace' && before?.type && before.type !== type ? before.type : undefined;
  const protect = (op === 'delete' ? before?.protect : after?.protect) ?? goal?.protect ?? before?.protect ?? false;
  const dependencies = [...new Set([...(goal?.dependencies ?? []), ...(goal?.parent ? [goal.parent] : [])])].sort();
  return {
    urn,
    name: urnName(urn),
    type,
    op,
    ...(id ? { id } : {}),
    ...(oldType ? { oldType } : {}),
    changedPaths: changedPathsOf(metadata, op),
    ...(op === 'delete' ? {} : { inputs: maskObject(after?.inputs ?? {}) }),
    dependencies,
    protect,
  };
}

/** Non-deletes in dependency order (ties by URN), then deletes by URN. */
function canonicalOrder(steps: readonly PlanStep[]): PlanStep[] {
  const live = steps.filter((s) => s.op !== 'delete');
  const byUrn = new Map(live.map((s) => [s.urn, s]));
  const placed = new Set<string>();
  const ordered: PlanStep[] = [];
  const pending = [...live].sort((a, b) => (a.urn < b.urn ? -1 : a.urn > b.urn ? 1 : 0));
  while (pending.length > 0) {
    // The first (by URN) step whose dependencies in this plan are all placed; on a cycle (Pulumi has none), the first.
    const at = Math.max(
      0,
      pending.findIndex((s) => s.dependencies.every((d) => !byUrn.has(d) || placed.has(d) || d === s.urn)),
    );
    const [next] = pending.splice(at, 1) as [PlanStep];
    placed.add(next.urn);
    ordered.push(next);
  }
  const deletes = steps.filter((s) => s.op === 'delete').sort((a, b) => (a.urn < b.urn ? -1 : a.urn > b.urn ? 1 : 0));
  return [...ordered, ...deletes];
}

/**
 * The outputs the program registered on its stack resource: its last outputs event's; without one, its pre event's
 * (Pulumi's recorded preview yaml-text-change, where only the outputs change, has nothing else of them).
 */
function stackOutputsOf(events: readonly EngineEvent[]): JsonObject {
  const last = (kind: 'resOutputsEvent' | 'resourcePreEvent') =>
    events.map((e) => e[kind]?.metadata).findLast((md) => md?.type === STACK_TYPE && md.new?.outputs)?.new?.outputs;
  return maskObject(last('resOutputsEvent') ?? last('resourcePreEvent') ?? {});
}

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

/**
 * The plan of a preview. Throws `IAC.PULUMI_EVENTS_INCOMPLETE` when the change summary reports more changes of
 * some kind than the events and the plan file account for (an event lost on the way): an approval must never bind
 * to a plan that shows less than Pulumi will do.
 */
export function planFromPreview(observation: PreviewObservation): Plan {
  const { stack, project, updatePlan } = observation;
  const events = inSequence(observation.events);
  const plans = updatePlan.resourcePlans ?? {};
  const steps = canonicalOrder([...observe(events, updatePlan).values()].map((observed) => stepOf(observed, plans[observed.urn]?.goal)));
  const counts = planCounts(steps);
  const reported = countsFromChangeSummary(observation.changeSummary);
  const missing = (['create', 'update', 'replace', 'delete'] as const).filter((op) => reported[op] > counts[op]);
  if (missing.length > 0) {
    throw new AppError('IAC.PULUMI_EVENTS_INCOMPLETE', 'internal', `pulumi reported more changes than its events describe (${missing.join(', ')}); the plan is not recorded`, {
      reported,
      described: counts,
    });
  }
  const outputs = stackOutputsOf(events);
  const references = [...observation.references].sort((a, b) => (canonicalJson(a) < canonicalJson(b) ? -1 : 1));
  return {
    schemaVersion: 1,
    project,
    stack,
    baseSerial: observation.baseSerial,
    steps,
    counts,
    outputs,
    references,
    digest: planDigest({ schemaVersion: 1, project, stack, steps, outputs }),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The approved plan against the plan made again at apply

/** Whether the value at `path` of `inputs`, or a value above it, is a masked secret. */
function secretAt(inputs: JsonObject | undefined, path: string): boolean {
  const segments = parsePath(path);
  if (!inputs || !segments) return false;
  let current: JsonValue | undefined = inputs;
  for (const segment of segments) {
    if (isSecretMask(current)) return true;
    if (typeof segment === 'number') current = Array.isArray(current) ? (current as readonly JsonValue[])[segment] : undefined;
    else current = isPlainObject(current) && Object.hasOwn(current, segment) ? current[segment] : undefined;
  }
  return isSecretMask(current);
}

/**
 * Whether carrying out `fresh` (the plan made again inside apply, with references resolved) does nothing that
 * `approved` did not. Equal digests cover. Otherwise every step must be the approved one, except that a step may
 * do less where the only difference is in secret values: a preview made without the values of references (they
 * are resolved only by apply) sees every secret-valued property as changed; apply, which knows them, may find
 * some unchanged. So an approved update or replace may become the same step with fewer changed paths, or `same`,
 * when every path it lost holds a masked secret. Anything else (another resource, op, input, dependency, option,
 * output) is not covered: the reason says what.
 */
export function planCovers(approved: Plan, fresh: Plan): { readonly covered: true } | { readonly covered: false; readonly reason: string } {
  if (approved.digest === fresh.digest) return { covered: true };
  const no = (reason: string) => ({ covered: false as const, reason });
  if (approved.project !== fresh.project || approved.stack !== fresh.stack) return no('the plan is for another project or stack');
  if (!jsonEqual(approved.outputs, fresh.outputs)) return no('the stack outputs differ');
  const approvedUrns = approved.steps.map((s) => s.urn);
  const freshUrns = fresh.steps.map((s) => s.urn);
  if (!jsonEqual(approvedUrns, freshUrns)) {
    const added = freshUrns.filter((u) => !approvedUrns.includes(u));
    const dropped = approvedUrns.filter((u) => !freshUrns.includes(u));
    return no(added.length > 0 ? `${added[0]} was not in the approved plan` : dropped.length > 0 ? `${dropped[0]} is no longer in the plan` : 'the resources are in another order');
  }
  for (const [index, step] of fresh.steps.entries()) {
    const was = approved.steps[index] as PlanStep;
    if (jsonEqual(step as unknown as JsonValue, was as unknown as JsonValue)) continue;
    const { op: _op, changedPaths: _paths, ...rest } = step;
    const { op: _wasOp, changedPaths: _wasPaths, ...wasRest } = was;
    const allowedOp = step.op === was.op || (step.op === 'same' && (was.op === 'update' || (was.op === 'replace' && was.oldType === undefined)));
    if (!allowedOp || !jsonEqual(rest, wasRest)) {
      return no(`${step.urn}: ${step.op === was.op ? `its ${step.op} differs from the approved one` : `${step.op} instead of the approved ${was.op}`}`);
    }
    const extra = step.changedPaths.filter((p) => !was.changedPaths.includes(p));
    if (extra.length > 0) return no(`${step.urn}: ${extra[0]} changes, which the approved plan did not change`);
    const lost = was.changedPaths.filter((p) => !step.changedPaths.includes(p));
    const notSecret = lost.find((p) => !secretAt(was.inputs, p));
    if (notSecret !== undefined || (step.op === 'same' && lost.length !== was.changedPaths.length)) {
      return no(`${step.urn}: ${notSecret ?? 'its changes'} no longer change, and not only secret values`);
    }
  }
  return { covered: true };
}

// ---------------------------------------------------------------------------------------------------------------
// Up → ApplyResult

/** The diagnostics by which Pulumi stops an update that would go beyond its `--plan` (the "constraint" errors). */
const PLAN_CONSTRAINT = [/violates plan/i, /is not allowed by the plan/i, /expected resource operations for .* but none were seen/i];

export function isPlanConstraintMessage(message: string): boolean {
  return PLAN_CONSTRAINT.some((pattern) => pattern.test(message));
}

/**
 * What stopped a preview or an update, in arrival order, plain text, secrets redacted: error diagnostics (severity
 * `error`) and violations of mandatory policies. Pulumi fails an update on a mandatory `policyEvent` without an
 * error diagnostic of its own (its engine's recorded stream TestSimpleAnalyzeResourceFailure has none), so without
 * them the failure would not say why. An advisory violation (`warning`) stops nothing and is not one of them.
 */
export function errorDiagnostics(events: readonly EngineEvent[], secrets: readonly string[]): { readonly urn?: string; readonly message: string }[] {
  return events
    .flatMap((e) => {
      const { diagnosticEvent: d, policyEvent: p } = e;
      if (d?.severity === 'error') return [{ urn: d.urn, text: plainMessage(d.message) }];
      if (p?.enforcementLevel === 'mandatory') return [{ urn: p.resourceUrn, text: `policy ${p.policyName} of ${p.policyPackName} (mandatory): ${plainMessage(p.message)}` }];
      return [];
    })
    .map(({ urn, text }) => ({ ...(urn ? { urn } : {}), message: redact(text, secrets) }))
    .filter((d) => d.message.length > 0);
}

/** What an `up` with `plan: <path>` gave. */
export interface UpObservation {
  /** The plan `up` carried out: the one made again inside apply, covered by the approved one. */
  readonly plan: Plan;
  /** The digest of the approved plan (the result's `planDigest`). */
  readonly approvedDigest: string;
  /** As `onEvent` received them. */
  readonly events: readonly EngineEvent[];
  /** The command's result; absent when it failed. */
  readonly result?: { readonly outputs: OutputMap; readonly summary?: UpdateSummary };
  /** Why the command failed (already redacted); absent when it succeeded. */
  readonly failure?: string;
  /** Why the caller cancelled the update (its `beforeStep` refused); absent when it did not. */
  readonly stopped?: ApplyError;
  /** The stack's update version after the command. */
  readonly serial: number;
  /** Resolved reference values: redacted from every message. */
  readonly secrets: readonly string[];
  readonly startedAt: string;
  readonly finishedAt: string;
}

/**
 * The apply result of an `up`: each planned resource's status (a resource whose operation failed is `failed`
 * with Pulumi's diagnostic; one never reached is `skipped`), stack outputs with secrets masked, and the error: a
 * plan constraint error is `PROVISIONING.PLAN_CHANGED`, anything else `PROVISIONING.APPLY_FAILED`.
 */
export function applyResultFromUp(observation: UpObservation): ApplyResult {
  const { plan, secrets } = observation;
  const events = inSequence(observation.events);
  // `up` runs with --skip-preview; events of a planning pass, should one come, say nothing about what was done.
  const applied = events.filter((e) => !e.resourcePreEvent?.planning && !e.resOutputsEvent?.planning);
  const observed = observe(applied);
  const finishedUrns = new Set(applied.flatMap((e) => (e.resOutputsEvent ? [e.resOutputsEvent.metadata.urn] : [])));
  const failedUrns = new Set(applied.flatMap((e) => (e.resOpFailedEvent ? [e.resOpFailedEvent.metadata.urn] : [])));
  const diagnostics = errorDiagnostics(events, secrets);
  const summaryResult = observation.result?.summary?.result;
  const succeeded =
    observation.result !== undefined && observation.failure === undefined && observation.stopped === undefined && failedUrns.size === 0 && (summaryResult === undefined || summaryResult === 'succeeded');

  const resources = plan.steps.map((step): ResourceResult => {
    const common = { urn: step.urn, name: step.name, type: step.type, op: step.op };
    const seen = observed.get(step.urn);
    const done = finishedUrns.has(step.urn);
    const after = seen ? latestNew(seen.metadata)?.new : undefined;
    // After a replace the resource is the replacement: its id is the one the events show, never the old one's (a
    // stream that only finishes deleting the old copy, as Pulumi's recorded failed-stacks-dont-rewrite-operations, shows none).
    const id = step.op === 'delete' ? undefined : after?.id || (step.op === 'replace' ? undefined : step.id);
    if (failedUrns.has(step.urn)) {
      const message = diagnostics.find((d) => d.urn === step.urn)?.message ?? `pulumi could not ${step.op} ${step.name}`;
      const keptId = step.op === 'create' ? after?.id || undefined : step.id;
      return { ...common, status: 'failed', ...(keptId ? { id: keptId } : {}), error: { code: 'PROVISIONING.APPLY_FAILED', message } };
    }
    if (done || succeeded) {
      // Pulumi's inputs as its engine events show them after the step (else the preview's): it cannot tell which
      // reference a secret came from, so a secret-valued input is `[secret]`, not the `{ secretRef }` it was
      // given; a value still unknown stays a computed marker.
      const inputs = step.op === 'delete' ? undefined : after?.inputs ? maskObject(after.inputs) : step.inputs;
      return { ...common, status: step.op === 'same' ? 'unchanged' : 'succeeded', ...(id ? { id } : {}), ...(inputs ? { inputs } : {}) };
    }
    return { ...common, status: 'skipped', ...(step.id ? { id: step.id } : {}) };
  });

  const base = { stack: plan.stack, planDigest: observation.approvedDigest, serial: observation.serial, resources, startedAt: observation.startedAt, finishedAt: observation.finishedAt };
  if (succeeded) return { status: 'applied', ...base, outputs: maskOutputs(observation.result?.outputs, stackOutputsOf(applied), secrets) };
  return { status: 'failed', ...base, outputs: {}, error: observation.stopped ?? upError(diagnostics, observation.failure, resources) };
}

function upError(diagnostics: readonly { urn?: string; message: string }[], failure: string | undefined, resources: readonly ResourceResult[]): ApplyError {
  const constraint = diagnostics.find((d) => isPlanConstraintMessage(d.message)) ?? (failure && isPlanConstraintMessage(failure) ? { message: failure } : undefined);
  if (constraint) {
    return { code: 'PROVISIONING.PLAN_CHANGED', message: `pulumi stopped the update: it would have done what the approved plan did not (${constraint.message})` };
  }
  const first = resources.find((r) => r.error)?.error?.message ?? diagnostics[0]?.message ?? failure ?? 'pulumi up failed';
  return { code: 'PROVISIONING.APPLY_FAILED', message: first };
}
