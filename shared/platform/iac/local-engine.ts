import { createLocalCloud, type LocalCloud } from '../cloud/local-cloud';
import { AppError, ensureError, expectedAppError } from '../errors/app-error';
import type { SqlStore } from '../sql/database';
import type { Clock, Ids } from '../time/clock';
import { asValueReference, isComputed, isPlainObject, jsonEqual, referenceKey, type JsonObject, type JsonValue } from './iac-values';
import {
  heldRulesOf,
  keepHeld,
  keepIgnored,
  planSchema,
  planStack,
  refreshedInputs,
  refusedApply,
  skippedStep,
  type ApplyError,
  type HeldIgnoreRule,
  type ApplyResult,
  type Plan,
  type PlanStep,
  type ResolveReferences,
  type ResourceResult,
  type StackState,
  type StateResource,
} from './plan';
import { loadProgram, ProgramEvaluator, type LoadedProgram, type ProjectFiles, type ResourceDeclaration } from './pulumi-yaml';
import { sqlStackStates, type StackStates } from './stack-state.repository';
import { qualifiedStackName, type StackRef } from './stack-ref';

/** Version of the embedded engine that evaluates Pulumi YAML projects against the local cloud. */
export const LOCAL_ENGINE_VERSION = 'runtime-cloud-local-iac 0.1.0';

/** Config set by the caller over the stack file's values, by key (`poolSize` or `project:poolSize`). */
export type ConfigOverrides = Readonly<Record<string, JsonValue>>;

/** How a preview plans (an apply re-plans the same way, so pass it the same options). */
export interface PlanOptions {
  /**
   * Plan against what the target really holds rather than what the state recorded: each resource of the state is
   * read from the target first. One gone from the target is created again; one whose type changed is replaced;
   * one whose properties differ from its recorded inputs is updated at the differing paths (ignoreChanges and
   * `ignore` still hold; where the state holds a reference or a computed marker the target is not compared).
   * A target that cannot be read fails as an apply to it does (`PROVISIONING.TARGET_UNREACHABLE`). Default false:
   * plan against the state. Example: `{ refresh: true }` for a reconciliation run.
   */
  readonly refresh?: boolean;
  /**
   * Operator ignore rules that hold on apply, over the project's own `ignoreChanges`: a matched path keeps what
   * the resource has (plan.ts `HeldIgnoreRule`). A path that cannot be read is `IAC.INVALID_IGNORE_RULE`.
   * Example: `[{ scope: { type: 'local:compute:Service' }, path: 'tags.*' }]`.
   */
  readonly ignore?: readonly HeldIgnoreRule[];
}

/** How a caller takes part in an apply: the plan options the preview had, and a say before each step. */
export interface ApplyOptions extends PlanOptions {
  /**
   * Awaited before each step. An AppError thrown here stops the apply before that step: it and the rest are
   * skipped and the result fails with the error's code. Example: renew the stack lock, throw when it was lost.
   */
  readonly beforeStep?: () => Promise<void>;
}

/** The local engine: the `IacEngine` port (iac-runner.ts) over the local cloud, with stack state in SQL. */
export interface LocalEngine {
  readonly name: 'local';
  /** The engine's version, after checking that its state store answers (the `iac-runner` health probe). */
  version(): Promise<string>;
  preview(stack: StackRef, files: ProjectFiles, config?: ConfigOverrides, options?: PlanOptions): Promise<Plan>;
  apply(stack: StackRef, files: ProjectFiles, config: ConfigOverrides, approvedPlan: Plan, resolveReferences: ResolveReferences, options?: ApplyOptions): Promise<ApplyResult>;
}

/**
 * Where the engine keeps stack state and which target it applies to: the host's SQL store (the in-process baseline
 * and tests), or what a runner job is given (`states` and `cloud` reached through the job's endpoints).
 */
export type LocalEngineOptions = (
  | {
      readonly store: SqlStore;
      readonly ids: Ids;
      /** The target applies go to; by default a local cloud over `store`. */
      readonly cloud?: LocalCloud;
    }
  | { readonly states: StackStates; readonly cloud: LocalCloud }
) & {
  readonly clock: Clock;
  /**
   * The local cloud target of a stack. Default: every stack applies to `local`.
   * Example: `(stack) => stack.stack.startsWith('prod') ? 'production' : 'local'`.
   */
  readonly targetOf?: (stack: StackRef) => string;
}

