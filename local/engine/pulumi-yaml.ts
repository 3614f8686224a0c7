import { posix } from 'node:path';
import { AppError } from '../../shared/platform/errors/app-error';
import {
  asValueReference,
  canonicalJson,
  collectReferences,
  computed,
  formatPath,
  invalidProject,
  isComputed,
  isPlainObject,
  isSecretValue,
  MAX_PATH_INDEX,
  replaceSecrets,
  SECRET_MASK,
  secretValue,
  unsupported,
  type JsonObject,
  type JsonValue,
  type PathSegment,
} from '../../shared/platform/iac/iac-values';
import { applyFunction, checkCall, functionCall, invokeArguments, scanValue, type FunctionCall, type FunctionHost } from '../../shared/platform/iac/pulumi-yaml-functions';
import { expandTypeToken, OPTION_NAMES, parseResource, RESOURCE_MEMBERS, TIMEOUT_KEYS, type ResourceDeclaration } from './pulumi-yaml-resource';
import { parseDeclarations, readStackConfig, resolveConfig, type ConfigDeclaration, type ResolvedConfig } from './pulumi-yaml-config';
import { canonical, canonicalKeys, findProgram, located, optionalMap, parseYamlSource, type ProjectFiles, type SourceFile } from '../../shared/platform/iac/pulumi-yaml-source';

export type { ResourceDeclaration } from './pulumi-yaml-resource';
export type { ProjectFiles, SourceFile } from '../../shared/platform/iac/pulumi-yaml-source';
export type { ConfigDeclaration, ConfigType, ResolvedConfig } from './pulumi-yaml-config';
export { readStackConfig, resolveConfig } from './pulumi-yaml-config';
export type { ConfigOrigin, StackConfig } from './pulumi-yaml-config';

/**
 * The Pulumi YAML project model of the local engine, read as the Pulumi YAML language host reads it: `Pulumi.yaml`
 * (the project: name, runtime, `main`, project config) and the program (`Main.json`, `Main.yaml` or `Pulumi.yaml`
 * itself, in the folder `main` names: config declarations, variables, resources with type / properties / options,
 * outputs), `Pulumi.<stack>.yaml` (config values), and the evaluation of expressions: `${...}` interpolations and
 * the built-in functions (pulumi-yaml-functions.ts). Pure: text in, values out, no I/O.
 *
 * Plan errors are AppErrors (kind `validation`) with stable codes, the offending path in `details.path`, and the
 * file and line where that path is written (`details.file`, `details.line`, the message starting `Main.yaml:12: `):
 * `IAC.INVALID_PROJECT` (malformed document), `IAC.UNSUPPORTED` (a construct the engine does not implement),
 * `IAC.INVALID_CONFIG`, `IAC.MISSING_CONFIG`, `IAC.UNKNOWN_REFERENCE`, `IAC.PLAN_CYCLE`, `IAC.INVALID_INTERPOLATION`,
 * `IAC.REFERENCE_IN_TEXT`, `IAC.INVALID_FUNCTION`.
 */

export interface PulumiProject {
  readonly name: string;
  /** In declaration order: the project file's, then the program file's (a key may be declared in both). */
  readonly config: readonly ConfigDeclaration[];
  /** As written, in declaration order. */
  readonly variables: Readonly<Record<string, JsonValue>>;
  /** In declaration order. */
  readonly resources: readonly ResourceDeclaration[];
  readonly outputs: Readonly<Record<string, JsonValue>>;
  /** The project folder's files, which `fn::readFile` and the file assets read. */
  readonly files: ProjectFiles;
  /** The program folder inside the project folder: `''`, or `src/` for `main: src`. File functions start there. */
  readonly programFolder: string;
  /** Where each value was written (the program file first, then the project file), for errors. */
  readonly sources: readonly SourceFile[];
}


/**
 * What `${pulumi.*}` gives a program. The program never runs on the host, and its runner works in a fresh folder,
 * so the folders are fixed paths rather than any machine's: equal programs plan equal values on every host.
 */
export interface ProgramContext {
  readonly stack: string;
  /** The stack's tenant (Pulumi's organization); `organization` when not known, as Pulumi's self-managed backends name it. */
  readonly organization: string;
  /** The project folder as a runner sees it: `/workspace`. */
  readonly rootDirectory: string;
  /** The program folder (where the language host runs): the root directory, or `main` inside it. */
  readonly cwd: string;
}

export const DEFAULT_ORGANIZATION = 'organization';
export const ROOT_DIRECTORY = '/workspace';

/** A project ready to plan: its model, its stack's config (overrides applied), and what `${pulumi.*}` is. */
export interface LoadedProgram {
  readonly project: PulumiProject;
  readonly config: ResolvedConfig;
  readonly context: ProgramContext;
}

