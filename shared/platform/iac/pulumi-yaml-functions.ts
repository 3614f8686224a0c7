import { createHash } from 'node:crypto';
import { AppError } from '../errors/app-error';
import {
  archive,
  asset,
  formatPath,
  invalidProject,
  isComputed,
  isPlainObject,
  isSecretValue,
  SIG_KEY,
  ASSET_SIG,
  ARCHIVE_SIG,
  unsupported,
  type JsonObject,
  type JsonValue,
  type PathSegment,
} from './iac-values';

/**
 * The built-in functions of Pulumi YAML (`fn::join`, `fn::readFile`, ...): how a call is recognised in a parsed
 * document, the shape of its arguments, and what it computes from evaluated arguments. The list and the semantics
 * are pulumi-yaml's (pkg/pulumiyaml/ast/expr.go `tryParseFunction`, run.go `evaluateBuiltin*`): names without case
 * (`Fn::Join` is `fn::join`), `fn::<pkg>:<module>:<function>` as a short form of `fn::invoke`. Pure.
 *
 * Pulumi YAML has no `fn::abs`, `fn::floor`, `fn::stringLen` or `fn::method`; like every other `fn::` key it does
 * not know, they fail the plan with `IAC.UNSUPPORTED` rather than pass as a plain object.
 */

export type FunctionName =
  | 'fn::invoke'
  | 'fn::join'
  | 'fn::split'
  | 'fn::select'
  | 'fn::toJSON'
  | 'fn::toBase64'
  | 'fn::fromBase64'
  | 'fn::secret'
  | 'fn::unsecret'
  | 'fn::readFile'
  | 'fn::filebase64'
  | 'fn::filebase64sha256'
  | 'fn::sha1'
  | 'fn::length'
  | 'fn::singleOrNone'
  | 'fn::pulumiResourceName'
  | 'fn::pulumiResourceType'
  | 'fn::stackReference'
  | 'fn::assetArchive'
  | 'fn::stringAsset'
  | 'fn::fileAsset'
  | 'fn::remoteAsset'
  | 'fn::fileArchive'
  | 'fn::remoteArchive';

const NAMES: readonly FunctionName[] = [
  'fn::invoke',
  'fn::join',
  'fn::split',
  'fn::select',
  'fn::toJSON',
  'fn::toBase64',
  'fn::fromBase64',
  'fn::secret',
  'fn::unsecret',
  'fn::readFile',
  'fn::filebase64',
  'fn::filebase64sha256',
  'fn::sha1',
  'fn::length',
  'fn::singleOrNone',
  'fn::pulumiResourceName',
  'fn::pulumiResourceType',
  'fn::stackReference',
  'fn::assetArchive',
  'fn::stringAsset',
  'fn::fileAsset',
  'fn::remoteAsset',
  'fn::fileArchive',
  'fn::remoteArchive',
];
const BY_LOWER = new Map(NAMES.map((n) => [n.toLowerCase(), n]));
const ASSETS_AND_ARCHIVES = new Set<FunctionName>(['fn::stringAsset', 'fn::fileAsset', 'fn::remoteAsset', 'fn::fileArchive', 'fn::remoteArchive', 'fn::assetArchive']);
/** `fn::aws:ec2:getAmi`: an invoke of that function token (expr.go `fnInvokeRegex`). */
export const INVOKE_SHORT_FORM = /^fn::[^:]+:[^:]+(:[^:]+)?$/;

/** A call as written: the canonical name, the key as written (for paths) and the arguments as written. */
export interface FunctionCall {
  readonly name: FunctionName;
  readonly key: string;
  readonly args: JsonValue;
}

/**
 * The call `value` is, or undefined when it is an ordinary object. A call is an object with one `fn::` key; an
 * `fn::` key Pulumi YAML does not define, or one beside other keys, is `IAC.UNSUPPORTED`. The short invoke form
 * becomes `fn::invoke` with `{ function, arguments }`.
 */
export function functionCall(value: JsonObject, path: readonly PathSegment[]): FunctionCall | undefined {
  const keys = Object.keys(value);
  const fnKey = keys.find((k) => k.toLowerCase().startsWith('fn::'));
  if (fnKey === undefined) return undefined;
  const at = formatPath([...path, fnKey]);
  if (keys.length !== 1) throw invalidProject(`${at}: a function call must be the only key of its object`, { path: at });
  const args = value[fnKey] as JsonValue;
  const name = BY_LOWER.get(fnKey.toLowerCase());
  if (name) return { name, key: fnKey, args };
  if (INVOKE_SHORT_FORM.test(fnKey.toLowerCase())) {
    const token = fnKey.slice(4);
    return { name: 'fn::invoke', key: fnKey, args: isPlainObject(args) ? { function: token, arguments: args } : { function: token } };
  }
  throw unsupported(fnKey, at);
}

export function isAssetOrArchiveCall(call: FunctionCall): boolean {
  return ASSETS_AND_ARCHIVES.has(call.name);
}

/** The parts of an `fn::invoke` argument, keys without case as Pulumi YAML reads them. */
export interface InvokeArguments {
  readonly token: string;
  readonly arguments: JsonValue;
  readonly options: JsonObject;
  readonly return?: string;
}

