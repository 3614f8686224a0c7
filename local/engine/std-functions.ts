import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { AppError } from '../../shared/platform/errors/app-error';
import { goJson } from '../../shared/platform/iac/pulumi-yaml-functions';
import { canonicalJson, computed, containsComputed, isPlainObject, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';

/**
 * The Pulumi Standard Library (`std`) functions a Pulumi YAML program reaches through `fn::invoke`, computed here
 * because the local engine runs no provider plugin. The list, the argument names, the result shapes (`{ result }`)
 * and the semantics, quirks included, are pulumi-std's (github.com/pulumi/pulumi-std, `provider/<function>.go` and
 * `provider/cmd/pulumi-resource-std/schema.json`). Numbers are float64 as they arrive over Pulumi's wire, so `%v`
 * and `tostring` print them as Go does (`1e+06`).
 *
 * Refused (undefined, so the plan fails `IAC.UNSUPPORTED` naming the function), because a plan must be reproducible
 * and a tenant's program may not read the host: `timestamp`, `uuid`, `bcrypt` (salted: a new value each run),
 * `rsadecrypt` (it needs a private key in the program), `file*`, `fileexists`, `pathexpand` and `abspath` (the
 * host's files, home and working folder). Not ported yet, so refused the same way: `timeadd`, `timecmp`, and
 * `base64gzip` (its bytes are Go's compressor's, which zlib does not reproduce exactly).
 *
 * Bad arguments (a missing required one, a wrong type, one the function does not take) and the peer's own errors
 * are `IAC.INVALID_FUNCTION`.
 */

type Args = JsonObject;
/** A result pulumi-std leaves out (its optional `result` was nil): the invoke answers `{}`. */
const NO_RESULT = Symbol('no result');
type StdFunction = (args: ArgReader) => JsonValue | typeof NO_RESULT;

/** `std:index:abs` (or `std:abs`) → `abs`; undefined for any other package. */
function functionName(token: string): string | undefined {
  const match = /^std:(?:index:)?([a-z0-9]+)$/.exec(token);
  return match?.[1];
}

/** The answer to an invoke of a std function, or undefined when `token` is not one implemented here. */
export function stdInvoke(token: string, args: JsonObject): JsonValue | undefined {
  const name = functionName(token);
  const fn = name === undefined || !Object.hasOwn(FUNCTIONS, name) ? undefined : FUNCTIONS[name];
  if (name === undefined || fn === undefined) return undefined;
  // An argument not known until apply makes the result unknown too, as the CLI's preview shows it.
  if (containsComputed(args)) return computed(canonicalJson({ 'fn::invoke': { function: `std:index:${name}`, arguments: args } }));
  const reader = new ArgReader(name, args);
  const result = fn(reader);
  // Every function reads all its arguments on the way to a result, so a key it did not read is one it does not take
  // (a misspelt optional argument would otherwise be ignored).
  const unknown = Object.keys(args).find((key) => !reader.read.has(key));
  if (unknown !== undefined) throw invalid(name, 'is not an argument of this function', unknown);
  return result === NO_RESULT ? {} : { result };
}

function invalid(name: string, message: string, argument?: string): AppError {
  return new AppError('IAC.INVALID_FUNCTION', 'validation', `std:${name}: ${argument === undefined ? '' : `argument '${argument}': `}${message}`, {
    function: `std:index:${name}`,
    ...(argument === undefined ? {} : { argument }),
  });
}

function typeName(value: JsonValue): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (isPlainObject(value)) return 'an object';
  return typeof value === 'number' ? 'a number' : typeof value === 'string' ? 'a string' : 'a boolean';
}

/** Reads one function's arguments by their schema names, checking each against its Go type. */
class ArgReader {
  readonly read = new Set<string>();

  constructor(
    readonly name: string,
    private readonly args: Args,
  ) {}

  fail(message: string, argument?: string): AppError {
    return invalid(this.name, message, argument);
  }

  private raw(key: string): JsonValue | undefined {
    this.read.add(key);
    return Object.hasOwn(this.args, key) ? this.args[key] : undefined;
  }

  private required(key: string): JsonValue {
    const value = this.raw(key);
    if (value === undefined) throw this.fail('is required', key);
    return value;
  }

  private check<T>(key: string, value: JsonValue, ok: boolean, what: string): T {
    if (!ok) throw this.fail(`must be ${what}, not ${typeName(value)}`, key);
    return value as T;
  }

  any(key: string): JsonValue {
    return this.required(key);
  }

  optional(key: string): JsonValue | undefined {
    const value = this.raw(key);
    return value === null ? undefined : value;
  }

  string(key: string): string {
    const value = this.required(key);
    return this.check(key, value, typeof value === 'string', 'a string');
  }

  number(key: string): number {
    const value = this.required(key);
    return this.check(key, value, typeof value === 'number', 'a number');
  }

  int(key: string): number {
    const value = this.number(key);
    if (!Number.isInteger(value)) throw this.fail(`must be an integer, not ${value}`, key);
    return value;
  }

  optionalInt(key: string): number | undefined {
    return this.optional(key) === undefined ? undefined : this.int(key);
  }

  optionalNumber(key: string): number | undefined {
    return this.optional(key) === undefined ? undefined : this.number(key);
  }

  list(key: string): readonly JsonValue[] {
    const value = this.required(key);
    return this.check(key, value, Array.isArray(value), 'a list');
  }

  object(key: string): JsonObject {
    const value = this.required(key);
    return this.check(key, value, isPlainObject(value), 'an object');
  }

  listOf<T extends JsonValue>(key: string, what: string, ok: (v: JsonValue) => boolean): readonly T[] {
    const list = this.list(key);
    list.forEach((item, i) => {
      if (!ok(item)) throw this.fail(`must be a list of ${what}, found ${typeName(item)} at index ${i}`, key);
    });
    return list as readonly T[];
  }

  strings(key: string): readonly string[] {
    return this.listOf<string>(key, 'strings', (v) => typeof v === 'string');
  }

  numbers(key: string): readonly number[] {
    return this.listOf<number>(key, 'numbers', (v) => typeof v === 'number');
  }

  lists(key: string): readonly (readonly JsonValue[])[] {
    return this.listOf<readonly JsonValue[]>(key, 'lists', (v) => Array.isArray(v));
  }
}

/** A float64 result; Pulumi's wire (and JSON) has no NaN or infinities, so those are the function's error. */
function finite(r: ArgReader, value: number): number {
  if (!Number.isFinite(value)) throw r.fail(`the result ${goFloatV(value)} is not a finite number`);
  return Object.is(value, -0) ? 0 : value;
}