export function createLocalEngine(options: LocalEngineOptions): LocalEngine {
  const { clock } = options;
  const states = 'states' in options ? options.states : sqlStackStates(options.store, clock);
  const cloud = 'states' in options ? options.cloud : (options.cloud ?? createLocalCloud(options));
  const targetOf = options.targetOf ?? (() => 'local');

  /** The state as a refresh reads it from the target (see `PlanOptions.refresh`); the state itself is unchanged. */
  async function refreshed(stack: StackRef, state: StackState | undefined): Promise<StackState | undefined> {
    if (!state) return state;
    const resources: StateResource[] = [];
    for (const resource of state.resources) {
      const found = await cloud.get(targetOf(stack), resource.id);
      // Gone from the target (or, from a state edited by hand, not the tenant's): planned as a create, like a
      // resource the state never had.
      if (!found || found.scope !== stack.tenant) continue;
      const inputs = refreshedInputs(resource.inputs, found.properties as JsonObject);
      resources.push({ ...resource, type: found.type, inputs, outputs: { ...inputs, id: resource.id } });
    }
    return { ...state, resources };
  }

  /** The state to plan against: as stored, or as the target holds it. */
  async function planningState(stack: StackRef, refresh: boolean | undefined): Promise<StackState | undefined> {
    const state = await states.read(stack);
    return refresh ? refreshed(stack, state) : state;
  }

  return {
    name: 'local',
    async version() {
      await states.probe();
      return LOCAL_ENGINE_VERSION;
    },
    async preview(stack, files, config = {}, planOptions = {}) {
      const program = loadProgram(files, stack.stack, config);
      assertProject(stack, program);
      const state = await planningState(stack, planOptions.refresh);
      return planStack({ stack: stack.stack, program, state, ...(planOptions.ignore ? { ignore: planOptions.ignore } : {}) });
    },
    async apply(stack, files, config, approvedPlan, resolveReferences, options = {}) {
      if (!planSchema.safeParse(approvedPlan).success) {
        throw new AppError('IAC.INVALID_PLAN', 'validation', 'the approved plan is not a plan this engine made');
      }
      const startedAt = clock.now().toISOString();
      const finish = (result: Omit<ApplyResult, 'startedAt' | 'finishedAt'>): ApplyResult => ({ ...result, startedAt, finishedAt: clock.now().toISOString() });

      // Everything up to the first change of the target: a refusal here leaves target and state untouched.
      let program: LoadedProgram;
      let state: StackState | undefined;
      let plan: Plan;
      try {
        program = loadProgram(files, stack.stack, config);
        assertProject(stack, program);
        // With refresh, the same reading of the target as the preview's: what changed there since moves the digest.
        state = await planningState(stack, options.refresh);
        plan = planStack({ stack: stack.stack, program, state, ...(options.ignore ? { ignore: options.ignore } : {}) });
      } catch (thrown) {
        return finish(refusedApply(approvedPlan, state?.serial ?? 0, expectedAppError(thrown)));
      }
      if (plan.digest !== approvedPlan.digest) {
        // The world or the program moved since approval: doing anything now would do what nobody approved.
        const error = new AppError('PROVISIONING.PLAN_CHANGED', 'conflict', 'the plan changed since it was approved; nothing was applied', {
          approvedDigest: approvedPlan.digest,
          currentDigest: plan.digest,
        });
        return finish(refusedApply(approvedPlan, plan.baseSerial, error));
      }
      let resolved: ReadonlyMap<string, JsonValue>;
      try {
        // All references are resolved before the first change, so a missing secret cannot leave a half-applied stack.
        resolved = await resolveAll(plan, resolveReferences);
      } catch (thrown) {
        return finish(refusedApply(plan, plan.baseSerial, expectedAppError(thrown, 'PROVISIONING.REFERENCE_UNRESOLVED')));
      }
      try {
        await cloud.recordApply(targetOf(stack), { stack, planDigest: plan.digest });
      } catch (thrown) {
        return finish(refusedApply(plan, plan.baseSerial, expectedAppError(thrown)));
      }
      const run = new StepRunner({ states, clock, cloud, target: targetOf(stack), stack, program, state, resolved, ignore: options.ignore ?? [], beforeStep: options.beforeStep });
      return finish(await run.all(plan));
    },
  };
}

/**
 * The program must be the stack's project: its state and its resources are found by the project's name, so a
 * program of another name would plan against nothing and create resources no scan of the stack would see.
 */
