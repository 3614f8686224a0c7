import { createHash } from 'node:crypto';
import { AppError } from '../../shared/platform/errors/app-error';
import {
  collectReferences,
  computed,
  invalidProject,
  isComputed,
  SECRET_MASK,
  formatPath,
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
} from '../../shared/platform/iac/iac-values';
import {
  changedPaths,
  heldIgnoreProblem,
  HIDDEN_VALUE,
  oldValuesAt,
  planCounts,
  planDigest,
  type HeldIgnoreRule,
  type Plan,
  type PlanStep,
  type RetainReason,
  type StackState,
  type StateResource,
} from '../../shared/platform/iac/plan';
import { computedOutputNames, computedSecretNames, withComputedOutputs } from './computed-outputs';
import { assertTypeAllowed, emulationOf, generatedOutputs, maskOutputs, type Emulation } from './emulated-providers';
import { ProgramEvaluator, projectGraph, topologicalOrder, type EvaluatorContext, type LoadedProgram, type ResourceDeclaration } from './pulumi-yaml';
import { stdInvoke } from './std-functions';
import { getRoots, isDuration, unsupportedBecause, type CustomTimeouts } from './pulumi-yaml-resource';
import { aliasUrns, resourceIdentities, type ResourceIdentity } from './resource-identity';

/**
 * The local engine's planner: desired resources (a loaded Pulumi YAML program) against a stack's state give one
 * step per resource (create | update | replace | delete | same), in an order that is safe to apply, and a digest
 * that an approval binds to (the plan model is the product's: shared/platform/iac/plan.ts). Pure: no I/O.
 */

/** A resource of the target as a plan reads it (for `get:` and `import`). */
export interface TargetResource {
  readonly id: string;
  readonly type: string;
  readonly properties: JsonObject;
}

/**
 * Thrown by `planStack` when it must read a resource of the target that `PlanInput.target` does not hold yet:
 * the caller reads it (null when the target has none for the stack's tenant) and plans again. Plans stay pure;
 * the engine does the I/O (local-engine.ts).
 */
export class TargetReadNeeded extends Error {
  constructor(readonly id: string) {
    super(`the plan needs the target's resource ${id}`);
  }
}

export interface PlanInput {
  readonly stack: string;
  readonly program: LoadedProgram;
  /** Undefined when the stack has no state yet. */
  readonly state: StackState | undefined;
  /** Operator ignore rules that hold on apply, over the program's own `ignoreChanges` (see `keepHeld`). */
  readonly ignore?: readonly HeldIgnoreRule[];
  /**
   * Target resources by id, as far as read: null for one the target does not have in the stack's tenant's scope.
   * An id the plan needs and this lacks throws `TargetReadNeeded`.
   */
  readonly target?: ReadonlyMap<string, TargetResource | null>;
}


/**
 * Plans `program` against `state`. Throws the project's plan errors (see pulumi-yaml.ts), `IAC.PROTECTED` when a
 * protected resource would be deleted or replaced, the get and import errors (`IAC.GET_NOT_FOUND`,
 * `IAC.IMPORT_NOT_FOUND`, `IAC.IMPORT_MISMATCH`, ...), `IAC.UNKNOWN_OUTPUT` for an output no provider here
 * computes, and `TargetReadNeeded`.
 */
