import { invalidProject, isPlainObject, parsePath, type JsonObject, type JsonValue } from './iac-values';

/**
 * A resource of a Pulumi YAML program as written: its type token, its properties (interpolations not yet
 * evaluated) and its resource options. Pure: parsed values in, a declaration out.
 *
 * Contract with the rest of the engine: `dependsOn` names every resource this one must come after besides those
 * its properties refer to, including those named by options (`parent`, `provider`, `providers`, `deletedWith`),
 * so the project graph (pulumi-yaml.ts) orders by it alone.
 */

export interface ResourceDeclaration {
  /** Logical name, unique in the project; `${name.property}` refers to it. */
  readonly name: string;
  /** Type token `package:module:Type`. */
  readonly type: string;
  /** As written: `${...}` not yet evaluated. */
  readonly properties: JsonObject;
  /** Names of resources this one must come after, besides those its properties refer to. */
  readonly dependsOn: readonly string[];
  /** A protected resource is never deleted or replaced: such a plan is refused (`IAC.PROTECTED`). */
  readonly protect: boolean;
  /** Property paths whose changes are ignored: an update keeps the stack state's value there. */
  readonly ignoreChanges: readonly string[];
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
const RESOURCE_KEYS = new Set(['type', 'properties', 'options']);
const OPTION_KEYS = new Set(['dependsOn', 'protect', 'ignoreChanges']);

export function parseResource(name: string, value: JsonValue): ResourceDeclaration {
  const path = `resources.${name}`;
  if (!isPlainObject(value)) throw invalidProject(`${path} must be a mapping`, { path });
  for (const key of Object.keys(value)) {
    // Silently ignoring a feature (get, defaultProvider, ...) would plan something other than what was written.
    if (!RESOURCE_KEYS.has(key)) throw invalidProject(`${path}.${key} is not supported by the local engine`, { path: `${path}.${key}` });
  }
  const type = typeof value.type === 'string' ? expandTypeToken(value.type) : undefined;
  if (type === undefined) {
    throw invalidProject(`${path}.type must be a type token package:module:Type`, { path: `${path}.type` });
  }
  const properties = value.properties ?? {};
  if (!isPlainObject(properties)) throw invalidProject(`${path}.properties must be a mapping`, { path: `${path}.properties` });
  const options = value.options ?? {};
  if (!isPlainObject(options)) throw invalidProject(`${path}.options must be a mapping`, { path: `${path}.options` });
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) throw invalidProject(`${path}.options.${key} is not supported by the local engine`, { path: `${path}.options.${key}` });
  }
  const protect = options.protect ?? false;
  if (typeof protect !== 'boolean') throw invalidProject(`${path}.options.protect must be true or false`, { path: `${path}.options.protect` });
  const dependsOn = stringList(options.dependsOn, `${path}.options.dependsOn`).map((entry, i) => {
    const match = /^\$\{([A-Za-z_][\w-]*)\}$/.exec(entry);
    if (!match?.[1]) throw invalidProject(`${path}.options.dependsOn[${i}] must be a resource reference \${name}`, { path: `${path}.options.dependsOn[${i}]` });
    return match[1];
  });
  const ignoreChanges = stringList(options.ignoreChanges, `${path}.options.ignoreChanges`);
  ignoreChanges.forEach((entry, i) => {
    if (!parsePath(entry)) throw invalidProject(`${path}.options.ignoreChanges[${i}] is not a property path`, { path: `${path}.options.ignoreChanges[${i}]` });
  });
  return { name, type, properties, dependsOn, protect, ignoreChanges };
}

function stringList(value: JsonValue | undefined, path: string): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw invalidProject(`${path} must be a list of strings`, { path });
  return [...(value)];
}
