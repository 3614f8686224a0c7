import type { EngineEvent, OpMap, StepEventMetadata } from '@pulumi/pulumi/automation';
import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { canonicalJson, isPlainObject, isSecretMask, jsonEqual, parsePath, type JsonObject, type JsonValue, type ValueReference } from './iac-values';
import { oldValuesAt, planCounts, planDigest, type Plan, type PlanStep, type StepOp } from './plan';
import { collapseOps, countsFromChangeSummary, inSequence, maskObject, normalizePath, stackOutputsOf, stepOpOf, urnName, urnType } from './pulumi-mapping';

/**
 * A Pulumi preview as this host's `Plan` (pulumi-mapping.ts says how ops, values and order map): the saved update
 * plan read and checked, the preview's events observed per URN, steps in canonical order; and whether a fresh plan
 * is covered by the approved one.
 */

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

export function observe(events: readonly EngineEvent[], updatePlan?: PulumiUpdatePlan): Map<string, Observed> {
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
export function latestNew(metadata: readonly StepEventMetadata[]): StepEventMetadata | undefined {
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
  const changedPaths = changedPathsOf(metadata, op);
  // The old inputs masked as the new ones are: a secret is `[secret]` in both.
  const oldValues = before?.inputs && changedPaths.length > 0 ? oldValuesAt(maskObject(before.inputs), changedPaths) : undefined;
  return {
    urn,
    name: urnName(urn),
    type,
    op,
    ...(id ? { id } : {}),
    ...(oldType ? { oldType } : {}),
    changedPaths,
    ...(oldValues ? { oldValues } : {}),
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
    // Old values are the state's, not what the apply does (plan.ts `oldValues`): fewer paths have fewer of them.
    const { op: _op, changedPaths: _paths, oldValues: _old, ...rest } = step;
    const { op: _wasOp, changedPaths: _wasPaths, oldValues: _wasOld, ...wasRest } = was;
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
