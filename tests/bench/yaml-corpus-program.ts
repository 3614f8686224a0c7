/**
 * One program of the YAML corpus (`npm run yaml-corpus`), made ready to measure: its files as `pulumi new` or
 * Pulumi's test harness would hand them over, the stack and config it runs with, what Pulumi would do with it
 * (run it, or refuse it) and the deterministic change the "change converges" stage makes. Read from the program's
 * own text, never from the engine under measurement, so an engine that drops a construct cannot hide it.
 *
 * Rules (the closing note of the measurement states them):
 * - Stack: the first `Pulumi.<stack>.yaml` of the folder, else `dev`; conformance programs run as `test`, as
 *   pulumi-test-language runs them.
 * - Templates (`${PROJECT}` in the name, or a `template:` section) are instantiated as `pulumi new` does:
 *   `${PROJECT}` is the folder name, `${DESCRIPTION}` the template's description, and each `template.config`
 *   value (else default) becomes a config value of the stack.
 * - Conformance programs and pulumi-yaml's integration tests get the config their test gives, where
 *   yaml-corpus-expected.ts has it.
 * - A program declaring a project config key with neither a default nor a value from the above is refused by
 *   Pulumi itself ("Missing required configuration variable"): it is "invalid as shipped", and refusing it is the
 *   faithful outcome — except a program of Pulumi's own tests (conformance, pkg/tests), whose test gives config
 *   yaml-corpus-expected.ts does not have: "not measured".
 */
import { parseDocument } from 'yaml';
import type { JsonObject, JsonValue } from '../../shared/platform/iac/iac-values';
import type { ConfigOverrides } from '../../local/engine/local-engine';
import type { ProjectFiles } from '../../local/engine/pulumi-yaml';
import { knownExpectation } from './yaml-corpus-expected';

/** What Pulumi does with the program: runs it (outputs known or not), refuses it, or we cannot tell. */
export type Expectation =
  | { readonly kind: 'run'; readonly outputs?: JsonObject; readonly outputsFrom?: 'pulumi-tests' | 'literal'; readonly outputKeys: readonly string[] }
  | { readonly kind: 'refusal'; readonly reason: string }
  | { readonly kind: 'not-measured'; readonly reason: string };

/** The deterministic change of the "change converges" stage. */
export type ProgramChange =
  | { readonly kind: 'property'; readonly resource: string; readonly property: string; readonly from: JsonValue; readonly to: JsonValue; readonly files: ProjectFiles }
  | { readonly kind: 'config'; readonly key: string; readonly from: JsonValue; readonly to: JsonValue; readonly config: ConfigOverrides };

export interface CorpusProgram {
  /** The program's folder relative to its corpus root (`examples/random`). */
  readonly id: string;
  /** The corpus root's name (`pulumi-yaml`, `templates`), for per-source counts. */
  readonly source: string;
  /** `examples`, `pkg/tests/testdata`, `templates`, `conformance`, ...: which kind of program it is. */
  readonly group: string;
  readonly project: string;
  readonly stack: string;
  readonly files: ProjectFiles;
  readonly config: ConfigOverrides;
  /** Secret config values, by the `secretRef` the config gives instead (the resolver answers these only). */
  readonly secrets: ReadonlyMap<string, JsonValue>;
  /** Resources the program's text declares: a plan with fewer steps dropped some. */
  readonly declaredResources: number;
  readonly expectation: Expectation;
  readonly change: ProgramChange | undefined;
}

/** Conformance tests' projects: `cmd/pulumi-language-yaml/testdata/projects/<test>[/<step>]`. */
const CONFORMANCE = /(?:^|\/)testdata\/projects\/([^/]+)(?:\/(\d+))?$/;

/**
 * pulumi-yaml's own integration tests that expect the deployment to fail (pkg/tests/integration_test.go,
 * `ExpectFailure`), and conformance tests whose provider fails on purpose.
 */
const UPSTREAM_REFUSALS: Readonly<Record<string, string>> = {
  'pkg/tests/testdata/type-fail': 'Pulumi refuses it: a property of the wrong type (TestTypeCheckError)',
  'pkg/tests/testdata/invalid-resource-object': 'Pulumi refuses it: resources.badResource must be an object (TestInvalidResourceObject)',
  'pkg/tests/testdata/project-config-ref': 'Pulumi refuses it: config "wrong-namespace:foo" not found (TestProjectConfigRef)',
  'l2-failed-create': 'its provider fails the create on purpose: Pulumi reports a failed update',
  'l2-failed-create-continue-on-error': 'its provider fails the create on purpose: Pulumi reports a failed update',
};

