import { LRUCache } from 'lru-cache';
import { parseDocument } from 'yaml';
import { deepFreeze } from '../values/deep-freeze';
import { AppError } from '../errors/app-error';
import {
  asValueReference,
  assertJson,
  computed,
  formatPath,
  invalidProject,
  isComputed,
  isPlainObject,
  parsePath,
  type JsonObject,
  type JsonValue,
  type PathSegment,
} from './iac-values';
import { parseResource, type ResourceDeclaration } from './pulumi-yaml-resource';

export type { ResourceDeclaration } from './pulumi-yaml-resource';

/**
 * The Pulumi YAML project model of the local engine: `Pulumi.yaml` (`runtime: yaml`: config declarations,
 * variables, resources with type / properties / options, outputs) and `Pulumi.<stack>.yaml` (config values), and
 * the evaluation of `${...}` interpolations. Pure: text in, values out, no I/O.
 *
 * Plan errors are AppErrors (kind `validation`) with stable codes and the offending path in `details.path`:
 * `IAC.INVALID_PROJECT` (malformed document or unsupported feature), `IAC.INVALID_CONFIG`, `IAC.MISSING_CONFIG`,
 * `IAC.UNKNOWN_REFERENCE`, `IAC.PLAN_CYCLE`, `IAC.INVALID_INTERPOLATION`, `IAC.REFERENCE_IN_TEXT`.
 */

export type ConfigType = 'string' | 'integer' | 'number' | 'boolean' | 'array' | 'object';

export interface ConfigDeclaration {
  /** Full key with its namespace: `my-project:poolSize`, `azure:location`. */
  readonly key: string;
  readonly type?: ConfigType;
  readonly default?: JsonValue;
  /** A secret key only accepts a `{ secretRef }` value, so no secret is ever written in Git in the clear. */
  readonly secret: boolean;
}

export interface PulumiProject {
  readonly name: string;
  readonly config: readonly ConfigDeclaration[];
  /** As written, in declaration order. */
  readonly variables: Readonly<Record<string, JsonValue>>;
  /** In declaration order. */
  readonly resources: readonly ResourceDeclaration[];
  readonly outputs: Readonly<Record<string, JsonValue>>;
}

/** Config values by full key (`project:key`); a value may be a `ValueReference`, resolved only by apply. */
export type ResolvedConfig = ReadonlyMap<string, JsonValue>;

/** The files of a project directory, by name relative to it: `Pulumi.yaml`, `Pulumi.<stack>.yaml`. */
export type ProjectFiles = Readonly<Record<string, string>>;

/** A project ready to plan: its model and its stack's config, overrides applied. */
export interface LoadedProgram {
  readonly project: PulumiProject;
  readonly config: ResolvedConfig;
}

/**
 * Reads `Pulumi.yaml` (or `.yml`) and `Pulumi.<stack>.yaml` (optional) from `files`, and applies `overrides`
 * (config set by the caller, e.g. a pool's new size) over the stack file's values.
 */
