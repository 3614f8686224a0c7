import { createHash } from 'node:crypto';
import { z } from 'zod';
import { AppError } from '../errors/app-error';
import {
  collectReferences,
  computed,
  formatPath,
  ignorePathProblem,
  isOpaque,
  isPlainObject,
  jsonEqual,
  parsePath,
  readPath,
  referenceKey,
  writePath,
  canonicalJson,
  type JsonObject,
  type JsonValue,
  type PathSegment,
  type ValueReference,
} from './iac-values';
import { ProgramEvaluator, projectGraph, topologicalOrder, type LoadedProgram, type ResourceDeclaration } from './pulumi-yaml';

/**
 * The diff and plan engine: desired resources (a loaded Pulumi YAML program) against a stack's state give one
 * step per resource (create | update | replace | delete | same), in an order that is safe to apply, and a digest
 * that an approval binds to. Pure: no I/O (hashing is computation).
 */

export type StepOp = 'create' | 'update' | 'replace' | 'delete' | 'same';
export const STEP_OPS: readonly StepOp[] = ['create', 'update', 'replace', 'delete', 'same'];

/**
 * One step of a plan.
 *
 * BREAKING-CHANGE SHAPE: plan receipts store it and the digest covers it; changing it changes every digest.
 */
export interface PlanStep {
  /** `urn:pulumi:<stack>::<project>::<type>::<name>`, the resource as it is after the step (as it was, for delete). */
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
  /** The inputs the step applies (absent for delete): references and computed values unresolved. */
  readonly inputs?: JsonObject;
  /** urns of the resources this one depends on, recorded in state so deletes can run in reverse order. */
  readonly dependencies: readonly string[];
  readonly protect: boolean;
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
  /** Stack outputs as far as known at plan time (ids to be created are computed values). */
  readonly outputs: JsonObject;
  /** The references the apply resolves (those of creates, updates and replaces), each once, sorted: never values. */
  readonly references: readonly ValueReference[];
  /** `sha256:<hex>` over the canonical JSON (sorted keys) of schemaVersion, project, stack, steps and outputs. */
  readonly digest: string;
}

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

export interface StateResource {
  readonly urn: string;
  readonly name: string;
  readonly type: string;
  readonly id: string;
  /** As planned: references unresolved, so secrets never reach the state. */
  readonly inputs: JsonObject;
  /** Inputs plus `id`. */
  readonly outputs: JsonObject;
  readonly protect: boolean;
  readonly dependencies: readonly string[];
}

const jsonObject = z.record(z.string(), z.json());

/** The schema of a serialized plan (a plan read back from a receipt). */
export const planSchema = z.object({
  schemaVersion: z.literal(1),
  project: z.string(),
  stack: z.string(),
  baseSerial: z.number().int().nonnegative(),
  steps: z.array(
    z.object({
      urn: z.string(),
      name: z.string(),
      type: z.string(),
      op: z.enum(['create', 'update', 'replace', 'delete', 'same']),
      id: z.string().optional(),
      oldType: z.string().optional(),
      changedPaths: z.array(z.string()),
      inputs: jsonObject.optional(),
      dependencies: z.array(z.string()),
      protect: z.boolean(),
    }),
  ),
  counts: z.object({ create: z.number(), update: z.number(), replace: z.number(), delete: z.number(), same: z.number() }),
  outputs: jsonObject,
  references: z.array(z.union([z.object({ secretRef: z.string() }).strict(), z.object({ configRef: z.string() }).strict()])),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
});

export function resourceUrn(stack: string, project: string, type: string, name: string): string {
  return `urn:pulumi:${stack}::${project}::${type}::${name}`;
}

export interface PlanInput {
  readonly stack: string;
  readonly program: LoadedProgram;
  /** Undefined when the stack has no state yet. */
  readonly state: StackState | undefined;
  /** Operator ignore rules that hold on apply, over the program's own `ignoreChanges` (see `keepHeld`). */
  readonly ignore?: readonly HeldIgnoreRule[];
}

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

/**
 * Plans `program` against `state`. Throws the project's plan errors (see pulumi-yaml.ts) and `IAC.PROTECTED`
 * when a protected resource would be deleted or replaced.
 */
