import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, normalize, sep } from 'node:path';
import { promisify } from 'node:util';
import type { ConfigMap, EngineEvent, OutputMap, UpdateSummary } from '@pulumi/pulumi/automation';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { AppError, expectedAppError } from '../errors/app-error';
import { systemClock, type Clock } from '../time/clock';
import { asValueReference, collectReferences, formatPath, isPlainObject, referenceKey, type JsonValue, type PathSegment, type ValueReference } from './iac-values';
import type { ApplyOptions, ConfigOverrides, IacEngine, PlanOptions } from './iac-runner';
import { resourceUrn } from './stack-ref';
import { heldIgnoreProblem, planSchema, refusedApply, type ApplyResult, type HeldIgnoreRule, type Plan, type ResolveReferences } from './plan';
import {
  pulumiAutomationApi,
  pulumiCliPath,
  PulumiCommandFailure,
  runnerUnavailable,
  translateAutomationError,
  type PulumiAutomation,
  type PulumiAutomationOptions,
  type PulumiStackHandle,
} from './pulumi-automation';
import { applyResultFromUp, errorDiagnostics, parseUpdatePlan, planCovers, planFromPreview, redact } from './pulumi-mapping';
import type { StackRef } from './stack-ref';
import type { ProjectFiles } from './pulumi-yaml-source';

/**
 * The `pulumi` runner: the `IacEngine` port (iac-runner.ts) over the Pulumi Automation API.
 *
 * - `preview` writes the project files of the commit to a temporary work directory, selects (or creates) the
 *   stack in a `LocalWorkspace` there, and runs `preview` saving an update plan; the engine events and the plan
 *   file become our `Plan` (pulumi-mapping.ts).
 *   The update plan's JSON goes with the `Plan` (`Plan.updatePlan`): the plan job ships it, the host stores it in
 *   the plan receipt and hands it to the apply job with the approved plan.
 * - `apply` does the same with references resolved (they are given to Pulumi as secret config), checks that this
 *   new plan does nothing the approved one did not (`planCovers`; else `PROVISIONING.PLAN_CHANGED`, nothing
 *   applied), and runs `up` constrained to an update plan: Pulumi itself refuses any operation beyond it, which is
 *   also `PROVISIONING.PLAN_CHANGED`. That update plan is the approved one (written to a file beside the project)
 *   when the plan has no references; with references it is the one this apply's preview saved, which `planCovers`
 *   bound to the approved plan: a Pulumi plan binds the values of secrets, and the approved preview saw only
 *   placeholders for them, so `up` with its plan would refuse every resource a secret reaches.
 * - `version` runs `pulumi version`; without the CLI it fails with `PROVISIONING.RUNNER_UNAVAILABLE`.
 *
 * Plan options: `refresh` is Pulumi's own (`preview --refresh`, `up --refresh`: the engine reads each resource
 * from its provider first). `ignore` rules are written into the project as `ignoreChanges` of the resources they
 * match (by type, or by URN), in Pulumi's path syntax (`tags.*` → `tags`, `*` → `*`, an all-digit segment → an
 * index `[n]`), so Pulumi keeps what the resource has there, in preview and up alike.
 *
 * References (`{ secretRef }`, `{ configRef }`) are accepted as whole config values (in `Pulumi.<stack>.yaml` or
 * in the overrides). Preview gives Pulumi a placeholder secret for each (`unresolved:secretRef:<name>`); apply
 * the resolved value, as a secret, so it never shows in engine events, and is redacted from every message.
 */

/** The `pulumi` runner: the `IacEngine` port of iac-runner.ts (spelled out here, as local-engine.ts does). */
export interface PulumiEngine {
  readonly name: 'pulumi';
  /** `pulumi version`; `PROVISIONING.RUNNER_UNAVAILABLE` without the CLI (the `iac-runner` health probe). */
  version(): Promise<string>;
  /**
   * The stack is selected by its own name in the project's backend: keeping one tenant's states apart from
   * another's is the backend's (a state location per tenant), not the stack name's.
   */
  preview(stack: StackRef, files: ProjectFiles, config?: ConfigOverrides, planOptions?: PlanOptions): Promise<Plan>;
  /**
   * `applyOptions.refresh` and `applyOptions.ignore` as for `preview` (for the preview made again and for `up`).
   * `applyOptions.beforeStep` is awaited before `up` starts, and again (one call at a time) as Pulumi starts a
   * resource: an AppError thrown there cancels the update, which fails with the error's code.
   */
  apply(stack: StackRef, files: ProjectFiles, config: ConfigOverrides, approvedPlan: Plan, resolveReferences: ResolveReferences, applyOptions?: ApplyOptions): Promise<ApplyResult>;
}

