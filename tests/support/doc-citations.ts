import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

/**
 * What the repository's documents and comments cite, and whether it is there: relative Markdown links (with their
 * `#anchor`, checked against the target's headings as GitHub slugs them), repository paths in backticks, `*.md`
 * files named anywhere, and relative paths (`./`, `../`) in comments. A citation of a file outside the repository
 * (a folder beside it) is a broken one: the repository stands alone.
 */

/** Installed packages and Git's files, wherever they are, are not the repository's own documents or code. */
const SKIPPED_ANYWHERE = new Set(['node_modules', '.git']);
/** Built, generated at run time or local state (git-ignored): not in a fresh clone, so neither read nor citable. */
const SKIPPED_AT_ROOT = new Set(['dist', '.tmp', '.runtime-cloud', 'coverage', 'bench', '.azurite']);
/** What tests write (gitignored): a clean checkout has none of it until they have run, so citing it is no problem. */
const TEST_OUTPUTS = 'tests/artifacts';

/** The repository's top-level folders: a path in backticks that starts with one of them is a citation. */
const TOP_FOLDERS = ['functions', 'shared', 'local', 'runner', 'contracts', 'infra', 'docs', 'tests', 'bin', '.ci'];

const CODE_FILE = /\.(ts|cjs|mjs|js)$/;

export interface Citation {
  /** The citing file, relative to the repository root. */
  readonly file: string;
  readonly line: number;
  /** As written. */
  readonly cited: string;
  /** Why it does not hold; absent when it does. */
  readonly problem?: string;
}

/** Every citation in the repository at `root`, each with its problem when the cited file or heading is not there. */
export function citationsIn(root: string): Citation[] {
  const citations: Citation[] = [];
  for (const file of filesOf(root, root)) {
    const text = readFileSync(join(root, file), 'utf8');
    if (file.endsWith('.md')) citations.push(...markdownCitations(root, file, text));
    else if (CODE_FILE.test(file) || file === '.ci/run') citations.push(...commentCitations(root, file, text));
  }
  return citations;
}

/** The Markdown documents and code files of the repository, relative to `root`. */
function filesOf(root: string, folder: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) {
      if (!SKIPPED_ANYWHERE.has(entry.name) && !(folder === root && SKIPPED_AT_ROOT.has(entry.name))) files.push(...filesOf(root, path));
    } else if (entry.isFile() && (entry.name.endsWith('.md') || CODE_FILE.test(entry.name) || relative(root, path) === join('.ci', 'run'))) {
      files.push(relative(root, path).split(sep).join('/'));
    }
  }
  return files;
}

