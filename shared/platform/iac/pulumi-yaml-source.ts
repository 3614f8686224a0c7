import { posix } from 'node:path';
import { LRUCache } from 'lru-cache';
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Node } from 'yaml';
import { AppError } from '../errors/app-error';
import { deepFreeze } from '../values/deep-freeze';
import { assertJson, formatPath, invalidProject, isPlainObject, type JsonObject, type JsonValue, type PathSegment } from './iac-values';

/**
 * Where a Pulumi YAML program is and where each of its values was written: program discovery as the Pulumi YAML
 * language host does it, YAML parsing (cached by text) with a line for every path, and the one place that puts
 * `file:line` on a plan error. Pure: text in, values out.
 */

/** The files of a project folder, every one by its path relative to the folder: `Pulumi.yaml`, `src/Main.yaml`. */
export type ProjectFiles = Readonly<Record<string, string>>;

/** Where the values of one parsed file were written: the 1-based line of each path (`resources.app.properties`). */
export interface SourceFile {
  readonly file: string;
  readonly lines: Readonly<Record<string, number>>;
}

/** The project file, and the file that holds the program (the same file when the program is in `Pulumi.yaml`). */
export interface ProgramSource {
  readonly projectFile: string;
  /** `Pulumi.yaml`, `Main.yaml`, `Main.json`, or one of those in the folder `main:` names (`src/Main.yaml`). */
  readonly programFile: string;
}

/**
 * The program file of a project, as the language host finds it: the program folder is the project folder, or the
 * folder `main:` of `Pulumi.yaml` names; in it the first of `Main.json`, `Main.yaml`, `Pulumi.yaml` that exists
 * (pulumi-yaml pkg/pulumiyaml/run.go `LoadDir`, which the language host calls with the program directory). `main`
 * naming a file rather than a folder is refused: Pulumi YAML reads only a folder there. `main` is resolved inside the
 * project folder only, so no program is read from elsewhere (the program policy refuses such a `main` before this).
 */
export function findProgram(files: ProjectFiles, projectFile: string, main: JsonValue | undefined): ProgramSource {
  let folder = '';
  if (main !== undefined && main !== null) {
    if (typeof main !== 'string') throw invalidProject(`${projectFile}: main must be a folder path`, { path: 'main', file: projectFile });
    const normalized = posix.normalize(main.replace(/\/+$/, '') || '.');
    if (posix.isAbsolute(normalized) || normalized === '..' || normalized.startsWith('../') || main.includes('\\')) {
      throw invalidProject(`${projectFile}: main ${JSON.stringify(main)} is outside the project folder`, { path: 'main', file: projectFile });
    }
    folder = normalized === '.' ? '' : `${normalized}/`;
    if (files[normalized] !== undefined) {
      throw invalidProject(`${projectFile}: main ${JSON.stringify(main)} is a file; Pulumi YAML reads the program from a folder (its Main.yaml)`, { path: 'main', file: projectFile });
    }
  }
  for (const name of PROGRAM_FILES) {
    const candidate = `${folder}${name}`;
    if (files[candidate] !== undefined) return { projectFile, programFile: candidate };
  }
  // As the language host says it: the first name it looked for.
  const expected = `${folder}${PROGRAM_FILES[0]}`;
  // The language host reads `Pulumi.yaml` only: a `Pulumi.yml` project needs its program in a Main file.
  const note = projectFile === 'Pulumi.yaml' || folder !== '' ? '' : ` (Pulumi YAML does not read a program from ${projectFile})`;
  throw invalidProject(`the project has no program: none of ${PROGRAM_FILES.map((n) => folder + n).join(', ')} exists${note}`, { path: expected, file: expected });
}

/** In the order the language host probes them. */
export const PROGRAM_FILES = ['Main.json', 'Main.yaml', 'Pulumi.yaml'] as const;

// ---------------------------------------------------------------------------------------------------------------
// Parsing

interface Parsed {
  readonly value: JsonValue;
  readonly lines: Readonly<Record<string, number>>;
}

/**
 * Parsed YAML by its text: every run of a stack reads the same few files at each commit, and parsing them was a
 * tenth of a loaded host's CPU. Values are frozen, since callers share them. Bounded by count and by text length.
 */
const parsedYaml = new LRUCache<string, Parsed>({ max: 256, maxSize: 16 * 1024 * 1024, sizeCalculation: (_, text) => Math.max(1, text.length * 2) });

/** A YAML (or JSON, which is YAML) document as JSON values, with the line of every path in it. */
export function parseYamlSource(text: string, file: string): { readonly value: JsonValue; readonly source: SourceFile } {
  let parsed = parsedYaml.get(text);
  if (!parsed) {
    const lineCounter = new LineCounter();
    const document = parseDocument(text, { prettyErrors: true, uniqueKeys: true, lineCounter });
    const [first] = document.errors;
    if (first) {
      const line = first.linePos?.[0]?.line;
      throw invalidProject(`${file} is not valid YAML: ${first.message.split('\n')[0]}`, { path: file, file, yamlCode: first.code, ...(line ? { line } : {}) });
    }
    const value: unknown = text.trim() === '' ? null : document.toJS({ maxAliasCount: 100 });
    assertJson(value, file);
    const lines: Record<string, number> = {};
    collectLines(document.contents, [], lines, lineCounter);
    parsed = deepFreeze({ value, lines });
    parsedYaml.set(text, parsed);
  }
  return { value: parsed.value, source: { file, lines: parsed.lines } };
}

