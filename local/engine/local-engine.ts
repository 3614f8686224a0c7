import { randomBytes } from 'node:crypto';
import { createLocalCloud, type LocalCloud } from '../cloud/local-cloud';
import { AppError, ensureError, expectedAppError } from '../../shared/platform/errors/app-error';
import type { SqlStore } from '../../shared/platform/sql/database';
import type { Clock, Ids } from '../../shared/platform/time/clock';
import { emulationOf, generatedOutputs, outputsFor } from './emulated-providers';
import { asValueReference, canonicalJson, isComputed, isPlainObject, referenceKey, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { planSchema, refusedApply, skippedStep, type ApplyError, type HeldIgnoreRule, type ApplyResult, type Plan, type PlanStep, type ResolveReferences, type ResourceResult, type StackState, type StateResource } from '../../shared/platform/iac/plan';
import { heldRulesOf, keepHeld, keepIgnored, evaluatorContext, planStack, refreshedInputs, secretOutputsOf, shownOutputs, TargetReadNeeded, type PlanInput, type TargetResource } from './planner';
import { loadProgram, ProgramEvaluator, type LoadedProgram, type ProjectFiles, type ResourceDeclaration } from './pulumi-yaml';
import { isProviderType, packageOf } from './pulumi-yaml-resource';
import { defaultProviderUrn } from './resource-identity';
import { sqlStackStates, type StackStates } from './stack-state.repository';
import type { ApplyOptions, ConfigOverrides, IacEngine, PlanOptions } from '../../shared/platform/iac/iac-runner';
import { qualifiedStackName, type StackRef } from '../../shared/platform/iac/stack-ref';

export type { ApplyOptions, ConfigOverrides, PlanOptions };

/** Version of the embedded engine that evaluates Pulumi YAML projects against the local cloud. */
export const LOCAL_ENGINE_VERSION = 'runtime-cloud-local-iac 0.1.0';

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
      // A get resource is read again by every plan.
      if (resource.external) {
        resources.push(resource);
        continue;
      }
      const found = await readOwn(stack, resource.id);
      // Gone from the target (or, from a state edited by hand, not the tenant's): planned as a create, like a
      // resource the state never had.
      if (!found) continue;
      const inputs = refreshedInputs(resource.inputs, found.properties);
      // What an emulated provider computed is not in the target; the state keeps it.
      resources.push({ ...resource, type: found.type, inputs, outputs: outputsFor(inputs, resource.id, generatedOutputs(resource.type, resource.outputs)) });
    }
    return { ...state, resources };
  }

  /** A resource of the target, when it is in the stack's tenant's scope: another tenant's is not there for it. */
  async function readOwn(stack: StackRef, id: string): Promise<TargetResource | null> {
    const found = await cloud.get(targetOf(stack), id);
    if (!found || found.scope !== stack.tenant) return null;
    return { id: found.id, type: found.type, properties: found.properties as JsonObject };
  }

  /** The state to plan against: as stored, or as the target holds it. */
  async function planningState(stack: StackRef, refresh: boolean | undefined): Promise<StackState | undefined> {
    const state = await states.read(stack);
    return refresh ? refreshed(stack, state) : state;
  }

  /**
   * Plans, reading from the target what the plan asks for (`get:` ids, `import` ids): each read adds one id, so
   * this ends after as many rounds as the program names ids. Returns the reads too: the apply uses the same.
   */
  async function planAgainstTarget(stack: StackRef, input: Omit<PlanInput, 'target'>): Promise<{ plan: Plan; reads: ReadonlyMap<string, TargetResource | null> }> {
    const reads = new Map<string, TargetResource | null>();
    // Ids known without the plan are read up front: imports the state does not hold yet, and get ids of text,
    // config and variables. One that names a resource's output (a get of a get) costs a round of planning.
    const held = new Set((input.state?.resources ?? []).map((r) => r.id));
    const { project, config } = input.program;
    const early = new ProgramEvaluator(project, config, () => ({}), evaluatorContext(input.program));
    for (const d of project.resources) {
      const imported = d.options?.import !== undefined && !held.has(d.options.import) ? d.options.import : undefined;
      const id = imported ?? (d.get ? knownId(early, d.get.id, ['resources', d.name, 'get', 'id']) : undefined);
      if (id !== undefined && !reads.has(id)) reads.set(id, await readOwn(stack, id));
    }
    for (;;) {
      try {
        return { plan: planStack({ ...input, target: reads }), reads };
      } catch (thrown) {
        if (!(thrown instanceof TargetReadNeeded) || reads.has(thrown.id)) throw thrown;
        reads.set(thrown.id, await readOwn(stack, thrown.id));
      }
    }
  }

  return {
    name: 'local',
    async version() {
      await states.probe();
      return LOCAL_ENGINE_VERSION;
    },
    async preview(stack, files, config = {}, planOptions = {}) {
      const program = loadProgram(files, stack.stack, config, { organization: stack.tenant });
      assertProject(stack, program);
      const state = await planningState(stack, planOptions.refresh);
      return (await planAgainstTarget(stack, { stack: stack.stack, program, state, ...(planOptions.ignore ? { ignore: planOptions.ignore } : {}) })).plan;
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
      let reads: ReadonlyMap<string, TargetResource | null>;
      try {
        program = loadProgram(files, stack.stack, config, { organization: stack.tenant });
        assertProject(stack, program);
        // With refresh, the same reading of the target as the preview's: what changed there since moves the digest.
        state = await planningState(stack, options.refresh);
        ({ plan, reads } = await planAgainstTarget(stack, { stack: stack.stack, program, state, ...(options.ignore ? { ignore: options.ignore } : {}) }));
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
      const run = new StepRunner({ states, clock, cloud, target: targetOf(stack), stack, program, state, resolved, reads, ignore: options.ignore ?? [], beforeStep: options.beforeStep });
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

/** A get's id as far as config and variables say it, or undefined (the plan evaluates it and reports what is wrong). */
function knownId(evaluator: ProgramEvaluator, id: JsonValue, path: (string | number)[]): string | undefined {
  try {
    const value = evaluator.evaluate(id, path);
    return typeof value === 'string' ? value : undefined;
  } catch {
    // It names a resource (not known yet) or is malformed: the plan's own evaluation says which.
    return undefined;
  }
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
  /** The target's resources the plan read (`get:`, `import`), as it read them. */
  readonly reads: ReadonlyMap<string, TargetResource | null>;
  readonly beforeStep: (() => Promise<void>) | undefined;
}

/** The old half of a replace, and the index of its step. */
interface Replaced {
  readonly index: number;
  readonly resource: StateResource;
}

/**
 * Carries out a plan's steps in order against the target. After every step that changed something the stack
 * state is written (a checkpoint, serial + 1), so a failure midway leaves a state that says exactly what was
 * applied, and a later plan starts from there.
 *
 * A replace creates the replacement first and deletes the old resource after every other step but the deletes,
 * as Pulumi does (the old one waits in the state as `pendingDelete`, so a failure in between leaves it for the
 * next plan to delete); with `deleteBeforeReplace` it deletes first. A retained delete (`retainOnDelete`,
 * `deletedWith` whose resource goes in the same plan) and the delete of a get resource only drop the state's
 * record.
 */
class StepRunner {
  readonly #resources: StateResource[];
  #serial: number;
  readonly #declarations: ReadonlyMap<string, ResourceDeclaration>;
  /** Old halves of replaces of this apply, deleted once the other steps but the deletes are done. */
  readonly #replaced: Replaced[] = [];

  constructor(private readonly context: StepRunnerContext) {
    this.#resources = [...(context.state?.resources ?? [])];
    this.#serial = context.state?.serial ?? 0;
    this.#declarations = new Map(context.program.project.resources.map((r) => [r.name, r]));
  }

  async all(plan: Plan): Promise<Omit<ApplyResult, 'startedAt' | 'finishedAt'>> {
    const results: ResourceResult[] = [];
    /** Fails the step at `index`; the steps from `next` on were never attempted. */
    const failed = (index: number, next: number, thrown: unknown): Omit<ApplyResult, 'startedAt' | 'finishedAt'> => {
      const step = plan.steps[index] as PlanStep;
      const error = ensureError(thrown);
      const failure: ApplyError = { code: error instanceof AppError ? error.code : 'PROVISIONING.APPLY_FAILED', message: error.message };
      const id = this.live(step.name)?.id;
      results[index] = { urn: step.urn, name: step.name, type: step.type, op: step.op, status: 'failed', ...(id ? { id } : {}), error: failure };
      results.push(...plan.steps.slice(next).map((s) => skippedStep(s)));
      return { status: 'failed', stack: plan.stack, planDigest: plan.digest, serial: this.#serial, resources: results, outputs: {}, error: failure };
    };
    for (const [index, step] of plan.steps.entries()) {
      if (step.op === 'delete') {
        const failure = await this.deleteReplaced((at, thrown) => failed(at, index, thrown));
        if (failure) return failure;
      }
      const stop = await this.mayGoOn();
      if (stop) {
        results.push(...plan.steps.slice(index).map((s) => skippedStep(s)));
        return { status: 'failed', stack: plan.stack, planDigest: plan.digest, serial: this.#serial, resources: results, outputs: {}, error: stop };
      }
      try {
        results.push(await this.step(step, index));
      } catch (thrown) {
        return failed(index, index + 1, thrown);
      }
    }
    const failure = await this.deleteReplaced((at, thrown) => failed(at, plan.steps.length, thrown));
    if (failure) return failure;
    const outputs = this.evaluator('recorded').outputs();
    return { status: 'applied', stack: plan.stack, planDigest: plan.digest, serial: this.#serial, resources: results, outputs };
  }

  /** Deletes the old halves of this apply's replaces; a failure fails the replace step it belongs to. */
  private async deleteReplaced(failed: (index: number, thrown: unknown) => Omit<ApplyResult, 'startedAt' | 'finishedAt'>) {
    while (this.#replaced.length > 0) {
      const { index, resource } = this.#replaced[0] as Replaced;
      try {
        await this.context.cloud.delete(this.context.target, resource.id);
        this.#replaced.shift();
        await this.remove(resource);
      } catch (thrown) {
        return failed(index, thrown);
      }
    }
    return undefined;
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

  private async step(step: PlanStep, index: number): Promise<ResourceResult> {
    const { cloud, target } = this.context;
    const done = (status: ResourceResult['status'], id?: string): ResourceResult => {
      const inputs = step.op === 'delete' ? undefined : this.#resources.find((r) => r.id === id && r.pendingDelete !== true)?.inputs;
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
        ...(step.read ? { read: true as const } : {}),
      };
    };
    const old = step.id === undefined ? undefined : this.#resources.find((r) => r.id === step.id && r.urn === (step.oldUrn ?? step.urn));
    switch (step.op) {
      case 'same': {
        if (step.read) return done('unchanged', await this.recordRead(step, old));
        if (!old) return done('unchanged', step.id);
        // Options (protect, dependencies, a new urn from an alias) can change without the target changing.
        const inputs = this.inputsOf(step, old);
        await this.checkpointIfChanged(old, this.stateResource(step, old.id, inputs, outputsFor(inputs, old.id, generatedOutputs(step.type, old.outputs))));
        return done('unchanged', old.id);
      }
      case 'create': {
        const inputs = this.inputsOf(step);
        if (step.import !== undefined) {
          // Adopted: the target already holds it, as the plan checked; from now on it is the stack's.
          await cloud.adopt(target, step.import, step.urn);
          await this.checkpoint(this.stateResource(step, step.import, inputs, outputsFor(inputs, step.import, this.generate(step, inputs))), undefined);
          return done('succeeded', step.import);
        }
        const generated = this.generate(step, inputs);
        const created = await cloud.create(target, { scope: this.context.stack.tenant, urn: step.urn, type: step.type, properties: this.resolve(this.cloudInputsOf(step)) });
        await this.checkpoint(this.stateResource(step, created.id, inputs, outputsFor(inputs, created.id, generated)), undefined);
        return done('succeeded', created.id);
      }
      case 'update': {
        const inputs = this.inputsOf(step, old);
        const id = old?.id ?? step.id ?? '';
        await cloud.update(target, id, this.resolve(this.keepOld(step, this.cloudInputsOf(step), old)));
        await this.checkpoint(this.stateResource(step, id, inputs, outputsFor(inputs, id, old ? generatedOutputs(step.type, old.outputs) : {})), old);
        return done('succeeded', id);
      }
      case 'replace': {
        if (old && step.deleteBeforeReplace) {
          // Each half is checkpointed, so a failure between them leaves a state without the resource, which is
          // what the target then holds.
          if (step.retain === undefined) await cloud.delete(target, old.id);
          await this.remove(old);
        }
        const inputs = this.inputsOf(step);
        const generated = this.generate(step, inputs);
        const created = await cloud.create(target, { scope: this.context.stack.tenant, urn: step.urn, type: step.type, properties: this.resolve(this.cloudInputsOf(step)) });
        const replacement = this.stateResource(step, created.id, inputs, outputsFor(inputs, created.id, generated));
        if (old && !step.deleteBeforeReplace) {
          await this.checkpoint(replacement, old, step.retain === undefined ? { ...old, pendingDelete: true } : undefined);
          if (step.retain === undefined) this.#replaced.push({ index, resource: { ...old, pendingDelete: true } });
        } else {
          await this.checkpoint(replacement, undefined);
        }
        return done('succeeded', created.id);
      }
      case 'delete': {
        // A resource already gone (deleted out of band) is what the step wants; a retained one stays there.
        const gone = this.#resources.find((r) => r.id === step.id && r.urn === step.urn);
        if (gone) {
          if (step.retain === undefined && !step.read) await cloud.delete(target, gone.id);
          await this.remove(gone);
        }
        return done('succeeded');
      }
    }
  }

  /** A get: recorded with what the target holds, as the plan read it, so the next evaluations see its outputs. */
  private async recordRead(step: PlanStep, old: StateResource | undefined): Promise<string> {
    const found = this.context.reads.get(step.id as string);
    if (!found) throw new AppError('IAC.GET_NOT_FOUND', 'validation', `the target holds no resource ${step.id}`, { id: step.id });
    const resource: StateResource = { ...this.stateResource(step, found.id, step.inputs ?? {}, outputsFor(found.properties, found.id)), external: true };
    await this.checkpointIfChanged(old, resource);
    return found.id;
  }

  /** What the step's emulated provider computes (emulated-providers.ts), seeded by tenant, urn, inputs and fresh entropy. */
  private generate(step: PlanStep, inputs: JsonObject): JsonObject {
    const emulation = emulationOf(step.type);
    if (!emulation) return {};
    try {
      return emulation.generate(this.resolve(this.cloudInputsOf(step)) as JsonObject, { tenant: this.context.stack.tenant, urn: step.urn, inputs, entropy: randomBytes(32) }, this.context.clock.now());
    } catch (thrown) {
      throw new AppError('IAC.EMULATION_FAILED', 'validation', `${step.name} (${step.type}): ${ensureError(thrown).message}`, { urn: step.urn });
    }
  }

  /**
   * The step's inputs as the state records them, evaluated again now that its dependencies exist: the plan's
   * computed values become the ids just created; secret outputs of others stay masked. Program, config and state
   * are the ones the digest was checked against, so nothing else differs.
   */
  private inputsOf(step: PlanStep, old?: StateResource): JsonObject {
    return this.keepOld(step, this.evaluator('recorded').resourceInputs(this.declaration(step)), old);
  }

  /** The inputs as the target receives them: others' secret outputs as they are, references still unresolved. */
  private cloudInputsOf(step: PlanStep): JsonObject {
    return this.evaluator('real').resourceInputs(this.declaration(step));
  }

  /** `ignoreChanges` and held rules: an update keeps the state's value at their paths. */
  private keepOld(step: PlanStep, evaluated: JsonObject, old: StateResource | undefined): JsonObject {
    if (!old || (step.op !== 'update' && step.op !== 'same')) return evaluated;
    const declaration = this.declaration(step);
    return keepHeld(keepIgnored(evaluated, old.inputs, declaration.ignoreChanges), old.inputs, heldRulesOf(this.context.ignore, step.urn, declaration.type));
  }

  private declaration(step: PlanStep): ResourceDeclaration {
    return this.#declarations.get(step.name) as ResourceDeclaration;
  }

  /** Evaluates the program over the state so far: `recorded` masks secret outputs, `real` is for the target only. */
  private evaluator(mode: 'recorded' | 'real'): ProgramEvaluator {
    const { project, config } = this.context.program;
    return new ProgramEvaluator(
      project,
      config,
      (name) => {
        const resource = this.live(name);
        if (!resource) return {};
        return { ...(mode === 'real' ? resource.outputs : shownOutputs(resource.outputs, resource.secretOutputs ?? [])), urn: resource.urn };
      },
      evaluatorContext(this.context.program),
    );
  }

  /** The state's resource a program name is now (not an old half waiting for its delete). */
  private live(name: string): StateResource | undefined {
    return this.#resources.find((r) => r.name === name && r.pendingDelete !== true);
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

  /** The state's record of the step's resource, with the options the state keeps (absent when unused). */
  private stateResource(step: PlanStep, id: string, inputs: JsonObject, outputs: JsonObject): StateResource {
    const declaration = this.declaration(step);
    const options = declaration.options ?? {};
    const identityProvider = step.provider ?? (isProviderType(step.type) ? undefined : defaultProviderUrn(this.context.stack.stack, this.context.program.project.name, packageOf(step.type)));
    const secret = secretOutputsOf(declaration);
    const deletedWith = options.deletedWith === undefined ? undefined : this.live(options.deletedWith)?.urn;
    const trigger = options.replacementTrigger === undefined ? undefined : this.evaluator('recorded').evaluate(options.replacementTrigger, ['resources', step.name, 'options', 'replacementTrigger']);
    return {
      urn: step.urn,
      name: step.name,
      type: step.type,
      id,
      inputs,
      outputs,
      protect: step.protect,
      dependencies: step.dependencies,
      ...(step.parent ? { parent: step.parent } : {}),
      ...(identityProvider ? { provider: identityProvider } : {}),
      ...(options.retainOnDelete ? { retainOnDelete: true as const } : {}),
      ...(deletedWith ? { deletedWith } : {}),
      ...(secret.length > 0 ? { secretOutputs: secret } : {}),
      ...(trigger !== undefined ? { replacementTrigger: trigger } : {}),
      ...(step.version ? { version: step.version } : {}),
      ...(step.customTimeouts ? { customTimeouts: step.customTimeouts } : {}),
    };
  }

  private async checkpointIfChanged(old: StateResource | undefined, resource: StateResource): Promise<void> {
    if (old && canonicalJson(old as unknown as JsonValue) === canonicalJson(resource as unknown as JsonValue)) return;
    await this.checkpoint(resource, old);
  }

  /** Writes `resource` in place of `old` (or appended), and `also` (an old half) at the end. */
  private async checkpoint(resource: StateResource, old: StateResource | undefined, also?: StateResource): Promise<void> {
    const at = old ? this.#resources.indexOf(old) : -1;
    if (at >= 0) this.#resources[at] = resource;
    else this.#resources.push(resource);
    if (also) this.#resources.push(also);
    await this.write();
  }

  private async remove(resource: StateResource): Promise<void> {
    const at = this.#resources.findIndex((r) => r.id === resource.id && r.urn === resource.urn && (r.pendingDelete === true) === (resource.pendingDelete === true));
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

/** The local engine as the IaC engine port (iac-runner.ts): the local host's, never the deployed host's. */
export function localIacRunner(options: LocalEngineOptions): IacEngine {
  return createLocalEngine(options);
}