/**
 * Checks the shape of a call's arguments as pulumi-yaml's parser does (a two-valued list for join, split, select; an
 * object with `function` for invoke; assets and archives in assetArchive), before anything is evaluated.
 */
export function checkCall(call: FunctionCall, path: readonly PathSegment[]): void {
  const at = [...path, call.key];
  const where = formatPath(at);
  const fail = (message: string) => invalidProject(`${where}: ${message}`, { path: where });
  switch (call.name) {
    case 'fn::join':
    case 'fn::split':
    case 'fn::select':
    case 'fn::stackReference':
      if (!Array.isArray(call.args) || call.args.length !== 2) throw fail(`the argument to ${call.name} must be a two-valued list`);
      return;
    case 'fn::invoke':
      invokeArguments(call, path);
      return;
    case 'fn::assetArchive': {
      if (!isPlainObject(call.args)) throw fail('the argument to fn::assetArchive must be an object');
      for (const [key, value] of Object.entries(call.args)) {
        if (key.includes('${')) throw invalidProject(`${formatPath([...at, key])}: keys in fn::assetArchive arguments must be string literals`, { path: formatPath([...at, key]) });
        const inner = isPlainObject(value) ? functionCall(value, [...at, key]) : undefined;
        if (!inner || !isAssetOrArchiveCall(inner)) throw invalidProject(`${formatPath([...at, key])}: value must be an asset or an archive`, { path: formatPath([...at, key]) });
      }
      return;
    }
    default:
      return;
  }
}

/** The parts of an `fn::invoke` call; `path` is where the call is. */
export function invokeArguments(call: FunctionCall, path: readonly PathSegment[]): InvokeArguments {
  const where = formatPath([...path, call.key]);
  if (!isPlainObject(call.args)) {
    throw invalidProject(`${where}: the argument to fn::invoke must be an object containing 'function', 'arguments', 'options', and 'return'`, { path: where });
  }
  const part = (name: string) => {
    const key = Object.keys(call.args as JsonObject).find((k) => k.toLowerCase() === name);
    return key === undefined ? undefined : (call.args as JsonObject)[key];
  };
  const token = part('function');
  if (typeof token !== 'string' || token.includes('${')) throw invalidProject(`${where}: function name must be a string literal`, { path: `${where}.function` });
  const args = part('arguments') ?? {};
  if (!isPlainObject(args)) throw invalidProject(`${where}: function arguments ('arguments') must be an object`, { path: `${where}.arguments` });
  const options = part('options') ?? {};
  if (!isPlainObject(options)) throw invalidProject(`${where}: invoke options must be an object`, { path: `${where}.options` });
  const ret = part('return');
  if (ret !== undefined && typeof ret !== 'string') throw invalidProject(`${where}: return directive must be a string literal`, { path: `${where}.return` });
  return { token, arguments: args, options, ...(ret === undefined ? {} : { return: ret }) };
}

// ---------------------------------------------------------------------------------------------------------------
// Evaluation of the functions that compute from known values. The evaluator (pulumi-yaml.ts) evaluates arguments,
// makes a call of an unknown (computed) argument unknown, and unwraps secrets first and marks the result secret.

/** What a function needs of the program: the project folder's files, resolved from the program folder. */
export interface FunctionHost {
  /** The text of a file, by a path relative to the program folder; undefined when there is none in the folder. */
  readFile(path: string): string | undefined;
  /** Whether a file or folder exists at a path relative to the program folder. */
  exists(path: string): boolean;
}

function typeName(value: JsonValue): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (isPlainObject(value)) return 'an object';
  return typeof value === 'number' ? 'a number' : typeof value === 'string' ? 'a string' : 'a boolean';
}

function functionError(name: string, path: string, message: string): AppError {
  return new AppError('IAC.INVALID_FUNCTION', 'validation', `${path}: ${name}: ${message}`, { path, function: name });
}

