import { AppError } from '../../shared/platform/errors/app-error';
import type { CustomTimeouts } from '../../shared/platform/iac/plan';
import { invalidProject, isPlainObject, parsePath, unsupported, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';

/**
 * A resource of a Pulumi YAML program as written: its type token, its properties (interpolations not yet
 * evaluated), a `get:` read when it is one, and its resource options, as upstream's template takes them
 * (pulumi-yaml pkg/pulumiyaml/ast/template.go, `ResourceDecl` and `ResourceOptionsDecl`). Pure: parsed values in,
 * a declaration out. What the options do to a plan and an apply is plan.ts's and local-engine.ts's business.
 *
 * Contract with the rest of the engine: `dependsOn` names every resource this one must come after besides those
 * its properties refer to, including those named by options (`parent`, `provider`, `providers`, `deletedWith`,
 * `replaceWith`), so the project graph (pulumi-yaml.ts) orders by it alone.
 */

export interface ResourceDeclaration {
  /** Key in `resources:`, unique in the project; `${name.property}` refers to it. */
  readonly name: string;
  /** Type token `package:module:Type`; a provider is `pulumi:providers:<package>`. */
  readonly type: string;
  /** As written: `${...}` not yet evaluated. Empty for a `get:` resource. */
  readonly properties: JsonObject;
  /** Names of resources this one must come after, besides those its properties refer to (see the contract above). */
  readonly dependsOn: readonly string[];
  /** A protected resource is never deleted or replaced: such a plan is refused (`IAC.PROTECTED`). */
  readonly protect: boolean;
  /** Property paths whose changes are ignored: an update keeps the stack state's value there. */
  readonly ignoreChanges: readonly string[];
  /** The options besides the three above; every member optional, so a declaration built by hand stays valid. */
  readonly options?: ResourceOptions;
  /** `get:`: the resource is read from the target by id, never created, updated or deleted. */
  readonly get?: GetDeclaration;
  /** `name:`: the logical name in the urn when it differs from the key (upstream's `ResourceDecl.Name`). */
  readonly logicalName?: string;
  /** `defaultProvider: true` on a provider: the package's resources without `provider:` use it. */
  readonly defaultProvider?: boolean;
}

export interface GetDeclaration {
  /** As written (an interpolation, or text). */
  readonly id: JsonValue;
  /** Properties the read must find as written (`${...}` not yet evaluated). */
  readonly state: JsonObject;
}


export interface ResourceOptions {
  /** Resource name: the urn's type is the parent's qualified type `parentType$type`. */
  readonly parent?: string;
  /** Resource name of an explicit provider (`pulumi:providers:<package of this resource>`). */
  readonly provider?: string;
  /** Provider resource names, for the resource and the children it parents (by package). */
  readonly providers?: readonly string[];
  readonly version?: string;
  /** Replace deleting the old resource first (Pulumi's default creates the replacement first). */
  readonly deleteBeforeReplace?: boolean;
  /** Property paths whose change replaces the resource (`*` for any). */
  readonly replaceOnChanges?: readonly string[];
  /** A delete (or the old half of a replace) leaves the resource in the target; only the state forgets it. */
  readonly retainOnDelete?: boolean;
  /** As written: urn strings or `{ name, type, parent, noParent, stack, project, urn }`; evaluated by the plan. */
  readonly aliases?: readonly JsonValue[];
  /** The id of a target resource this one adopts on its first plan instead of creating one. */
  readonly import?: string;
  /** Output names masked (`[secret]`) wherever outputs are shown. */
  readonly additionalSecretOutputs?: readonly string[];
  readonly customTimeouts?: CustomTimeouts;
  /** Resource name: when it is deleted by the same plan, this resource's delete is skipped (it goes with it). */
  readonly deletedWith?: string;
  /** Resource names: when one of them is replaced, this resource is replaced too. */
  readonly replaceWith?: readonly string[];
  /** Property paths whose values a plan does not show (their changes still count). */
  readonly hideDiffs?: readonly string[];
  /** As written: a value whose change replaces the resource. */
  readonly replacementTrigger?: JsonValue;
}

const TYPE_TOKEN = /^[\w-]+:[\w\-/.]*:[\w.-]+$/;

/**
 * A type token as Pulumi YAML resolves it: `pkg:Type` is `pkg:index:Type` (`random:RandomPassword` is
 * `random:index:RandomPassword`); a three-part token stays. Undefined when `token` is not a token at all.
 */
export function expandTypeToken(token: string): string | undefined {
  const twoPart = /^([\w-]+):([\w.-]+)$/.exec(token);
  const expanded = twoPart ? `${twoPart[1]}:index:${twoPart[2]}` : token;
  return TYPE_TOKEN.test(expanded) ? expanded : undefined;
}

/** The package of a type token: `aws` for `aws:s3:Bucket`, `random` for `pulumi:providers:random`. */
export function packageOf(type: string): string {
  return type.startsWith('pulumi:providers:') ? type.slice('pulumi:providers:'.length) : (type.split(':')[0] ?? type);
}

export function isProviderType(type: string): boolean {
  return type.startsWith('pulumi:providers:');
}

/** iac-values.ts `unsupported`, saying why in its message (and `details.reason`). */
export function unsupportedBecause(construct: string, path: string, why: string): AppError {
  const error = unsupported(construct, path, { reason: why });
  return new AppError(error.code, error.kind, `${error.message}: ${why}`, error.details);
}

/** The members of a resource in Pulumi YAML (upstream's `ResourceDecl`). */
export const RESOURCE_MEMBERS = ['type', 'properties', 'options', 'get', 'name', 'defaultProvider'] as const;
const RESOURCE_KEYS = new Set<string>(RESOURCE_MEMBERS);

/** Every option of upstream's `ResourceOptionsDecl`, and why the refused ones are refused. */
const REFUSED_OPTIONS: Readonly<Record<string, string>> = {
  pluginDownloadURL: 'the installation decides where provider plugins come from',
  envVarMappings: "the installation decides a provider's environment",
};
const OPTION_KEYS = new Set([
  'additionalSecretOutputs',
  'aliases',
  'customTimeouts',
  'deleteBeforeReplace',
  'dependsOn',
  'ignoreChanges',
  'import',
  'parent',
  'protect',
  'provider',
  'providers',
  'version',
  'replaceOnChanges',
  'retainOnDelete',
  'replaceWith',
  'deletedWith',
  'hideDiffs',
  'replacementTrigger',
]);
/** Every option name upstream knows, the refused ones among them. */
export const OPTION_NAMES: readonly string[] = [...OPTION_KEYS, ...Object.keys(REFUSED_OPTIONS)];
/** The members of `customTimeouts`. */
export const TIMEOUT_KEYS = ['create', 'update', 'delete', 'read'] as const;
const ALIAS_KEYS = new Set(['urn', 'name', 'type', 'parent', 'noParent', 'stack', 'project']);
/** A Go duration as Pulumi parses custom timeouts: `300ms`, `1.5h`, `2h45m`. */
const DURATION = /^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$/;
const SEMVER = /^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;
const REFERENCE = /^\$\{([A-Za-z_][\w-]*)\}$/;

export function parseResource(name: string, value: JsonValue): ResourceDeclaration {
  const path = `resources.${name}`;
  if (!isPlainObject(value)) throw invalidProject(`${path} must be a mapping`, { path });
  for (const key of Object.keys(value)) {
    if (!RESOURCE_KEYS.has(key)) throw invalidProject(`${path}.${key} is not a member of a resource in Pulumi YAML`, { path: `${path}.${key}` });
  }
  const type = typeof value.type === 'string' ? expandTypeToken(value.type) : undefined;
  if (type === undefined) {
    throw invalidProject(`${path}.type must be a type token package:module:Type`, { path: `${path}.type` });
  }
  const properties = value.properties ?? {};
  // Pulumi YAML also takes the whole set as one expression (`properties: ${inputs}`); the engine plans each
  // property by its name, so it says so rather than calling the program invalid.
  if (typeof properties === 'string' && /^\$\{.*\}$/s.test(properties.trim())) {
    throw unsupportedBecause('properties given as one expression', `${path}.properties`, 'write the properties as a mapping');
  }
  if (!isPlainObject(properties)) throw invalidProject(`${path}.properties must be a mapping`, { path: `${path}.properties` });
  const options = value.options ?? {};
  if (!isPlainObject(options)) throw invalidProject(`${path}.options must be a mapping`, { path: `${path}.options` });
  for (const key of Object.keys(options)) {
    const refused = REFUSED_OPTIONS[key];
    if (refused) throw unsupportedBecause(`options.${key}`, `${path}.options.${key}`, refused);
    if (!OPTION_KEYS.has(key)) throw invalidProject(`${path}.options.${key} is not a resource option of Pulumi YAML`, { path: `${path}.options.${key}` });
  }
  const at = (key: string) => `${path}.options.${key}`;
  const protect = options.protect ?? false;
  if (typeof protect !== 'boolean') throw invalidProject(`${at('protect')} must be true or false`, { path: at('protect') });
  const ignoreChanges = propertyPaths(options.ignoreChanges, at('ignoreChanges'));

  const parent = resourceReference(options.parent, at('parent'));
  const provider = resourceReference(options.provider, at('provider'));
  const providers = resourceReferences(options.providers, at('providers'));
  const deletedWith = resourceReference(options.deletedWith, at('deletedWith'));
  const replaceWith = resourceReferences(options.replaceWith, at('replaceWith'));
  const explicitDependsOn = resourceReferences(options.dependsOn, at('dependsOn'));

  const parsed: Record<string, unknown> = {
    ...(parent !== undefined ? { parent } : {}),
    ...(provider !== undefined ? { provider } : {}),
    ...(providers.length > 0 ? { providers } : {}),
    ...(deletedWith !== undefined ? { deletedWith } : {}),
    ...(replaceWith.length > 0 ? { replaceWith } : {}),
    ...optionalString(options.version, at('version'), SEMVER, 'a semantic version (1.2.3)', 'version'),
    ...optionalBoolean(options.deleteBeforeReplace, at('deleteBeforeReplace'), 'deleteBeforeReplace'),
    ...optionalBoolean(options.retainOnDelete, at('retainOnDelete'), 'retainOnDelete'),
    ...optionalString(options.import, at('import'), /^[^$]+$/, 'a literal resource id', 'import'),
    ...nonEmpty('replaceOnChanges', replaceOnChangesPaths(options.replaceOnChanges, at('replaceOnChanges'))),
    ...nonEmpty('hideDiffs', propertyPaths(options.hideDiffs, at('hideDiffs'))),
    ...nonEmpty('additionalSecretOutputs', outputNames(options.additionalSecretOutputs, at('additionalSecretOutputs'))),
    ...(options.aliases !== undefined ? { aliases: aliasList(options.aliases, at('aliases')) } : {}),
    ...(options.customTimeouts !== undefined ? { customTimeouts: customTimeouts(options.customTimeouts, at('customTimeouts')) } : {}),
    ...(options.replacementTrigger !== undefined ? { replacementTrigger: options.replacementTrigger } : {}),
  };
  if (isProviderType(type) && provider !== undefined) throw invalidProject(`${at('provider')}: a provider takes no provider`, { path: at('provider') });

  const logicalName = value.name;
  if (logicalName !== undefined && (typeof logicalName !== 'string' || !/^[^:]+$/.test(logicalName) || logicalName.includes('::'))) {
    throw invalidProject(`${path}.name must be text without ':'`, { path: `${path}.name` });
  }
  const defaultProvider = value.defaultProvider;
  if (defaultProvider !== undefined && typeof defaultProvider !== 'boolean') throw invalidProject(`${path}.defaultProvider must be true or false`, { path: `${path}.defaultProvider` });
  if (defaultProvider !== undefined && !isProviderType(type)) {
    throw invalidProject(`${path}.defaultProvider: only a provider (pulumi:providers:<package>) can be a default provider`, { path: `${path}.defaultProvider` });
  }

  const get = value.get === undefined ? undefined : getDeclaration(value.get, `${path}.get`);
  if (get && value.properties !== undefined) throw invalidProject(`${path}: a get resource takes no properties (give them as get.state)`, { path: `${path}.properties` });
  if (get && isProviderType(type)) throw invalidProject(`${path}.get: a provider cannot be read`, { path: `${path}.get` });

  const optionRefs = [parent, provider, ...providers, deletedWith, ...replaceWith].filter((n): n is string => n !== undefined);
  const dependsOn = [...new Set([...explicitDependsOn, ...optionRefs])];
  if (dependsOn.includes(name)) throw invalidProject(`${path}.options: a resource cannot name itself`, { path: `${path}.options` });
  return {
    name,
    type,
    properties: get ? {} : properties,
    dependsOn,
    protect,
    ignoreChanges,
    ...(Object.keys(parsed).length > 0 ? { options: parsed } : {}),
    ...(get ? { get } : {}),
    ...(logicalName !== undefined ? { logicalName } : {}),
    ...(defaultProvider !== undefined ? { defaultProvider } : {}),
  };
}

/** `${name}` → name; anything else is not a resource. */
function resourceReference(value: JsonValue | undefined, path: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  const match = typeof value === 'string' ? REFERENCE.exec(value) : null;
  if (!match?.[1]) throw invalidProject(`${path} must be a resource reference \${name}`, { path });
  return match[1];
}

function resourceReferences(value: JsonValue | undefined, path: string): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw invalidProject(`${path} must be a list of resource references \${name}`, { path });
  return (value as readonly JsonValue[]).map((entry, i) => resourceReference(entry, `${path}[${i}]`) as string);
}