export interface ProgramSource {
  readonly id: string;
  readonly source: string;
  readonly files: ProjectFiles;
}

/** The program ready to measure. Throws only when `Pulumi.yaml` is not YAML at all (then parse fails anyway). */
export function prepareProgram({ id, source, files: shipped }: ProgramSource): CorpusProgram {
  const conformance = CONFORMANCE.exec(id);
  const test = conformance?.[1];
  const group = test ? 'conformance' : groupOf(id);
  const folder = id.split('/').filter((p) => !/^\d+$/.test(p)).pop() ?? id;

  const projectDoc = readYaml(shipped['Pulumi.yaml'] ?? shipped['Pulumi.yml'] ?? '') ?? {};
  const template = isObject(projectDoc.template) ? projectDoc.template : undefined;
  const rawName = typeof projectDoc.name === 'string' ? projectDoc.name : folder;
  const isTemplate = template !== undefined || rawName.includes('${PROJECT}');
  const files = isTemplate ? instantiate(shipped, folder, typeof template?.description === 'string' ? template.description : '') : shipped;
  const project = isTemplate ? rawName.replaceAll('${PROJECT}', folder) : rawName;

  const stackFile = Object.keys(files).filter((f) => /^Pulumi\.[^./]+\.ya?ml$/.test(f)).sort()[0];
  const stack = test ? 'test' : (stackFile?.split('.')[1] ?? 'dev');
  const testdata = /(?:^|\/)(pkg\/tests\/testdata\/[^/]+)$/.exec(id)?.[1];
  const known = test ? (knownExpectation(conformance?.[2] ? `${test}/${conformance[2]}` : test) ?? knownExpectation(test)) : testdata ? knownExpectation(testdata) : undefined;

  const config: Record<string, JsonValue> = {};
  const secrets = new Map<string, JsonValue>();
  for (const [key, value] of Object.entries(isObject(template?.config) ? template.config : {})) {
    // `pulumi new` writes a template key's `value`, else its `default`, into the stack's config.
    const given = isObject(value) ? (value.value ?? value.default) : undefined;
    if (given !== undefined) config[key] = given as JsonValue;
  }
  for (const [key, value] of Object.entries(known?.config ?? {})) config[key] = value;
  for (const [key, value] of Object.entries(known?.secrets ?? {})) {
    const ref = `corpus://${project}/${key}`;
    config[key] = { secretRef: ref };
    secrets.set(ref, value);
  }

  const main = mainTemplate(files, projectDoc);
  const stackValues = stackFile ? configKeys(readYaml(files[stackFile] ?? '')?.config, project) : new Set<string>();
  const missing = requiredConfig(main.declarations, project).filter((key) => !stackValues.has(key) && !configKeys(config, project).has(key));
  const refusal = UPSTREAM_REFUSALS[test ?? testdata ?? ''] ?? untypedConfig(main.declarations) ?? refusalReason(projectDoc, main.doc);
  const outputKeys = Object.keys(asObject(main.doc.outputs));

  let expectation: Expectation;
  if (refusal) expectation = { kind: 'refusal', reason: refusal };
  else if (missing.length > 0 && (test || testdata)) expectation = { kind: 'not-measured', reason: `its test gives config we do not have: ${missing.join(', ')}` };
  else if (missing.length > 0) {
    // `pulumi new` asks for a template's config without a default; given nothing, `pulumi up` refuses to run.
    expectation = { kind: 'refusal', reason: `invalid as shipped: config ${missing.join(', ')} has no value (Pulumi refuses: missing required configuration)` };
  }
  else if (known?.outputs) expectation = { kind: 'run', outputs: known.outputs, outputsFrom: 'pulumi-tests', outputKeys };
  else {
    const literal = literalOutputs(main.doc, project, { ...defaults(main.declarations, project), ...stackConfig(files, stackFile, project), ...qualified(config, project) });
    expectation = literal ? { kind: 'run', outputs: literal, outputsFrom: 'literal', outputKeys } : { kind: 'run', outputKeys };
  }

  return {
    id,
    source,
    group,
    project,
    stack,
    files,
    config,
    secrets,
    declaredResources: Object.keys(isObject(main.doc.resources) ? main.doc.resources : {}).length,
    expectation,
    change: safely(() => chooseChange(files, main, project, config)),
  };
}