function assertProject(stack: StackRef, program: LoadedProgram): void {
  if (program.project.name === stack.project) return;
  throw new AppError('IAC.PROJECT_MISMATCH', 'validation', `the program is project ${program.project.name}, not ${stack.project} of stack ${qualifiedStackName(stack)}`, {
    stack: qualifiedStackName(stack),
    project: program.project.name,
  });
}

async function resolveAll(plan: Plan, resolve: ResolveReferences): Promise<ReadonlyMap<string, JsonValue>> {
  const values = new Map<string, JsonValue>();
  for (const reference of plan.references) values.set(referenceKey(reference), await resolve(reference));
  return values;
}

interface StepRunnerContext {
  readonly states: StackStates;
  readonly clock: Clock;
  readonly cloud: LocalCloud;
  readonly target: string;
  readonly stack: StackRef;
  readonly program: LoadedProgram;
  /**
   * The state the plan was made against: with refresh, as read from the target, so the checkpoints record what
   * the target holds (references still as recorded).
   */
  readonly state: StackState | undefined;
  /** The held ignore rules the plan was made with. */
  readonly ignore: readonly HeldIgnoreRule[];
  /** Resolved reference values by `referenceKey`. */
  readonly resolved: ReadonlyMap<string, JsonValue>;
  readonly beforeStep: (() => Promise<void>) | undefined;
}

/**
 * Carries out a plan's steps in order against the target. After every step that changed something the stack
 * state is written (a checkpoint, serial + 1), so a failure midway leaves a state that says exactly what was
 * applied, and a later plan starts from there.
 */
class StepRunner {
  readonly #resources: StateResource[];
  #serial: number;
  readonly #declarations: ReadonlyMap<string, ResourceDeclaration>;

  constructor(private readonly context: StepRunnerContext) {
    this.#resources = [...(context.state?.resources ?? [])];
    this.#serial = context.state?.serial ?? 0;
    this.#declarations = new Map(context.program.project.resources.map((r) => [r.name, r]));
  }

