import { posix } from 'node:path';
import { LRUCache } from 'lru-cache';
import { parseDocument } from 'yaml';
import { AppError } from '../platform/errors/app-error';
import { deepFreeze } from '../platform/values/deep-freeze';
import { findProgram } from '../platform/iac/pulumi-yaml-source';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * Which Pulumi projects the installation lets a runner evaluate, checked on the files read at the commit before
 * anything evaluates them. A project may say what to build; it may not say where state lives, where secrets are
 * decrypted, which plugins run or where code comes from: those are the installation's. Pure: text in, problems out.
 *
 * Every key of `Pulumi.yaml` and of `Pulumi.<stack>.yaml` is on one of two lists below, each with the reason it is
 * there; a key on neither list is refused as unknown, since a key the host cannot judge might be one that redirects
 * (Pulumi adds keys over time, and the Pulumi schema allows extra keys for the YAML runtime's program).
 */
export const ProjectErrors = {
  /** The project sets a key this installation does not allow; the details name every key. */
  notAllowed: 'PROVISIONING.PROJECT_NOT_ALLOWED',
} as const;

export interface ProjectPolicy {
  /** Runtimes a project may name (`RuntimeCloud__Provisioning__Runtimes`). Example: `['yaml']`. */
  readonly runtimes: readonly string[];
}

/** The project as `loadDesiredState` returns it: `Pulumi.yaml`'s text, each stack file's text, every file of the folder. */
export interface PolicyProjectFiles {
  readonly project: string;
  readonly stacks: Readonly<Record<string, string>>;
  /**
   * Every file by its path in the folder. The program the local engine reads (`Main.json`, `Main.yaml`, or in the
   * folder `main` names, its `Pulumi.yaml`) is checked like `Pulumi.yaml`'s program, and so is every `Main.*`.
   */
  readonly files?: Readonly<Record<string, string>>;
}

export interface ProjectProblem {
  /** `Pulumi.yaml`, `Pulumi.<stack>.yaml` or the path of a `Main.yaml`. */
  readonly file: string;
  /** The key as a path: `backend`, `runtime.options`, `resources.site.options.pluginDownloadURL`. */
  readonly key: string;
  readonly reason: string;
}

type Check = (value: unknown, key: string, policy: ProjectPolicy) => readonly Omit<ProjectProblem, 'file'>[];

const allowed: Check = () => [];
const refused =
  (reason: string): Check =>
  (_value, key) => [{ key, reason }];

/** Keys of `Pulumi.yaml`: each allowed, refused, or allowed only in a harmless form, and why. */
const PROJECT_KEYS: Readonly<Record<string, Check>> = {
  // The project's name: part of the stack's identity (tenant/project/stack), which the tenant chooses.
  name: allowed,
  // Which language host evaluates the program: only those the installation lists, and without options (the YAML
  // runtime's `compiler` runs a command, nodejs `nodeargs` loads code, go/dotnet/java `binary` names an executable).
  runtime: runtimeProblems,
  // Metadata that nothing evaluates.
  description: allowed,
  author: allowed,
  website: allowed,
  license: allowed,
  // Where the program is: allowed inside the project folder only, so no code comes from outside the commit's folder.
  main: mainProblems,
  // Where stack files are read from: the host checks the stack files directly in the folder, so another folder would
  // let the engine read stack settings (a secrets provider) that were never checked.
  stackConfigDir: stackConfigDirProblems,
  // Config declarations and values of the project: allowed as a map. The string form is the deprecated name of
  // stackConfigDir and is refused like it.
  config: configProblems,
  // The YAML runtime's beta name of `config`.
  configuration: allowed,
  // Where the stack's state lives: the installation's backend (per tenant), never the project's.
  backend: refused('sets where the stack state lives, which the installation decides'),
  // `refresh: always` only refreshes state from the cloud before an operation; any other option is unknown.
  options: optionsProblems,
  // Plugin binaries from paths the project names: code from outside the folder and the installation's plugins.
  plugins: refused('names plugin binaries to run instead of the installation\'s plugins'),
  // Packages installed from sources the project names (a Git repository, a local plugin, a plugin name).
  packages: refused('installs packages from sources the project names'),
  // Read only by `pulumi new` when a stack is created from a template; nothing in a plan or apply reads it.
  template: allowed,
  // The YAML runtime's program: allowed, and checked for what reads outside the folder or downloads plugins.
  variables: programProblems(''),
  resources: programProblems(''),
  outputs: programProblems(''),
  // The YAML runtime's CLI settings: `requiredVersion` only checks the CLI version.
  pulumi: (value, key) => unknownKeys(value, key, ['requiredVersion']),
};

/**
 * Keys of a program file other than `Pulumi.yaml` (`Main.yaml`, `Main.json`, a `main:` folder's `Pulumi.yaml`): a
 * Pulumi YAML template's (pulumi-yaml ast/template.go `TemplateDecl`).
 */
const mainKeys = (folder: string): Readonly<Record<string, Check>> => ({
  config: configProblems,
  configuration: allowed,
  variables: programProblems(folder),
  resources: programProblems(folder),
  outputs: programProblems(folder),
  // Metadata that nothing evaluates.
  name: allowed,
  description: allowed,
  // The YAML runtime's CLI settings: `requiredVersion` only checks the CLI version.
  pulumi: (value, key) => unknownKeys(value, key, ['requiredVersion']),
});

/** Keys of `Pulumi.<stack>.yaml`. */
const STACK_KEYS: Readonly<Record<string, Check>> = {
  // Config values: allowed, except encrypted ones: secrets are Secret Broker references ({ secretRef }); a `secure:`
  // value would be decrypted by whatever key the stack has, so a ciphertext copied from elsewhere could be read.
  config: stackConfigProblems,
  // Which secrets provider decrypts the stack's secrets, and the key material of it: the installation's.
  secretsprovider: refused('sets which secrets provider decrypts the stack\'s secrets, which the installation decides'),
  encryptedkey: refused('sets the data key of the stack\'s secrets, which the installation\'s secrets provider holds'),
  encryptionsalt: refused('sets the passphrase salt of the stack\'s secrets, which the installation\'s secrets provider holds'),
  // Pulumi ESC environments: config and secrets from outside the installation's reference store.
  environment: refused('imports Pulumi ESC environments, config and secrets from outside the installation\'s references'),
};

/**
 * Every key of the project that the installation does not allow, in file order; none means the project may be
 * planned. A file that is not a YAML mapping is a problem too: what the host cannot read it cannot judge.
 */
export function projectProblems(files: PolicyProjectFiles, policy: ProjectPolicy): readonly ProjectProblem[] {
  const problems: ProjectProblem[] = [];
  const check = (file: string, text: string, keys: Readonly<Record<string, Check>>, required: readonly string[]) => {
    const document = readMapping(text);
    if (typeof document === 'string') {
      problems.push({ file, key: '(document)', reason: document });
      return;
    }
    for (const key of required) if (!(key in document)) problems.push({ file, key, reason: 'is required' });
    for (const [key, value] of Object.entries(document)) {
      // Pulumi YAML reads its sections without case (`Resources`), so every spelling of a key is judged as that key.
      const known = Object.hasOwn(keys, key) ? key : Object.keys(keys).find((k) => k.toLowerCase() === key.toLowerCase());
      const checkKey = known === undefined ? undefined : keys[known];
      const found = checkKey ? checkKey(value, key, policy) : [{ key, reason: 'is not a key this installation knows, so it is not allowed' }];
      problems.push(...found.map((problem) => ({ file, ...problem })));
    }
  };
  check('Pulumi.yaml', files.project, PROJECT_KEYS, ['runtime']);
  for (const [stack, text] of Object.entries(files.stacks)) check(`Pulumi.${stack}.yaml`, text, STACK_KEYS, []);
  for (const { file, text } of programFiles(files).slice(1)) check(file, text, mainKeys(posix.dirname(file)), []);
  return problems;
}

/**
 * The files that may hold the program, each checked as one: `Pulumi.yaml` first, then the file the engine reads the
 * program from when it is another, and every `Main.*` of the folder (one the engine does not read today is read
 * once a `main:` or a file next to it changes).
 */
export function programFiles(files: PolicyProjectFiles): readonly { readonly file: string; readonly text: string }[] {
  const all = files.files ?? {};
  const program = programFileOf(files.project, all);
  const others = Object.entries(all)
    .filter(([path]) => path === program || /(^|\/)Main\.(ya?ml|json)$/.test(path))
    .map(([file, text]) => ({ file, text }));
  return [{ file: 'Pulumi.yaml', text: files.project }, ...others];
}

/**
 * The file the local engine reads the program from (pulumi-yaml-source.ts `findProgram`, so both always agree), when
 * it is not `Pulumi.yaml` itself; undefined when there is none to find (the engine then refuses the project).
 */
function programFileOf(projectText: string, files: Readonly<Record<string, string>>): string | undefined {
  const document = readMapping(projectText);
  if (typeof document === 'string') return undefined;
  const main = typeof document.main === 'string' ? document.main : undefined;
  try {
    const { programFile } = findProgram({ ...files, 'Pulumi.yaml': projectText }, 'Pulumi.yaml', main);
    return programFile === 'Pulumi.yaml' ? undefined : programFile;
  } catch {
    // No program, or a main outside the folder: `main` is refused above, and the engine refuses a project without one.
    return undefined;
  }
}

/** The AppError that fails a plan whose project has problems: `PROVISIONING.PROJECT_NOT_ALLOWED`, naming each key. */
export function projectNotAllowed(problems: readonly ProjectProblem[]): AppError {
  const listed = problems.map((p) => `${p.key} (${p.file}) ${p.reason}`).join('; ');
  return problemError(ProvisioningErrors.projectNotAllowed, `the project is not allowed by this installation: ${listed}`, {
    keys: problems.map((p) => (p.file === 'Pulumi.yaml' ? p.key : `${p.file}:${p.key}`)),
    problems: problems.map((p) => ({ file: p.file, key: p.key, reason: p.reason })),
  });
}

/**
 * Files read before, by their text: every run of a commit reads the same files (as pulumi-yaml.ts's cache does). The
 * mappings are frozen, as the checks only read them.
 */
const readMappings = new LRUCache<string, { readonly value: Readonly<Record<string, unknown>> | string }>({ max: 512, maxSize: 8 * 1024 * 1024, sizeCalculation: (_, text) => Math.max(1, text.length) });

function readMapping(text: string): Readonly<Record<string, unknown>> | string {
  const cached = readMappings.get(text);
  if (cached) return cached.value;
  const value = parseMapping(text);
  readMappings.set(text, { value: typeof value === 'string' ? value : deepFreeze(value) });
  return value;
}

function parseMapping(text: string): Record<string, unknown> | string {
  if (text.trim() === '') return {};
  const document = parseDocument(text, { uniqueKeys: true });
  const [error] = document.errors;
  if (error) return `is not valid YAML: ${error.message.split('\n')[0]}`;
  let value: unknown;
  try {
    value = document.toJS({ maxAliasCount: 100 });
  } catch (e) {
    return `cannot be read: ${e instanceof Error ? e.message : String(e)}`;
  }
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) return 'is not a mapping';
  return value as Record<string, unknown>;
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unknownKeys(value: unknown, key: string, known: readonly string[]): Omit<ProjectProblem, 'file'>[] {
  if (value === null || value === undefined) return [];
  if (!isMapping(value)) return [{ key, reason: 'must be a mapping' }];
  return Object.keys(value)
    .filter((k) => !known.includes(k))
    .map((k) => ({ key: `${key}.${k}`, reason: 'is not a key this installation knows, so it is not allowed' }));
}

function runtimeProblems(value: unknown, key: string, policy: ProjectPolicy): Omit<ProjectProblem, 'file'>[] {
  const allowedList = policy.runtimes.length > 0 ? policy.runtimes.join(', ') : 'none';
  const named = (name: unknown) =>
    typeof name === 'string' && policy.runtimes.includes(name) ? [] : [{ key: typeof value === 'string' ? key : `${key}.name`, reason: `is ${JSON.stringify(name ?? null)}; this installation allows ${allowedList}` }];
  if (typeof value === 'string') return named(value);
  if (!isMapping(value)) return [{ key, reason: 'must be a runtime name or { name, options }' }];
  const problems = [...named(value.name), ...unknownKeys(value, key, ['name', 'options'])];
  const options = value.options;
  if (options !== undefined && options !== null && !(isMapping(options) && Object.keys(options).length === 0)) {
    problems.push({ key: `${key}.options`, reason: 'sets runtime options, which can run commands or load code (the YAML runtime\'s compiler, nodejs nodeargs, a binary)' });
  }
  return problems;
}

/** Whether a relative path stays inside the project folder. */
function insideFolder(path: string): boolean {
  if (path.includes('\\') || path.includes('\0') || /^[A-Za-z]:/.test(path)) return false;
  const normalized = posix.normalize(path);
  return !posix.isAbsolute(normalized) && normalized !== '..' && !normalized.startsWith('../');
}

function mainProblems(value: unknown, key: string): Omit<ProjectProblem, 'file'>[] {
  if (value === null || value === undefined) return [];
  if (typeof value !== 'string') return [{ key, reason: 'must be a path' }];
  return insideFolder(value) ? [] : [{ key, reason: `points outside the project folder (${JSON.stringify(value)}); the program must be in the folder the promotion names` }];
}

function stackConfigDirProblems(value: unknown, key: string): Omit<ProjectProblem, 'file'>[] {
  if (value === null || value === undefined) return [];
  if (typeof value === 'string' && insideFolder(value) && posix.normalize(value).replace(/\/$/, '') === '.') return [];
  return [{ key, reason: 'moves the stack files out of the project folder, where the host checks them' }];
}

function configProblems(value: unknown, key: string): Omit<ProjectProblem, 'file'>[] {
  if (typeof value === 'string') return [{ key, reason: 'names a config directory (the deprecated form of stackConfigDir); stack files are read from the project folder only' }];
  return [];
}

function optionsProblems(value: unknown, key: string): Omit<ProjectProblem, 'file'>[] {
  return unknownKeys(value, key, ['refresh']);
}

function stackConfigProblems(value: unknown, key: string): Omit<ProjectProblem, 'file'>[] {
  if (value === null || value === undefined) return [];
  if (!isMapping(value)) return [{ key, reason: 'must be a mapping' }];
  return Object.entries(value)
    .filter(([, v]) => isMapping(v) && 'secure' in v)
    .map(([k]) => ({ key: `${key}.${k}`, reason: 'is an encrypted value; a secret is given as a Secret Broker reference ({ secretRef: ... })' }));
}

const FILE_FUNCTIONS = new Set(['fn::readfile', 'fn::filebase64', 'fn::filebase64sha256', 'fn::fileasset', 'fn::filearchive']);
const REMOTE_FUNCTIONS = new Set(['fn::remoteasset', 'fn::remotearchive']);

/**
 * The YAML program (variables, resources, outputs): refused are a file function (`fn::readFile`, `fn::filebase64`,
 * `fn::filebase64sha256`, `fn::fileAsset`, `fn::fileArchive`) whose path is not a constant inside the folder (Pulumi YAML allows any constant absolute path,
 * such as a runner's token file), and a remote asset or archive (content from outside the commit, fetched by the
 * runner). Function names are matched without case, as Pulumi YAML accepts `Fn::` too. A file path is read from the
 * program's folder (`folder`, as the language host runs there), and must stay inside the project folder. Which
 * packages the program uses, and from where their plugins come (`pluginDownloadURL`), is package-policy.ts's.
 */
function programProblems(folder: string): Check {
  return (value, key) => programProblemsIn(folder, value, key);
}

function programProblemsIn(folder: string, value: unknown, key: string): Omit<ProjectProblem, 'file'>[] {
  const problems: Omit<ProjectProblem, 'file'>[] = [];
  const walk = (node: unknown, path: string) => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => walk(item, `${path}[${i}]`));
      return;
    }
    if (!isMapping(node)) return;
    for (const [k, v] of Object.entries(node)) {
      const at = `${path}.${k}`;
      const lower = k.toLowerCase();
      if (FILE_FUNCTIONS.has(lower)) {
        if (typeof v !== 'string' || v.includes('${') || posix.isAbsolute(v) || !insideFolder(posix.join(folder, v))) {
          problems.push({ key: at, reason: 'reads a file that is not a constant path inside the project folder' });
        }
      } else if (REMOTE_FUNCTIONS.has(lower)) {
        problems.push({ key: at, reason: 'fetches content from outside the commit, which the host never saw' });
      } else {
        walk(v, at);
      }
    }
  };
  walk(value, key);
  return problems;
}