function groupOf(id: string): string {
  if (id.startsWith('pkg/tests/testdata/')) return 'pkg/tests/testdata';
  return id.includes('/') ? (id.split('/')[0] ?? id) : 'templates';
}

/** `${PROJECT}` and `${DESCRIPTION}` replaced in every file, as `pulumi new` does. */
function instantiate(files: ProjectFiles, project: string, description: string): ProjectFiles {
  return Object.fromEntries(Object.entries(files).map(([name, text]) => [name, text.replaceAll('${PROJECT}', project).replaceAll('${DESCRIPTION}', description)]));
}

interface MainTemplate {
  /** The file that holds the program: `<main>/Main.yaml`, `Main.json`, or `Pulumi.yaml` itself. */
  readonly file: string;
  readonly doc: Record<string, unknown>;
  /** `config:` and the older `configuration:` of Pulumi.yaml and the main file together. */
  readonly declarations: Record<string, unknown>;
}

/**
 * The file Pulumi YAML evaluates (pulumi-yaml pkg/pulumiyaml/run.go `LoadDir`): in the `main:` folder (default the
 * project's) the first of `Main.json`, `Main.yaml`, `Pulumi.yaml`.
 */
function mainTemplate(files: ProjectFiles, projectDoc: Record<string, unknown>): MainTemplate {
  const dir = typeof projectDoc.main === 'string' ? projectDoc.main.replace(/^\.\//, '').replace(/\/+$/, '') : '';
  const prefix = dir === '' || dir === '.' ? '' : `${dir}/`;
  let file = 'Pulumi.yaml';
  let doc = projectDoc;
  for (const candidate of [`${prefix}Main.json`, `${prefix}Main.yaml`, ...(prefix ? [`${prefix}Pulumi.yaml`] : [])]) {
    const text = files[candidate];
    if (text === undefined) continue;
    file = candidate;
    doc = (candidate.endsWith('.json') ? readJson(text) : readYaml(text)) ?? {};
    break;
  }
  const declarations = { ...asObject(projectDoc.configuration), ...asObject(projectDoc.config), ...(doc === projectDoc ? {} : { ...asObject(doc.configuration), ...asObject(doc.config) }) };
  return { file, doc, declarations };
}

/** Why Pulumi's result cannot be had on the local cloud, so the faithful outcome is a clear refusal. */
function refusalReason(projectDoc: Record<string, unknown>, main: Record<string, unknown>): string | undefined {
  const runtime = projectDoc.runtime;
  if (isObject(runtime) && isObject(runtime.options) && runtime.options.compiler !== undefined) return 'it runs a compiler command (runtime.options.compiler)';
  const resources = isObject(main.resources) ? main.resources : {};
  for (const [name, resource] of Object.entries(resources)) {
    // As pulumi-yaml's TestInvalidResourceObject: a resource that is not an object with a type is refused.
    if (!isObject(resource) || typeof resource.type !== 'string') return `invalid as shipped: Pulumi refuses it, resources.${name} must be an object with a type`;
    if (resource.type.startsWith('command:')) return `resources.${name} runs a command (${resource.type})`;
  }
  // `fn::invoke` (any case) or its short form `fn::<package>:<module>:<function>`; pulumi-std's functions are
  // pure computations the engine answers as the std provider does, so they are no reason to refuse.
  const invoke = findKey(main, (key, value) => {
    const token = /^fn::invoke$/i.test(key) ? (isObject(value) ? value.function : undefined) : /^fn::[\w-]+:/.test(key) ? key.slice('fn::'.length) : undefined;
    if (token === undefined && !/^fn::invoke$/i.test(key)) return false;
    return !(typeof token === 'string' && token.startsWith('std:'));
  });
  if (invoke) return `${invoke} calls a provider function, which only the provider can answer`;
  return undefined;
}

/**
 * A config declaration with neither a type nor a default (`inputs: {}`): pulumi-yaml refuses it ("unable to infer
 * type: either 'default' or 'type' is required", pkg/pulumiyaml/run.go `registerConfig`).
 */
function untypedConfig(declarations: Record<string, unknown>): string | undefined {
  const key = Object.keys(declarations).find((k) => {
    const value = declarations[k];
    return isObject(value) && Object.keys(value).every((field) => field === 'description' || field === 'secret');
  });
  return key === undefined ? undefined : `invalid as shipped: config ${key} has neither a type nor a default (Pulumi YAML refuses it)`;
}

/** Path of the first object key in `value` that `matches` (given the key and its value). */
function findKey(value: unknown, matches: (key: string, value: unknown) => boolean, path = ''): string | undefined {
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      const found = findKey(item, matches, `${path}[${i}]`);
      if (found) return found;
    }
  } else if (isObject(value)) {
    for (const [k, v] of Object.entries(value)) {
      const here = path ? `${path}.${k}` : k;
      if (matches(k, v)) return here;
      const found = findKey(v, matches, here);
      if (found) return found;
    }
  }
  return undefined;
}

