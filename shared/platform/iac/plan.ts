import { createHash } from 'node:crypto';
import { z } from 'zod';
import { AppError } from '../errors/app-error';
import {
  formatPath,
  ignorePathProblem,
  isOpaque,
  isPlainObject,
  jsonEqual,
  canonicalJson,
  parsePath,
  readPath,
  replaceSecrets,
  writePath,
  SECRET_MASK,
  type JsonObject,
  type JsonValue,
  type PathSegment,
  type ValueReference,
} from './iac-values';

/**
 * The plan model every engine produces and the host records, checks and approves: steps, counts, outputs, the
 * digest an approval binds to, stack state, held ignore rules and apply results. Pure: no I/O (hashing is
 * computation). The local engine's planner (local/engine/planner.ts) and the Pulumi mapping (pulumi-mapping.ts)
 * both produce it.
 */

/** Pulumi's `customTimeouts`: Go durations (`5m`, `1h30m`), validated and recorded. */
export type CustomTimeouts = {
  readonly create?: string;
  readonly update?: string;
  readonly delete?: string;
  readonly read?: string;
};

export type StepOp = 'create' | 'update' | 'replace' | 'delete' | 'same';
export const STEP_OPS: readonly StepOp[] = ['create', 'update', 'replace', 'delete', 'same'];

/** Why a delete (or the old half of a replace) leaves the resource in the target: only the state forgets it. */
export type RetainReason = 'retainOnDelete' | 'deletedWith';

/**
 * One step of a plan. Pulumi's `import` is a create with `import` (nothing is created: the target's resource is
 * adopted), its `read` (a `get:` resource) a same with `read`, as pulumi-mapping.ts maps Pulumi's own steps.
 * Members for resource options are present only when the option is used, so plans of programs without them
 * keep their digests.
 *
 * BREAKING-CHANGE SHAPE: plan receipts store it and the digest covers it; changing it changes every digest.
 */
export interface PlanStep {
  /**
   * `urn:pulumi:<stack>::<project>::<type>::<name>`, the resource as it is after the step (as it was, for delete);
   * a child's type is `parentType$type`.
   */
  readonly urn: string;
  readonly name: string;
  readonly type: string;
  readonly op: StepOp;
  /** The resource's id in the target before the step; absent for create. */
  readonly id?: string;
  /** replace: the type the resource had (a type change replaces the resource). */
  readonly oldType?: string;
  /** update, replace: changed property paths (`tags.env`, `rules[0].port`), sorted; ignored paths excluded. */
  readonly changedPaths: readonly string[];
  /**
   * update, replace: what the stack state held at each changed path before the step (`oldValuesAt`), masked as
   * `inputs` are; a changed path the state had no value at is left out. Absent when there is none. Not covered by
   * the digest: what an apply does depends on the new values only, and plans made before it keep their digests.
   */
  readonly oldValues?: JsonObject;
  /** The inputs the step applies (absent for delete): references and computed values unresolved. */
  readonly inputs?: JsonObject;
  /** urns of the resources this one depends on, recorded in state so deletes can run in reverse order. */
  readonly dependencies: readonly string[];
  readonly protect: boolean;
  /** The parent's urn (`options.parent`). */
  readonly parent?: string;
  /** The urn of the program's provider resource the resource uses; absent for the package's default provider. */
  readonly provider?: string;
  /** create: the id of the target's resource this step adopts (`options.import`) instead of creating one. */
  readonly import?: string;
  /** same: a `get:` resource, read from the target, never changed by this stack. */
  readonly read?: true;
  /** The urn the state knew the resource by, when an alias found it under another. */
  readonly oldUrn?: string;
  /** replace: the old resource is deleted before its replacement is created (`options.deleteBeforeReplace`). */
  readonly deleteBeforeReplace?: true;
  /** replace: what forced it besides a type change (`replaceOnChanges`, `replacementTrigger`, `replaceWith`, `provider`). */
  readonly replaceBecause?: string;
  /** delete, replace: the (old) resource stays in the target. */
  readonly retain?: RetainReason;
  /** `options.hideDiffs`: `inputs` shows `[hidden]` there; `hiddenDigest` binds the values to the digest. */
  readonly hiddenPaths?: readonly string[];
  readonly hiddenDigest?: string;
  readonly version?: string;
  readonly customTimeouts?: CustomTimeouts;
}