function stringList(value: JsonValue | undefined, path: string): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw invalidProject(`${path} must be a list of strings`, { path });
  return [...(value as readonly string[])];
}

function propertyPaths(value: JsonValue | undefined, path: string): string[] {
  const entries = stringList(value, path);
  entries.forEach((entry, i) => {
    if (!parsePath(entry)) throw invalidProject(`${path}[${i}] is not a property path`, { path: `${path}[${i}]` });
  });
  return entries;
}

/** Property paths, or `*` (any change replaces), as Pulumi's replaceOnChanges takes them. */
function replaceOnChangesPaths(value: JsonValue | undefined, path: string): string[] {
  const entries = stringList(value, path);
  entries.forEach((entry, i) => {
    if (entry !== '*' && !parsePath(entry.replace(/\[\*\]/g, '[0]'))) throw invalidProject(`${path}[${i}] is not a property path`, { path: `${path}[${i}]` });
  });
  return entries;
}

function outputNames(value: JsonValue | undefined, path: string): string[] {
  const entries = stringList(value, path);
  entries.forEach((entry, i) => {
    if (!/^[A-Za-z_][\w-]*$/.test(entry)) throw invalidProject(`${path}[${i}] is not an output name`, { path: `${path}[${i}]` });
  });
  return entries;
}