export interface PulumiRunnerOptions extends PulumiAutomationOptions {
  /** The Automation API; default: the real one (`pulumiAutomationApi`). Tests pass a test double. */
  readonly automation?: PulumiAutomation;
  /** Where temporary work directories are made; default: the OS temp directory. */
  readonly workRoot?: string;
  readonly clock?: Clock;
}

export const PULUMI_PLACEHOLDER_PREFIX = 'unresolved:';

export function createPulumiRunner(options: PulumiRunnerOptions = {}): PulumiEngine {
  const automation = options.automation ?? pulumiAutomationApi(options);
  const clock = options.clock ?? systemClock;
  const run = promisify(execFile);

  return {
    name: 'pulumi',
    async version() {
      try {
        const { stdout } = await run(pulumiCliPath(options.cliRoot), ['version'], { timeout: 10_000 });
        return `pulumi ${stdout.trim()}`;
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        throw code === 'ENOENT' ? runnerUnavailable() : runnerUnavailable('pulumi version failed');
      }
    },

    async preview({ stack }, files, config = {}, planOptions = {}) {
      return withWorkDir(options.workRoot, async (work) => {
        const project = await writeProject(work, files, stack, config, planOptions.ignore ?? []);
        const handle = await openStack(automation, stack, work, project, (reference) => `${PULUMI_PLACEHOLDER_PREFIX}${referenceKey(reference)}`);
        return previewPlan(handle, work, stack, project, [], planOptions.refresh === true);
      });
    },

    async apply({ stack }, files, config, approvedPlan, resolveReferences, applyOptions = {}) {
      if (!planSchema.safeParse(approvedPlan).success) {
        throw new AppError('IAC.INVALID_PLAN', 'validation', 'the approved plan is not a plan this engine made');
      }
      const startedAt = clock.now().toISOString();
      const finish = (result: Omit<ApplyResult, 'startedAt' | 'finishedAt'>): ApplyResult => ({ ...result, startedAt, finishedAt: clock.now().toISOString() });

      return withWorkDir(options.workRoot, async (work) => {
        // Everything up to `up` changes nothing in the target: a refusal here leaves it untouched.
        let project: WrittenProject;
        let handle: PulumiStackHandle;
        const secrets: string[] = [];
        try {
          project = await writeProject(work, files, stack, config, applyOptions.ignore ?? []);
        } catch (thrown) {
          return finish(refusedApply(approvedPlan, approvedPlan.baseSerial, expectedAppError(thrown)));
        }
        const resolved = new Map<string, JsonValue>();
        try {
          for (const { reference } of project.references) {
            const key = referenceKey(reference);
            if (!resolved.has(key)) resolved.set(key, await resolveReferences(reference));
          }
        } catch (thrown) {
          return finish(refusedApply(approvedPlan, approvedPlan.baseSerial, expectedAppError(thrown, 'PROVISIONING.REFERENCE_UNRESOLVED')));
        }
        for (const value of resolved.values()) secrets.push(configText(value));
        let fresh: Plan;
        try {
          handle = await openStack(automation, stack, work, project, (reference) => configText(resolved.get(referenceKey(reference)) ?? null), secrets);
          fresh = await previewPlan(handle, work, stack, project, secrets, applyOptions.refresh === true);
        } catch (thrown) {
          return finish(refusedApply(approvedPlan, approvedPlan.baseSerial, expectedAppError(thrown)));
        }
        const coverage = planCovers(approvedPlan, fresh);
        if (!coverage.covered) {
          const error = new AppError('PROVISIONING.PLAN_CHANGED', 'conflict', `the plan changed since it was approved; nothing was applied: ${coverage.reason}`);
          return finish(refusedApply(approvedPlan, fresh.baseSerial, error));
        }

        // The caller's last word before anything changes; then again as Pulumi starts each resource, where a
        // refusal cancels the update (Pulumi finishes the operations in flight and starts no other).
        const stopBefore = await mayGoOn(applyOptions.beforeStep);
        if (stopBefore) return finish(refusedApply(fresh, fresh.baseSerial, stopBefore));
        const planFile = await updatePlanFile(work, approvedPlan);
        const events: EngineEvent[] = [];
        const cancel = new AbortController();
        let stopped: AppError | undefined;
        let checking: Promise<void> | undefined;
        const onEvent = (event: EngineEvent) => {
          events.push(event);
          if (!event.resourcePreEvent || !applyOptions.beforeStep || checking || stopped) return;
          checking = mayGoOn(applyOptions.beforeStep).then((stop) => {
            checking = undefined;
            if (stop && !stopped) {
              stopped = stop;
              cancel.abort();
            }
          });
        };
        let result: { outputs: OutputMap; summary?: UpdateSummary } | undefined;
        let failure: string | undefined;
        try {
          const up = await handle.up({ plan: planFile, onEvent, showSecrets: false, signal: cancel.signal, ...(applyOptions.refresh ? { refresh: true } : {}) });
          result = { outputs: up.outputs, summary: up.summary };
        } catch (thrown) {
          failure = failureMessage(translateAutomationError(thrown), secrets);
        }
        await checking;
        const serial = result?.summary?.version ?? (await lastVersion(handle)) ?? fresh.baseSerial;
        const at = clock.now().toISOString();
        return applyResultFromUp({
          plan: fresh,
          approvedDigest: approvedPlan.digest,
          events,
          ...(result ? { result } : {}),
          ...(failure !== undefined ? { failure } : {}),
          ...(stopped ? { stopped: { code: stopped.code, message: stopped.message } } : {}),
          serial,
          secrets,
          startedAt,
          finishedAt: at,
        });
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Work directory and project files

interface WorkDir {
  /** The project directory: the commit's files. */
  readonly project: string;
  /** The update plan file a preview saves, beside the project (never inside it). */
  readonly planFile: string;
  /** The approved update plan, written for `up`, beside the project. */
  readonly approvedPlanFile: string;
}

/**
 * The update plan `up` is held to: the approved one when the plan has no references (written to its file), else
 * the one this apply's preview saved (see the top of this file).
 */
async function updatePlanFile(work: WorkDir, approvedPlan: Plan): Promise<string> {
  if (approvedPlan.updatePlan === undefined || approvedPlan.references.length > 0) return work.planFile;
  await writeFile(work.approvedPlanFile, JSON.stringify(approvedPlan.updatePlan));
  return work.approvedPlanFile;
}

async function withWorkDir<T>(root: string | undefined, work: (dir: WorkDir) => Promise<T>): Promise<T> {
  const base = await mkdtemp(join(root ?? tmpdir(), 'runtime-cloud-pulumi-'));
  try {
    const project = join(base, 'project');
    await mkdir(project);
    return await work({ project, planFile: join(base, 'update-plan.json'), approvedPlanFile: join(base, 'approved-update-plan.json') });
  } finally {
    // The work directory may hold encrypted secret config: it goes with the call.
    await rm(base, { recursive: true, force: true });
  }
}

interface WrittenProject {
  /** `name` of `Pulumi.yaml`. */
  readonly name: string;
  /** Config keys (namespaced) whose values are references, with the reference. */
  readonly references: readonly { readonly key: string; readonly reference: ValueReference }[];
}

/**
 * Writes `files` into the project directory, with `Pulumi.<stack>.yaml`'s config rewritten: keys namespaced
 * (`poolSize` → `<project>:poolSize`), `overrides` merged over the file's values, and reference values taken out
 * (they are set as secrets through the workspace); and with the `ignore` rules added to the `ignoreChanges` of
 * the resources they match.
 */
async function writeProject(work: WorkDir, files: ProjectFiles, stack: string, overrides: ConfigOverrides, ignore: readonly HeldIgnoreRule[]): Promise<WrittenProject> {
  const projectFile = files['Pulumi.yaml'] !== undefined ? 'Pulumi.yaml' : 'Pulumi.yml';
  const projectText = files[projectFile];
  if (projectText === undefined) throw invalidProject('the project has no Pulumi.yaml');
  let projectDocument: unknown;
  try {
    projectDocument = parseYaml(projectText) as unknown;
  } catch {
    throw invalidProject('Pulumi.yaml is not valid YAML');
  }
  const projectName = isPlainObject(projectDocument) ? projectDocument.name : undefined;
  if (typeof projectName !== 'string' || projectName.length === 0) throw invalidProject('Pulumi.yaml has no project name');
  const name = projectName;
  const held = withHeldIgnores(projectDocument as Record<string, unknown>, stack, name, ignore);

  const stackFile = `Pulumi.${stack}.yaml`;
  let stackDocument: Record<string, unknown> = {};
  if (files[stackFile] !== undefined) {
    let parsed: unknown;
    try {
      parsed = parseYaml(files[stackFile]);
    } catch {
      throw invalidConfig(`${stackFile} is not valid YAML`);
    }
    if (parsed !== null && parsed !== undefined && !isPlainObject(parsed)) throw invalidConfig(`${stackFile} is not a mapping`);
    stackDocument = parsed ?? {};
  }
  const fileConfig = stackDocument.config ?? {};
  if (!isPlainObject(fileConfig)) throw invalidConfig(`config of ${stackFile} is not a mapping`);

  const namespaced = (key: string) => (key.includes(':') ? key : `${name}:${key}`);
  const config = new Map<string, JsonValue>();
  for (const [key, value] of Object.entries(fileConfig)) config.set(namespaced(key), value);
  for (const [key, value] of Object.entries(overrides)) config.set(namespaced(key), value);

  const plain: Record<string, JsonValue> = {};
  const references: { key: string; reference: ValueReference }[] = [];
  for (const [key, value] of [...config.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const reference = asValueReference(value);
    if (reference) references.push({ key, reference });
    else if (collectReferences(value).length > 0) {
      throw invalidConfig(`config ${key}: the pulumi runner takes a reference only as a whole config value`, { path: `config.${key}` });
    } else plain[key] = value;
  }

  for (const [file, text] of Object.entries(files)) {
    if (file === stackFile) continue;
    await writeFile(await projectPath(work.project, file), file === projectFile && held ? stringifyYaml(held) : text);
  }
  const rewritten = { ...stackDocument, config: plain };
  await writeFile(join(work.project, stackFile), stringifyYaml(rewritten));
  return { name, references };
}

/**
 * The project document with each held ignore rule added to the `options.ignoreChanges` of the resources it matches
 * (by type, or by the URN the resource has in `stack`), or undefined when no rule matches a resource (the project
 * file is then written as it is). A rule whose path cannot be read is `IAC.INVALID_IGNORE_RULE`, as in the local
 * engine: a rule silently dropped would let the apply change what the operator said holds.
 */
function withHeldIgnores(document: Record<string, unknown>, stack: string, project: string, ignore: readonly HeldIgnoreRule[]): Record<string, unknown> | undefined {
  if (ignore.length === 0) return undefined;
  for (const rule of ignore) {
    const problem = heldIgnoreProblem(rule.path);
    if (problem) throw new AppError('IAC.INVALID_IGNORE_RULE', 'validation', `the ignore rule for ${rule.path} cannot be read: ${problem}`, { path: rule.path, scope: rule.scope });
  }
  const resources = document.resources;
  if (!isPlainObject(resources)) return undefined;
  let matched = false;
  const rewritten: Record<string, unknown> = {};
  for (const [resourceName, declaration] of Object.entries(resources)) {
    const type = isPlainObject(declaration) ? declaration.type : undefined;
    const rules =
      typeof type === 'string' ? ignore.filter((r) => ('urn' in r.scope ? r.scope.urn === resourceUrn(stack, project, type, resourceName) : r.scope.type === type)) : [];
    if (rules.length === 0 || !isPlainObject(declaration)) {
      rewritten[resourceName] = declaration;
      continue;
    }
    matched = true;
    const options = isPlainObject(declaration.options) ? declaration.options : {};
    const existing = Array.isArray(options.ignoreChanges) ? (options.ignoreChanges as readonly unknown[]) : [];
    const added = rules.map((r) => pulumiIgnorePath(r.path)).filter((p) => !existing.includes(p));
    rewritten[resourceName] = { ...declaration, options: { ...options, ignoreChanges: [...existing, ...new Set(added)] } };
  }
  return matched ? { ...document, resources: rewritten } : undefined;
}

/**
 * A held rule's path (inventory's dot syntax) in Pulumi's `ignoreChanges` syntax. Pulumi reads `[n]` as an array
 * index only, so an all-digit segment is taken as one: an object key made of digits cannot be held this way.
 */
export function pulumiIgnorePath(path: string): string {
  const names = path.split('.');
  if (names[names.length - 1] === '*') names.pop();
  if (names.length === 0) return '*';
  const segments: PathSegment[] = names.map((n) => (/^\d+$/.test(n) ? Number(n) : n));
  return formatPath(segments);
}

async function projectPath(root: string, file: string): Promise<string> {
  const normalized = normalize(file);
  if (isAbsolute(file) || normalized === '..' || normalized.startsWith(`..${sep}`) || normalized.split(sep).includes('..')) {
    throw invalidProject(`the project file ${file} is outside the project`);
  }
  const path = join(root, normalized);
  await mkdir(dirname(path), { recursive: true });
  return path;
}

function invalidProject(message: string): AppError {
  return new AppError('IAC.INVALID_PROJECT', 'validation', message);
}

function invalidConfig(message: string, details: Record<string, unknown> = {}): AppError {
  return new AppError('IAC.INVALID_CONFIG', 'validation', message, details);
}

/** A config value as Pulumi config text: strings as they are, anything else as JSON. */
function configText(value: JsonValue): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/**
 * The stack in a workspace over the project directory, with each reference set as secret config to
 * `valueOf(reference)`. A CLI that is missing, or that cannot reach its backend or secrets provider, is
 * `PROVISIONING.RUNNER_UNAVAILABLE`.
 */
async function openStack(
  automation: PulumiAutomation,
  stack: string,
  work: WorkDir,
  project: WrittenProject,
  valueOf: (reference: ValueReference) => string,
  secrets: readonly string[] = [],
): Promise<PulumiStackHandle> {
  try {
    const handle = await automation.selectStack({ stackName: stack, workDir: work.project });
    if (project.references.length > 0) {
      const config: ConfigMap = {};
      for (const { key, reference } of project.references) config[key] = { value: valueOf(reference), secret: true };
      await handle.setAllConfig(config);
    }
    return handle;
  } catch (thrown) {
    const error = translateAutomationError(thrown);
    if (error instanceof PulumiCommandFailure) {
      if (error.reason === 'concurrent-update') throw stackBusy(stack);
      throw runnerUnavailable(`pulumi could not open stack ${stack}: ${failureMessage(error, secrets)}`);
    }
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Preview

async function previewPlan(handle: PulumiStackHandle, work: WorkDir, stack: string, project: WrittenProject, secrets: readonly string[], refresh: boolean): Promise<Plan> {
  const baseSerial = (await lastVersion(handle, true)) ?? 0;
  const events: EngineEvent[] = [];
  let changeSummary;
  try {
    ({ changeSummary } = await handle.preview({ plan: work.planFile, onEvent: (event) => events.push(event), ...(refresh ? { refresh: true } : {}) }));
  } catch (thrown) {
    const error = translateAutomationError(thrown);
    if (!(error instanceof PulumiCommandFailure)) throw error;
    if (error.reason === 'concurrent-update') throw stackBusy(stack);
    const diagnostics = errorDiagnostics(events, secrets);
    throw new AppError('IAC.PREVIEW_FAILED', 'unprocessable', diagnostics[0]?.message ?? failureMessage(error, secrets), {
      diagnostics: diagnostics.slice(0, 10),
    });
  }
  let planJson: unknown;
  try {
    planJson = JSON.parse(await readFile(work.planFile, 'utf8'));
  } catch {
    throw new AppError('IAC.PULUMI_PLAN_UNREADABLE', 'internal', 'pulumi preview saved no readable update plan');
  }
  const plan = planFromPreview({
    stack,
    project: project.name,
    baseSerial,
    events,
    updatePlan: parseUpdatePlan(planJson),
    changeSummary,
    references: project.references.map((r) => r.reference),
  });
  // As Pulumi saved it, so the apply hands `up` exactly this file's content.
  return isPlainObject(planJson) ? { ...plan, updatePlan: planJson } : plan;
}

/** The stack's last update version, read without secrets; undefined for a stack never updated. */
async function lastVersion(handle: PulumiStackHandle, strict = false): Promise<number | undefined> {
  try {
    return (await handle.info(false))?.version;
  } catch (thrown) {
    if (strict) throw translateAutomationError(thrown);
    return undefined;
  }
}

function stackBusy(stack: string): AppError {
  return new AppError('PROVISIONING.STACK_BUSY', 'unavailable', `another update holds stack ${stack}`);
}

// ---------------------------------------------------------------------------------------------------------------
// Failures

/** A failed command in one line: the last line of its stderr that says `error:`, redacted; never the whole output. */
function failureMessage(error: Error, secrets: readonly string[]): string {
  if (error instanceof AppError) return error.message;
  if (!(error instanceof PulumiCommandFailure)) return redact(error.message, secrets).slice(0, 500);
  const line = error.stderr
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => /^error:/i.test(l))
    .pop();
  return redact(line ?? error.message, secrets).slice(0, 500);
}

/** The caller's `beforeStep`: undefined to go on, or the AppError that stops the apply (anything else is rethrown). */
async function mayGoOn(beforeStep: (() => Promise<void>) | undefined): Promise<AppError | undefined> {
  try {
    await beforeStep?.();
    return undefined;
  } catch (thrown) {
    return expectedAppError(thrown);
  }
}

/**
 * The production runner: the Pulumi Automation API, chosen by `RuntimeCloud__IaC__Runner=pulumi`.
 * Every workspace call runs the `pulumi` CLI, and so does `version()` (the `iac-runner` health probe): without
 * it they fail with `PROVISIONING.RUNNER_UNAVAILABLE`.
 */
export function pulumiIacRunner(options: PulumiRunnerOptions = {}): IacEngine {
  return createPulumiRunner(options);
}
