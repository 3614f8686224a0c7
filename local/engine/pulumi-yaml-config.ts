import { AppError } from '../../shared/platform/errors/app-error';
import { asValueReference, formatPath, invalidProject, isPlainObject, unsupported, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { canonical, canonicalKeys, located, optionalMap, parseYamlSource, type SourceFile } from '../../shared/platform/iac/pulumi-yaml-source';

/**
 * Config of a Pulumi YAML project as the language host reads it: declarations (`config:` / `configuration:` of the
 * project and program files), values of `Pulumi.<stack>.yaml`, and the resolved value of every key, converted from
 * the text Pulumi passes config as. Pure.
 */

export type ConfigType = 'string' | 'integer' | 'number' | 'boolean' | 'array' | 'object';

export interface ConfigDeclaration {
  /** Full key with its namespace: `my-project:poolSize`, `azure:location`. */
  readonly key: string;
  readonly type?: ConfigType;
  /** The element type of an `array` (`List<String>`, `items: { type: string }`). */
  readonly items?: ConfigType;
  readonly default?: JsonValue;
  /** A value set in the project file itself (`value:`), under the stack file's. */
  readonly value?: JsonValue;
  /** A secret key only accepts a `{ secretRef }` value, so no secret is ever written in Git in the clear. */
  readonly secret: boolean;
  /** Where it is declared (`config.poolSize`), so config errors name the line. */
  readonly path?: string;
  /**
   * The key the program refers to it by, when `name:` reads another key (`key` is then `project:<name>`): Pulumi
   * YAML reads the value under `name` and registers it under the map key (run.go `registerConfig`).
   */
  readonly programKey?: string;
}


/** Config values by full key (`project:key`); a value may be a `ValueReference`, resolved only by apply. */
export type ResolvedConfig = ReadonlyMap<string, JsonValue>;

const CONFIG_FIELDS = canonical(['type', 'name', 'secret', 'default', 'value', 'items', 'description']);

/**
 * Config declarations (ast/template.go `ConfigMapDecl`): `key: { type, default, secret, items, name, value }`
 * (keys without case), or `key: value`, a default with its type inferred. `ns:key: value` sets another
 * namespace's key (`aws:region: us-east-1`).
 */
export function parseDeclarations(config: JsonObject, project: string, section: string): ConfigDeclaration[] {
  return Object.entries(config).map(([rawKey, raw]) => {
    const path = `${section}.${rawKey}`;
    if (!isPlainObject(raw)) {
      const key = fullConfigKey(rawKey, project, path);
      return rawKey.includes(':') ? { key, value: raw, secret: false, path } : { key, default: raw, secret: false, path };
    }
    const value = canonicalKeys(raw, CONFIG_FIELDS, path);
    for (const k of Object.keys(value)) if (!CONFIG_FIELDS.has(k.toLowerCase())) throw unsupported(`config field ${k}`, `${path}.${k}`);
    const renamed = value.name;
    if (renamed !== undefined && (typeof renamed !== 'string' || renamed === '')) throw invalidProject(`${path}.name must be a config key`, { path: `${path}.name` });
    const key = fullConfigKey(renamed ?? rawKey, project, path);
    const programKey = renamed === undefined ? undefined : fullConfigKey(rawKey, project, path);
    if (value.type === undefined && value.default === undefined && value.value === undefined) {
      throw invalidProject(`${path}: unable to infer type: either 'default' or 'type' is required`, { path });
    }
    const parsedType = value.type === undefined ? undefined : configType(value.type, `${path}.type`);
    const itemsType = isPlainObject(value.items) && value.items.type !== undefined ? configType(value.items.type, `${path}.items.type`).type : undefined;
    const items = parsedType?.items ?? itemsType;
    const secret = value.secret ?? false;
    if (typeof secret !== 'boolean') throw invalidProject(`${path}.secret must be true or false`, { path: `${path}.secret` });
    const declaration: ConfigDeclaration = {
      key,
      secret,
      path,
      ...(programKey && programKey !== key ? { programKey } : {}),
      ...(parsedType ? { type: parsedType.type } : {}),
      ...(items ? { items } : {}),
      ...(value.default !== undefined ? { default: value.default } : {}),
      ...(value.value !== undefined ? { value: value.value } : {}),
    };
    if (declaration.default !== undefined) convertConfigValue(declaration, declaration.default);
    return declaration;
  });
}

/**
 * A config type as Pulumi YAML spells it (config/config.go `Parse`, without case): `string`, `int`/`integer`,
 * `number`, `bool`/`boolean`, `object`, `List<T>` of those; and as the Pulumi CLI's project config does: `array`
 * (with `items`).
 */
function configType(value: JsonValue, path: string): { type: ConfigType; items?: ConfigType } {
  const text = typeof value === 'string' ? value.trim().toLowerCase() : '';
  const list = /^list<(.+)>$/.exec(text);
  if (list?.[1] !== undefined) {
    const inner = configType(list[1].trim(), path);
    if (inner.items || inner.type === 'array') throw invalidProject(`${path}: unknown config type ${JSON.stringify(value)}`, { path });
    return { type: 'array', items: inner.type };
  }
  const scalar: ConfigType | undefined =
    text === 'string' ? 'string' : text === 'int' || text === 'integer' ? 'integer' : text === 'number' ? 'number' : text === 'bool' || text === 'boolean' ? 'boolean' : text === 'object' ? 'object' : text === 'array' || text === 'list' ? 'array' : undefined;
  if (!scalar) throw invalidProject(`${path}: unknown config type ${JSON.stringify(value)}: valid types are string, integer, number, boolean, object, List<T>`, { path });
  return { type: scalar };
}

/** `key` → `project:key`; `ns:key` stays. */
function fullConfigKey(key: string, project: string, path: string): string {
  // Any name Pulumi takes (`cC-Charlie_charlie.😃⁉️` too), with at most one namespace.
  if (!/^(?:[^:\s]+:)?[^:\s]+$/u.test(key)) {
    throw new AppError('IAC.INVALID_CONFIG', 'validation', `${path}: ${JSON.stringify(key)} is not a config key`, { path });
  }
  return key.includes(':') ? key : `${project}:${key}`;
}

/** Where a config value was written: the stack file and the value's path in it (`config.poolSize`). */
export interface ConfigOrigin {
  readonly file: string;
  readonly path: string;
}

/** The `config` of `Pulumi.<stack>.yaml`: values and where each was written, by full key. */
export interface StackConfig {
  readonly values: Readonly<Record<string, JsonValue>>;
  readonly origins: Readonly<Record<string, ConfigOrigin>>;
  readonly source: SourceFile;
}

export function readStackConfig(text: string, project: string, file = 'Pulumi.<stack>.yaml'): StackConfig {
  const { value: document, source } = parseYamlSource(text, file);
  return located([source], () => {
    if (document !== null && !isPlainObject(document)) throw invalidProject(`${file} must be a mapping`, { path: file, file });
    const values: Record<string, JsonValue> = {};
    const origins: Record<string, ConfigOrigin> = {};
    for (const [rawKey, value] of Object.entries(optionalMap(document ?? {}, 'config'))) {
      const path = formatPath(['config', rawKey]);
      const key = fullConfigKey(rawKey, project, path);
      if (isPlainObject(value) && Object.keys(value).length === 1 && typeof value.secure === 'string') {
        throw new AppError('IAC.INVALID_CONFIG', 'validation', `${path}: encrypted values need the Pulumi CLI; give a { secretRef: ... } instead`, { path });
      }
      values[key] = value;
      origins[key] = { file, path };
    }
    return { values, origins, source };
  });
}

/**
 * Declared values in the project file, stack values over them, overrides over both; every declared key must end
 * with a value of its type. Values come as Pulumi passes them to the language host: as text the way `pulumi config
 * set` writes them (`"3"`, `"true"`, JSON for objects and lists) or typed as YAML writes them; a declared key's value
 * is converted to its type, an undeclared key's text as the language host converts it (pkg/server/server.go `Run`).
 */
export function resolveConfig(
  project: { readonly name: string; readonly config: readonly ConfigDeclaration[] },
  stackValues: Readonly<Record<string, JsonValue>>,
  overrides: Readonly<Record<string, JsonValue>> = {},
  origins: Readonly<Record<string, ConfigOrigin>> = {},
): ResolvedConfig {
  const values = new Map<string, JsonValue>();
  /** Where each value comes from, for errors: a stack file's line, else the declaration's. */
  const from = new Map<string, Readonly<Record<string, string>>>();
  for (const declaration of project.config) {
    // The first declaration's default wins: the CLI applies Pulumi.yaml's before the program's is read.
    if (declaration.default !== undefined && !values.has(declaration.key)) values.set(declaration.key, declaration.default);
  }
  for (const declaration of project.config) if (declaration.value !== undefined) values.set(declaration.key, declaration.value);
  for (const [key, value] of Object.entries(stackValues)) {
    values.set(key, value);
    const origin = origins[key];
    if (origin) from.set(key, { file: origin.file, path: origin.path });
  }
  for (const [rawKey, value] of Object.entries(overrides)) {
    const key = fullConfigKey(rawKey, project.name, `overrides.${rawKey}`);
    values.set(key, value);
    from.set(key, { path: `overrides.${rawKey}` });
  }
  const declaredKeys = new Set(project.config.flatMap((d) => [d.key, ...(d.programKey ? [d.programKey] : [])]));
  for (const declaration of project.config) {
    const value = values.get(declaration.key);
    if (value === undefined) {
      throw new AppError('IAC.MISSING_CONFIG', 'validation', `config ${declaration.key} is declared without a default and has no value`, { key: declaration.key, ...(declaration.path ? { path: declaration.path } : {}) });
    }
    const converted = convertConfigValue(declaration, value, from.get(declaration.key) ?? (declaration.path ? { path: declaration.path } : {}));
    values.set(declaration.key, converted);
    if (declaration.programKey) values.set(declaration.programKey, converted);
  }
  for (const [key, value] of values) if (!declaredKeys.has(key) && typeof value === 'string') values.set(key, untypedConfigValue(value));
  return values;
}

/** A declared key's value in its type, from text or from a typed value; anything else is `IAC.INVALID_CONFIG`. */
function convertConfigValue(declaration: ConfigDeclaration, value: JsonValue, where: Readonly<Record<string, string>> = declaration.path ? { path: declaration.path } : {}): JsonValue {
  const reference = asValueReference(value);
  if (declaration.secret && !(reference && 'secretRef' in reference)) {
    throw new AppError('IAC.INVALID_CONFIG', 'validation', `config ${declaration.key} is secret: give it as { secretRef: ... }`, { key: declaration.key, ...where });
  }
  // A reference's value is known only at apply; its type is the referenced system's business.
  const type = declaration.type ?? inferredType(value);
  if (reference || !type) return value;
  const converted = convertTo(type, value);
  const ok = converted !== undefined && (type !== 'array' || !declaration.items || (converted as readonly JsonValue[]).every((item) => hasType(declaration.items as ConfigType, item)));
  if (!ok) {
    const expected = declaration.items ? `List<${declaration.items}>` : type;
    throw new AppError('IAC.INVALID_CONFIG', 'validation', `config ${declaration.key} must be of type ${expected}`, { key: declaration.key, expected, ...where });
  }
  return converted;
}

function inferredType(value: JsonValue): ConfigType | undefined {
  if (typeof value === 'string') return 'string';
  if (typeof value === 'number') return 'number';
  if (typeof value === 'boolean') return 'boolean';
  if (Array.isArray(value)) return 'array';
  return isPlainObject(value) ? 'object' : undefined;
}

function hasType(type: ConfigType, value: JsonValue): boolean {
  if (type === 'string') return typeof value === 'string';
  if (type === 'integer') return Number.isInteger(value);
  if (type === 'number') return typeof value === 'number';
  if (type === 'boolean') return typeof value === 'boolean';
  if (type === 'array') return Array.isArray(value);
  return isPlainObject(value);
}

/** `value` as `type`: itself when it has the type, else converted from its text; undefined when it cannot be. */
function convertTo(type: ConfigType, value: JsonValue): JsonValue | undefined {
  if (hasType(type, value)) return value;
  if (type === 'string') return typeof value === 'number' || typeof value === 'boolean' ? String(value) : undefined;
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (type === 'integer') return /^[+-]?\d+$/.test(text) && Number.isSafeInteger(Number(text)) ? Number(text) : undefined;
  if (type === 'number') return FLOAT.test(text) ? Number(text) : undefined;
  if (type === 'boolean') return goBool(text);
  const parsed = parseJson(value);
  return parsed !== undefined && hasType(type, parsed) ? parsed : undefined;
}

const FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/** Go's `strconv.ParseBool`, which the Pulumi SDK's config reads booleans with. */
function goBool(text: string): boolean | undefined {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(text)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(text)) return false;
  return undefined;
}

function parseJson(text: string): JsonValue | undefined {
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    return undefined;
  }
}

/**
 * An undeclared key's text as the language host reads it: `0`-led text (`"01234"`) stays text, then an integer, a
 * boolean, a number, JSON, or else the text.
 */
function untypedConfigValue(text: string): JsonValue {
  if (text.length > 1 && text.startsWith('0') && !text.startsWith('0.')) return text;
  if (/^[+-]?\d+$/.test(text) && Number.isSafeInteger(Number(text))) return Number(text);
  const bool = goBool(text);
  if (bool !== undefined) return bool;
  if (FLOAT.test(text)) return Number(text);
  const parsed = parseJson(text);
  return parsed !== undefined ? parsed : text;
}