// ---------------------------------------------------------------------------------------------------------------
// Go's text forms: `%v` of a decoded value, strings.Compare order, and unicode.IsSpace.

/** Shortest decimal digits and exponent of a finite x ≠ 0, as strconv finds them. */
function shortestDigits(x: number): { digits: string; exp: number } {
  const [mantissa = '', exponent = '0'] = Math.abs(x).toExponential().split('e');
  return { digits: mantissa.replace('.', ''), exp: Number(exponent) };
}

function twoDigitExponent(exp: number, upper = false): string {
  return `${upper ? 'E' : 'e'}${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
}

/** strconv's 'g' form of a float64 (what `%v` and `%g` print): shortest digits, or `precision` significant ones. */
function goFloatG(x: number, precision?: number, upper = false): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '+Inf' : '-Inf';
  const sign = x < 0 || Object.is(x, -0) ? '-' : '';
  if (x === 0) return `${sign}0`;
  const rounded = precision === undefined ? x : Number(x.toPrecision(Math.max(precision, 1)));
  const { digits, exp } = shortestDigits(rounded);
  // strconv's %g: exponent form when exp < -4 || exp >= eprec, eprec 6 for the shortest form, else the precision
  // (capped at the digit count when the number is integral).
  let eprec = precision === undefined ? 6 : Math.max(precision, 1);
  if (precision !== undefined && eprec > digits.length && digits.length >= exp + 1) eprec = digits.length;
  if (exp < -4 || exp >= eprec) {
    const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${mantissa}${twoDigitExponent(exp, upper)}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  const whole = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
  const fraction = digits.slice(exp + 1);
  return `${sign}${whole}${fraction ? `.${fraction}` : ''}`;
}

function goFloatV(x: number): string {
  return goFloatG(x);
}

/** Go's `%v` of a value decoded from Pulumi's wire (numbers float64, objects map[string]interface{}). */
function goV(value: JsonValue): string {
  if (value === null) return '<nil>';
  if (typeof value === 'number') return goFloatV(value);
  if (typeof value === 'string') return value;
  if (typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return `[${(value as readonly JsonValue[]).map(goV).join(' ')}]`;
  const object = value as JsonObject;
  return `map[${sortedKeys(object).map((k) => `${k}:${goV(object[k] as JsonValue)}`).join(' ')}]`;
}

/** Go's string order (bytes of UTF-8), which is not JavaScript's UTF-16 order for characters beyond U+FFFF. */
function goCompare(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function sortedKeys(object: JsonObject): string[] {
  return Object.keys(object).sort(goCompare);
}

const GO_SPACE = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const TRIM_SPACE = new RegExp(`^[${GO_SPACE}]+|[${GO_SPACE}]+$`, 'g');

/**
 * strings.ToUpper/ToLower: Unicode's simple, per-character mapping. JavaScript applies the full one (ß → SS, a final
 * sigma by context), so a character whose full mapping is not one character keeps Go's simple answer.
 */
function goCase(text: string, upper: boolean): string {
  return [...text]
    .map((c) => {
      if (!upper && c === '\u0130') return 'i';
      const mapped = upper ? c.toUpperCase() : c.toLowerCase();
      return [...mapped].length === 1 ? mapped : c;
    })
    .join('');
}

function graphemes(text: string): string[] {
  return [...new Intl.Segmenter().segment(text)].map((s) => s.segment);
}

// ---------------------------------------------------------------------------------------------------------------
// Go's fmt.Sprintf through pulumi-std's `formattable` (format.go): integral float64s become int64, %v of a list or
// map is its JSON, anything else is fmt's own handling, bad verbs and missing arguments included.

interface Spec {
  minus: boolean;
  plus: boolean;
  sharp: boolean;
  space: boolean;
  zero: boolean;
  width?: number;
  precision?: number;
}

function pad(text: string, spec: Spec, numeric: boolean): string {
  const width = spec.width ?? 0;
  const length = [...text].length;
  if (length >= width) return text;
  if (spec.minus) return text + ' '.repeat(width - length);
  if (spec.zero && numeric) {
    const sign = /^[+\- ]/.test(text) ? (text[0] as string) : '';
    return sign + '0'.repeat(width - length) + text.slice(sign.length);
  }
  return ' '.repeat(width - length) + text;
}

/** strconv.Quote: JSON's escapes, but Go's \a, \v and \xNN for other control bytes, and \u for U+2028/9. */
function goQuote(text: string): string {
  return JSON.stringify(text)
    .replace(/\\u00([01][0-9a-f])/g, (_m, hex: string) => (hex === '07' ? '\\a' : hex === '0b' ? '\\v' : `\\x${hex}`))
    .replace(/[\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`)
    .replace(/[\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
}

function goTypeOf(value: JsonValue, integral: boolean): string {
  if (value === null) return '';
  if (typeof value === 'number') return integral ? 'int64' : 'float64';
  if (typeof value === 'string') return 'string';
  if (typeof value === 'boolean') return 'bool';
  return Array.isArray(value) ? '[]interface {}' : 'map[string]interface {}';
}

function badVerb(verb: string, value: JsonValue, integral: boolean): string {
  if (value === null) return `%!${verb}(<nil>)`;
  const shown = typeof value === 'number' && integral ? BigInt(value).toString() : goV(value);
  return `%!${verb}(${goTypeOf(value, integral)}=${shown})`;
}

function formatInteger(n: bigint, verb: string, spec: Spec): string {
  const negative = n < 0n;
  const magnitude = negative ? -n : n;
  const base = verb === 'b' ? 2 : verb === 'o' ? 8 : verb === 'x' || verb === 'X' ? 16 : 10;
  let digits = magnitude.toString(base);
  if (verb === 'X') digits = digits.toUpperCase();
  if (spec.precision !== undefined) digits = spec.precision === 0 && magnitude === 0n ? '' : digits.padStart(spec.precision, '0');
  if (spec.sharp) digits = (verb === 'b' ? '0b' : verb === 'o' ? '0' : verb === 'x' ? '0x' : verb === 'X' ? '0X' : '') + digits;
  const sign = negative ? '-' : spec.plus ? '+' : spec.space ? ' ' : '';
  return pad(sign + digits, spec.precision === undefined ? spec : { ...spec, zero: false }, true);
}

function formatFloat(x: number, verb: string, spec: Spec): string {
  const upper = verb === 'E' || verb === 'G';
  // JavaScript's toFixed/toExponential/toPrecision stop at 100 digits.
  if ((spec.precision ?? 0) > 100) throw new FormatUnsupported('float precisions above 100');
  let body: string;
  if (!Number.isFinite(x)) body = Number.isNaN(x) ? 'NaN' : x > 0 ? '+Inf' : '-Inf';
  else if (verb === 'e' || verb === 'E') {
    const [mantissa = '', exponent = '0'] = Math.abs(x).toExponential(spec.precision ?? 6).split('e');
    body = `${x < 0 ? '-' : ''}${mantissa}${twoDigitExponent(Number(exponent), upper)}`;
  } else if (verb === 'f' || verb === 'F') {
    // toFixed turns to exponent form from 1e21; such a float64 is an integer, so its digits are exact as a bigint.
    const precision = spec.precision ?? 6;
    body = Math.abs(x) >= 1e21 ? `${BigInt(x).toString()}${precision > 0 ? `.${'0'.repeat(precision)}` : ''}` : x.toFixed(precision);
  }
  else body = goFloatG(x, spec.precision, upper);
  if (!body.startsWith('-') && !body.startsWith('+')) body = (spec.plus ? '+' : spec.space ? ' ' : '') + body;
  return pad(body, spec, Number.isFinite(x));
}

/** One verb applied to one argument, as fmt does for the value's Go type. */
function formatOne(verb: string, value: JsonValue, spec: Spec, topLevel: boolean): string {
  const integral = topLevel && typeof value === 'number' && Number.isInteger(value) && Math.abs(value) < 2 ** 63;
  if (verb === 'v' && (Array.isArray(value) || isPlainObject(value))) return topLevel ? goJson(value) : goV(value);
  if (Array.isArray(value)) return `[${(value as readonly JsonValue[]).map((v) => formatOne(verb, v, spec, false)).join(' ')}]`;
  if (isPlainObject(value)) {
    const object = value;
    return `map[${sortedKeys(object).map((k) => `${formatOne(verb, k, spec, false)}:${formatOne(verb, object[k] as JsonValue, spec, false)}`).join(' ')}]`;
  }
  if (value === null) return verb === 'v' ? pad('<nil>', spec, false) : badVerb(verb, value, false);
  if (typeof value === 'boolean') return verb === 'v' || verb === 't' ? pad(String(value), spec, false) : badVerb(verb, value, false);
  if (typeof value === 'string') {
    const cut = (t: string) => (spec.precision === undefined ? t : [...t].slice(0, spec.precision).join(''));
    switch (verb) {
      case 'v':
        return pad(spec.sharp ? goQuote(value) : cut(value), spec, false);
      case 's':
        return pad(cut(value), spec, false);
      case 'q':
        return pad(goQuote(cut(value)), spec, false);
      case 'x':
      case 'X': {
        const hex = Buffer.from(cut(value), 'utf8').toString('hex');
        return pad(verb === 'X' ? hex.toUpperCase() : hex, spec, false);
      }
      default:
        return badVerb(verb, value, false);
    }
  }
  if (integral) {
    const n = BigInt(value);
    switch (verb) {
      case 'v':
      case 'd':
        return formatInteger(n, 'd', spec);
      case 'b':
      case 'o':
      case 'x':
      case 'X':
        return formatInteger(n, verb, spec);
      case 'c':
        return pad(String.fromCodePoint(Number(n)), spec, false);
      case 'q':
        return pad(`'${String.fromCodePoint(Number(n))}'`, spec, false);
      case 'U':
        return pad(`U+${n.toString(16).toUpperCase().padStart(4, '0')}`, spec, false);
      default:
        return badVerb(verb, value, true);
    }
  }
  if ('eEfFgGv'.includes(verb)) return formatFloat(value as number, verb === 'v' ? 'g' : verb, spec);
  if ('bxX'.includes(verb)) throw new FormatUnsupported(`%${verb} of a fractional number`);
  return badVerb(verb, value, false);
}

/** A directive the port does not print as Go would; refused rather than printed differently. */
class FormatUnsupported extends Error {}

/** Bounds that keep a plan's memory finite where Go would allocate whatever it is asked to. */
const MAX_FORMAT_WIDTH = 10_000;
const MAX_RANGE_LENGTH = 1_000_000;
const MAX_INDENT = 10_000;

/** fmt.Sprintf(input, args...) with pulumi-std's formattable wrapping each argument. */
function goSprintf(input: string, args: readonly JsonValue[]): string {
  let out = '';
  let next = 0;
  let i = 0;
  while (i < input.length) {
    const c = input[i] as string;
    if (c !== '%') {
      out += c;
      i += 1;
      continue;
    }
    i += 1;
    const spec: Spec = { minus: false, plus: false, sharp: false, space: false, zero: false };
    for (; i < input.length; i += 1) {
      const f = input[i];
      if (f === '-') spec.minus = true;
      else if (f === '+') spec.plus = true;
      else if (f === '#') spec.sharp = true;
      else if (f === ' ') spec.space = true;
      else if (f === '0') spec.zero = !spec.minus;
      else break;
    }
    const digits = (): number | undefined => {
      if (input[i] === '*' || input[i] === '[') throw new FormatUnsupported('argument indexes ([n]) and * widths');
      const m = /^\d+/.exec(input.slice(i));
      if (!m) return undefined;
      i += m[0].length;
      if (Number(m[0]) > MAX_FORMAT_WIDTH) throw new FormatUnsupported(`widths and precisions above ${MAX_FORMAT_WIDTH}`);
      return Number(m[0]);
    };
    spec.width = digits();
    if (input[i] === '.') {
      i += 1;
      spec.precision = digits() ?? 0;
    }
    const verb = String.fromCodePoint(input.codePointAt(i) ?? 0);
    if (i >= input.length) {
      out += '%!(NOVERB)';
      break;
    }
    i += verb.length;
    if (verb === '%') {
      out += '%';
      continue;
    }
    if (next >= args.length) {
      out += `%!${verb}(MISSING)`;
      continue;
    }
    out += formatOne(verb, args[next] as JsonValue, spec, true);
    next += 1;
  }
  if (next < args.length) {
    const extra = args.slice(next).map((a) => (a === null ? '<nil>' : `${goTypeOf(a, typeof a === 'number' && Number.isInteger(a))}=${typeof a === 'number' && Number.isInteger(a) ? String(a) : goV(a)}`));
    out += `%!(EXTRA ${extra.join(', ')})`;
  }
  return out;
}

function sprintf(r: ArgReader, input: string, args: readonly JsonValue[]): string {
  try {
    return goSprintf(input, args);
  } catch (e) {
    if (e instanceof FormatUnsupported) throw r.fail(`${e.message} are not supported by the local engine`, 'input');
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Go's regexp (RE2) on JavaScript's engine: `(?P<name>` groups, and leading inline flags, which JavaScript spells
// as flags of the whole expression. Both are leftmost-first, so matches agree on the syntax they share.

function goRegExp(r: ArgReader, pattern: string, key: string, global: boolean): RegExp {
  let source = pattern;
  let flags = global ? 'gu' : 'u';
  const inline = /^\(\?([imsU]+)\)/.exec(source);
  if (inline) {
    if (inline[1]?.includes('U')) throw r.fail('error parsing regexp: the non-greedy flag (?U) is not supported by the local engine', key);
    flags += inline[1] ?? '';
    source = source.slice(inline[0].length);
  }
  try {
    return new RegExp(translateRe2(source), flags);
  } catch (e) {
    throw r.fail(`error parsing regexp: ${e instanceof Error ? e.message : String(e)}`, key);
  }
}

class Re2Unsupported extends Error {}

const POSIX_CLASSES: Readonly<Record<string, string>> = {
  alnum: '0-9A-Za-z',
  alpha: 'A-Za-z',
  ascii: '\\x00-\\x7f',
  blank: '\\t ',
  cntrl: '\\x00-\\x1f\\x7f',
  digit: '0-9',
  graph: '!-~',
  lower: 'a-z',
  print: ' -~',
  punct: '!-\\/:-@\\[-`{-~',
  space: '\\t\\n\\v\\f\\r ',
  upper: 'A-Z',
  word: '0-9A-Za-z_',
  xdigit: '0-9A-Fa-f',
};

/**
 * RE2 syntax as JavaScript's: `(?P<name>`, `\A`, `\z`, `\pL`, Go's ASCII `\s`, `[[:alpha:]]`. What RE2 rejects but
 * JavaScript would accept (backreferences, lookarounds) is an error, as it is upstream, rather than a match.
 */
function translateRe2(source: string): string {
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i += 1) {
    const c = source[i] as string;
    const rest = source.slice(i);
    if (c === '\\') {
      const e = source[i + 1] ?? '';
      i += 1;
      if (/[1-9]/.test(e)) throw new Re2Unsupported('invalid escape sequence: backreferences are not RE2');
      if (e === 'A' && !inClass) out += '^';
      else if (e === 'z' && !inClass) out += '$';
      else if ((e === 'p' || e === 'P') && /^[A-Za-z]$/.test(source[i + 1] ?? '')) {
        out += `\\${e}{${source[i + 1] as string}}`;
        i += 1;
      } else if (e === 's' || e === 'S') {
        const space = '\\t\\n\\f\\r ';
        out += inClass ? (e === 's' ? space : '') : e === 's' ? `[${space}]` : `[^${space}]`;
        if (inClass && e === 'S') throw new Re2Unsupported('\\S inside a character class is not supported by the local engine');
      } else out += `\\${e}`;
    } else if (inClass) {
      const posix = /^\[:(\^?)([a-z]+):\]/.exec(rest);
      if (posix) {
        const chars = POSIX_CLASSES[posix[2] as string];
        if (posix[1] || chars === undefined) throw new Re2Unsupported(`the class [:${posix[1] ?? ''}${posix[2] ?? ''}:] is not supported by the local engine`);
        out += chars;
        i += posix[0].length - 1;
      } else {
        if (c === ']') inClass = false;
        out += c;
      }
    } else if (c === '[') {
      inClass = true;
      out += c;
      // A `]` first in a class (after an optional `^`) is a literal in RE2.
      const literal = /^\[(\^?)\]/.exec(rest);
      if (literal) {
        out += `${literal[1] ?? ''}\\]`;
        i += literal[0].length - 1;
      }
    } else if (/^\(\?(=|!|<=|<!)/.test(rest)) throw new Re2Unsupported('invalid or unsupported Perl syntax: lookarounds are not RE2');
    else if (rest.startsWith('(?P<')) {
      out += '(?<';
      i += 3;
    } else out += c;
  }
  return out;
}

function groupNames(re: RegExp): (string | undefined)[] {
  const names: (string | undefined)[] = [];
  // Capture groups in source order: `(` not followed by `?`, or `(?<name>`; escaped and class characters skipped.
  const source = re.source;
  let inClass = false;
  for (let i = 0; i < source.length; i += 1) {
    const c = source[i];
    if (c === '\\') i += 1;
    else if (inClass) inClass = c !== ']';
    else if (c === '[') inClass = true;
    else if (c === '(') {
      if (source[i + 1] !== '?') names.push(undefined);
      else {
        const named = /^\(\?<([A-Za-z_]\w*)>/.exec(source.slice(i));
        if (named) names.push(named[1]);
      }
    }
  }
  return names;
}

/** regex.go / regexall.go: the match, the list of groups, or the map of named groups. */
function submatches(r: ArgReader, re: RegExp, match: RegExpExecArray): JsonValue {
  const names = groupNames(re);
  if (names.length === 0) return match[0];
  let named = false;
  for (const name of ['', ...names.map((n) => n ?? '')]) {
    if (name === '' && named) throw r.fail('regex pattern contains a mix of named and unnamed submatches, must be all named or all unnamed');
    if (name !== '') named = true;
  }
  const groups = names.map((_, i) => match[i + 1] ?? '');
  if (!named) return groups;
  return Object.fromEntries(names.map((n, i) => [n as string, groups[i] as string]));
}

/** Go's Regexp.ReplaceAllString template: `$1`, `${1}`, `$name`, `${name}` (longest name), `$$`. */
function goExpand(template: string, match: RegExpExecArray | string[], groups: Record<string, string | undefined> | undefined): string {
  return template.replace(/\$(\$|\{(\w+)\}|(\w+))/g, (_all, whole: string, braced?: string, bare?: string) => {
    if (whole === '$') return '$';
    const name = braced ?? bare ?? '';
    if (/^\d+$/.test(name)) return match[Number(name)] ?? '';
    return groups?.[name] ?? '';
  });
}

// ---------------------------------------------------------------------------------------------------------------
// CIDR arithmetic (Go's net.ParseCIDR, github.com/apparentlymart/go-cidr), on addresses as bigints.

interface Network {
  readonly bits: 32 | 128;
  readonly address: bigint;
  readonly prefix: number;
}

function parseIPv4(text: string): bigint | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  let value = 0n;
  for (const part of parts) {
    if (!/^(0|[1-9]\d{0,2})$/.test(part) || Number(part) > 255) return undefined;
    value = (value << 8n) | BigInt(part);
  }
  return value;
}

function parseIPv6(text: string): bigint | undefined {
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const groups = (half: string): bigint[] | undefined => {
    if (half === '') return [];
    const out: bigint[] = [];
    const parts = half.split(':');
    for (const [i, part] of parts.entries()) {
      if (i === parts.length - 1 && part.includes('.')) {
        const v4 = parseIPv4(part);
        if (v4 === undefined) return undefined;
        out.push(v4 >> 16n, v4 & 0xffffn);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(part)) out.push(BigInt(`0x${part}`));
      else return undefined;
    }
    return out;
  };
  const head = groups(halves[0] ?? '');
  const tail = halves.length === 2 ? groups(halves[1] ?? '') : [];
  if (!head || !tail) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  return [...head, ...Array<bigint>(missing).fill(0n), ...tail].reduce((acc, g) => (acc << 16n) | g, 0n);
}

function mask(bits: number, prefix: number): bigint {
  return ((1n << BigInt(prefix)) - 1n) << BigInt(bits - prefix);
}

function parseCidr(r: ArgReader, text: string): Network {
  const slash = text.lastIndexOf('/');
  const address = slash < 0 ? '' : text.slice(0, slash);
  const prefixText = slash < 0 ? '' : text.slice(slash + 1);
  const bits = address.includes(':') ? 128 : 32;
  const ip = bits === 32 ? parseIPv4(address) : parseIPv6(address);
  if (ip === undefined || !/^\d{1,3}$/.test(prefixText) || Number(prefixText) > bits) {
    throw r.fail(`invalid CIDR expression: invalid CIDR address: ${text}`, 'input');
  }
  const prefix = Number(prefixText);
  return { bits, address: ip & mask(bits, prefix), prefix };
}

/** net.IP.String: dotted IPv4 (also for IPv4-mapped IPv6), RFC 5952 IPv6 with the first longest zero run as `::`. */
function formatIp(bits: number, address: bigint): string {
  const v4 = (value: bigint) => [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 0xffn)).join('.');
  if (bits === 32) return v4(address);
  if (address >> 32n === 0xffffn) return v4(address & 0xffffffffn);
  const groups = Array.from({ length: 8 }, (_, i) => Number((address >> BigInt(112 - 16 * i)) & 0xffffn));
  let best = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === 0) j += 1;
    if (j - i > bestLength) [best, bestLength] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLength).join(':')}`;
}

function formatNetwork(n: Network): string {
  return `${formatIp(n.bits, n.address)}/${n.prefix}`;
}

function cidrSubnet(r: ArgReader, base: Network, newbits: number, netnum: bigint): Network {
  if (newbits < 0 || netnum < 0n) throw r.fail('newbits and netnum must not be negative');
  if (base.prefix + newbits > base.bits) throw r.fail(`insufficient address space to extend prefix of ${base.prefix} by ${newbits}`);
  if (netnum.toString(2).length > newbits && netnum !== 0n) {
    throw r.fail(`prefix extension of ${newbits} does not accommodate a subnet numbered ${netnum}`);
  }
  const prefix = base.prefix + newbits;
  return { bits: base.bits, prefix, address: base.address | (netnum << BigInt(base.bits - prefix)) };
}

function cidrsubnets(r: ArgReader): JsonValue {
  const network = parseCidr(r, r.string('input'));
  const newbits = r.numbers('newbits');
  newbits.forEach((n, i) => {
    if (!Number.isInteger(n)) throw r.fail(`must be a list of integers, found ${n} at index ${i}`, 'newbits');
  });
  if (newbits.length === 0) return [];
  const size = 1n << BigInt(network.bits);
  const last = (n: Network) => n.address | (size - 1n - mask(network.bits, n.prefix));
  // go-cidr PreviousSubnet: the subnet of the first length just before the network (wrapping below zero).
  const first = network.prefix + (newbits[0] as number);
  let current: Network = { bits: network.bits, prefix: first, address: (network.address - 1n + size) % size & mask(network.bits, Math.min(first, network.bits)) };
  return newbits.map((length, i) => {
    if (length < 1) throw r.fail(`argument ${i + 1} (${length}) must extend prefix by at least one bit`);
    if (length > 32) throw r.fail(`argument ${i + 1} (${length}) may not extend prefix by more than 32 bits`);
    const prefix = length + network.prefix;
    if (prefix > network.bits) {
      throw r.fail(`argument ${i + 1} would extend prefix to ${prefix} bits, which is too long for an ${network.bits === 32 ? 'IPv4' : 'IPv6'} address`);
    }
    // go-cidr NextSubnet: the subnet of this length after the current one's last address.
    const m = mask(network.bits, prefix);
    const within: Network = { bits: network.bits, prefix, address: last(current) & m };
    const following = (last(within) + 1n) % size;
    const next: Network = { bits: network.bits, prefix, address: following & m };
    if (following === 0n || (next.address & mask(network.bits, network.prefix)) !== network.address) {
      throw r.fail(`not enough remaining address space for a subnet with a prefix of ${prefix} bits after ${formatNetwork(current)}`);
    }
    current = next;
    return formatNetwork(next);
  });
}

function cidrhost(r: ArgReader): JsonValue {
  const network = parseCidr(r, r.string('input'));
  let host = BigInt(r.int('host'));
  const max = (1n << BigInt(network.bits - network.prefix)) - 1n;
  let magnitude = host;
  if (host < 0n) {
    magnitude = -host - 1n;
    host = max - magnitude;
  }
  if (magnitude > max) throw r.fail(`prefix of ${network.prefix} does not accommodate a host numbered ${host}`);
  return formatIp(network.bits, network.address | host);
}

// ---------------------------------------------------------------------------------------------------------------
// types.go assignableType: the Terraform conversion rules coalesce and setintersection share. Every number is a
// float64 on Pulumi's wire, so numbers never conflict with each other.

function assignableType(r: ArgReader, values: readonly JsonValue[]): 'string' | 'bool' | 'number' | undefined {
  let sawBool = false;
  let sawNumber = false;
  let sawString = false;
  for (const value of values) {
    if (value === null) continue;
    if (typeof value === 'boolean') sawBool = true;
    else if (typeof value === 'number') sawNumber = true;
    else if (typeof value === 'string') sawString = true;
    else throw r.fail('all arguments must be of a supported type');
  }
  if (sawString) return 'string';
  if (sawBool && sawNumber) throw r.fail('all arguments must be convertible to the same type');
  return sawBool ? 'bool' : sawNumber ? 'number' : undefined;
}

/** A key for Go's map[interface{}] on decoded scalars; a list or a map is unhashable there (a panic upstream). */
function scalarKey(r: ArgReader, value: JsonValue): string {
  if (Array.isArray(value) || isPlainObject(value)) throw r.fail('elements must be strings, numbers, booleans or null: a list or a map cannot be compared');
  return `${typeof value}:${JSON.stringify(value)}`;
}

/** tolist.go convertListSameType: compares the list with its elements, so (upstream's quirk) it stringifies unless all but the last are lists. */
function convertListSameType(list: readonly JsonValue[]): JsonValue[] {
  const sameType = list.slice(0, -1).every((item) => Array.isArray(item));
  return sameType ? [...list] : list.map(goV);
}

function hash(algorithm: string, encoding: 'hex' | 'base64'): StdFunction {
  return (r) => createHash(algorithm).update(r.string('input'), 'utf8').digest(encoding);
}

/** Go's filepath.Clean on a POSIX path. */
function goClean(path: string): string {
  if (path === '') return '.';
  const normal = posix.normalize(path);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

function goParseInt(r: ArgReader, text: string, base: number): number {
  const syntax = () => r.fail(`strconv.ParseInt: parsing ${goQuote(text)}: invalid syntax`, 'input');
  if (base > 36) throw r.fail(`strconv.ParseInt: parsing ${goQuote(text)}: invalid base ${base}`, 'base');
  const match = /^([+-]?)(.+)$/.exec(text);
  if (!match) throw syntax();
  let value = 0n;
  for (const c of (match[2] as string).toLowerCase()) {
    const digit = parseInt(c, 36);
    if (Number.isNaN(digit) || digit >= base) throw syntax();
    value = value * BigInt(base) + BigInt(digit);
  }
  if (match[1] === '-') value = -value;
  if (value > 2n ** 63n - 1n || value < -(2n ** 63n)) throw r.fail(`strconv.ParseInt: parsing ${goQuote(text)}: value out of range`, 'input');
  return Number(value);
}

// ---------------------------------------------------------------------------------------------------------------
// The functions, by name, each as its provider/<name>.go computes it.

const FUNCTIONS: Readonly<Record<string, StdFunction>> = {
  // Math.
  abs: (r) => Math.abs(r.number('input')),
  ceil: (r) => finite(r, Math.ceil(r.number('input'))),
  floor: (r) => finite(r, Math.floor(r.number('input'))),
  log: (r) => finite(r, Math.log(r.number('input')) / Math.log(r.number('base'))),
  max: (r) => {
    const input = r.numbers('input');
    if (input.length === 0) throw r.fail('input list must not be empty');
    return input.reduce((a, b) => Math.max(a, b));
  },
  min: (r) => {
    const input = r.numbers('input');
    if (input.length === 0) throw r.fail('input list must not be empty');
    return input.reduce((a, b) => Math.min(a, b));
  },
  pow: (r) => finite(r, Math.pow(r.number('base'), r.number('exponent'))),
  signum: (r) => Math.sign(r.number('input')) || 0,
  sum: (r) => finite(r, r.numbers('input').reduce((a, b) => a + b, 0)),
  parseint: (r) => {
    const input = r.string('input');
    const base = r.optionalInt('base') ?? 10;
    if (base < 2 || base > 62) throw r.fail('base must be between 2 and 62 inclusive', 'base');
    return goParseInt(r, input, base);
  },
  tonumber: (r) => {
    const input = r.any('input');
    if (input === null) return NO_RESULT;
    if (typeof input === 'number') return input;
    if (typeof input === 'string' && /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(input) && Number.isFinite(Number(input))) return Number(input);
    throw r.fail(`${goV(input)} is not a number value`, 'input');
  },

  // Strings.
  chomp: (r) => r.string('input').replace(/(?:\r\n?|\n)*$/, ''),
  format: (r) => sprintf(r, r.string('input'), r.list('args')),
  formatlist: (r) => {
    const input = r.string('input');
    const args = r.list('args');
    const lengths = new Set(args.filter((a) => Array.isArray(a)).map((a) => (a as readonly JsonValue[]).length));
    if (lengths.size > 1) throw r.fail('all list arguments must be of the same length');
    const [length] = [...lengths];
    if (length === undefined) return [sprintf(r, input, args)];
    return Array.from({ length }, (_, i) => sprintf(r, input, args.map((a) => (Array.isArray(a) ? ((a as readonly JsonValue[])[i] as JsonValue) : a))));
  },
  indent: (r) => {
    const input = r.string('input');
    const spaces = r.int('spaces');
    if (spaces < 0 || spaces > MAX_INDENT) throw r.fail(`must be between 0 and ${MAX_INDENT}`, 'spaces');
    return input.replaceAll('\n', `\n${' '.repeat(spaces)}`);
  },
  join: (r) => r.strings('input').join(r.string('separator')),
  lower: (r) => goCase(r.string('input'), false),
  upper: (r) => goCase(r.string('input'), true),
  replace: (r) => {
    const text = r.string('text');
    const search = r.string('search');
    const replacement = r.string('replace');
    if (search.length > 1 && search.startsWith('/') && search.endsWith('/')) {
      const re = goRegExp(r, search.slice(1, -1), 'search', true);
      return text.replace(re, (...found: unknown[]) => {
        const last = found[found.length - 1];
        const groups = typeof last === 'object' && last !== null ? (last as Record<string, string | undefined>) : undefined;
        const count = found.length - (groups ? 3 : 2);
        return goExpand(replacement, found.slice(0, count).map((f) => (typeof f === 'string' ? f : '')), groups);
      });
    }
    return text.replaceAll(search, replacement);
  },
  split: (r) => {
    const text = r.string('text');
    const separator = r.string('separator');
    // strings.Split with an empty separator splits after each UTF-8 sequence.
    return separator === '' ? [...text] : text.split(separator);
  },
  startswith: (r) => r.string('input').startsWith(r.string('prefix')),
  endswith: (r) => r.string('input').endsWith(r.string('suffix')),
  strrev: (r) => graphemes(r.string('input')).reverse().join(''),
  substr: (r) => {
    const input = r.string('input');
    let offset = r.int('offset');
    const length = r.int('length');
    if (length === 0) return '';
    const bytes = Buffer.byteLength(input, 'utf8');
    if (offset < 0 && bytes === 0) throw r.fail('a negative offset needs a non-empty input', 'offset');
    // Upstream adds the byte length until the offset is not negative: the same as this remainder.
    if (offset < 0) offset = (offset % bytes) + (offset % bytes < 0 ? bytes : 0);
    const rest = graphemes(input).slice(offset);
    return (length < 0 ? rest : rest.slice(0, length)).join('');
  },
  title: (r) => r.string('input').replace(/[\p{L}\p{N}\p{M}_'’]+/gu, (word) => {
    const [first = '', ...rest] = [...word];
    return goCase(first, true) + goCase(rest.join(''), false);
  }),
  trim: (r) => {
    const cutset = new Set(r.string('cutset'));
    const chars = [...r.string('input')];
    let start = 0;
    let end = chars.length;
    while (start < end && cutset.has(chars[start] as string)) start += 1;
    while (end > start && cutset.has(chars[end - 1] as string)) end -= 1;
    return chars.slice(start, end).join('');
  },
  trimprefix: (r) => {
    const input = r.string('input');
    const prefix = r.string('prefix');
    return input.startsWith(prefix) ? input.slice(prefix.length) : input;
  },
  trimsuffix: (r) => {
    const input = r.string('input');
    const suffix = r.string('suffix');
    return suffix !== '' && input.endsWith(suffix) ? input.slice(0, -suffix.length) : input;
  },
  trimspace: (r) => r.string('input').replace(TRIM_SPACE, ''),
  regex: (r) => {
    const re = goRegExp(r, r.string('pattern'), 'pattern', false);
    const match = re.exec(r.string('string'));
    return match ? submatches(r, re, match) : [];
  },
  regexall: (r) => {
    const re = goRegExp(r, r.string('pattern'), 'pattern', true);
    return [...r.string('string').matchAll(re)].map((m) => submatches(r, re, m));
  },
  tostring: (r) => {
    const input = r.any('input');
    if (input === null) return NO_RESULT;
    if (typeof input === 'string' || typeof input === 'boolean' || typeof input === 'number') return goV(input);
    throw r.fail(`${goV(input)} is not a string value`, 'input');
  },
  tobool: (r) => {
    const input = r.any('input');
    if (input === null) return NO_RESULT;
    if (typeof input === 'boolean') return input;
    if (typeof input === 'string' && ['1', 't', 'T', 'TRUE', 'true', 'True'].includes(input)) return true;
    if (typeof input === 'string' && ['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(input)) return false;
    throw r.fail(`${goV(input)} is not a boolean value`, 'input');
  },

  // Collections.
  alltrue: (r) => r.list('input').every((v) => v === true || v === 'true'),
  anytrue: (r) => r.list('input').some((v) => v === true || v === 'true'),
  chunklist: (r) => {
    const input = r.list('input');
    const size = r.int('size');
    if (size < 0) throw r.fail('size must be greater than or equal to 0', 'size');
    // Upstream loops forever on size 0 with a non-empty list; a plan must end, so that is an error here.
    if (size === 0 && input.length > 0) throw r.fail('size must be greater than 0 for a non-empty list', 'size');
    const out: JsonValue[] = [];
    for (let i = 0; i < input.length; i += size) out.push(input.slice(i, i + size));
    return out;
  },
  coalesce: (r) => {
    const input = r.list('input');
    const type = assignableType(r, input);
    const found = type === 'string' ? input.filter((v) => v !== null).map(goV).find((s) => s !== '') : input.find((v) => v !== null);
    if (type === undefined || found === undefined) throw r.fail('no non-empty values found');
    return found;
  },
  coalescelist: (r) => {
    const found = r.lists('input').find((list) => list.length > 0);
    if (found === undefined) throw r.fail('no non-empty list found');
    return found;
  },
  compact: (r) =>
    r.list('input').filter((v) => {
      if (v !== null && typeof v !== 'string') throw r.fail('compact arg is not a string value');
      return v !== null && v !== '';
    }),
  concat: (r) => r.lists('input').flat(),
  contains: (r) => {
    const element = goJson(r.any('element'));
    return r.list('input').some((v) => goJson(v) === element);
  },
  distinct: (r) => {
    const seen = new Set<string>();
    return r.list('input').filter((v) => {
      const key = scalarKey(r, v);
      return seen.has(key) ? false : (seen.add(key), true);
    });
  },
  element: (r) => {
    const input = r.list('input');
    if (input.length === 0) throw r.fail('input list must not be empty when using the element function');
    let index = r.int('index') % input.length;
    while (index < 0) index += input.length;
    return input[index] as JsonValue;
  },
  flatten: (r) => {
    const walk = (list: readonly JsonValue[]): JsonValue[] => list.flatMap((v) => (Array.isArray(v) ? walk(v as readonly JsonValue[]) : [v]));
    return walk(r.list('input'));
  },
  index: (r) => {
    const input = r.list('input');
    if (input.length === 0) throw r.fail('input list must not be empty when using the index function');
    const element = goJson(r.any('element'));
    const found = input.findIndex((v) => goJson(v) === element);
    if (found < 0) throw r.fail('item not found');
    return found;
  },
  keys: (r) => sortedKeys(r.object('input')),
  length: (r) => {
    const input = r.any('input');
    // Go's len: bytes of a string's UTF-8, elements of a list, entries of a map.
    if (typeof input === 'string') return Buffer.byteLength(input, 'utf8');
    if (Array.isArray(input)) return input.length;
    if (isPlainObject(input)) return Object.keys(input).length;
    throw r.fail('input must be a string, list, or map', 'input');
  },
  lookup: (r) => {
    const map = r.object('map');
    const key = r.string('key');
    const fallback = r.optional('default');
    if (Object.hasOwn(map, key)) return map[key] as JsonValue;
    if (fallback !== undefined) return fallback;
    throw r.fail('key not found in input map');
  },
  map: (r) => {
    const args = r.list('args');
    if (args.length % 2 !== 0) throw r.fail('expected an even number of arguments');
    const out: Record<string, JsonValue> = {};
    for (let i = 0; i < args.length; i += 2) {
      const key = args[i];
      if (typeof key !== 'string') throw r.fail(`expected a string key at index ${i}`);
      out[key] = args[i + 1] as JsonValue;
    }
    return out;
  },
  // Upstream's `keys` field is unexported Go, so its schema has no `keys` and it is always empty: the function
  // answers [] for no values and fails for any values. Ported as it computes, not as its description says.
  matchkeys: (r) => {
    r.strings('searchList');
    if (r.strings('values').length !== 0) throw r.fail('values and keys must be of equal length');
    return [];
  },
  merge: (r) => {
    const maps = r.listOf<JsonObject>('input', 'objects', (v) => isPlainObject(v));
    const merged: Record<string, JsonValue> = {};
    for (const m of maps) Object.assign(merged, m);
    return Object.fromEntries(sortedKeys(merged).map((k) => [k, merged[k] as JsonValue]));
  },
  range: (r) => {
    const limit = r.number('limit');
    const start = r.optionalNumber('start') ?? 0;
    let step = r.optionalNumber('step') ?? (start > limit ? -1 : 1);
    if (start === limit) return [];
    if (step === 0) step = start < limit ? 1 : -1;
    else if ((start < limit && step < 0) || (start > limit && step > 0)) return [];
    const length = Math.ceil((limit - start) / step);
    if (length > MAX_RANGE_LENGTH) throw r.fail(`a range of more than ${MAX_RANGE_LENGTH} numbers is not supported by the local engine`);
    return Array.from({ length }, (_, i) => start + i * step);
  },
  reverse: (r) => [...r.list('input')].reverse(),
  setintersection: (r) => {
    const sets = r.lists('input');
    if (sets.length === 0) return [];
    const type = assignableType(r, sets.flat());
    if (type === undefined) return [];
    const convert = (item: JsonValue): JsonValue => {
      if (type === 'string') return goV(item);
      if (item === null) throw r.fail('null cannot be converted to the common type of the other elements');
      return item;
    };
    const seen = new Map<string, { value: JsonValue; count: number }>();
    sets.forEach((set, i) => {
      for (const item of set) {
        const value = convert(item);
        const key = scalarKey(r, value);
        const entry = seen.get(key) ?? { value, count: 0 };
        if (entry.count === i) entry.count = i + 1;
        seen.set(key, entry);
      }
    });
    return [...seen.values()].filter((e) => e.count === sets.length).map((e) => e.value);
  },
  slice: (r) => {
    const list = r.list('list');
    let from = r.optionalInt('from') ?? 0;
    let to = r.optionalInt('to') ?? list.length;
    if (from < 0) from += list.length;
    if (to < 0) to += list.length;
    if (from < 0 || from > list.length) throw r.fail('from index out of range', 'from');
    if (to < 0 || to > list.length) throw r.fail('to index out of range', 'to');
    if (from > to) throw r.fail(`slice bounds out of range [${from}:${to}]`);
    return list.slice(from, to);
  },
  sort: (r) => [...r.strings('input')].sort(goCompare),
  tolist: (r) => convertListSameType(r.list('input')),
  toset: (r) => {
    const seen = new Set<string>();
    const unique = r.list('input').filter((v) => {
      const key = scalarKey(r, v);
      return seen.has(key) ? false : (seen.add(key), true);
    });
    return convertListSameType(unique);
  },
  transpose: (r) => {
    const input = r.object('input');
    const out = new Map<string, string[]>();
    for (const [key, list] of Object.entries(input)) {
      if (!Array.isArray(list) || !list.every((v) => typeof v === 'string')) throw r.fail(`must map keys to lists of strings, not ${typeName(list)} at '${key}'`, 'input');
      for (const value of list as readonly string[]) out.set(value, [...(out.get(value) ?? []), key]);
    }
    return Object.fromEntries([...out.keys()].sort(goCompare).map((k) => [k, (out.get(k) ?? []).sort(goCompare)]));
  },
  values: (r) => {
    const input = r.object('input');
    return sortedKeys(input).map((k) => input[k] as JsonValue);
  },
  zipmap: (r) => {
    const keys = r.strings('keys');
    const values = r.list('values');
    if (keys.length !== values.length) throw r.fail('keys and values must be the same length');
    return Object.fromEntries(keys.map((k, i) => [k, values[i] as JsonValue]));
  },

  // Encoding.
  base64encode: (r) => Buffer.from(r.string('input'), 'utf8').toString('base64'),
  base64decode: (r) => {
    // Go's StdEncoding: padded, strict alphabet; it skips \r and \n.
    const encoded = r.string('input').replace(/[\r\n]/g, '');
    if (encoded.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(encoded)) throw r.fail('failed to decode base64 data: illegal base64 data', 'input');
    const bytes = Buffer.from(encoded, 'base64');
    const decoded = bytes.toString('utf8');
    if (!Buffer.from(decoded, 'utf8').equals(bytes)) throw r.fail('decoded base64 data is not valid UTF-8', 'input');
    return decoded;
  },
  jsonencode: (r) => goJson(r.any('input')),
  jsondecode: (r) => {
    // Upstream decodes into a map: an object decodes, `null` is null, anything else is returned as the input text.
    const input = r.string('input');
    try {
      const parsed: unknown = JSON.parse(input);
      if (parsed === null || isPlainObject(parsed)) return parsed;
    } catch {
      // Not JSON: upstream returns the text itself.
    }
    return input;
  },
  csvdecode: (r) => {
    const input = r.string('input');
    if (input === '') return [];
    const rows = input.split('\n');
    const header = (rows[0] as string).split(',').map((h) => h.trim());
    return rows.slice(1).map((line) => {
      const row = line.split(',');
      if (row.length !== header.length) throw r.fail('Invalid input: each line must contain the same number of fields');
      return Object.fromEntries(header.map((h, c) => [h, (row[c] as string).trim()]));
    });
  },
  urlencode: (r) =>
    encodeURIComponent(r.string('input'))
      .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
      .replace(/%20/g, '+'),

  // Hashing.
  md5: hash('md5', 'hex'),
  sha1: hash('sha1', 'hex'),
  sha256: hash('sha256', 'hex'),
  sha512: hash('sha512', 'hex'),
  base64sha256: hash('sha256', 'base64'),
  base64sha512: hash('sha512', 'base64'),

  // CIDR.
  cidrhost,
  cidrnetmask: (r) => {
    const input = r.string('input');
    const network = parseCidr(r, input);
    if (network.bits !== 32) throw r.fail(`IPv6 addresses cannot have a netmask: ${input}`, 'input');
    return formatIp(32, mask(32, network.prefix));
  },
  cidrsubnet: (r) => {
    const network = parseCidr(r, r.string('input'));
    return formatNetwork(cidrSubnet(r, network, r.int('newbits'), BigInt(r.int('netnum'))));
  },
  cidrsubnets,

  // Paths (text only: nothing here touches the file system).
  basename: (r) => {
    // Go's filepath.Base: "." for "", trailing slashes dropped, "/" for only slashes.
    const input = r.string('input');
    if (input === '') return '.';
    const path = input.replace(/\/+$/, '');
    return path === '' ? '/' : path.slice(path.lastIndexOf('/') + 1);
  },
  dirname: (r) => {
    const path = r.string('input');
    return goClean(path.slice(0, path.lastIndexOf('/') + 1));
  },
};