/** Project config keys (`project:key`) declared with a type but no default: Pulumi needs a value for each. */
function requiredConfig(declarations: Record<string, unknown>, project: string): string[] {
  return Object.entries(declarations)
    .filter(([key, value]) => isObject(value) && value.default === undefined && ('type' in value || 'secret' in value) && qualify(key, project).startsWith(`${project}:`))
    .map(([key]) => qualify(key, project));
}

function defaults(declarations: Record<string, unknown>, project: string): Record<string, JsonValue> {
  const values: Record<string, JsonValue> = {};
  for (const [key, value] of Object.entries(declarations)) {
    if (isObject(value) && ('type' in value || 'default' in value)) {
      if (value.default !== undefined) values[qualify(key, project)] = value.default as JsonValue;
    } else values[qualify(key, project)] = value as JsonValue;
  }
  return values;
}

function stackConfig(files: ProjectFiles, stackFile: string | undefined, project: string): Record<string, JsonValue> {
  return stackFile ? qualified(asObject(readYaml(files[stackFile] ?? '')?.config) as Record<string, JsonValue>, project) : {};
}

function qualified(values: Readonly<Record<string, JsonValue>>, project: string): Record<string, JsonValue> {
  return Object.fromEntries(Object.entries(values).map(([k, v]) => [qualify(k, project), v]));
}

function configKeys(values: unknown, project: string): Set<string> {
  return new Set(Object.keys(asObject(values)).map((k) => qualify(k, project)));
}

function qualify(key: string, project: string): string {
  return key.includes(':') ? key : `${project}:${key}`;
}

/**
 * The outputs Pulumi gives when every output is static: literals, `${config}` and variables that are themselves
 * static (no resource, no `fn::`). Undefined when some output needs a resource or a function.
 */
function literalOutputs(main: Record<string, unknown>, project: string, config: Readonly<Record<string, JsonValue>>): JsonObject | undefined {
  const variables = asObject(main.variables);
  const resources = asObject(main.resources);
  const evaluating = new Set<string>();
  const evaluate = (value: unknown): JsonValue | undefined => {
    if (typeof value === 'string') return interpolate(value);
    if (Array.isArray(value)) {
      const items = value.map(evaluate);
      return items.every((i) => i !== undefined) ? (items) : undefined;
    }
    if (isObject(value)) {
      if (Object.keys(value).some((k) => k.startsWith('fn::'))) return undefined;
      // Keys are interpolated as values are (`$${` in a key is a literal `${` in Pulumi's output too).
      const entries = Object.entries(value).map(([k, v]) => [interpolate(k), evaluate(v)] as const);
      return entries.every(([k, v]) => typeof k === 'string' && v !== undefined) ? (Object.fromEntries(entries) as JsonObject) : undefined;
    }
    return value as JsonValue;
  };
  const lookup = (root: string): JsonValue | undefined => {
    if (Object.hasOwn(resources, root) || root === 'pulumi') return undefined;
    if (Object.hasOwn(variables, root)) {
      if (evaluating.has(root)) return undefined;
      evaluating.add(root);
      const value = evaluate(variables[root]);
      evaluating.delete(root);
      return value;
    }
    return config[qualify(root, project)];
  };
  const interpolate = (text: string): JsonValue | undefined => {
    const whole = /^\$\{([A-Za-z_][\w:-]*)\}$/.exec(text);
    if (whole?.[1]) return lookup(whole[1]);
    let unknown = false;
    const joined = text.replace(/\$\$\{|\$\{([^}]*)\}/g, (match, expression: string | undefined) => {
      if (expression === undefined) return '${';
      const value = /^[A-Za-z_][\w:-]*$/.test(expression.trim()) ? lookup(expression.trim()) : undefined;
      if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return String(value);
      unknown = true;
      return match;
    });
    return unknown ? undefined : joined;
  };
  const outputs: Record<string, JsonValue> = {};
  for (const [key, value] of Object.entries(asObject(main.outputs))) {
    const evaluated = evaluate(value);
    if (evaluated === undefined) return undefined;
    outputs[key] = evaluated;
  }
  return outputs;
}