  async all(plan: Plan): Promise<Omit<ApplyResult, 'startedAt' | 'finishedAt'>> {
    const results: ResourceResult[] = [];
    for (const [index, step] of plan.steps.entries()) {
      const stop = await this.mayGoOn();
      if (stop) {
        results.push(...plan.steps.slice(index).map((s) => skippedStep(s)));
        return { status: 'failed', stack: plan.stack, planDigest: plan.digest, serial: this.#serial, resources: results, outputs: {}, error: stop };
      }
      try {
        results.push(await this.step(step));
      } catch (thrown) {
        const error = ensureError(thrown);
        const failure: ApplyError = { code: error instanceof AppError ? error.code : 'PROVISIONING.APPLY_FAILED', message: error.message };
        const id = this.#resources.find((r) => r.name === step.name)?.id;
        results.push({ urn: step.urn, name: step.name, type: step.type, op: step.op, status: 'failed', ...(id ? { id } : {}), error: failure });
        results.push(...plan.steps.slice(index + 1).map((s) => skippedStep(s)));
        return { status: 'failed', stack: plan.stack, planDigest: plan.digest, serial: this.#serial, resources: results, outputs: {}, error: failure };
      }
    }
    const outputs = new ProgramEvaluator(this.context.program.project, this.context.program.config, (name) => this.outputsOf(name)).outputs();
    return { status: 'applied', stack: plan.stack, planDigest: plan.digest, serial: this.#serial, resources: results, outputs };
  }

  /** The caller's `beforeStep`: undefined to go on, or why the apply must stop before the next step. */
  private async mayGoOn(): Promise<ApplyError | undefined> {
    try {
      await this.context.beforeStep?.();
      return undefined;
    } catch (thrown) {
      const error = expectedAppError(thrown);
      return { code: error.code, message: error.message };
    }
  }

  private async step(step: PlanStep): Promise<ResourceResult> {
    const { cloud, target } = this.context;
    const done = (status: ResourceResult['status'], id?: string): ResourceResult => {
      const inputs = step.op === 'delete' ? undefined : this.#resources.find((r) => r.name === step.name)?.inputs;
      const ignoreChanges = step.op === 'delete' ? [] : (this.#declarations.get(step.name)?.ignoreChanges ?? []);
      return {
        urn: step.urn,
        name: step.name,
        type: step.type,
        op: step.op,
        status,
        ...(id ? { id } : {}),
        ...(inputs ? { inputs } : {}),
        ...(ignoreChanges.length > 0 ? { ignoreChanges } : {}),
      };
    };
    const old = this.#resources.find((r) => r.name === step.name);
    switch (step.op) {
      case 'same': {
        // Options (protect, dependencies) can change without the target changing; only the state records them.
        if (old && (old.urn !== step.urn || old.protect !== step.protect || !jsonEqual(old.dependencies, step.dependencies))) {
          await this.checkpoint({ ...old, urn: step.urn, protect: step.protect, dependencies: step.dependencies });
        }
        return done('unchanged', old?.id);
      }
      case 'create': {
        const inputs = this.inputsOf(step);
        const created = await cloud.create(target, { scope: this.context.stack.tenant, urn: step.urn, type: step.type, properties: this.resolve(inputs) });
        await this.checkpoint(this.stateResource(step, created.id, inputs));
        return done('succeeded', created.id);
      }
      case 'update': {
        const inputs = this.inputsOf(step, old);
        const id = old?.id ?? step.id ?? '';
        await cloud.update(target, id, this.resolve(inputs));
        await this.checkpoint(this.stateResource(step, id, inputs));
        return done('succeeded', id);
      }
      case 'replace': {
        // Delete, then create: each half is checkpointed, so a failure between them leaves a state without the
        // resource, which is what the target then holds.
        if (old) {
          await cloud.delete(target, old.id);
          await this.remove(old.name);
        }
        const inputs = this.inputsOf(step);
        const created = await cloud.create(target, { scope: this.context.stack.tenant, urn: step.urn, type: step.type, properties: this.resolve(inputs) });
        await this.checkpoint(this.stateResource(step, created.id, inputs));
        return done('succeeded', created.id);
      }
      case 'delete': {
        // A resource already gone (deleted out of band) is what the step wants.
        if (old) {
          await cloud.delete(target, old.id);
          await this.remove(old.name);
        }
        return done('succeeded');
      }
    }
  }

  /**
   * The step's inputs evaluated again now that its dependencies exist: the plan's computed values become the ids
   * just created. Program, config and state are the ones the digest was checked against, so nothing else differs.
   */
  private inputsOf(step: PlanStep, old?: StateResource): JsonObject {
    const declaration = this.#declarations.get(step.name) as ResourceDeclaration;
    const evaluated = new ProgramEvaluator(this.context.program.project, this.context.program.config, (name) => this.outputsOf(name)).resourceInputs(declaration);
    if (!old || step.op !== 'update') return evaluated;
    return keepHeld(keepIgnored(evaluated, old.inputs, declaration.ignoreChanges), old.inputs, heldRulesOf(this.context.ignore, step.urn, declaration.type));
  }

  private outputsOf(name: string): JsonObject {
    const resource = this.#resources.find((r) => r.name === name);
    return resource ? { ...resource.outputs, urn: resource.urn } : {};
  }

  /** The inputs as the target receives them: references replaced by their values. */
  private resolve(value: JsonObject): Record<string, unknown> {
    const walk = (v: JsonValue): JsonValue => {
      const reference = asValueReference(v);
      if (reference) return this.context.resolved.get(referenceKey(reference)) ?? null;
      if (isComputed(v)) throw new AppError('PROVISIONING.APPLY_FAILED', 'internal', 'a computed value was still unknown when its resource was applied');
      if (Array.isArray(v)) return (v as readonly JsonValue[]).map(walk);
      if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
      return v;
    };
    return walk(value) as Record<string, unknown>;
  }

  private stateResource(step: PlanStep, id: string, inputs: JsonObject): StateResource {
    return { urn: step.urn, name: step.name, type: step.type, id, inputs, outputs: { ...inputs, id }, protect: step.protect, dependencies: step.dependencies };
  }

  private async checkpoint(resource: StateResource): Promise<void> {
    const at = this.#resources.findIndex((r) => r.name === resource.name);
    if (at >= 0) this.#resources[at] = resource;
    else this.#resources.push(resource);
    await this.write();
  }

  private async remove(name: string): Promise<void> {
    const at = this.#resources.findIndex((r) => r.name === name);
    if (at >= 0) this.#resources.splice(at, 1);
    await this.write();
  }

  private async write(): Promise<void> {
    const { states, stack, program } = this.context;
    const state: StackState = { stack: stack.stack, project: program.project.name, serial: this.#serial + 1, resources: [...this.#resources] };
    await states.write(stack, state);
    this.#serial = state.serial;
  }
}