function nonEmpty(key: string, list: readonly string[]): Record<string, readonly string[]> {
  return list.length > 0 ? { [key]: list } : {};
}

function optionalBoolean(value: JsonValue | undefined, path: string, key: string): Record<string, boolean> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'boolean') throw invalidProject(`${path} must be true or false`, { path });
  return { [key]: value };
}

function optionalString(value: JsonValue | undefined, path: string, pattern: RegExp, what: string, key: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'string' || !pattern.test(value)) throw invalidProject(`${path} must be ${what}`, { path });
  return { [key]: value };
}

function aliasList(value: JsonValue, path: string): JsonValue[] {
  if (!Array.isArray(value)) throw invalidProject(`${path} must be a list of urns or alias mappings`, { path });
  return (value as readonly JsonValue[]).map((entry, i) => {
    const at = `${path}[${i}]`;
    if (typeof entry === 'string') return entry;
    if (!isPlainObject(entry)) throw invalidProject(`${at} must be a urn or a mapping of ${[...ALIAS_KEYS].join(', ')}`, { path: at });
    for (const key of Object.keys(entry)) {
      if (!ALIAS_KEYS.has(key)) throw invalidProject(`${at}.${key} is not a member of an alias (${[...ALIAS_KEYS].join(', ')})`, { path: `${at}.${key}` });
    }
    if (entry.noParent !== undefined && typeof entry.noParent !== 'boolean') throw invalidProject(`${at}.noParent must be true or false`, { path: `${at}.noParent` });
    if (entry.noParent === true && entry.parent !== undefined) throw invalidProject(`${at}: parent and noParent exclude each other`, { path: at });
    return entry;
  });
}