/**
 * The change: the first top-level scalar property written as a literal (no `${`) of the first resource that has
 * one, in declaration order — a string gets `-changed` appended, a number + 1, a boolean flipped. Without one,
 * the first project config key with a scalar default that some resource's properties use, changed the same way
 * through the stack's config. Without either, a property `corpusChange: added` added to the first resource.
 * Undefined when the program declares no resource.
 */
function chooseChange(files: ProjectFiles, main: MainTemplate, project: string, config: ConfigOverrides): ProgramChange | undefined {
  const resources = asObject(main.doc.resources);
  for (const [name, resource] of Object.entries(resources)) {
    const properties = isObject(resource) ? asObject(resource.properties) : {};
    for (const [property, from] of Object.entries(properties)) {
      const to = changed(from);
      if (to === undefined) continue;
      return { kind: 'property', resource: name, property, from: from as JsonValue, to, files: { ...files, [main.file]: withProperty(files[main.file] ?? '', main.file, [name, property], to) } };
    }
  }
  const used = JSON.stringify(Object.values(resources).map((r) => (isObject(r) ? r.properties : undefined)));
  for (const [key, value] of Object.entries(main.declarations)) {
    const full = qualify(key, project);
    if (!full.startsWith(`${project}:`)) continue;
    const plain = full.slice(project.length + 1);
    const from = full in config ? config[full] : key in config ? config[key] : isObject(value) ? value.default : value;
    const to = changed(from);
    if (to === undefined || !(used.includes(`\${${plain}}`) || used.includes(`\${${full}}`))) continue;
    return { kind: 'config', key, from: from as JsonValue, to, config: { ...config, [key]: to } };
  }
  const first = Object.keys(resources).find((name) => {
    const resource = resources[name];
    return isObject(resource) && (resource.properties === undefined || resource.properties === null || isObject(resource.properties));
  });
  if (first === undefined) return undefined;
  const added = { kind: 'property', resource: first, property: 'corpusChange', from: null, to: 'added' } as const;
  return { ...added, files: { ...files, [main.file]: withProperty(files[main.file] ?? '', main.file, [first, added.property], added.to) } };
}

/** A program whose text the change cannot be written into (odd YAML) gets no change, not a crash of the run. */
function safely<T>(choose: () => T | undefined): T | undefined {
  try {
    return choose();
  } catch {
    return undefined;
  }
}

function changed(value: unknown): JsonValue | undefined {
  if (typeof value === 'string') return value.includes('${') ? undefined : `${value}-changed`;
  if (typeof value === 'number') return value + 1;
  if (typeof value === 'boolean') return !value;
  return undefined;
}

/** The file with `resources.<name>.properties.<property>` set to `value`, the rest of the text as written. */
function withProperty(text: string, file: string, [name, property]: readonly [string, string], value: JsonValue): string {
  if (file.endsWith('.json')) {
    const doc = JSON.parse(text) as { resources: Record<string, { properties?: Record<string, unknown> }> };
    const resource = doc.resources[name];
    if (resource) resource.properties = { ...resource.properties, [property]: value };
    return JSON.stringify(doc, null, 2);
  }
  const doc = parseDocument(text);
  doc.setIn(['resources', name, 'properties', property], value);
  return doc.toString();
}

function readYaml(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = parseDocument(text).toJS({ maxAliasCount: 100 });
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function readJson(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asObject(value: unknown): Record<string, unknown> {
  return isObject(value) ? value : {};
}