export function planStack({ stack, program, state, ignore = [] }: PlanInput): Plan {
  const { project, config } = program;
  for (const rule of ignore) {
    const problem = heldIgnoreProblem(rule.path);
    if (problem) throw invalidIgnoreRule(rule, problem);
  }
  const graph = projectGraph(project, config);
  const current = new Map((state?.resources ?? []).map((r) => [r.name, r]));
  const declarations = new Map(project.resources.map((r) => [r.name, r]));
  const urns = new Map(project.resources.map((r) => [r.name, resourceUrn(stack, project.name, r.type, r.name)]));
  const outputs = new Map<string, JsonObject>();
  const evaluator = new ProgramEvaluator(project, config, (name) => outputs.get(name) ?? {});

  const steps: PlanStep[] = [];
  for (const name of graph.order) {
    const declaration = declarations.get(name) as ResourceDeclaration;
    const urn = urns.get(name) as string;
    const old = current.get(name);
    const desired = evaluator.resourceInputs(declaration);
    const common = {
      urn,
      name,
      type: declaration.type,
      dependencies: (graph.dependencies.get(name) ?? []).map((d) => urns.get(d) as string),
      protect: declaration.protect,
    };
    let step: PlanStep;
    if (!old) {
      step = { ...common, op: 'create', changedPaths: [], inputs: desired };
    } else if (old.type !== declaration.type) {
      if (old.protect || declaration.protect) throw protectedResource(old, 'replace');
      step = { ...common, op: 'replace', id: old.id, oldType: old.type, changedPaths: changedPaths(old.inputs, desired), inputs: desired };
    } else {
      const inputs = keepHeld(keepIgnored(desired, old.inputs, declaration.ignoreChanges), old.inputs, heldRulesOf(ignore, urn, declaration.type));
      const changed = changedPaths(old.inputs, inputs);
      step = { ...common, op: changed.length > 0 ? 'update' : 'same', id: old.id, changedPaths: changed, inputs };
    }
    steps.push(step);
    // A resource that keeps its id exposes it now; a new or replaced one only once the apply has created it.
    const id = step.op === 'same' || step.op === 'update' ? (step.id as string) : computed(`\${${name}.id}`);
    outputs.set(name, { ...step.inputs, id, urn });
  }

  const gone = (state?.resources ?? []).filter((r) => !declarations.has(r.name));
  const goneByUrn = new Map(gone.map((r) => [r.urn, r.name]));
  const goneDeps = new Map(gone.map((r) => [r.name, r.dependencies.flatMap((u) => goneByUrn.get(u) ?? [])]));
  // A resource goes before what it depends on: the reverse of the order in which they were created.
  for (const name of topologicalOrder(gone.map((r) => r.name), goneDeps).reverse()) {
    const old = current.get(name) as StateResource;
    if (old.protect) throw protectedResource(old, 'delete');
    steps.push({ urn: old.urn, name, type: old.type, op: 'delete', id: old.id, changedPaths: [], dependencies: old.dependencies, protect: old.protect });
  }

  const stackOutputs = evaluator.outputs();
  const counts = Object.fromEntries(STEP_OPS.map((op) => [op, steps.filter((s) => s.op === op).length])) as Record<StepOp, number>;
  const references = new Map<string, ValueReference>();
  // Only steps that send inputs to the target need their references resolved.
  for (const step of steps.filter((s) => s.op === 'create' || s.op === 'update' || s.op === 'replace')) {
    for (const reference of collectReferences(step.inputs ?? {})) references.set(referenceKey(reference), reference);
  }
  return {
    schemaVersion: 1,
    project: project.name,
    stack,
    baseSerial: state?.serial ?? 0,
    steps,
    counts,
    outputs: stackOutputs,
    references: [...references.keys()].sort().map((k) => references.get(k) as ValueReference),
    digest: planDigest({ schemaVersion: 1, project: project.name, stack, steps, outputs: stackOutputs }),
  };
}