function markdownCitations(root: string, file: string, text: string): Citation[] {
  const found: Citation[] = [];
  let fenced = false;
  text.split('\n').forEach((content, index) => {
    const line = index + 1;
    if (/^\s*```/.test(content)) fenced = !fenced;
    // Code blocks are commands and output; links and backticks are read outside them.
    if (fenced) return;
    for (const [, target] of content.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // https:, mailto:
      found.push({ file, line, cited: target!, problem: linkProblem(root, file, target!) });
    }
    // A link's target is checked above; the rest of the line for the paths it names.
    const prose = content.replace(/\]\([^)\s]+\)/g, ']');
    for (const cited of citedPaths(prose)) found.push({ file, line, cited, problem: pathProblem(root, file, cited) });
  });
  return found;
}

function commentCitations(root: string, file: string, text: string): Citation[] {
  const found: Citation[] = [];
  text.split('\n').forEach((content, index) => {
    const comment = commentOf(content, file);
    if (comment === undefined) return;
    for (const cited of citedPaths(comment)) found.push({ file, line: index + 1, cited, problem: pathProblem(root, file, cited) });
  });
  return found;
}

/** The comment part of a line (`//`, a block comment's line, a shell `#`), or undefined when it has none. */
function commentOf(line: string, file: string): string | undefined {
  if (file === '.ci/run') return /^\s*#/.test(line) ? line : undefined;
  const block = /^\s*(\/\*\*?|\*)(\s|$)/.exec(line);
  if (block) return line;
  const slashes = line.indexOf('// ');
  return slashes >= 0 && !/['"`]/.test(line.slice(0, slashes)) ? line.slice(slashes) : undefined;
}

/**
 * The paths a piece of text cites: in backticks when they start with a top-level folder of the repository, and
 * wherever they are a relative path (`./`, `../`) or end in `.md`.
 */
export function citedPaths(text: string): string[] {
  const paths = new Set<string>();
  for (const [, inside] of text.matchAll(/`([^`\s]+)`/g)) {
    if (TOP_FOLDERS.some((top) => inside!.startsWith(`${top}/`))) paths.add(inside!);
  }
  for (const [cited] of text.matchAll(/(?<![\w/.@-])(?:\.\.?\/)+[\w.*-]+(?:\/[\w.*-]+)*\/?/g)) paths.add(cited);
  for (const [cited] of text.matchAll(/(?<![\w/.@:-])(?:[\w.-]+\/)*[\w.-]+\.md\b/g)) paths.add(cited);
  return [...paths]
    .map((path) => path.replace(/[.,:;]+$/, ''))
    .filter((path) => !/[<{$…]|\*\*/.test(path) && !/^\.+$/.test(path))
    .filter((path) => !path.split('/').some((segment) => SKIPPED_ANYWHERE.has(segment)) && !SKIPPED_AT_ROOT.has(path.split('/')[0]!))
    .filter((path) => path !== TEST_OUTPUTS && !path.startsWith(`${TEST_OUTPUTS}/`));
}

function linkProblem(root: string, file: string, target: string): string | undefined {
  const [path, anchor] = target.split('#', 2) as [string, string | undefined];
  const resolved = path === '' ? join(root, file) : resolve(root, dirname(file), decodeURIComponent(path));
  const outside = outsideProblem(root, resolved);
  if (outside) return outside;
  if (!existsSync(resolved)) return 'no such file in the repository';
  if (anchor !== undefined && resolved.endsWith('.md') && !headingSlugs(readFileSync(resolved, 'utf8')).has(anchor)) return `no heading #${anchor} in it`;
  return undefined;
}

/**
 * A path is taken relative to the citing file or to the repository root, or (a test file named as in the guarantees'
 * table) relative to `tests/`; a module may be named without its `.ts`. A relative path (`../…`) that finds nothing
 * in the repository and leads out of it from the root cites a file outside the repository.
 */
function pathProblem(root: string, file: string, cited: string): string | undefined {
  const bases = cited.startsWith('./') || cited.startsWith('../') ? [dirname(file), '.'] : ['.', 'tests', dirname(file)];
  const candidates = bases.map((base) => resolve(root, base, cited)).filter((candidate) => !outsideProblem(root, candidate));
  if (candidates.some((candidate) => exists(candidate) || exists(`${candidate}.ts`))) return undefined;
  return outsideProblem(root, resolve(root, cited)) ?? 'no such file in the repository';
}

function outsideProblem(root: string, resolved: string): string | undefined {
  const inside = relative(root, resolved);
  return inside.startsWith('..') ? 'outside the repository' : undefined;
}

/** Whether a path exists; `*` in its last segments matches any characters but `/`. */
function exists(path: string): boolean {
  if (!path.includes('*')) return existsSync(path);
  const parts = path.split(sep);
  const first = parts.findIndex((part) => part.includes('*'));
  return matchFrom(parts.slice(0, first).join(sep) || sep, parts.slice(first));
}

function matchFrom(folder: string, rest: readonly string[]): boolean {
  const [part, ...more] = rest;
  if (part === undefined) return true;
  if (part === '') return more.length === 0 && existsSync(folder) && statSync(folder).isDirectory();
  if (!existsSync(folder) || !statSync(folder).isDirectory()) return false;
  const pattern = new RegExp(`^${part.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}$`);
  return readdirSync(folder).some((name) => pattern.test(name) && matchFrom(join(folder, name), more));
}

/** The anchors of a Markdown document's headings, slugged as GitHub does (lower case, punctuation out, spaces to `-`). */
export function headingSlugs(markdown: string): Set<string> {
  const slugs = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const slug = heading[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    slugs.add(count === 0 ? slug : `${slug}-${count}`);
    seen.set(slug, count + 1);
  }
  return slugs;
}