/** A Go duration, as Pulumi parses custom timeouts. */
export function isDuration(value: JsonValue): boolean {
  return typeof value === 'string' && DURATION.test(value);
}

/** As written: a duration, or an interpolation the plan evaluates and checks (`${createTimeout}`). */
function customTimeouts(value: JsonValue, path: string): CustomTimeouts {
  if (!isPlainObject(value)) throw invalidProject(`${path} must be a mapping of create, update, delete, read`, { path });
  const timeouts: Record<string, string> = {};
  for (const [key, duration] of Object.entries(value)) {
    if (!(TIMEOUT_KEYS as readonly string[]).includes(key)) throw invalidProject(`${path}.${key} is not a timeout (create, update, delete, read)`, { path: `${path}.${key}` });
    if (typeof duration !== 'string' || !(isDuration(duration) || duration.includes('${'))) {
      throw invalidProject(`${path}.${key} must be a duration such as 30s, 5m or 1h30m`, { path: `${path}.${key}` });
    }
    timeouts[key] = duration;
  }
  return timeouts;
}

function getDeclaration(value: JsonValue, path: string): GetDeclaration {
  if (!isPlainObject(value)) throw invalidProject(`${path} must be a mapping of id and state`, { path });
  for (const key of Object.keys(value)) {
    if (key !== 'id' && key !== 'state') throw invalidProject(`${path}.${key} is not a member of get (id, state)`, { path: `${path}.${key}` });
  }
  const id = value.id;
  if (typeof id !== 'string' || id.trim() === '') throw invalidProject(`${path}.id must be the id of the resource to read`, { path: `${path}.id` });
  const state = value.state ?? {};
  if (!isPlainObject(state)) throw invalidProject(`${path}.state must be a mapping`, { path: `${path}.state` });
  return { id, state };
}

/**
 * The roots of the `${...}` in a get's id and state (`net` for `${net.id}`): the plan orders a get after the
 * resources among them (the project graph sees properties only; these may also name config and variables).
 */
export function getRoots(get: GetDeclaration): string[] {
  const roots: string[] = [];
  const walk = (value: JsonValue) => {
    if (typeof value === 'string') for (const m of value.matchAll(/(?<!\$)\$\{\s*([A-Za-z_][\w-]*)/g)) roots.push(m[1] as string);
    else if (Array.isArray(value)) (value as readonly JsonValue[]).forEach(walk);
    else if (isPlainObject(value)) Object.values(value).forEach(walk);
  };
  walk(get.id);
  walk(get.state);
  return [...new Set(roots)];
}

export type { CustomTimeouts };