export interface LoadOptions {
  /** The stack's tenant, `${pulumi.organization}`. Default `organization`. */
  readonly organization?: string;
}

/**
 * Reads the project from `files` (every file of the project folder, by relative path): `Pulumi.yaml` (or `.yml`), the
 * program it points at, and `Pulumi.<stack>.yaml` (optional), and applies `overrides` (config set by the caller, e.g.
 * a pool's new size) over the stack file's values.
 */
export function loadProgram(files: ProjectFiles, stack: string, overrides: Readonly<Record<string, JsonValue>> = {}, options: LoadOptions = {}): LoadedProgram {
  const projectFile = files['Pulumi.yaml'] !== undefined ? 'Pulumi.yaml' : files['Pulumi.yml'] !== undefined ? 'Pulumi.yml' : undefined;
  if (projectFile === undefined) throw invalidProject('the project has no Pulumi.yaml', { path: 'Pulumi.yaml', file: 'Pulumi.yaml' });
  const project = parseProject(files, projectFile);
  const stackFile = files[`Pulumi.${stack}.yaml`] !== undefined || files[`Pulumi.${stack}.yml`] === undefined ? `Pulumi.${stack}.yaml` : `Pulumi.${stack}.yml`;
  const stackText = files[stackFile];
  const stackConfig = stackText === undefined ? undefined : readStackConfig(stackText, project.name, stackFile);
  // The stack file last: a declaration's path (`config.size`) is found in the project first; a value's error names its file.
  const sources = [...project.sources, ...(stackConfig ? [stackConfig.source] : [])];
  const config = located(sources, () => resolveConfig(project, stackConfig?.values ?? {}, overrides, stackConfig?.origins ?? {}));
  const context: ProgramContext = {
    stack,
    organization: options.organization ?? DEFAULT_ORGANIZATION,
    rootDirectory: ROOT_DIRECTORY,
    cwd: programCwd(ROOT_DIRECTORY, project.programFolder),
  };
  return { project, config, context };
}