/**
 * A plan: what an apply of `stack` will do, step by step.
 *
 * BREAKING-CHANGE SHAPE: stored in plan receipts and bound to approvals through `digest`; changing it is a
 * breaking change (bump `schemaVersion`).
 */
export interface Plan {
  readonly schemaVersion: 1;
  readonly project: string;
  readonly stack: string;
  /** The stack state serial the plan was made against (0: no state yet). Not covered by the digest. */
  readonly baseSerial: number;
  /** Creates, updates, replaces and sames in dependency order, then deletes in reverse dependency order. */
  readonly steps: readonly PlanStep[];
  readonly counts: Readonly<Record<StepOp, number>>;
  /** Stack outputs as far as known at plan time (ids to be created are computed values, secrets masked). */
  readonly outputs: JsonObject;
  /** The references the apply resolves (those of creates, updates and replaces), each once, sorted: never values. */
  readonly references: readonly ValueReference[];
  /** `sha256:<hex>` over the canonical JSON (sorted keys) of schemaVersion, project, stack, steps and outputs. */
  readonly digest: string;
  /**
   * The `pulumi` engine's update plan (`pulumi preview --save-plan`, Pulumi's `DeploymentPlanV1` JSON), kept with
   * the plan so the apply runs `up --plan` with it and Pulumi itself refuses any operation beyond it. Absent for the
   * local engine, which applies the recorded steps only. Not covered by the digest: it is Pulumi's own format (with
   * its timestamp and seeds); the host checks that its resources and operations are the steps' (pulumi-mapping.ts
   * `updatePlanProblem`), and at most `MAX_UPDATE_PLAN_CHARS` of JSON.
   */
  readonly updatePlan?: JsonObject;
}

/** The largest update plan (its JSON text) a plan may carry: Pulumi's plans are a few KB per resource. */
export const MAX_UPDATE_PLAN_CHARS = 4 * 1024 * 1024;

/**
 * A stack's state: what the last applies left in the target.
 *
 * BREAKING-CHANGE SHAPE: stored as JSON in the SQL store; changing it breaks stored states.
 */
export interface StackState {
  readonly stack: string;
  readonly project: string;
  /** Grows by one on every write; 0 means no state has been written. */
  readonly serial: number;
  /** In the order they were applied. */
  readonly resources: readonly StateResource[];
}

/** Members after `dependencies` are optional: states written before them read as without the option. */
export interface StateResource {
  readonly urn: string;
  readonly name: string;
  readonly type: string;
  readonly id: string;
  /** As planned: references unresolved, so secrets never reach the state. */
  readonly inputs: JsonObject;
  /** Inputs plus `id`, plus what an emulated provider computed (emulated-providers.ts). */
  readonly outputs: JsonObject;
  readonly protect: boolean;
  readonly dependencies: readonly string[];
  readonly parent?: string;
  /** The provider's urn: a provider resource of the program, or the package's default (`…::pulumi:providers:<pkg>::default`). */
  readonly provider?: string;
  readonly retainOnDelete?: true;
  /** The urn of the resource whose delete takes this one with it (`options.deletedWith`). */
  readonly deletedWith?: string;
  /** Outputs masked wherever they are shown: the provider's secret outputs and `additionalSecretOutputs`. */
  readonly secretOutputs?: readonly string[];
  /** A `get:` resource: read from the target, not this stack's to delete. */
  readonly external?: true;
  /** The old half of a create-before-delete replace whose delete has not happened yet: the next plan deletes it. */
  readonly pendingDelete?: true;
  /** The evaluated `replacementTrigger` of the last apply. */
  readonly replacementTrigger?: JsonValue;
  readonly version?: string;
  readonly customTimeouts?: CustomTimeouts;
}

const jsonObject = z.record(z.string(), z.json());
const customTimeoutsSchema = z.object({ create: z.string(), update: z.string(), delete: z.string(), read: z.string() }).partial().strict();