export function loadProgram(files: ProjectFiles, stack: string, overrides: Readonly<Record<string, JsonValue>> = {}): LoadedProgram {
  const projectText = files['Pulumi.yaml'] ?? files['Pulumi.yml'];
  if (projectText === undefined) throw invalidProject('the project has no Pulumi.yaml', { path: 'Pulumi.yaml' });
  const project = parseProject(projectText);
  const stackFile = `Pulumi.${stack}.yaml`;
  const stackText = files[stackFile] ?? files[`Pulumi.${stack}.yml`];
  const stackValues = stackText === undefined ? {} : parseStackConfig(stackText, project.name, stackFile);
  return { project, config: resolveConfig(project, stackValues, overrides) };
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing

const NAME = /^[A-Za-z_][\w-]*$/;
/** The root of an interpolation: a name, or a config key with its namespace (`aws:region`). */
const ROOT = /^[A-Za-z_][\w-]*(?::[A-Za-z_][\w-]*)?/;
const DECLARATION_KEYS = new Set(['type', 'default', 'secret', 'description', 'items']);

/**
 * Parsed YAML by its text: every run of a stack reads the same few files at each commit, and parsing them was a
 * tenth of a loaded host's CPU. Values are frozen, since callers share them. Bounded by count and by text length.
 */
const parsedYaml = new LRUCache<string, { readonly value: JsonValue }>({ max: 256, maxSize: 8 * 1024 * 1024, sizeCalculation: (_, text) => Math.max(1, text.length) });

function parseYaml(text: string, file: string): JsonValue {
  const cached = parsedYaml.get(text);
  if (cached) return cached.value;
  const document = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  const [first] = document.errors;
  if (first) throw invalidProject(`${file} is not valid YAML: ${first.message.split('\n')[0]}`, { path: file, yamlCode: first.code });
  const value: unknown = document.toJS({ maxAliasCount: 100 });
  assertJson(value, file);
  parsedYaml.set(text, { value: deepFreeze(value) });
  return value;
}

export function parseProject(text: string, file = 'Pulumi.yaml'): PulumiProject {
  const document = parseYaml(text, file);
  if (!isPlainObject(document)) throw invalidProject(`${file} must be a mapping`, { path: file });
  const name = document.name;
  if (typeof name !== 'string' || name.trim() === '') throw invalidProject(`${file}: name is required`, { path: 'name' });
  const runtime = isPlainObject(document.runtime) ? document.runtime.name : document.runtime;
  if (runtime !== 'yaml') {
    throw invalidProject(`${file}: the local engine evaluates runtime: yaml projects only (found ${JSON.stringify(runtime ?? null)})`, { path: 'runtime' });
  }
  const config = parseDeclarations(optionalMap(document, 'config'), name);
  const variables = optionalMap(document, 'variables');
  const outputs = optionalMap(document, 'outputs');
  const resources = Object.entries(optionalMap(document, 'resources')).map(([n, v]) => parseResource(n, v));

  const taken = new Map<string, string>();
  for (const [kind, names] of [
    ['resources', resources.map((r) => r.name)],
    ['variables', Object.keys(variables)],
  ] as const) {
    for (const n of names) {
      if (!NAME.test(n)) throw invalidProject(`${kind}.${n}: a name must start with a letter or _ and hold only letters, digits, _ and -`, { path: `${kind}.${n}` });
      const other = taken.get(n);
      if (other) throw invalidProject(`${kind}.${n}: the name is also used in ${other}`, { path: `${kind}.${n}` });
      taken.set(n, kind);
    }
  }
  for (const declaration of config) {
    const plain = declaration.key.startsWith(`${name}:`) ? declaration.key.slice(name.length + 1) : undefined;
    const other = plain === undefined ? undefined : taken.get(plain);
    // `${key}` must name one thing: a config key may not share its name with a resource or a variable.
    if (other) throw invalidProject(`config.${plain}: the name is also used in ${other}`, { path: `config.${plain}` });
  }

  for (const [key, value] of Object.entries(variables)) checkExpressions(value, ['variables', key]);
  for (const resource of resources) checkExpressions(resource.properties, ['resources', resource.name, 'properties']);
  for (const [key, value] of Object.entries(outputs)) checkExpressions(value, ['outputs', key]);
  return { name, config, variables, resources, outputs };
}

function optionalMap(document: JsonObject, key: string): JsonObject {
  const value = document[key];
  if (value === undefined || value === null) return {};
  if (!isPlainObject(value)) throw invalidProject(`${key} must be a mapping`, { path: key });
  return value;
}

function parseDeclarations(config: JsonObject, project: string): ConfigDeclaration[] {
  return Object.entries(config).map(([rawKey, value]) => {
    const key = fullConfigKey(rawKey, project, `config.${rawKey}`);
    const isDeclaration =
      isPlainObject(value) && Object.keys(value).length > 0 && Object.keys(value).every((k) => DECLARATION_KEYS.has(k)) && ('type' in value || 'default' in value);
    // Pulumi also takes `key: value`, a default with its type inferred.
    if (!isDeclaration) return { key, default: value, secret: false };
    const type = value.type === undefined ? undefined : configType(value.type, `config.${rawKey}.type`);
    const secret = value.secret ?? false;
    if (typeof secret !== 'boolean') throw invalidProject(`config.${rawKey}.secret must be true or false`, { path: `config.${rawKey}.secret` });
    const declaration: ConfigDeclaration = { key, secret, ...(type ? { type } : {}), ...(value.default !== undefined ? { default: value.default } : {}) };
    if (declaration.default !== undefined) checkConfigValue(declaration, declaration.default);
    return declaration;
  });
}

function configType(value: JsonValue, path: string): ConfigType {
  const text = typeof value === 'string' ? value.toLowerCase() : '';
  if (text === 'string' || text === 'integer' || text === 'number' || text === 'boolean' || text === 'object') return text;
  if (text === 'array' || text === 'list' || text.startsWith('list<')) return 'array';
  throw invalidProject(`${path}: unknown config type ${JSON.stringify(value)}`, { path });
}

/** `key` → `project:key`; `ns:key` stays. */
function fullConfigKey(key: string, project: string, path: string): string {
  if (!/^(?:[A-Za-z_][\w.-]*:)?[A-Za-z_][\w-]*$/.test(key)) {
    throw new AppError('IAC.INVALID_CONFIG', 'validation', `${path}: ${JSON.stringify(key)} is not a config key`, { path });
  }
  return key.includes(':') ? key : `${project}:${key}`;
}

/** The `config` of `Pulumi.<stack>.yaml`, by full key. */
export function parseStackConfig(text: string, project: string, file = 'Pulumi.<stack>.yaml'): Record<string, JsonValue> {
  const document = text.trim() === '' ? {} : parseYaml(text, file);
  if (!isPlainObject(document)) throw invalidProject(`${file} must be a mapping`, { path: file });
  const values: Record<string, JsonValue> = {};
  for (const [rawKey, value] of Object.entries(optionalMap(document, 'config'))) {
    const key = fullConfigKey(rawKey, project, `config.${rawKey}`);
    if (isPlainObject(value) && Object.keys(value).length === 1 && typeof value.secure === 'string') {
      throw new AppError('IAC.INVALID_CONFIG', 'validation', `config.${rawKey}: encrypted values need the Pulumi CLI; give a { secretRef: ... } instead`, {
        path: `config.${rawKey}`,
      });
    }
    values[key] = value;
  }
  return values;
}

/** Stack values over declared defaults, overrides over both; every declared key must end with a value of its type. */
export function resolveConfig(project: PulumiProject, stackValues: Readonly<Record<string, JsonValue>>, overrides: Readonly<Record<string, JsonValue>> = {}): ResolvedConfig {
  const values = new Map<string, JsonValue>();
  for (const declaration of project.config) if (declaration.default !== undefined) values.set(declaration.key, declaration.default);
  for (const [key, value] of Object.entries(stackValues)) values.set(key, value);
  for (const [rawKey, value] of Object.entries(overrides)) values.set(fullConfigKey(rawKey, project.name, `overrides.${rawKey}`), value);
  for (const declaration of project.config) {
    const value = values.get(declaration.key);
    if (value === undefined) {
      throw new AppError('IAC.MISSING_CONFIG', 'validation', `config ${declaration.key} is declared without a default and has no value`, { key: declaration.key });
    }
    checkConfigValue(declaration, value);
  }
  return values;
}

function checkConfigValue(declaration: ConfigDeclaration, value: JsonValue): void {
  const reference = asValueReference(value);
  if (declaration.secret && !(reference && 'secretRef' in reference)) {
    throw new AppError('IAC.INVALID_CONFIG', 'validation', `config ${declaration.key} is secret: give it as { secretRef: ... }`, { key: declaration.key });
  }
  // A reference's value is known only at apply; its type is the referenced system's business.
  if (reference || !declaration.type) return;
  const ok =
    declaration.type === 'string'
      ? typeof value === 'string'
      : declaration.type === 'integer'
        ? Number.isInteger(value)
        : declaration.type === 'number'
          ? typeof value === 'number'
          : declaration.type === 'boolean'
            ? typeof value === 'boolean'
            : declaration.type === 'array'
              ? Array.isArray(value)
              : isPlainObject(value);
  if (!ok) throw new AppError('IAC.INVALID_CONFIG', 'validation', `config ${declaration.key} must be of type ${declaration.type}`, { key: declaration.key, expected: declaration.type });
}

// ---------------------------------------------------------------------------------------------------------------
// Interpolation

interface Interpolation {
  readonly expression: string;
  readonly segments: readonly PathSegment[];
}

/** A string split into literal text and `${...}` interpolations; `$${` is a literal `${`. */
function scan(text: string, path: readonly PathSegment[]): (string | Interpolation)[] {
  const parts: (string | Interpolation)[] = [];
  let literal = '';
  let i = 0;
  while (i < text.length) {
    if (text.startsWith('$${', i)) {
      literal += '${';
      i += 3;
    } else if (text.startsWith('${', i)) {
      const close = text.indexOf('}', i + 2);
      const expression = close < 0 ? '' : text.slice(i + 2, close).trim();
      const segments = close < 0 ? undefined : parsePath(expression, ROOT);
      if (!segments) {
        throw invalidProject(`${formatPath(path)}: malformed interpolation in ${JSON.stringify(text)}`, { path: formatPath(path) });
      }
      if (literal) parts.push(literal);
      literal = '';
      parts.push({ expression, segments });
      i = close + 1;
    } else {
      literal += text[i];
      i++;
    }
  }
  if (literal || parts.length === 0) parts.push(literal);
  return parts;
}

/** Walks a raw value: checks every interpolation parses and no unsupported function (`fn::invoke`, ...) is used. */
function checkExpressions(value: JsonValue, path: PathSegment[]): void {
  visitInterpolations(value, path, () => undefined);
}

function visitInterpolations(value: JsonValue, path: PathSegment[], visit: (i: Interpolation, path: readonly PathSegment[]) => void): void {
  if (typeof value === 'string') {
    for (const part of scan(value, path)) if (typeof part !== 'string') visit(part, path);
  } else if (Array.isArray(value)) {
    (value as readonly JsonValue[]).forEach((item, i) => visitInterpolations(item, [...path, i], visit));
  } else if (isPlainObject(value)) {
    if (asValueReference(value)) return;
    const fn = Object.keys(value).find((k) => k.startsWith('fn::'));
    if (fn) throw invalidProject(`${formatPath([...path, fn])}: ${fn} is not supported by the local engine`, { path: formatPath([...path, fn]) });
    for (const [k, v] of Object.entries(value)) visitInterpolations(v, [...path, k], visit);
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
 * Resolves every interpolation root of the project to a resource, a variable or a config key, and orders the
 * resources. An unknown root is `IAC.UNKNOWN_REFERENCE`, a loop among resources and variables `IAC.PLAN_CYCLE`.
 */
export function projectGraph(project: PulumiProject, config: ResolvedConfig): ProjectGraph {
  const resources = new Map(project.resources.map((r) => [r.name, r]));
  const edges = new Map<NodeKey, Set<NodeKey>>();
  const link = (from: NodeKey, root: string, path: readonly PathSegment[], expression: string) => {
    const target: NodeKey | undefined = resources.has(root) ? `resources.${root}` : Object.hasOwn(project.variables, root) ? `variables.${root}` : undefined;
    if (target) edges.get(from)?.add(target);
    else if (configKey(project, config, root) === undefined) throw unknownReference(path, expression);
  };
  for (const name of Object.keys(project.variables)) edges.set(`variables.${name}`, new Set());
  for (const resource of project.resources) edges.set(`resources.${resource.name}`, new Set());
  for (const [name, value] of Object.entries(project.variables)) {
    visitInterpolations(value, ['variables', name], (i, path) => link(`variables.${name}`, String(i.segments[0]), path, i.expression));
  }
  for (const resource of project.resources) {
    const from: NodeKey = `resources.${resource.name}`;
    visitInterpolations(resource.properties, ['resources', resource.name, 'properties'], (i, path) => link(from, String(i.segments[0]), path, i.expression));
    resource.dependsOn.forEach((name, i) => {
      const path = ['resources', resource.name, 'options', 'dependsOn', i];
      if (!resources.has(name)) throw unknownReference(path, name);
      edges.get(from)?.add(`resources.${name}`);
    });
  }
  for (const [name, value] of Object.entries(project.outputs)) {
    visitInterpolations(value, ['outputs', name], (i, path) => {
      const root = String(i.segments[0]);
      if (!resources.has(root) && !Object.hasOwn(project.variables, root) && configKey(project, config, root) === undefined) throw unknownReference(path, i.expression);
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
 * Evaluates the project's `${...}` interpolations. A value that is exactly one interpolation keeps the type of
 * what it refers to; interpolations inside a longer string are joined as text. A computed value inside a string
 * makes the whole string computed. Variables are evaluated once per evaluator.
 */
export class ProgramEvaluator {
  readonly #variables = new Map<string, JsonValue>();

  constructor(
    private readonly project: PulumiProject,
    private readonly config: ResolvedConfig,
    private readonly outputsOf: OutputsOf,
  ) {}

  /** The resource's properties with every interpolation evaluated. */
  resourceInputs(resource: ResourceDeclaration): JsonObject {
    return this.evaluate(resource.properties, ['resources', resource.name, 'properties']) as JsonObject;
  }

  /** The stack outputs. */
  outputs(): JsonObject {
    return Object.fromEntries(Object.entries(this.project.outputs).map(([k, v]) => [k, this.evaluate(v, ['outputs', k])]));
  }

  evaluate(value: JsonValue, path: PathSegment[]): JsonValue {
    if (typeof value === 'string') return this.interpolate(value, path);
    if (Array.isArray(value)) return (value as readonly JsonValue[]).map((item, i) => this.evaluate(item, [...path, i]));
    if (isPlainObject(value) && !asValueReference(value)) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.evaluate(v, [...path, k])]));
    }
    return value;
  }

  private interpolate(text: string, path: PathSegment[]): JsonValue {
    const parts = scan(text, path);
    const [only] = parts;
    if (parts.length === 1 && only !== undefined && typeof only !== 'string') return this.lookup(only, path);
    let joined = '';
    let unknown = false;
    for (const part of parts) {
      if (typeof part === 'string') {
        joined += part;
        continue;
      }
      const value = this.lookup(part, path);
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
    return unknown ? computed(text) : joined;
  }

  private lookup(interpolation: Interpolation, path: PathSegment[]): JsonValue {
    const [rootSegment, ...members] = interpolation.segments;
    const root = String(rootSegment);
    let current: JsonValue | undefined;
    const resource = this.project.resources.find((r) => r.name === root);
    if (resource) current = this.outputsOf(root);
    else if (Object.hasOwn(this.project.variables, root)) current = this.variable(root);
    else {
      const key = configKey(this.project, this.config, root);
      current = key === undefined ? undefined : this.config.get(key);
    }
    for (const member of members) {
      if (current === undefined) break;
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
    return current;
  }

  private variable(name: string): JsonValue {
    let value = this.#variables.get(name);
    if (value === undefined) {
      value = this.evaluate(this.project.variables[name] ?? null, ['variables', name]);
      this.#variables.set(name, value);
    }
    return value;
  }
}