function programCwd(rootDirectory: string, programFolder: string): string {
  return posix.join(rootDirectory, programFolder).replace(/(?<=.)\/$/, '');
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing

/** Reserved for `${pulumi.stack}` and the like (pulumi-yaml sort.go `checkUniqueNode`). */
const PULUMI = 'pulumi';

const TEMPLATE_KEYS = canonical(['name', 'namespace', 'description', 'version', 'pulumi', 'configuration', 'config', 'variables', 'resources', 'outputs', 'components']);
const RESOURCE_FIELDS = canonical(RESOURCE_MEMBERS);
const OPTION_FIELDS = canonical(OPTION_NAMES);
const GET_FIELDS = canonical(['id', 'state']);
const TIMEOUT_FIELDS = canonical(TIMEOUT_KEYS);

/** A resource as `parseResource` reads it: its fields, options, `get` and `customTimeouts` keys canonical. */
function canonicalResource(value: JsonValue, path: string): JsonValue {
  if (!isPlainObject(value)) return value;
  const resource = { ...canonicalKeys(value, RESOURCE_FIELDS, path) };
  if (isPlainObject(resource.options)) {
    const options = { ...canonicalKeys(resource.options, OPTION_FIELDS, `${path}.options`) };
    if (isPlainObject(options.customTimeouts)) options.customTimeouts = canonicalKeys(options.customTimeouts, TIMEOUT_FIELDS, `${path}.options.customTimeouts`);
    resource.options = options;
  }
  if (isPlainObject(resource.get)) resource.get = canonicalKeys(resource.get, GET_FIELDS, `${path}.get`);
  return resource;
}

/** The project from the project folder's files: `projectFile` and the program file it leads to. */
export function parseProject(files: ProjectFiles, projectFile = 'Pulumi.yaml'): PulumiProject {
  const projectText = files[projectFile];
  if (projectText === undefined) throw invalidProject(`the project has no ${projectFile}`, { path: projectFile, file: projectFile });
  const { value: projectDocument, source: projectSource } = parseYamlSource(projectText, projectFile);
  const { name, main } = located([projectSource], () => {
    if (!isPlainObject(projectDocument)) throw invalidProject(`${projectFile} must be a mapping`, { path: projectFile });
    const projectName = projectDocument.name;
    if (typeof projectName !== 'string' || projectName.trim() === '') throw invalidProject(`${projectFile}: name is required`, { path: 'name' });
    const runtime = isPlainObject(projectDocument.runtime) ? projectDocument.runtime.name : projectDocument.runtime;
    if (runtime !== 'yaml') {
      throw invalidProject(`${projectFile}: the local engine evaluates runtime: yaml projects only (found ${JSON.stringify(runtime ?? null)})`, { path: 'runtime' });
    }
    const runtimeOptions = isPlainObject(projectDocument.runtime) ? projectDocument.runtime.options : undefined;
    for (const option of Object.keys(isPlainObject(runtimeOptions) ? runtimeOptions : {})) {
      // `compiler` makes the program the output of a command (CUE, jsonnet): Pulumi.yaml's own program is not it.
      throw unsupported(`runtime option ${option}`, `runtime.options.${option}`);
    }
    return { name: projectName, main: projectDocument.main };
  });
  const { programFile } = located([projectSource], () => findProgram(files, projectFile, main));
  const programFolder = programFile.includes('/') ? programFile.slice(0, programFile.lastIndexOf('/') + 1) : '';
  if (programFile === projectFile) {
    const sources = [projectSource];
    return located(sources, () => buildProject({ name, files, programFolder, sources, program: projectDocument as JsonObject, projectConfig: undefined, programFile }));
  }
  const { value: programDocument, source: programSource } = parseYamlSource(files[programFile] ?? '', programFile);
  const sources = [programSource, projectSource];
  return located(sources, () => {
    if (programDocument !== null && !isPlainObject(programDocument)) throw invalidProject(`${programFile} must be a mapping`, { path: programFile, file: programFile });
    const projectSections = canonicalKeys(projectDocument as JsonObject, TEMPLATE_KEYS, '');
    for (const section of ['variables', 'resources', 'outputs'] as const) {
      // Pulumi YAML reads the program from the program file alone: these would be ignored, and the plan would not
      // be what the project says.
      if (projectSections[section] !== undefined) {
        throw invalidProject(`${projectFile}: ${section} is ignored by Pulumi YAML when the program is ${programFile}; move it there`, { path: section, file: projectFile });
      }
    }
    const programSections = canonicalKeys(programDocument ?? {}, TEMPLATE_KEYS, '');
    for (const key of Object.keys(programSections)) {
      if (!TEMPLATE_KEYS.has(key.toLowerCase())) throw invalidProject(`${programFile}: ${key} is not a key of a Pulumi YAML program`, { path: key, file: programFile });
    }
    return buildProject({ name, files, programFolder, sources, program: programSections, projectConfig: optionalMap(projectSections, 'config'), programFile });
  });
}

interface ProjectParts {
  readonly name: string;
  readonly files: ProjectFiles;
  readonly programFolder: string;
  readonly sources: readonly SourceFile[];
  /** The program's document (Pulumi.yaml's own when it is the program). */
  readonly program: JsonObject;
  /** Pulumi.yaml's `config` when the program is another file: the project's config, which the CLI reads. */
  readonly projectConfig: JsonObject | undefined;
  readonly programFile: string;
}

function buildProject({ name, files, programFolder, sources, program, projectConfig, programFile }: ProjectParts): PulumiProject {
  const document = canonicalKeys(program, TEMPLATE_KEYS, '');
  const components = optionalMap(document, 'components');
  if (Object.keys(components).length > 0) throw unsupported('components', 'components', { file: programFile });
  const pulumi = optionalMap(document, 'pulumi');
  for (const key of Object.keys(pulumi)) {
    // requiredVersion asks for a Pulumi CLI version; the local engine is no CLI, and a plan is the same at any version.
    if (key.toLowerCase() !== 'requiredversion') throw unsupported(`pulumi.${key}`, `pulumi.${key}`);
  }
  const config = [
    ...(projectConfig ? parseDeclarations(projectConfig, name, 'config') : []),
    ...parseDeclarations(optionalMap(document, 'config'), name, 'config'),
  ];
  // `configuration` is the older spelling; `config` wins for a key in both (ast/template.go `GetConfig`).
  const declared = new Set(config.map((c) => c.key));
  config.push(...parseDeclarations(optionalMap(document, 'configuration'), name, 'configuration').filter((c) => !declared.has(c.key)));
  const variables = optionalMap(document, 'variables');
  const outputs = optionalMap(document, 'outputs');
  const resources = Object.entries(optionalMap(document, 'resources')).map(([n, v]) => parseResource(n, canonicalResource(v, `resources.${n}`)));

  const taken = new Map<string, string>();
  for (const [kind, names] of [
    ['resources', resources.map((r) => r.name)],
    ['variables', Object.keys(variables)],
  ] as const) {
    for (const n of names) {
      if (n === PULUMI) throw invalidProject(`${kind}.${n}: pulumi is a reserved name`, { path: `${kind}.${n}` });
      // Any name Pulumi YAML takes (`index.html` too: `${["index.html"]}` refers to it); an empty one names nothing.
      if (n.trim() === '') throw invalidProject(`${kind}: a name must not be empty`, { path: kind });
      const other = taken.get(n);
      if (other) throw invalidProject(`${kind}.${n}: the name is also used in ${other}`, { path: `${kind}.${n}` });
      taken.set(n, kind);
    }
  }
  for (const declaration of config) {
    const plain = declaration.key.startsWith(`${name}:`) ? declaration.key.slice(name.length + 1) : undefined;
    if (plain === PULUMI) throw invalidProject(`config.${plain}: pulumi is a reserved name`, { path: `config.${plain}` });
    const other = plain === undefined ? undefined : taken.get(plain);
    // `${key}` must name one thing: a config key may not share its name with a resource or a variable.
    if (other) throw invalidProject(`config.${plain}: the name is also used in ${other}`, { path: `config.${plain}` });
  }

  for (const [key, value] of Object.entries(variables)) checkExpressions(value, ['variables', key]);
  for (const resource of resources) {
    for (const [key, value] of Object.entries(resource.properties)) checkExpressions(value, ['resources', resource.name, 'properties', key]);
  }
  for (const [key, value] of Object.entries(outputs)) checkExpressions(value, ['outputs', key]);
  return { name, config, variables, resources, outputs, files, programFolder, sources };
}



// ---------------------------------------------------------------------------------------------------------------
// Interpolation

interface Interpolation {
  /** As written between `${` and `}`. */
  readonly expression: string;
  /** The root (a resource, variable or config key, or `pulumi`), then property names and list indexes. */
  readonly segments: readonly PathSegment[];
}

/**
 * A string split into literal text and `${...}` accesses as pulumi-yaml reads it (ast/interpolation.go,
 * ast/property.go): `$$` is a literal `$`; an access is `.name`, `["key"]` (with `\"` inside) and `[0]`, where a
 * name is anything up to the next `.`, `[` or `}` (so `${aws:region}` is one name).
 */
function scan(text: string, path: readonly PathSegment[]): (string | Interpolation)[] {
  const parts: (string | Interpolation)[] = [];
  let literal = '';
  let i = 0;
  const malformed = (why: string) => invalidProject(`${formatPath(path)}: ${why} in ${JSON.stringify(text)}`, { path: formatPath(path) });
  while (i < text.length) {
    if (text.startsWith('$$', i)) {
      literal += '$';
      i += 2;
    } else if (text.startsWith('${', i)) {
      const start = i + 2;
      const segments: PathSegment[] = [];
      let j = start;
      for (;;) {
        const c = text[j];
        if (c === undefined) throw malformed('unterminated interpolation');
        if (c === '}') break;
        if (c === '.') {
          j++;
        } else if (c === '[' && text[j + 1] === '"') {
          let key = '';
          let k = j + 2;
          for (;;) {
            const d = text[k];
            if (d === undefined) throw malformed('missing closing quote in property name');
            if (d === '"') break;
            if (d === '\\' && text[k + 1] === '"') {
              key += '"';
              k += 2;
            } else {
              key += d;
              k++;
            }
          }
          if (text[k + 1] !== ']') throw malformed('missing closing bracket in property access');
          segments.push(key);
          j = k + 2;
        } else if (c === '[') {
          const close = text.indexOf(']', j);
          if (close < 0) throw malformed('missing closing bracket in list index');
          const index = text.slice(j + 1, close);
          if (!/^[+-]?\d+$/.test(index)) throw malformed('invalid list index');
          if (segments.length === 0) throw malformed('the root property must be a string subscript or a name');
          const n = Number(index);
          if (n > MAX_PATH_INDEX) throw malformed(`a list index past ${MAX_PATH_INDEX}`);
          segments.push(n);
          j = close + 1;
        } else {
          let k = j;
          while (k < text.length && text[k] !== '.' && text[k] !== '[' && text[k] !== '}') k++;
          segments.push(text.slice(j, k));
          j = k;
        }
      }
      if (segments.length === 0 || segments[0] === '') throw malformed('an empty interpolation');
      if (literal) parts.push(literal);
      literal = '';
      parts.push({ expression: text.slice(start, j), segments });
      i = j + 1;
    } else {
      literal += text[i];
      i++;
    }
  }
  if (literal || parts.length === 0) parts.push(literal);
  return parts;
}

/**
 * Walks a value as written: checks every interpolation parses and every function call is one Pulumi YAML has, with
 * arguments of its shape, so a malformed program fails before anything is evaluated.
 */
function checkExpressions(value: JsonValue, path: PathSegment[]): void {
  visitInterpolations(value, path, () => undefined);
}

/** Every interpolation in a value as written, in map keys and function arguments too. */
function visitInterpolations(value: JsonValue, path: PathSegment[], visit: (i: Interpolation, path: readonly PathSegment[]) => void): void {
  if (typeof value === 'string') {
    for (const part of scan(value, path)) if (typeof part !== 'string') visit(part, path);
  } else if (Array.isArray(value)) {
    (value as readonly JsonValue[]).forEach((item, i) => visitInterpolations(item, [...path, i], visit));
  } else if (isPlainObject(value)) {
    if (asValueReference(value)) return;
    const call = functionCall(value, path);
    if (call) {
      checkCall(call, path);
      visitInterpolations(call.args, [...path, call.key], visit);
      return;
    }
    for (const [k, v] of Object.entries(value)) {
      for (const part of scan(k, [...path, k])) if (typeof part !== 'string') visit(part, [...path, k]);
      visitInterpolations(v, [...path, k], visit);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Dependency graph

export interface ProjectGraph {
  /** Resource names, each after every resource it depends on; ties keep declaration order. */
  readonly order: readonly string[];
  /** For each resource, the resources it depends on (directly, through variables, and by dependsOn). */
  readonly dependencies: ReadonlyMap<string, readonly string[]>;
}

type NodeKey = `resources.${string}` | `variables.${string}`;

/**
 * Resolves every interpolation root of the project to a resource, a variable, a config key or `pulumi`, and orders
 * the resources. An unknown root is `IAC.UNKNOWN_REFERENCE`, a loop among resources and variables `IAC.PLAN_CYCLE`.
 */
export function projectGraph(project: PulumiProject, config: ResolvedConfig): ProjectGraph {
  return located(project.sources, () => buildGraph(project, config));
}

function buildGraph(project: PulumiProject, config: ResolvedConfig): ProjectGraph {
  const resources = new Map(project.resources.map((r) => [r.name, r]));
  const edges = new Map<NodeKey, Set<NodeKey>>();
  const known = (root: string) => root === PULUMI || configKey(project, config, root) !== undefined;
  const link = (from: NodeKey, root: string, path: readonly PathSegment[], expression: string) => {
    const target: NodeKey | undefined = resources.has(root) ? `resources.${root}` : Object.hasOwn(project.variables, root) ? `variables.${root}` : undefined;
    if (target) edges.get(from)?.add(target);
    else if (!known(root)) throw unknownReference(path, expression);
  };
  for (const name of Object.keys(project.variables)) edges.set(`variables.${name}`, new Set());
  for (const resource of project.resources) edges.set(`resources.${resource.name}`, new Set());
  for (const [name, value] of Object.entries(project.variables)) {
    visitInterpolations(value, ['variables', name], (i, path) => link(`variables.${name}`, String(i.segments[0]), path, i.expression));
  }
  for (const resource of project.resources) {
    const from: NodeKey = `resources.${resource.name}`;
    for (const [key, value] of Object.entries(resource.properties)) {
      visitInterpolations(value, ['resources', resource.name, 'properties', key], (i, path) => link(from, String(i.segments[0]), path, i.expression));
    }
    resource.dependsOn.forEach((name, i) => {
      const path = ['resources', resource.name, 'options', 'dependsOn', i];
      if (!resources.has(name)) throw unknownReference(path, name);
      edges.get(from)?.add(`resources.${name}`);
    });
  }
  for (const [name, value] of Object.entries(project.outputs)) {
    visitInterpolations(value, ['outputs', name], (i, path) => {
      const root = String(i.segments[0]);
      if (!resources.has(root) && !Object.hasOwn(project.variables, root) && !known(root)) throw unknownReference(path, i.expression);
    });
  }
  assertAcyclic(edges);

  const resourceDeps = new Map<string, string[]>();
  const reach = (node: NodeKey, seen: Set<NodeKey>, into: Set<string>) => {
    for (const next of edges.get(node) ?? []) {
      if (seen.has(next)) continue;
      seen.add(next);
      if (next.startsWith('resources.')) into.add(next.slice('resources.'.length));
      else reach(next, seen, into);
    }
  };
  for (const resource of project.resources) {
    const into = new Set<string>();
    reach(`resources.${resource.name}`, new Set(), into);
    resourceDeps.set(resource.name, project.resources.map((r) => r.name).filter((n) => into.has(n)));
  }
  return { order: topologicalOrder(project.resources.map((r) => r.name), resourceDeps), dependencies: resourceDeps };
}

/** Names in an order where each comes after its dependencies; among ready names the earliest listed goes first. */
export function topologicalOrder(names: readonly string[], dependencies: ReadonlyMap<string, readonly string[]>): string[] {
  const order: string[] = [];
  const placed = new Set<string>();
  const known = new Set(names);
  while (order.length < names.length) {
    const next = names.find((n) => !placed.has(n) && (dependencies.get(n) ?? []).every((d) => placed.has(d) || !known.has(d)));
    // Only a cycle leaves nothing ready; callers check for cycles first, so this keeps the rest in listed order.
    const chosen = next ?? names.find((n) => !placed.has(n));
    if (chosen === undefined) break;
    order.push(chosen);
    placed.add(chosen);
  }
  return order;
}

function assertAcyclic(edges: ReadonlyMap<NodeKey, ReadonlySet<NodeKey>>): void {
  const state = new Map<NodeKey, 'visiting' | 'done'>();
  const trail: NodeKey[] = [];
  const visit = (node: NodeKey) => {
    const seen = state.get(node);
    if (seen === 'done') return;
    if (seen === 'visiting') {
      const cycle = [...trail.slice(trail.indexOf(node)), node];
      throw new AppError('IAC.PLAN_CYCLE', 'validation', `the project has a dependency cycle: ${cycle.join(' -> ')}`, { cycle, path: node });
    }
    state.set(node, 'visiting');
    trail.push(node);
    for (const next of edges.get(node) ?? []) visit(next);
    trail.pop();
    state.set(node, 'done');
  };
  for (const node of edges.keys()) visit(node);
}

function configKey(project: PulumiProject, config: ResolvedConfig, root: string): string | undefined {
  const key = root.includes(':') ? root : `${project.name}:${root}`;
  return config.has(key) ? key : undefined;
}

function unknownReference(path: readonly PathSegment[], reference: string): AppError {
  const where = formatPath(path);
  return new AppError('IAC.UNKNOWN_REFERENCE', 'validation', `${where}: \${${reference}} refers to nothing in the project`, { path: where, reference });
}

// ---------------------------------------------------------------------------------------------------------------
// Evaluation

/**
 * The outputs of a resource as interpolations see them: its inputs, plus `id` and `urn`. During a plan, an `id`
 * the apply has yet to create is a `ComputedValue`.
 */
export type OutputsOf = (resource: string) => JsonObject;

/**
 * What an evaluation knows beyond the project: the program context (`${pulumi.*}`; without it `${pulumi.stack}` and
 * `${pulumi.organization}` are unknown to the evaluation and fail it), and the provider functions it can call.
 */
export interface EvaluatorContext extends Partial<ProgramContext> {
  /**
   * An emulated provider function: its result for `args` (which may hold computed values: return a computed value
   * then, unless the result does not depend on them), or undefined when there is no emulation of `token`. A
   * provider function without one fails the plan (`IAC.UNSUPPORTED`): the local cloud cannot call real providers.
   */
  readonly invoke?: (token: string, args: JsonObject) => JsonValue | undefined;
}

/**
 * Evaluates the project's expressions. A value that is exactly one interpolation keeps the type of what it refers
 * to (`${res}` alone is the resource's id); interpolations inside a longer string are joined as text. A computed
 * value inside a string, or in a function's arguments, makes the result computed. A value marked `fn::secret` goes
 * to resources as it is and shows as `[secret]` in the stack outputs. Variables are evaluated once per evaluator.
 */
export class ProgramEvaluator {
  readonly #variables = new Map<string, JsonValue>();
  readonly #context: EvaluatorContext;

  constructor(
    private readonly project: PulumiProject,
    private readonly config: ResolvedConfig,
    private readonly outputsOf: OutputsOf,
    context: EvaluatorContext = {},
  ) {
    this.#context = context;
  }

  /**
   * The resource's properties with every expression evaluated. Property names are names, not expressions (ast/
   * template.go `PropertyMapDecl`), so only keys of objects inside the properties are interpolated.
   */
  resourceInputs(resource: ResourceDeclaration): JsonObject {
    const path = ['resources', resource.name, 'properties'];
    return located(this.project.sources, () => Object.fromEntries(Object.entries(resource.properties).map(([k, v]) => [k, replaceSecrets(this.value(v, [...path, k]))])));
  }

  /** The stack outputs; a secret value shows as `SECRET_MASK`. */
  outputs(): JsonObject {
    return located(this.project.sources, () =>
      Object.fromEntries(Object.entries(this.project.outputs).map(([k, v]) => [k, replaceSecrets(this.value(v, ['outputs', k]), SECRET_MASK)])),
    );
  }

  /** `value` (as written in the program at `path`) evaluated. */
  evaluate(value: JsonValue, path: PathSegment[]): JsonValue {
    return located(this.project.sources, () => replaceSecrets(this.value(value, path)));
  }

  /** The evaluated value, secrets still marked. */
  private value(value: JsonValue, path: PathSegment[]): JsonValue {
    if (typeof value === 'string') return this.interpolate(value, path);
    if (Array.isArray(value)) return (value as readonly JsonValue[]).map((item, i) => this.value(item, [...path, i]));
    if (!isPlainObject(value) || asValueReference(value)) return value;
    const call = functionCall(value, path);
    if (call) return this.call(call, path);
    const result: Record<string, JsonValue> = {};
    let computedKey = false;
    for (const [rawKey, inner] of Object.entries(value)) {
      const keyPath = [...path, rawKey];
      const key = replaceSecrets(this.interpolate(rawKey, keyPath));
      if (isComputed(key)) computedKey = true;
      else if (typeof key !== 'string') {
        throw new AppError('IAC.INVALID_INTERPOLATION', 'validation', `${formatPath(keyPath)}: an object key must evaluate to a string, not ${JSON.stringify(key)}`, { path: formatPath(keyPath) });
      } else if (Object.hasOwn(result, key)) {
        throw new AppError('IAC.INVALID_INTERPOLATION', 'validation', `${formatPath(keyPath)}: the key ${JSON.stringify(key)} is in the object twice`, { path: formatPath(keyPath) });
      } else result[key] = this.value(inner, keyPath);
    }
    // An object whose keys are not known yet is not known either.
    return computedKey ? computed(canonicalJson(value)) : result;
  }

  private interpolate(text: string, path: PathSegment[]): JsonValue {
    const parts = scan(text, path);
    const [only] = parts;
    if (parts.length === 1 && only !== undefined && typeof only !== 'string') return this.lookup(only, path);
    let joined = '';
    let unknown = false;
    let secret = false;
    for (const part of parts) {
      if (typeof part === 'string') {
        joined += part;
        continue;
      }
      let value = this.lookup(part, path);
      if (isSecretValue(value)) {
        secret = true;
        value = replaceSecrets(value);
      }
      if (isComputed(value)) unknown = true;
      else if (asValueReference(value)) {
        // The text would hold the resolved value, and a plan must not: references are whole values only.
        throw new AppError('IAC.REFERENCE_IN_TEXT', 'validation', `${formatPath(path)}: \${${part.expression}} is resolved only at apply and must be a whole value, not part of a string`, {
          path: formatPath(path),
          reference: part.expression,
        });
      } else if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') joined += String(value);
      else {
        throw new AppError('IAC.INVALID_INTERPOLATION', 'validation', `${formatPath(path)}: \${${part.expression}} is not text, a number or a boolean and cannot be part of a string`, {
          path: formatPath(path),
          reference: part.expression,
        });
      }
    }
    if (unknown) return computed(text);
    return secret ? secretValue(joined) : joined;
  }

  private lookup(interpolation: Interpolation, path: PathSegment[]): JsonValue {
    const [rootSegment, ...members] = interpolation.segments;
    const root = String(rootSegment);
    let current: JsonValue | undefined;
    const resource = this.project.resources.find((r) => r.name === root);
    if (resource) {
      const outputs = this.outputsOf(root);
      // A resource as a value is a reference to it, which a resource input receives as the resource's id.
      if (members.length === 0) {
        const id = outputs.id;
        if (id === undefined) throw unknownReference(path, interpolation.expression);
        return id;
      }
      current = outputs;
    } else if (Object.hasOwn(this.project.variables, root)) current = this.variable(root);
    else if (root === PULUMI) current = this.pulumiVariable(members, path);
    else {
      const key = configKey(this.project, this.config, root);
      current = key === undefined ? undefined : this.config.get(key);
    }
    let secret = false;
    for (const member of members) {
      if (current === undefined) break;
      if (isSecretValue(current)) {
        secret = true;
        current = current.value;
      }
      if (isComputed(current)) return computed(`\${${interpolation.expression}}`);
      if (asValueReference(current)) {
        throw new AppError('IAC.INVALID_INTERPOLATION', 'validation', `${formatPath(path)}: \${${interpolation.expression}} reads into a value that is resolved only at apply`, {
          path: formatPath(path),
          reference: interpolation.expression,
        });
      }
      current =
        typeof member === 'number'
          ? Array.isArray(current)
            ? (current as readonly JsonValue[])[member]
            : undefined
          : isPlainObject(current) && Object.hasOwn(current, member)
            ? current[member]
            : undefined;
    }
    if (current === undefined) throw unknownReference(path, interpolation.expression);
    return secret && !isSecretValue(current) ? secretValue(current) : current;
  }

  /** `${pulumi.*}`: the stack, project, organization and folders (pulumi-yaml run.go `ensureSetup`). */
  private pulumiVariable(members: readonly PathSegment[], path: PathSegment[]): JsonValue {
    const context = this.#context;
    const member = members[0];
    const needed = member === 'stack' ? context.stack : member === 'organization' ? context.organization : 'known';
    if (needed === undefined) throw unsupported(`pulumi.${String(member)} without the stack's context`, formatPath(path));
    const rootDirectory = context.rootDirectory ?? ROOT_DIRECTORY;
    return {
      project: this.project.name,
      rootDirectory,
      cwd: context.cwd ?? programCwd(rootDirectory, this.project.programFolder),
      ...(context.stack === undefined ? {} : { stack: context.stack }),
      ...(context.organization === undefined ? {} : { organization: context.organization }),
    };
  }

  private variable(name: string): JsonValue {
    let value = this.#variables.get(name);
    if (value === undefined) {
      value = this.value(this.project.variables[name] ?? null, ['variables', name]);
      this.#variables.set(name, value);
    }
    return value;
  }

  private call(call: FunctionCall, path: PathSegment[]): JsonValue {
    const at = [...path, call.key];
    const where = formatPath(at);
    switch (call.name) {
      case 'fn::secret': {
        const value = this.value(call.args, at);
        return isSecretValue(value) ? value : secretValue(value);
      }
      case 'fn::unsecret':
        return replaceSecrets(this.value(call.args, at));
      case 'fn::invoke':
        return this.invoke(call, path);
      case 'fn::pulumiResourceName':
      case 'fn::pulumiResourceType': {
        const parts = typeof call.args === 'string' ? scan(call.args, at) : [];
        const [only] = parts;
        const resource = parts.length === 1 && only !== undefined && typeof only !== 'string' && only.segments.length === 1 ? this.project.resources.find((r) => r.name === only.segments[0]) : undefined;
        if (!resource) throw new AppError('IAC.INVALID_FUNCTION', 'validation', `${where}: ${call.name} requires a resource, \${name}`, { path: where, function: call.name });
        return call.name === 'fn::pulumiResourceName' ? resource.name : resource.type;
      }
      case 'fn::stackReference':
        throw unsupported(call.name, where);
      default: {
        const args = this.value(call.args, at);
        const { computed: unknown, secret } = scanValue(args);
        if (unknown) return computed(canonicalJson({ [call.key]: call.args }));
        const plain = replaceSecrets(args);
        if (call.name !== 'fn::select' && call.name !== 'fn::singleOrNone' && collectReferences(plain).length > 0) {
          throw new AppError('IAC.REFERENCE_IN_TEXT', 'validation', `${where}: a value resolved only at apply cannot be an argument of ${call.name}`, { path: where, function: call.name });
        }
        const result = applyFunction(call.name, plain, where, this.files());
        return secret ? secretValue(result) : result;
      }
    }
  }

  /** `fn::invoke`: a provider function, which only an emulation registered in the context can answer. */
  private invoke(call: FunctionCall, path: PathSegment[]): JsonValue {
    const where = formatPath([...path, call.key]);
    const parts = invokeArguments(call, path);
    const args = this.value(parts.arguments, [...path, call.key, 'arguments']);
    const token = expandTypeToken(parts.token) ?? parts.token;
    const result = this.#context.invoke?.(token, replaceSecrets(args) as JsonObject);
    if (result === undefined) throw unsupported(`fn::invoke of ${token}`, where, { function: token });
    let value = result;
    if (parts.return !== undefined && !isComputed(result)) {
      if (!isPlainObject(result) || !Object.hasOwn(result, parts.return)) {
        throw new AppError('IAC.INVALID_FUNCTION', 'validation', `${where}: fn::invoke of ${token} did not contain a property '${parts.return}' in the returned value`, { path: where, function: token });
      }
      value = result[parts.return] as JsonValue;
    }
    return scanValue(args).secret ? secretValue(value) : value;
  }

  /** The project folder's files as the file functions see them: paths from the program folder, inside the folder. */
  private files(): FunctionHost {
    const { files, programFolder } = this.project;
    const resolve = (file: string): string | undefined => {
      if (file.includes('\\') || file.includes('\0')) return undefined;
      const joined = posix.normalize(posix.join(programFolder || '.', file));
      return posix.isAbsolute(file) || joined === '..' || joined.startsWith('../') ? undefined : joined;
    };
    return {
      readFile: (file) => {
        const at = resolve(file);
        return at === undefined ? undefined : files[at];
      },
      exists: (file) => {
        const at = resolve(file);
        if (at === undefined) return false;
        const folder = at === '.' ? '' : `${at.replace(/\/$/, '')}/`;
        return files[at] !== undefined || Object.keys(files).some((f) => f.startsWith(folder));
      },
    };
  }
}