/** The schema of one plan step (a step read back from a receipt). */
export const planStepSchema = z.object({
  urn: z.string(),
  name: z.string(),
  type: z.string(),
  op: z.enum(['create', 'update', 'replace', 'delete', 'same']),
  id: z.string().optional(),
  oldType: z.string().optional(),
  changedPaths: z.array(z.string()),
  oldValues: jsonObject.optional(),
  inputs: jsonObject.optional(),
  dependencies: z.array(z.string()),
  protect: z.boolean(),
  parent: z.string().optional(),
  provider: z.string().optional(),
  import: z.string().optional(),
  read: z.literal(true).optional(),
  oldUrn: z.string().optional(),
  deleteBeforeReplace: z.literal(true).optional(),
  replaceBecause: z.string().optional(),
  retain: z.enum(['retainOnDelete', 'deletedWith']).optional(),
  hiddenPaths: z.array(z.string()).optional(),
  hiddenDigest: z.string().optional(),
  version: z.string().optional(),
  customTimeouts: customTimeoutsSchema.optional(),
});

/** The optional members of a state resource (runner-job.ts validates states written by jobs with them). */
export const stateResourceOptionalSchema = {
  parent: z.string().optional(),
  provider: z.string().optional(),
  retainOnDelete: z.literal(true).optional(),
  deletedWith: z.string().optional(),
  secretOutputs: z.array(z.string()).optional(),
  external: z.literal(true).optional(),
  pendingDelete: z.literal(true).optional(),
  replacementTrigger: z.json().optional(),
  version: z.string().optional(),
  customTimeouts: customTimeoutsSchema.optional(),
};

/** The schema of a serialized plan (a plan read back from a receipt). */
export const planSchema = z.object({
  schemaVersion: z.literal(1),
  project: z.string(),
  stack: z.string(),
  baseSerial: z.number().int().nonnegative(),
  steps: z.array(planStepSchema),
  counts: z.object({ create: z.number(), update: z.number(), replace: z.number(), delete: z.number(), same: z.number() }),
  outputs: jsonObject,
  references: z.array(z.union([z.object({ secretRef: z.string() }).strict(), z.object({ configRef: z.string() }).strict()])),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  updatePlan: jsonObject.refine((plan) => JSON.stringify(plan).length <= MAX_UPDATE_PLAN_CHARS, `an update plan is at most ${MAX_UPDATE_PLAN_CHARS} characters of JSON`).optional(),
});

/**
 * An operator's ignore rule that holds on apply (inventory's `IgnoreRule` with `holdsOnApply`, as far as planning
 * needs it): at the matched path the resource keeps what it has, like `ignoreChanges`. `path` is inventory's
 * syntax (shared/inventory/drift.ts): dot-separated (`sku.capacity`, `rules.0.port`; an all-digit segment is an
 * array index where the resource holds an array there, at most `MAX_PATH_INDEX`), a trailing `.*` for the subtree
 * (`tags.*`), `*` alone for every property.
 *
 * BREAKING-CHANGE SHAPE: stored with reconciliation runs, which plan and apply with the same rules.
 *
 * @example { scope: { type: 'local:compute:Service' }, path: 'tags.*' }
 */
export interface HeldIgnoreRule {
  readonly scope: { readonly type: string } | { readonly urn: string };
  readonly path: string;
}

/** The text a plan shows in place of a value under `hideDiffs`. */
export const HIDDEN_VALUE = '[hidden]';
/** How many steps of each op. */
export function planCounts(steps: readonly PlanStep[]): Record<StepOp, number> {
  return Object.fromEntries(STEP_OPS.map((op) => [op, steps.filter((s) => s.op === op).length])) as Record<StepOp, number>;
}

/** The digest of a plan's content: equal content gives an equal digest, any change another. */
export function planDigest(content: Pick<Plan, 'schemaVersion' | 'project' | 'stack' | 'steps' | 'outputs'>): string {
  const steps = content.steps.map(({ oldValues: _old, ...step }) => step);
  const text = canonicalJson({ ...content, steps });
  return `sha256:${createHash('sha256').update(text).digest('hex')}`;
}

/**
 * Paths where `before` and `after` differ, deep: objects by key, arrays by index; references and computed values
 * are single values. Sorted, so equal inputs give equal plans.
 */