/** The digest of a plan's content: equal content gives an equal digest, any change another. */
export function planDigest(content: Pick<Plan, 'schemaVersion' | 'project' | 'stack' | 'steps' | 'outputs'>): string {
  const text = canonicalJson(content as unknown as JsonValue);
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
 * `desired` with the state's value at every ignored path (or without the path, where the state has none), as
 * Pulumi's ignoreChanges does: the resource keeps what it has there, and the diff cannot see it.
 */
export function keepIgnored(desired: JsonObject, old: JsonObject, ignoreChanges: readonly string[]): JsonObject {
  let result: JsonValue = desired;
  for (const entry of ignoreChanges) {
    const segments = parsePath(entry);
    if (segments) result = writePath(result, segments, readPath(old, segments));
  }
  return result as JsonObject;
}

/** The held rules whose scope is the resource: its urn, or its type. */
export function heldRulesOf(rules: readonly HeldIgnoreRule[], urn: string, type: string): HeldIgnoreRule[] {
  return rules.filter((rule) => ('urn' in rule.scope ? rule.scope.urn === urn : rule.scope.type === type));
}

/** Why `path` is not a held-rule path, or undefined: iac-values.ts `ignorePathProblem`, which inventory asks too. */
export function heldIgnoreProblem(path: string): string | undefined {
  return ignorePathProblem(path);
}

/**
 * `desired` with `old`'s value at every path the held rules name (or without the path, where `old` has none), as
 * `keepIgnored` does for `ignoreChanges`; `*` keeps all of `old`. A subtree rule (`tags.*`) and an exact one
 * (`tags`) keep the same thing: the value at that path, all of it. Like `ignoreChanges`, the rules apply to
 * updates only: a resource that is missing is still created, one whose type changed still replaced.
 */
export function keepHeld(desired: JsonObject, old: JsonObject, rules: readonly HeldIgnoreRule[]): JsonObject {
  let result: JsonValue = desired;
  for (const rule of rules) {
    const names = rule.path.split('.');
    if (names[names.length - 1] === '*') names.pop();
    if (names.length === 0) return old;
    const segments = heldSegments(names, old, result);
    result = writePath(result, segments, readPath(old, segments));
  }
  return result as JsonObject;
}

/** Inventory's dot path as property path segments: an all-digit name is an index where either side has an array. */
function heldSegments(names: readonly string[], old: JsonValue, desired: JsonValue): PathSegment[] {
  const segments: PathSegment[] = [];
  let left: JsonValue | undefined = old;
  let right: JsonValue | undefined = desired;
  for (const name of names) {
    const segment: PathSegment = /^\d+$/.test(name) && (Array.isArray(left) || Array.isArray(right)) ? Number(name) : name;
    segments.push(segment);
    left = left === undefined ? undefined : readPath(left, [segment]);
    right = right === undefined ? undefined : readPath(right, [segment]);
  }
  return segments;
}

function invalidIgnoreRule(rule: HeldIgnoreRule, problem: string): AppError {
  return new AppError('IAC.INVALID_IGNORE_RULE', 'validation', `the ignore rule for ${rule.path} cannot be read: ${problem}`, { path: rule.path, scope: rule.scope });
}

/**
 * The inputs a resource has in the target as a refresh reads them: `observed` (the target's properties), except
 * where `recorded` (the state's inputs) holds a reference or a computed marker: the target holds the resolved
 * value there, which must not enter a plan or a state, so that value is not compared and the recorded one kept.
 * Objects are merged key by key, arrays index by index (an array's length is the target's).
 */
export function refreshedInputs(recorded: JsonObject, observed: JsonObject): JsonObject {
  return (refreshedValue(recorded, observed) ?? {}) as JsonObject;
}

function refreshedValue(recorded: JsonValue | undefined, observed: JsonValue | undefined): JsonValue | undefined {
  if (recorded !== undefined && isOpaque(recorded)) return recorded;
  if (observed === undefined) return undefined;
  if (Array.isArray(recorded) && Array.isArray(observed)) {
    const left = recorded as readonly JsonValue[];
    return (observed as readonly JsonValue[]).map((item, i) => refreshedValue(left[i], item) ?? null);
  }
  if (isPlainObject(recorded) && isPlainObject(observed) && !isOpaque(observed)) {
    const merged: Record<string, JsonValue> = {};
    for (const key of new Set([...Object.keys(recorded), ...Object.keys(observed)])) {
      const value = refreshedValue(recorded[key], observed[key]);
      if (value !== undefined) merged[key] = value;
    }
    return merged;
  }
  return observed;
}

function protectedResource(resource: StateResource, op: 'delete' | 'replace'): AppError {
  return new AppError('IAC.PROTECTED', 'unprocessable', `${resource.name} is protected: the plan would ${op} it`, { urn: resource.urn, op, path: `resources.${resource.name}` });
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