function collectLines(node: unknown, path: PathSegment[], into: Record<string, number>, counter: LineCounter): void {
  if (isMap(node)) {
    for (const pair of node.items) {
      if (!isPair(pair)) continue;
      const key: unknown = isScalar(pair.key) ? pair.key.value : pair.key;
      if (typeof key !== 'string' && typeof key !== 'number' && typeof key !== 'boolean') continue;
      const at = [...path, String(key)];
      const range = (pair.key as Node | null)?.range ?? (pair.value as Node | null)?.range;
      if (range) remember(into, at, counter.linePos(range[0]).line);
      collectLines(pair.value, at, into, counter);
    }
  } else if (isSeq(node)) {
    node.items.forEach((item, i) => {
      const at = [...path, i];
      const range = (item as Node | null)?.range;
      if (range) remember(into, at, counter.linePos(range[0]).line);
      collectLines(item, at, into, counter);
    });
  }
}

function remember(into: Record<string, number>, path: readonly PathSegment[], line: number): void {
  const exact = formatPath(path);
  into[exact] = line;
  // Pulumi YAML reads section, resource and option keys without case (`Resources`, `dependsOn`): errors name the
  // canonical spelling, so the lower-case path finds the line as well.
  const lower = exact.toLowerCase();
  if (!(lower in into)) into[lower] = line;
}

// ---------------------------------------------------------------------------------------------------------------
// Locations on errors

/** The file and line of `path` (`resources.app.properties.size`): its own line, else its nearest parent's. */
export function locate(sources: readonly SourceFile[], path: string): { readonly file: string; readonly line: number } | undefined {
  for (let candidate: string | undefined = path; candidate; candidate = parentPath(candidate)) {
    for (const source of sources) {
      const line = source.lines[candidate] ?? source.lines[candidate.toLowerCase()];
      if (line !== undefined) return { file: source.file, line };
    }
  }
  return undefined;
}

function parentPath(path: string): string | undefined {
  const cut = Math.max(path.lastIndexOf('.'), path.lastIndexOf('['));
  return cut > 0 ? path.slice(0, cut) : undefined;
}

/**
 * `error` with the file and line of its `details.path` when it has a path and no line yet: the message starts
 * `Main.yaml:12: `, and `details` gain `file` and `line`. Anything else is returned as it is. Every parse and
 * evaluation step of the engine passes its errors through here, so each names where the program says what failed.
 */
export function withLocation(error: unknown, sources: readonly SourceFile[]): unknown {
  if (!(error instanceof AppError) || typeof error.details.path !== 'string' || typeof error.details.line === 'number') return error;
  const named = typeof error.details.file === 'string' ? sources.filter((s) => s.file === error.details.file) : [];
  const found = locate(named.length > 0 ? named : sources, error.details.path);
  if (!found) return error;
  const located = new AppError(error.code, error.kind, `${found.file}:${found.line}: ${error.message}`, { ...error.details, file: found.file, line: found.line });
  located.stack = error.stack;
  return located;
}

/** Runs `work`, locating any error it throws in `sources`. */
export function located<T>(sources: readonly SourceFile[], work: () => T): T {
  try {
    return work();
  } catch (error) {
    throw withLocation(error, sources);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Key spelling

/**
 * Keys Pulumi YAML reads without case (ast/template.go `parseRecord` matches field names with `strings.EqualFold`):
 * by section, the canonical spelling of each lower-cased key.
 */
export const canonical = (names: readonly string[]): ReadonlyMap<string, string> => new Map(names.map((n) => [n.toLowerCase(), n]));

/** `value` with its known keys in their canonical spelling; two spellings of one key are an error. */
export function canonicalKeys(value: JsonObject, keys: ReadonlyMap<string, string>, path: string): JsonObject {
  const result: Record<string, JsonValue> = {};
  const writtenAs = new Map<string, string>();
  for (const [key, inner] of Object.entries(value)) {
    const name = keys.get(key.toLowerCase()) ?? key;
    const other = writtenAs.get(name);
    if (other !== undefined) throw invalidProject(`${path}: ${other} and ${key} are the same key`, { path: path ? `${path}.${key}` : key });
    writtenAs.set(name, key);
    result[name] = inner;
  }
  return result;
}

/** A section of a document that must be a mapping when present; absent (or null) is empty. */
export function optionalMap(document: JsonObject, key: string): JsonObject {
  const value = document[key];
  if (value === undefined || value === null) return {};
  if (!isPlainObject(value)) throw invalidProject(`${key} must be a mapping`, { path: key });
  return value;
}
