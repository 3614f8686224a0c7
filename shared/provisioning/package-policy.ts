import { satisfies, valid } from 'semver';
import { AppError } from '../platform/errors/app-error';
import { formatPath, isPlainObject, type JsonValue, type PathSegment } from '../platform/iac/iac-values';
import { INVOKE_SHORT_FORM } from '../platform/iac/pulumi-yaml-functions';
import { locate, parseYamlSource, type SourceFile } from '../platform/iac/pulumi-yaml-source';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * Which Pulumi packages a tenant's program may use: the installation's list (`RuntimeCloud__Provisioning__Packages`),
 * checked on the program as the language host reads it, before any runner job and for every engine. The Pulumi
 * engine installs a plugin a program names by itself, and a provider runs whatever its plugin does (a `command`
 * resource runs a shell at preview, before policy and approval): so a package the list does not name, a version
 * outside its range, `command`, and a plugin from a URL the program names are refused here, never downloaded there.
 * Pure: text in, problems out.
 *
 * What names a package (pulumi-yaml packages.go `resolvePkgName`, the same for every token): a resource's or a
 * `get`'s `type` (`azure-native:storage:StorageAccount` → `azure-native`; the short form `random:RandomPassword` →
 * `random`), an explicit provider (`pulumi:providers:aws` → `aws`), an invoke's `function` (`fn::invoke`, or the
 * short form `fn::aws:ec2:getAmi`), and the package keys of `options.providers`. Tokens are compared as written,
 * with case, as the language host loads a plugin by the name as written.
 */
export const PackageErrors = {
  /** The program uses a package (or a version of one) this installation does not allow; the details name each. */
  notAllowed: 'PROVISIONING.PACKAGE_NOT_ALLOWED',
} as const;

export interface PackagePolicy {
  /**
   * Package name → the semver range of the versions a program may ask for (`options.version`); a program that asks
   * for none gets the runner image's. Example: `{ 'azure-native': '3.28.0', random: '>=4.21.0 <5.0.0' }`.
   */
  readonly packages: Readonly<Record<string, string>>;
}

export interface PackageProblem {
  /** The type or function token as written (`command:local:Command`, `pulumi:providers:aws`). */
  readonly type: string;
  /** The file that says it: `Pulumi.yaml`, `Main.yaml`, `src/Main.yaml`. */
  readonly file: string;
  /** Its 1-based line. */
  readonly line: number;
  readonly reason: string;
}

/** A program file: its path in the project folder and its text. */
export interface ProgramText {
  readonly file: string;
  readonly text: string;
}

/**
 * The builtins of the `pulumi` package a program may use, and why each is harmless. Every other `pulumi:` token is
 * refused: the host cannot judge what it does.
 */
const PULUMI_BUILTINS: Readonly<Record<string, string>> = {
  // A value kept in the stack's state: no provider, nothing outside the stack.
  'pulumi:index:Stash': 'keeps a value in the state',
  'pulumi:Stash': 'keeps a value in the state',
  // Reads another stack's outputs, by name, from the same backend: each tenant's backend is its own
  // (`backend.url` must name {tenant}), so it reads only the tenant's own stacks.
  'pulumi:pulumi:StackReference': "reads a stack of the tenant's own backend",
};

const NEVER: Readonly<Record<string, string>> = {
  command: 'runs commands on the runner (at preview, before policy and approval), which no installation allows',
};

const PLUGIN_DOWNLOAD_URL = 'plugindownloadurl';
const PROGRAM_SECTIONS = new Set(['variables', 'resources', 'outputs']);