export function changedPaths(before: JsonValue | undefined, after: JsonValue | undefined): string[] {
  const paths: string[] = [];
  const walk = (a: JsonValue | undefined, b: JsonValue | undefined, path: PathSegment[]) => {
    if (jsonEqual(a, b)) return;
    if (Array.isArray(a) && Array.isArray(b)) {
      const left = a as readonly JsonValue[];
      const right = b as readonly JsonValue[];
      for (let i = 0; i < Math.max(left.length, right.length); i++) walk(left[i], right[i], [...path, i]);
    } else if (isPlainObject(a) && isPlainObject(b) && !isOpaque(a) && !isOpaque(b)) {
      for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) walk(a[key], b[key], [...path, key]);
    } else {
      paths.push(formatPath(path));
    }
  };
  walk(before, after, []);
  return paths.sort();
}

/**
 * What `before` (a resource's inputs in the stack state) held at each of `paths`, keyed by path, or undefined when
 * it held nothing at any: a plan step's `oldValues`. Masked as a plan shows values: a secret (`fn::secret`), or a
 * property the resource's outputs keep secret (`secret`, top-level names), as `SECRET_MASK`; a `hideDiffs` path
 * (`hidden`) as `HIDDEN_VALUE`; a reference stays a reference, never its value.
 */
export function oldValuesAt(before: JsonObject, paths: readonly string[], masked: { readonly secret?: readonly string[]; readonly hidden?: readonly string[] } = {}): JsonObject | undefined {
  const hidden = (masked.hidden ?? []).flatMap((h) => { const segments = parsePath(h); return segments ? [segments] : []; });
  const old: Record<string, JsonValue> = {};
  for (const path of paths) {
    const segments = parsePath(path);
    if (!segments) continue;
    let value = readPath(before, segments);
    if (value === undefined) continue;
    if (masked.secret?.includes(String(segments[0]))) value = SECRET_MASK;
    for (const h of hidden) {
      const hiddenHere = h.length <= segments.length && h.every((s, i) => s === segments[i]);
      if (hiddenHere) value = HIDDEN_VALUE;
      else if (segments.every((s, i) => s === h[i]) && readPath(value, h.slice(segments.length)) !== undefined) value = writePath(value, h.slice(segments.length), HIDDEN_VALUE);
    }
    old[path] = replaceSecrets(value, SECRET_MASK);
  }
  return Object.keys(old).length > 0 ? old : undefined;
}

/** Why `path` is not a held-rule path, or undefined: iac-values.ts `ignorePathProblem`, which inventory asks too. */
export function heldIgnoreProblem(path: string): string | undefined {
  return ignorePathProblem(path);
}

// ---------------------------------------------------------------------------------------------------------------
// Apply results

/**
 * Resolves one reference to its value, inside apply only (the Secret Broker, the Config Platform). The value goes
 * to the target and nowhere else: not into the state, the result, or an error message.
 */
export type ResolveReferences = (reference: ValueReference) => Promise<JsonValue>;

/** `unknown`: the runner of the apply went silent before it reported the step (a runner-lost receipt). */
export type ResourceStatus = 'succeeded' | 'unchanged' | 'failed' | 'skipped' | 'unknown';

export interface ApplyError {
  readonly code: string;
  readonly message: string;
}

/** BREAKING-CHANGE SHAPE: part of the apply receipt. */
export interface ResourceResult {
  readonly urn: string;
  readonly name: string;
  readonly type: string;
  readonly op: StepOp;
  /** `unchanged` for a same step; `skipped` for steps never attempted because the apply stopped or was refused. */
  readonly status: ResourceStatus;
  /** The resource's id after the step (absent once deleted, or when never created). */
  readonly id?: string;
  /**
   * What the resource holds after a step that succeeded or left it unchanged (absent for deletes, failed and
   * skipped steps, and in receipts from before it): its inputs as the stack state records them, references
   * unresolved (never a value), computed values replaced by what the apply learnt. The `pulumi` runner gives
   * what its engine events show instead (see pulumi-mapping.ts).
   */
  readonly inputs?: JsonObject;
  /** The project's `ignoreChanges` of the resource, when it has any: drift there is not the apply's to undo. */
  readonly ignoreChanges?: readonly string[];
  /** A `get:` resource: read, not the stack's, so not what the stack's environment must hold (run-events.ts). */
  readonly read?: true;
  readonly error?: ApplyError;
}