/** A call's result from its evaluated arguments (every one known, none secret). `path` names the call. */
export function applyFunction(name: FunctionName, args: JsonValue, path: string, host: FunctionHost): JsonValue {
  const fail = (message: string) => functionError(name, path, message);
  const text = (value: JsonValue, what: string): string => {
    if (typeof value !== 'string') throw fail(`${what} must be a string, not ${typeName(value)}`);
    return value;
  };
  const list = args as readonly JsonValue[];
  switch (name) {
    case 'fn::join': {
      const delimiter = list[0] === null ? '' : text(list[0] ?? null, 'the delimiter');
      const parts = list[1] ?? null;
      if (!Array.isArray(parts)) throw fail(`the second argument must be a list, found ${typeName(parts)}`);
      return (parts as readonly JsonValue[]).map((p, i) => {
        if (typeof p !== 'string') throw fail(`the second argument must be a list of strings, found ${typeName(p)} at index ${i}`);
        return p;
      }).join(delimiter);
    }
    case 'fn::split':
      return text(list[1] ?? null, 'the source').split(text(list[0] ?? null, 'the delimiter'));
    case 'fn::select': {
      const index = list[0] ?? null;
      if (typeof index !== 'number') throw fail(`index must be a number, not ${typeName(index)}`);
      if (!Number.isInteger(index) || index < 0) throw fail(`index must be a positive integral, not ${index}`);
      const values = list[1] ?? null;
      if (!Array.isArray(values)) throw fail(`the second argument must be a list, not ${typeName(values)}`);
      const selected = (values as readonly JsonValue[])[index];
      if (selected === undefined) throw fail(`list index ${index} out-of-bounds for list of length ${values.length}`);
      return selected;
    }
    case 'fn::toJSON':
      return goJson(args);
    case 'fn::toBase64':
      return Buffer.from(text(args, 'the argument'), 'utf8').toString('base64');
    case 'fn::fromBase64': {
      const encoded = text(args, 'the argument');
      if (encoded.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(encoded)) throw fail(`unable to decode ${JSON.stringify(encoded)}: not standard base64`);
      const bytes = Buffer.from(encoded, 'base64');
      const decoded = bytes.toString('utf8');
      if (!Buffer.from(decoded, 'utf8').equals(bytes)) throw fail('output is not a valid UTF-8 string');
      return decoded;
    }
    case 'fn::readFile':
      return readFile(name, text(args, 'the path'), path, host);
    case 'fn::filebase64':
      return Buffer.from(readFile(name, text(args, 'the path'), path, host), 'utf8').toString('base64');
    case 'fn::filebase64sha256':
      return createHash('sha256').update(readFile(name, text(args, 'the path'), path, host), 'utf8').digest('base64');
    case 'fn::sha1':
      return createHash('sha1').update(text(args, 'the argument'), 'utf8').digest('hex');
    case 'fn::length':
      if (Array.isArray(args)) return args.length;
      if (isPlainObject(args)) return Object.keys(args).length;
      if (typeof args === 'string') return [...new Intl.Segmenter().segment(args)].length;
      throw fail(`requires a list, map, or string, got ${typeName(args)}`);
    case 'fn::singleOrNone': {
      if (!Array.isArray(args)) throw fail(`requires a list, got ${typeName(args)}`);
      if (args.length > 1) throw fail(`expected a list of 0 or 1 elements, got ${args.length}`);
      return (args as readonly JsonValue[])[0] ?? null;
    }
    case 'fn::stringAsset':
      return asset('text', text(args, 'the argument'));
    case 'fn::fileAsset':
      return asset('path', existing(name, text(args, 'the path'), path, host));
    case 'fn::remoteAsset':
      return asset('uri', text(args, 'the argument'));
    case 'fn::fileArchive':
      return archive('path', existing(name, text(args, 'the path'), path, host));
    case 'fn::remoteArchive':
      return archive('uri', text(args, 'the argument'));
    case 'fn::assetArchive': {
      const entries = args as JsonObject;
      for (const [key, value] of Object.entries(entries)) {
        if (!isPlainObject(value) || (value[SIG_KEY] !== ASSET_SIG && value[SIG_KEY] !== ARCHIVE_SIG)) throw fail(`${key} must be an asset or an archive`);
      }
      return archive('assets', Object.fromEntries(Object.keys(entries).sort().map((k) => [k, entries[k] as JsonValue])));
    }
    default:
      // The evaluator handles invoke, secret, unsecret, the resource functions and stackReference itself.
      throw unsupported(name, path);
  }
}

function readFile(name: string, file: string, path: string, host: FunctionHost): string {
  const content = host.readFile(file);
  if (content === undefined) throw functionError(name, path, `no file ${JSON.stringify(file)} in the project folder`);
  return content;
}

function existing(name: string, file: string, path: string, host: FunctionHost): string {
  if (!host.exists(file)) throw functionError(name, path, `no file or folder ${JSON.stringify(file)} in the project folder`);
  return file;
}

/**
 * JSON as Go's `json.Marshal` writes it, which is what `fn::toJSON` gives upstream: object keys sorted, and `<`, `>`,
 * `&`, U+2028 and U+2029 escaped.
 */
export function goJson(value: JsonValue): string {
  const encode = (v: JsonValue): string => {
    if (Array.isArray(v)) return `[${(v as readonly JsonValue[]).map(encode).join(',')}]`;
    if (isPlainObject(v)) {
      return `{${Object.keys(v)
        .sort()
        .map((k) => `${JSON.stringify(k)}:${encode(v[k] as JsonValue)}`)
        .join(',')}}`;
    }
    return JSON.stringify(v);
  };
  return encode(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Whether a value has a computed value or a secret anywhere: what decides how a call's result is marked. */
export function scanValue(value: JsonValue): { computed: boolean; secret: boolean } {
  const found = { computed: false, secret: false };
  const walk = (v: JsonValue) => {
    if (isComputed(v)) found.computed = true;
    else if (isSecretValue(v)) {
      found.secret = true;
      walk(v.value);
    } else if (Array.isArray(v)) (v as readonly JsonValue[]).forEach(walk);
    else if (isPlainObject(v)) Object.values(v).forEach(walk);
  };
  walk(value);
  return found;
}