/** Every use of a package the policy does not allow, in file order; none means the program may run. */
export function packageProblems(programs: readonly ProgramText[], policy: PackagePolicy): readonly PackageProblem[] {
  const problems: PackageProblem[] = [];
  for (const { file, text } of programs) {
    let value: JsonValue;
    let source: SourceFile;
    try {
      ({ value, source } = parseYamlSource(text, file));
    } catch (error) {
      // The project policy refuses such a file first; should one get here, what the host cannot read it cannot judge.
      problems.push({ type: '(none)', file, line: 1, reason: `cannot be read, so its packages cannot be judged: ${error instanceof Error ? error.message : String(error)}` });
      continue;
    }
    if (!isPlainObject(value)) continue;
    const refuse = (type: string, path: readonly PathSegment[], reason: string) =>
      problems.push({ type, file, line: locate([source], formatPath(path))?.line ?? 1, reason });
    for (const [section, content] of Object.entries(value)) {
      if (!PROGRAM_SECTIONS.has(section.toLowerCase())) continue;
      if (section.toLowerCase() === 'resources' && isPlainObject(content)) {
        for (const [name, resource] of Object.entries(content)) checkResource(resource, [section, name], policy, refuse);
      } else {
        walk(content, [section], undefined, policy, refuse);
      }
    }
  }
  return problems;
}

/** The AppError that fails a run whose program uses what the policy does not allow, naming each type, file and line. */
export function packageNotAllowed(problems: readonly PackageProblem[]): AppError {
  const listed = problems.map((p) => `${p.file}:${p.line}: ${p.type} ${p.reason}`).join('; ');
  return problemError(ProvisioningErrors.packageNotAllowed, `the program uses packages this installation does not allow: ${listed}`, {
    packages: problems.map((p) => ({ type: p.type, file: p.file, line: p.line, reason: p.reason })),
  });
}

type Refuse = (type: string, path: readonly PathSegment[], reason: string) => void;

/** A key of `value` matched without case, as Pulumi YAML reads resource fields, options and invoke arguments. */
function keyOf(value: Readonly<Record<string, JsonValue>>, name: string): string | undefined {
  return Object.keys(value).find((k) => k.toLowerCase() === name);
}

function checkResource(resource: JsonValue, path: readonly PathSegment[], policy: PackagePolicy, refuse: Refuse): void {
  if (!isPlainObject(resource)) return;
  const typeKey = keyOf(resource, 'type');
  const type = typeKey === undefined ? undefined : resource[typeKey];
  // No type: the language host refuses the resource before it loads anything.
  if (typeKey !== undefined) {
    // An expression (`${kind}`) is judged as the text it is, as the language host reads a type: never a valid token
    // of an allowed package.
    if (typeof type !== 'string') refuse(JSON.stringify(type), [...path, typeKey], 'is not a type token, so its package cannot be judged');
    else checkToken(type, 'resource', [...path, typeKey], policy, refuse);
  }
  const token = typeof type === 'string' ? type : '(none)';
  const optionsKey = keyOf(resource, 'options');
  const options = optionsKey === undefined ? undefined : resource[optionsKey];
  if (optionsKey !== undefined && isPlainObject(options)) {
    checkVersion(token, options, [...path, optionsKey], policy, refuse);
    const providersKey = keyOf(options, 'providers');
    const providers = providersKey === undefined ? undefined : options[providersKey];
    // The map form names each provider's package; the providers themselves are resources, checked as such.
    if (providersKey !== undefined && isPlainObject(providers)) {
      for (const name of Object.keys(providers)) {
        const reason = packageReason(name, policy);
        if (reason !== undefined) refuse(`pulumi:providers:${name}`, [...path, optionsKey, providersKey, name], reason);
      }
    }
  }
  walk(resource, path, token, policy, refuse);
}

/**
 * Every invoke and every `pluginDownloadURL` under `node`; `type` is the resource or invoke it belongs to. Function
 * names are matched without case, as Pulumi YAML reads `Fn::Invoke` too.
 */
function walk(node: JsonValue, path: readonly PathSegment[], type: string | undefined, policy: PackagePolicy, refuse: Refuse): void {
  if (Array.isArray(node)) {
    node.forEach((item: JsonValue, i) => walk(item, [...path, i], type, policy, refuse));
    return;
  }
  if (!isPlainObject(node)) return;
  for (const [key, value] of Object.entries(node)) {
    const at = [...path, key];
    const lower = key.toLowerCase();
    if (lower === PLUGIN_DOWNLOAD_URL) {
      refuse(type ?? '(none)', at, "downloads a provider plugin from a URL the program names, instead of the installation's plugins");
    } else if (lower === 'fn::invoke') {
      checkInvoke(value, at, policy, refuse);
    } else if (INVOKE_SHORT_FORM.test(lower)) {
      const token = key.slice('fn::'.length);
      checkToken(token, 'function', at, policy, refuse);
      walk(value, at, token, policy, refuse);
    } else {
      walk(value, at, type, policy, refuse);
    }
  }
}