/**
 * What an apply did: each step's status, in plan order, and the stack outputs.
 *
 * BREAKING-CHANGE SHAPE: stored as the apply receipt; changing it is a breaking change.
 */
export interface ApplyResult {
  readonly status: 'applied' | 'failed';
  readonly stack: string;
  /** The digest of the approved plan the apply was asked to carry out. */
  readonly planDigest: string;
  /** The stack state serial after the apply (unchanged when nothing was written). */
  readonly serial: number;
  readonly resources: readonly ResourceResult[];
  /** Stack outputs (references unresolved); empty when the apply failed. */
  readonly outputs: JsonObject;
  /** Why the apply failed: `PROVISIONING.PLAN_CHANGED`, `PROVISIONING.TARGET_UNREACHABLE`, ... */
  readonly error?: ApplyError;
  /** ISO-8601 UTC. */
  readonly startedAt: string;
  readonly finishedAt: string;
}

/** The result of an apply refused before (or stopped at) its first change: every step skipped. */
export function refusedApply(plan: Plan, serial: number, error: AppError): Omit<ApplyResult, 'startedAt' | 'finishedAt'> {
  return {
    status: 'failed',
    stack: plan.stack,
    planDigest: plan.digest,
    serial,
    resources: plan.steps.map(skippedStep),
    outputs: {},
    error: { code: error.code, message: error.message },
  };
}

/** A step the apply did not carry out. */
export function skippedStep(step: PlanStep): ResourceResult {
  return { urn: step.urn, name: step.name, type: step.type, op: step.op, status: 'skipped', ...(step.id ? { id: step.id } : {}) };
}

/**
 * Why an apply's result is not the approved plan carried out, or undefined when it is: what the host checks of an
 * apply job's report before it records it (apply.service.ts), since an agent's word proves nothing.
 *
 * - The result names the approved plan's digest and stack.
 * - Each reported resource is a step of the plan (URN, name, type), each step reported once, with the step's op;
 *   except that an update, or a replace that keeps its type, may be reported `same`: the `pulumi` engine's preview
 *   inside apply knows the secret values the approved preview did not, and may find such a step changes nothing
 *   (pulumi-mapping.ts `planCovers` allows exactly this).
 * - A failed apply may report fewer steps (it stopped early; the rest are skipped or not reported). An `applied`
 *   one reports every step, none of them failed, skipped or unknown.
 *
 * Not checked here (not knowable from the plan): the inputs, ids and outputs the result reports.
 */
export function applyDivergence(approved: Plan, result: ApplyResult): string | undefined {
  if (result.planDigest !== approved.digest) return `it reports an apply of plan ${result.planDigest}, not of the approved plan ${approved.digest}`;
  if (result.stack !== approved.stack) return `it reports an apply of stack ${result.stack}, not ${approved.stack}`;
  const unreported = [...approved.steps];
  for (const reported of result.resources) {
    const same = (step: PlanStep) => step.urn === reported.urn && step.name === reported.name && step.type === reported.type;
    const index = unreported.findIndex((step) => same(step) && (step.op === reported.op || (reported.op === 'same' && maySeeSame(step))));
    if (index < 0) {
      const planned = approved.steps.filter(same);
      if (planned.length === 0) return `it reports ${reported.op} ${reported.urn}, which is no step of the approved plan`;
      return `it reports ${reported.op} ${reported.urn}, where the approved plan has ${planned.map((s) => s.op).join(', ')}${planned.some((s) => s.op === reported.op) ? ' once' : ''}`;
    }
    unreported.splice(index, 1);
  }
  if (result.status === 'applied') {
    const missing = unreported[0];
    if (missing) return `it reports the apply done without the approved ${missing.op} of ${missing.urn}`;
    const undone = result.resources.find((r) => r.status !== 'succeeded' && r.status !== 'unchanged');
    if (undone) return `it reports the apply done with ${undone.urn} ${undone.status}`;
  }
  return undefined;
}

/** An approved step an apply may find unchanged (see `applyDivergence`). */
function maySeeSame(step: PlanStep): boolean {
  return step.op === 'update' || (step.op === 'replace' && step.oldType === undefined);
}