export function planStack({ stack, program, state, ignore = [], target }: PlanInput): Plan {
  const { project } = program;
  for (const rule of ignore) {
    const problem = heldIgnoreProblem(rule.path);
    if (problem) throw invalidIgnoreRule(rule, problem);
  }
  const planner = new Planner(stack, program, state, ignore, target);
  const steps = [...planner.resourceSteps(), ...planner.deleteSteps()];
  const stackOutputs = planner.stackOutputs();
  const counts = planCounts(steps);
  const references = new Map<string, ValueReference>();
  // Only steps that send inputs to the target need their references resolved.
  for (const step of steps.filter((s) => (s.op === 'create' && s.import === undefined) || s.op === 'update' || s.op === 'replace')) {
    for (const reference of collectReferences(planner.inputsOf(step.name) ?? {})) references.set(referenceKey(reference), reference);
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

/**
 * The names of the secret outputs of a declared resource: its provider's (emulated-providers.ts, computed-outputs.ts)
 * and its `additionalSecretOutputs`.
 */
export function secretOutputsOf(declaration: ResourceDeclaration): string[] {
  return [...new Set([...(emulationOf(declaration.type)?.secret ?? []), ...computedSecretNames(declaration.type), ...(declaration.options?.additionalSecretOutputs ?? [])])];
}

/** Outputs as plans, states' inputs and receipts show them: secret outputs masked. */
export function shownOutputs(outputs: JsonObject, secret: readonly string[]): JsonObject {
  return maskOutputs(outputs, secret, SECRET_MASK);
}

/**
 * What the evaluations of a plan and its apply know besides the program: the stack's context (`${pulumi.*}`) and
 * the provider functions the local engine answers (the `std` functions; any other `fn::invoke` is UNSUPPORTED).
 */
export function evaluatorContext(program: LoadedProgram): EvaluatorContext {
  return { ...program.context, invoke: stdInvoke };
}

/** One planning: the program's resources against the state, in dependency order. */
class Planner {
  readonly #declarations: ReadonlyMap<string, ResourceDeclaration>;
  readonly #identities: ReadonlyMap<string, ResourceIdentity>;
  readonly #order: readonly string[];
  readonly #dependencies: ReadonlyMap<string, readonly string[]>;
  readonly #claimed: ReadonlyMap<string, StateResource>;
  /** Outputs as the evaluator sees them at plan time: secrets masked, what the apply creates computed. */
  readonly #outputs = new Map<string, JsonObject>();
  /** Inputs of the planned steps, not hidden (the step shows `hideDiffs` paths hidden). */
  readonly #inputs = new Map<string, JsonObject>();
  readonly #steps = new Map<string, PlanStep>();
  readonly #evaluator: ProgramEvaluator;

  constructor(
    private readonly stack: string,
    private readonly program: LoadedProgram,
    private readonly state: StackState | undefined,
    private readonly ignore: readonly HeldIgnoreRule[],
    private readonly target: ReadonlyMap<string, TargetResource | null> | undefined,
  ) {
    const { project, config } = program;
    this.#declarations = new Map(project.resources.map((r) => [r.name, r]));
    for (const d of project.resources) assertTypeAllowed(d.type, `resources.${d.name}.type`);
    this.#identities = resourceIdentities(stack, project.name, project.resources);
    const graph = projectGraph(project, config);
    // A get's id and state may name resources, which the project graph (properties only) does not see.
    const dependencies = new Map<string, readonly string[]>(graph.dependencies);
    const position = new Map(project.resources.map((r, i) => [r.name, i]));
    for (const d of project.resources) {
      const fromGet = d.get ? getRoots(d.get).filter((n) => this.#declarations.has(n) && n !== d.name) : [];
      if (fromGet.length === 0) continue;
      const all = new Set([...(graph.dependencies.get(d.name) ?? []), ...fromGet]);
      dependencies.set(d.name, [...all].sort((x, y) => (position.get(x) ?? 0) - (position.get(y) ?? 0)));
    }
    this.#dependencies = dependencies;
    this.#order = checkedOrder(topologicalOrder(project.resources.map((r) => r.name), dependencies), dependencies);
    this.#evaluator = new ProgramEvaluator(project, config, (name) => this.#outputs.get(name) ?? {}, evaluatorContext(program));
    this.#claimed = this.claimState();
  }

  /**
   * Which state resource each declaration is: the one with its urn; else, among the rest, one an alias names;
   * else one of its name whose urn differs only in its own type (a type change, planned as a replace).
   */
  private claimState(): Map<string, StateResource> {
    const live = (this.state?.resources ?? []).filter((r) => r.pendingDelete !== true);
    const byUrn = new Map(live.map((r) => [r.urn, r]));
    const taken = new Set<StateResource>();
    const claimed = new Map<string, StateResource>();
    const claim = (name: string, resource: StateResource | undefined) => {
      if (!resource || taken.has(resource) || claimed.has(name)) return;
      taken.add(resource);
      claimed.set(name, resource);
    };
    for (const name of this.#order) claim(name, byUrn.get(this.identity(name).urn));
    const byName = new Map<string, StateResource[]>();
    for (const r of live) byName.set(r.name, [...(byName.get(r.name) ?? []), r]);
    for (const name of this.#order) {
      if (claimed.has(name)) continue;
      const d = this.declaration(name);
      const context = { stack: this.stack, project: this.program.project.name };
      for (const urn of aliasUrns(d, this.#identities, context, (v, p) => this.evaluate(v, p))) claim(name, byUrn.get(urn));
      const identity = this.identity(name);
      const typeChanged = (byName.get(name) ?? []).find((r) => !taken.has(r) && r.type !== d.type && r.urn === identity.urn.replace(`${d.type}::`, `${r.type}::`));
      claim(name, typeChanged);
    }
    return claimed;
  }

  resourceSteps(): PlanStep[] {
    return this.#order.map((name) => {
      const step = this.planResource(this.declaration(name));
      this.#steps.set(name, step);
      return step;
    });
  }

  inputsOf(name: string): JsonObject | undefined {
    return this.#inputs.get(name);
  }

  stackOutputs(): JsonObject {
    return this.withOutputErrors(() => this.#evaluator.outputs());
  }

  private planResource(d: ResourceDeclaration): PlanStep {
    const identity = this.identity(d.name);
    const old = this.#claimed.get(d.name);
    const options = d.options ?? {};
    const common = {
      urn: identity.urn,
      name: d.name,
      type: d.type,
      dependencies: (this.#dependencies.get(d.name) ?? []).map((n) => this.identity(n).urn),
      protect: d.protect,
      ...(identity.parent ? { parent: identity.parent } : {}),
      ...(identity.provider ? { provider: identity.provider } : {}),
      ...(old && old.urn !== identity.urn ? { oldUrn: old.urn } : {}),
      ...(options.version ? { version: options.version } : {}),
      ...(options.customTimeouts ? { customTimeouts: this.customTimeouts(d) } : {}),
    };
    if (d.get) return this.planRead(d, common, old);
    const desired = this.withOutputErrors(() => this.#evaluator.resourceInputs(d));
    // The apply records the trigger of every resource: one it could not evaluate fails the plan, not the apply.
    if (options.replacementTrigger !== undefined && old?.replacementTrigger === undefined) this.evaluate(options.replacementTrigger, ['resources', d.name, 'options', 'replacementTrigger']);
    const secret = secretOutputsOf(d);
    const emulation = emulationOf(d.type);
    let step: PlanStep;
    let inputs = desired;
    if (!old) {
      if (options.import !== undefined) this.checkImport(d, desired, options.import);
      step = { ...common, op: 'create', changedPaths: [], inputs: desired, ...(options.import !== undefined ? { import: options.import } : {}) };
    } else if (old.external) {
      throw invalidProject(`resources.${d.name}: the stack reads ${old.urn} with get; it cannot manage it as well (remove the get first)`, { path: `resources.${d.name}` });
    } else if (old.type !== d.type) {
      step = { ...common, op: 'replace', id: old.id, oldType: old.type, changedPaths: changedPaths(old.inputs, desired), inputs: desired };
    } else {
      inputs = keepHeld(keepIgnored(desired, old.inputs, d.ignoreChanges), old.inputs, heldRulesOf(this.ignore, identity.urn, d.type));
      const changed = changedPaths(old.inputs, inputs);
      const because = this.replaceReason(d, old, changed, emulation);
      step = because
        ? { ...common, op: 'replace', id: old.id, changedPaths: changed, inputs, replaceBecause: because }
        : { ...common, op: changed.length > 0 ? 'update' : 'same', id: old.id, changedPaths: changed, inputs };
    }
    if (step.op === 'replace') {
      if (old?.protect || d.protect) throw protectedResource(old as StateResource, 'replace');
      step = { ...step, ...(options.deleteBeforeReplace ? { deleteBeforeReplace: true as const } : {}), ...(options.retainOnDelete ? { retain: 'retainOnDelete' as const } : {}) };
    }
    this.#inputs.set(d.name, inputs);
    // A resource that keeps its id exposes it now; a new or replaced one only once the apply has created it.
    const kept = step.op === 'same' || step.op === 'update';
    const id = kept ? (step.id as string) : step.import !== undefined ? step.import : computed(`\${${d.name}.id}`);
    const generated = kept && old ? generatedOutputs(d.type, old.outputs) : Object.fromEntries((emulation?.outputs ?? []).map((o) => [o, computed(`\${${d.name}.${o}}`)]));
    const context = { tenant: this.program.context.organization, urn: identity.urn, name: d.name, config: this.program.config };
    // The cloud's outputs (computed-outputs.ts) are known from the inputs; the id of what the apply creates is not
    // (as in Pulumi's preview), and a kept resource keeps the id it has.
    const outputs = { ...withComputedOutputs(d.type, { ...inputs, id, ...generated }, context), id: kept ? (old?.outputs.id ?? id) : id };
    this.#outputs.set(d.name, { ...shownOutputs(outputs, secret), urn: identity.urn });
    const oldValues = old && (step.op === 'update' || step.op === 'replace') ? oldValuesAt(old.inputs, step.changedPaths, { secret: [...secret, ...(old.secretOutputs ?? [])], hidden: options.hideDiffs ?? [] }) : undefined;
    return hideDiffs(oldValues ? { ...step, oldValues } : step, options.hideDiffs ?? []);
  }

  /** The custom timeouts evaluated: each must be a duration. */
  private customTimeouts(d: ResourceDeclaration): CustomTimeouts {
    const path = ['resources', d.name, 'options', 'customTimeouts'];
    const evaluated = this.evaluate((d.options?.customTimeouts ?? {}), path) as JsonObject;
    for (const [key, value] of Object.entries(evaluated)) {
      if (!isDuration(value)) throw invalidProject(`${formatPath([...path, key])} must be a duration such as 30s, 5m or 1h30m`, { path: formatPath([...path, key]) });
    }
    return evaluated;
  }

  /** Why an update must be a replace, or undefined. */
  private replaceReason(d: ResourceDeclaration, old: StateResource, changed: readonly string[], emulation: Emulation | undefined): string | undefined {
    const options = d.options ?? {};
    const forcing = (options.replaceOnChanges ?? []).find((entry) => changed.some((path) => pathCovers(entry, path)));
    if (forcing !== undefined) return `replaceOnChanges ${forcing}`;
    if (emulation?.replaceOnChange && changed.length > 0) return `${d.type} replaces on any change`;
    if (options.replacementTrigger !== undefined && old.replacementTrigger !== undefined) {
      const trigger = this.evaluate(options.replacementTrigger, ['resources', d.name, 'options', 'replacementTrigger']);
      if (!jsonEqual(trigger, old.replacementTrigger)) return 'replacementTrigger';
    }
    const by = (options.replaceWith ?? []).find((n) => this.#steps.get(n)?.op === 'replace');
    if (by !== undefined) return `replaceWith ${by}`;
    const provider = this.identity(d.name).providerOfRecord;
    // A resource moved to another provider is another provider's resource: Pulumi replaces it.
    if (old.provider !== undefined && provider !== undefined && !this.isSameProvider(old.provider, provider)) return `provider ${provider}`;
    return undefined;
  }

  /** The provider the state recorded is `provider`, or was renamed to it (an alias carried it over). */
  private isSameProvider(recorded: string, provider: string): boolean {
    if (recorded === provider) return true;
    const renamed = [...this.#claimed.entries()].find(([, r]) => r.urn === recorded)?.[0];
    return renamed !== undefined && this.identity(renamed).urn === provider;
  }

  /** A get: the target's resource by id, its outputs what the target holds. */
  private planRead(d: ResourceDeclaration, common: Omit<PlanStep, 'op' | 'changedPaths'>, old: StateResource | undefined): PlanStep {
    const get = d.get as NonNullable<ResourceDeclaration['get']>;
    const path = `resources.${d.name}.get`;
    if (old && !old.external) throw invalidProject(`${path}: ${d.name} is managed by this stack; it cannot become a get (remove it first)`, { path });
    const id = this.evaluate(get.id, ['resources', d.name, 'get', 'id']);
    if (isComputed(id)) throw unsupportedBecause('get.id', `${path}.id`, 'the id must be known at plan time; an output of a resource this plan creates is not');
    if (typeof id !== 'string') throw invalidProject(`${path}.id must be text (the id of a resource the target holds)`, { path: `${path}.id` });
    const found = this.read(id);
    if (!found) throw new AppError('IAC.GET_NOT_FOUND', 'validation', `${path}.id: the target holds no resource ${id} for this tenant`, { path: `${path}.id`, id });
    if (found.type !== d.type) {
      throw new AppError('IAC.GET_TYPE_MISMATCH', 'validation', `${path}.id: ${id} is a ${found.type}, not a ${d.type}`, { path: `${path}.id`, id, found: found.type, declared: d.type });
    }
    const state = this.evaluate(get.state, ['resources', d.name, 'get', 'state']) as JsonObject;
    const differing = Object.keys(state).filter((k) => !isOpaque(state[k]) && !jsonEqual(state[k], found.properties[k])).sort();
    if (differing.length > 0) {
      throw new AppError('IAC.GET_STATE_MISMATCH', 'validation', `${path}.state: ${id} holds other values at ${differing.join(', ')}`, { path: `${path}.state`, id, paths: differing });
    }
    this.#outputs.set(d.name, { ...shownOutputs({ ...found.properties, id }, secretOutputsOf(d)), urn: common.urn });
    return { ...common, op: 'same', id, changedPaths: [], inputs: state, read: true };
  }

  /** An import must find the resource in the target, of the type, holding what the program says. */
  private checkImport(d: ResourceDeclaration, desired: JsonObject, id: string): void {
    const path = `resources.${d.name}.options.import`;
    const found = this.read(id);
    if (!found) throw new AppError('IAC.IMPORT_NOT_FOUND', 'validation', `${path}: the target holds no resource ${id} for this tenant`, { path, id });
    if (found.type !== d.type) throw new AppError('IAC.IMPORT_MISMATCH', 'validation', `${path}: ${id} is a ${found.type}, not a ${d.type}`, { path, id, found: found.type, declared: d.type });
    const managed = (this.state?.resources ?? []).find((r) => r.id === id);
    if (managed) throw new AppError('IAC.IMPORT_MISMATCH', 'validation', `${path}: ${id} is already this stack's ${managed.name}`, { path, id, urn: managed.urn });
    // Where the program holds a reference or a computed value, what the target holds cannot be compared.
    const held = keepIgnored(refreshedInputs(desired, found.properties), desired, d.ignoreChanges);
    const differing = changedPaths(held, keepIgnored(desired, desired, d.ignoreChanges));
    if (differing.length > 0) {
      throw new AppError('IAC.IMPORT_MISMATCH', 'validation', `${path}: ${id} holds other values than the program at ${differing.join(', ')}; make the properties what the target holds`, {
        path,
        id,
        paths: differing,
      });
    }
  }

  private read(id: string): TargetResource | null {
    const found = this.target?.get(id);
    if (found === undefined) throw new TargetReadNeeded(id);
    return found;
  }

  deleteSteps(): PlanStep[] {
    const claimed = new Set(this.#claimed.values());
    const gone = (this.state?.resources ?? []).filter((r) => !claimed.has(r));
    const deleted = new Set(gone.map((r) => r.urn));
    const key = (r: StateResource) => `${r.urn}#${r.id}`;
    const byUrn = new Map(gone.map((r) => [r.urn, key(r)]));
    const goneDeps = new Map(gone.map((r) => [key(r), r.dependencies.flatMap((u) => byUrn.get(u) ?? [])]));
    const byKey = new Map(gone.map((r) => [key(r), r]));
    // A resource goes before what it depends on: the reverse of the order in which they were created.
    return topologicalOrder(gone.map(key), goneDeps)
      .reverse()
      .map((k) => {
        const old = byKey.get(k) as StateResource;
        if (old.protect) throw protectedResource(old, 'delete');
        const retain: RetainReason | undefined = old.retainOnDelete ? 'retainOnDelete' : old.deletedWith !== undefined && deleted.has(old.deletedWith) ? 'deletedWith' : undefined;
        return {
          urn: old.urn,
          name: old.name,
          type: old.type,
          op: 'delete' as const,
          id: old.id,
          changedPaths: [],
          dependencies: old.dependencies,
          protect: old.protect,
          ...(retain ? { retain } : {}),
          ...(old.external ? { read: true as const } : {}),
        };
      });
  }

  private declaration(name: string): ResourceDeclaration {
    return this.#declarations.get(name) as ResourceDeclaration;
  }

  private identity(name: string): ResourceIdentity {
    return this.#identities.get(name) as ResourceIdentity;
  }

  private evaluate(value: JsonValue, path: PathSegment[]): JsonValue {
    return this.withOutputErrors(() => this.#evaluator.evaluate(value, path));
  }

  /**
   * An unknown member of a resource's outputs, at any depth (`${bucket.arn}`, `${config.metadata.name}` where the
   * inputs have `metadata` without `name`), is `IAC.UNKNOWN_OUTPUT`, naming the resource, the output and the type.
   */
  private withOutputErrors<T>(work: () => T): T {
    try {
      return work();
    } catch (error) {
      if (!(error instanceof AppError) || error.code !== 'IAC.UNKNOWN_REFERENCE') throw error;
      const reference = typeof error.details.reference === 'string' ? parsePath(error.details.reference) : undefined;
      const [root, ...members] = reference ?? [];
      const d = typeof root === 'string' ? this.#declarations.get(root) : undefined;
      if (!d || typeof members[0] !== 'string' || !this.#outputs.get(d.name)) throw error;
      throw unknownOutput(d, members, error.details.path);
    }
  }
}

/**
 * `order`, checked to be a dependency order: the project graph has refused cycles among properties and options,
 * but a get's references (which it does not see) can still close one: `IAC.PLAN_CYCLE`.
 */
function checkedOrder(order: readonly string[], dependencies: ReadonlyMap<string, readonly string[]>): string[] {
  const placed = new Set<string>();
  for (const name of order) {
    const missing = (dependencies.get(name) ?? []).find((d) => !placed.has(d));
    if (missing !== undefined) throw new AppError('IAC.PLAN_CYCLE', 'validation', `the project has a dependency cycle through ${name} and ${missing}`, { path: `resources.${name}` });
    placed.add(name);
  }
  return [...order];
}

function unknownOutput(d: ResourceDeclaration, members: readonly PathSegment[], path: unknown): AppError {
  const emulation = emulationOf(d.type);
  const output = formatPath(members);
  const why = emulation?.notEmulated.includes(String(members[0]))
    ? `the local engine does not emulate ${d.type}'s ${output}`
    : emulation
      ? `${d.type} has the outputs ${[...emulation.outputs, 'and its inputs'].join(', ')}`
      : computedOutputNames(d.type).length > 0
        ? `the local engine computes ${computedOutputNames(d.type).join(', ')} of ${d.type} besides its inputs, and does not emulate ${output}`
        : `the local engine knows only the inputs and id of ${d.type} (no provider computes its outputs here)`;
  return new AppError('IAC.UNKNOWN_OUTPUT', 'validation', `${typeof path === 'string' ? `${path}: ` : ''}\${${d.name}.${output}}: ${d.name} (${d.type}) has no output ${output}: ${why}`, {
    ...(typeof path === 'string' ? { path } : {}),
    resource: d.name,
    output,
    type: d.type,
  });
}

/** A replaceOnChanges entry covers a changed path at, under or above it; `*` covers any, `[*]` any index. */
function pathCovers(entry: string, changed: string): boolean {
  if (entry === '*') return true;
  const pattern = new RegExp(`^${entry.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\\\[\\\*\\\]/g, '\\[\\d+\\]')}`);
  const match = pattern.exec(changed);
  if (match && (changed.length === match[0].length || changed[match[0].length] === '.' || changed[match[0].length] === '[')) return true;
  // A change above the entry (the whole `tags` replaced) changes it too.
  return entry.startsWith(changed) && (entry[changed.length] === '.' || entry[changed.length] === '[');
}

/** The step with `hideDiffs` paths shown as `[hidden]`; their values still bind the digest through a hash. */
function hideDiffs(step: PlanStep, paths: readonly string[]): PlanStep {
  if (paths.length === 0 || !step.inputs) return step;
  let shown: JsonValue = step.inputs;
  const hidden: JsonValue[] = [];
  for (const path of paths) {
    const segments = parsePath(path) as PathSegment[];
    const value = readPath(step.inputs, segments);
    hidden.push(value ?? null);
    if (value !== undefined) shown = writePath(shown, segments, HIDDEN_VALUE);
  }
  const hiddenDigest = `sha256:${createHash('sha256').update(canonicalJson(hidden)).digest('hex')}`;
  return { ...step, inputs: shown as JsonObject, hiddenPaths: paths, hiddenDigest };
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