function checkInvoke(args: JsonValue, path: readonly PathSegment[], policy: PackagePolicy, refuse: Refuse): void {
  if (!isPlainObject(args)) {
    refuse('(none)', path, 'is an invoke without a function, so its package cannot be judged');
    return;
  }
  const functionKey = keyOf(args, 'function');
  const token = functionKey === undefined ? undefined : args[functionKey];
  if (typeof token !== 'string') {
    refuse(JSON.stringify(token ?? '(none)'), functionKey === undefined ? path : [...path, functionKey], 'is not a function token, so its package cannot be judged');
    walk(args, path, undefined, policy, refuse);
    return;
  }
  checkToken(token, 'function', [...path, functionKey ?? 'function'], policy, refuse);
  const optionsKey = keyOf(args, 'options');
  const options = optionsKey === undefined ? undefined : args[optionsKey];
  if (optionsKey !== undefined && isPlainObject(options)) checkVersion(token, options, [...path, optionsKey], policy, refuse);
  walk(args, path, token, policy, refuse);
}

/** A resource type or function token: its package must be allowed, or it must be an allowed builtin. */
function checkToken(token: string, kind: 'resource' | 'function', path: readonly PathSegment[], policy: PackagePolicy, refuse: Refuse): void {
  const parts = token.split(':');
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => p === '')) {
    refuse(token, path, `is not a ${kind === 'resource' ? 'type' : 'function'} token (package:module:name), so its package cannot be judged`);
    return;
  }
  const name = packageName(parts);
  if (name === 'pulumi') {
    if (kind === 'resource' && Object.hasOwn(PULUMI_BUILTINS, token)) return;
    refuse(token, path, `is not a builtin of the pulumi package this installation allows (${Object.keys(PULUMI_BUILTINS).join(', ')})`);
    return;
  }
  const reason = packageReason(name, policy);
  if (reason !== undefined) refuse(token, path, reason);
}

/** pulumi-yaml's `resolvePkgName`: the last part of `pulumi:providers:<pkg>`, else the first. */
function packageName(parts: readonly string[]): string {
  return parts.length === 3 && parts[0] === 'pulumi' && parts[1] === 'providers' ? (parts[2] ?? '') : (parts[0] ?? '');
}

/** Why `name` may not be used, or undefined when the policy allows it. */
function packageReason(name: string, policy: PackagePolicy): string | undefined {
  const never = Object.hasOwn(NEVER, name.toLowerCase()) ? NEVER[name.toLowerCase()] : undefined;
  if (never !== undefined) return `is of package ${name}, which ${never}`;
  if (Object.hasOwn(policy.packages, name)) return undefined;
  const allowed = Object.keys(policy.packages);
  return `is of package ${name}, which this installation does not allow (allowed: ${allowed.length > 0 ? allowed.join(', ') : 'none'})`;
}

/** `options.version` of a resource, provider or invoke of `token`: within the package's range, or absent. */
function checkVersion(token: string, options: Readonly<Record<string, JsonValue>>, path: readonly PathSegment[], policy: PackagePolicy, refuse: Refuse): void {
  const versionKey = keyOf(options, 'version');
  if (versionKey === undefined) return;
  const version = options[versionKey];
  const at = [...path, versionKey];
  const parts = token.split(':');
  const name = packageName(parts);
  const range = Object.hasOwn(policy.packages, name) ? policy.packages[name] : undefined;
  // A package that is not allowed is refused by its token already; a builtin has no plugin to pick a version of.
  if (range === undefined) return;
  if (typeof version !== 'string' || version.includes('${') || valid(version) === null) {
    refuse(token, at, `asks for version ${JSON.stringify(version)} of ${name}, which is not a literal version (1.2.3)`);
  } else if (!satisfies(version, range)) {
    refuse(token, at, `asks for version ${version} of ${name}; this installation allows ${range} (the runner carries no other version and downloads none)`);
  }
}
