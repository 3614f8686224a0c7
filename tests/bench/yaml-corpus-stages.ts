/**
 * The stages one corpus program goes through on the local IaC engine, in order, stopping at the first that
 * fails: parse, plan (against an empty stack), apply (the approved plan), re-plan (every step `same`), change
 * (the program's deterministic change is planned, seen, applied, and re-planned all `same`), outputs (the first
 * apply's stack outputs against what Pulumi gives, where known). For a program Pulumi refuses, the faithful
 * outcome is a clear refusal (an AppError code) before anything is applied.
 */
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import { jsonEqual, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { createLocalEngine, type ConfigOverrides, type LocalEngine } from '../../local/engine/local-engine';
import type { ApplyResult, Plan, ResolveReferences } from '../../shared/platform/iac/plan';
import { loadProgram, type ProjectFiles } from '../../local/engine/pulumi-yaml';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import { createSqlStore, type SqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { ManualClock, type Ids } from '../../shared/platform/time/clock';
import type { CorpusProgram } from './yaml-corpus-program';

export const STAGES = ['parse', 'plan', 'apply', 'replan', 'change', 'outputs'] as const;
export type Stage = (typeof STAGES)[number];

/** `skipped`: the stage does not apply (no change to make); `not-checked`: Pulumi's outputs are not known. */
export type StageStatus = 'passed' | 'failed' | 'skipped' | 'not-checked' | 'not-reached';

export interface StageFailure {
  readonly stage: Stage;
  /** The engine's AppError code, `CORPUS.*` for what the harness found wrong, `UNEXPECTED.<Error>` for a crash. */
  readonly code: string;
  readonly message: string;
}

/**
 * A failure's cause: its message with what is particular to one program taken out (file and line, names,
 * interpolations, quoted values, types), so failures of one cause group together, e.g.
 * `resources.*.options.provider is not supported by the local engine`.
 */
export function causeOf(failure: Pick<StageFailure, 'code' | 'message'>): string {
  const fixed: Readonly<Record<string, string>> = {
    'CORPUS.EMPTY_PLAN': 'declares resources, plans none',
    'CORPUS.DROPPED_RESOURCES': 'plans fewer resources than it declares',
    'CORPUS.OUTPUTS_MISSING': 'outputs the program declares are missing',
    'CORPUS.NOT_IDEMPOTENT': 'the re-plan after apply is not all same',
    'CORPUS.NOT_CONVERGED': 'the re-plan after the change is not all same',
    'CORPUS.CHANGE_NOT_SEEN': 'the change is not in the plan',
  };
  const known = fixed[failure.code];
  if (known) return known;
  if (failure.code === 'CORPUS.OUTPUTS_DIFFER') return /Pulumi [^;]*, engine \(absent\)/.test(failure.message) ? "outputs Pulumi gives are absent" : "output values differ from Pulumi's";
  return failure.message
    .replace(/^[\w./-]+\.(?:ya?ml|json):\d+: /, '')
    .replace(/\$\{[^}]*\}/g, '${…}')
    .replace(/"(?:[^"\\]|\\.)*"/g, '"…"')
    .replace(/\b(resources|variables|outputs|config)\.[\w.-]+?(?=\.(?:options|properties|get|type|defaultProvider)\b|[:[ ]|$)/g, '$1.*')
    .replace(/\.properties(?:\.[\w-]+|\[\d+\])+/g, '.properties.*')
    .replace(/[\w-]+ \([^)]*\) has no output [\w-]+: /, '… has no output …: ')
    .replace(/the local engine knows (a [^']*'s inputs and id only|only the inputs and id of \S+)/, "the local engine knows only a resource's inputs and id")
    .replace(/fn::invoke of \S+/, 'fn::invoke of …')
    .replace(/config [\w:-]+ is declared/, 'config … is declared')
    .replace(/^[\w-]+ \([^)]*\): /, '… : ')
    .replace(/\b\d+\b/g, 'N');
}

/**
 * - `faithful`: every stage passed, outputs equal to Pulumi's; `passed-unchecked`: the same, outputs not known;
 * - `failed`: a stage failed (see `failure`);
 * - `refused` / `refused-unclearly`: Pulumi refuses it and so did the engine, with an AppError code / with a crash;
 * - `accepted-refusal`: Pulumi refuses it, the engine planned and applied it;
 * - `not-measured`: we cannot give it what Pulumi's harness gives it.
 */
export type Outcome = 'faithful' | 'passed-unchecked' | 'failed' | 'refused' | 'refused-unclearly' | 'accepted-refusal' | 'not-measured';

/** The dangerous outcomes, reported apart from failures. */
export type Danger = 'empty-plan' | 'dropped-resources' | 'accepted-refusal';

/** One row of the JSON report. */
export interface ProgramReport {
  readonly id: string;
  readonly source: string;
  readonly group: string;
  readonly project: string;
  readonly stack: string;
  readonly expectation: CorpusProgram['expectation']['kind'];
  readonly reason?: string;
  readonly outcome: Outcome;
  readonly stages: Readonly<Record<Stage, StageStatus>>;
  readonly failure?: StageFailure & { readonly cause: string };
  readonly dangers: readonly Danger[];
  readonly declaredResources: number;
  readonly plannedSteps?: number;
  /** With `empty-plan` or `dropped-resources`: applying that plan succeeded (an incomplete stack reported applied). */
  readonly emptyPlanApplied?: boolean;
  readonly change?: string;
  readonly outputs?: { readonly from: string; readonly equal: boolean; readonly expected: JsonObject; readonly actual: JsonObject };
  /** On the last step of a multi-step conformance test: its steps applied one after the other on one stack. */
  readonly sequence?: SequenceResult;
}

/** A multi-step test run as pulumi-test-language runs it: every step on the stack the step before left. */
export interface SequenceResult {
  readonly steps: number;
  readonly converged: boolean;
  /** The first step (its folder, `l2-destroy/1`) and stage that failed. */
  readonly failure?: StageFailure & { readonly step: string };
}

/**
 * The engine the corpus runs on: the local engine over a migrated in-memory SQLite store, its clock fixed and its
 * ids in order, so two runs give the same plans.
 */
export async function corpusEngine(): Promise<{ engine: LocalEngine; store: SqlStore }> {
  const store = createSqlStore({ dialect: 'sqlite', connection: ':memory:' });
  await migrateToLatest(store.db, 'sqlite', allMigrations);
  let n = 0;
  const ids: Ids = { next: (prefix) => `${prefix ?? 'id'}_${String(++n).padStart(6, '0')}` };
  return { engine: createLocalEngine({ store, ids, clock: new ManualClock('2026-01-01T00:00:00Z') }), store };
}

/**
 * Measures one program on `engine` as stack `tenant/<project>/<stack>`; `tenant` must be the program's own. The
 * parse stage is `load` (the engine's `loadProgram`; a test gives another to stand for an engine that parses more).
 */
export async function measureProgram(engine: LocalEngine, program: CorpusProgram, tenant: string, load: typeof loadProgram = loadProgram): Promise<ProgramReport> {
  const stack: StackRef = { tenant, project: program.project, stack: program.stack };
  const resolve: ResolveReferences = (reference) => {
    const value = 'secretRef' in reference ? program.secrets.get(reference.secretRef) : undefined;
    if (value !== undefined) return Promise.resolve(value);
    return Promise.reject(new AppError('CORPUS.REFERENCE_UNRESOLVED', 'not-found', `the corpus gives no value for ${JSON.stringify(reference)}`));
  };
  const stages: Record<Stage, StageStatus> = { parse: 'not-reached', plan: 'not-reached', apply: 'not-reached', replan: 'not-reached', change: 'not-reached', outputs: 'not-reached' };
  const dangers: Danger[] = [];
  const base = {
    id: program.id,
    source: program.source,
    group: program.group,
    project: program.project,
    stack: program.stack,
    expectation: program.expectation.kind,
    ...('reason' in program.expectation ? { reason: program.expectation.reason } : {}),
    declaredResources: program.declaredResources,
  };
  if (program.expectation.kind === 'not-measured') return { ...base, outcome: 'not-measured', stages, dangers };

  let plannedSteps: number | undefined;
  let outputs: ProgramReport['outputs'];
  let change: string | undefined;
  const report = (failure?: StageFailure): ProgramReport => {
    const refusal = program.expectation.kind === 'refusal';
    let outcome: Outcome;
    if (refusal) {
      // Only the engine's own error counts as a refusal: an empty plan or a failed re-plan is no refusal.
      const refused = failure !== undefined && (failure.stage === 'parse' || failure.stage === 'plan' || failure.stage === 'apply') && !failure.code.startsWith('CORPUS.');
      outcome = !refused ? 'accepted-refusal' : failure.code.startsWith('UNEXPECTED.') ? 'refused-unclearly' : 'refused';
      if (outcome === 'accepted-refusal') dangers.push('accepted-refusal');
    } else outcome = failure ? 'failed' : stages.outputs === 'passed' ? 'faithful' : 'passed-unchecked';
    return {
      ...base,
      outcome,
      stages,
      ...(failure ? { failure: { ...failure, cause: causeOf(failure) } } : {}),
      dangers,
      ...(plannedSteps !== undefined ? { plannedSteps } : {}),
      ...(emptyApplied ? { emptyPlanApplied: true } : {}),
      ...(change ? { change } : {}),
      ...(outputs ? { outputs } : {}),
    };
  };
  /** Runs a stage: its failure (thrown, or returned) stops the program there. */
  const run = async (stage: Stage, body: () => Promise<StageFailure | 'skipped' | 'not-checked' | undefined>): Promise<StageFailure | undefined> => {
    let failure: StageFailure | undefined;
    let status: StageStatus = 'passed';
    try {
      const result = await body();
      if (result === 'skipped' || result === 'not-checked') status = result;
      else failure = result;
    } catch (thrown) {
      failure = failureOf(stage, thrown);
    }
    stages[stage] = failure ? 'failed' : status;
    return failure;
  };

  let approved: Plan | undefined;
  let emptyApplied = false;
  let applied: ApplyResult | undefined;
  const failure =
    (await run('parse', () => {
      load(program.files, program.stack, program.config);
      return Promise.resolve(undefined);
    })) ??
    (await run('plan', async () => {
      const plan = await engine.preview(stack, program.files, program.config);
      plannedSteps = plan.steps.length;
      approved = plan;
      if (plan.steps.length >= program.declaredResources) return undefined;
      // The worst outcome: resources the program declares are missing from a plan that would apply. Apply it
      // anyway, to record whether the engine would report the stack as applied.
      const empty = plan.steps.length === 0;
      dangers.push(empty ? 'empty-plan' : 'dropped-resources');
      emptyApplied = (await engine.apply(stack, program.files, program.config, plan, resolve)).status === 'applied';
      return {
        stage: 'plan',
        code: empty ? 'CORPUS.EMPTY_PLAN' : 'CORPUS.DROPPED_RESOURCES',
        message: `the program declares ${program.declaredResources} resources, the plan has ${plan.steps.length} steps${emptyApplied ? ', and applying it succeeded' : ''}`,
      };
    })) ??
    (await run('apply', async () => {
      applied = await engine.apply(stack, program.files, program.config, approved as Plan, resolve);
      return applyFailure('apply', applied);
    })) ??
    (await run('replan', async () => notSame('replan', await engine.preview(stack, program.files, program.config), 'CORPUS.NOT_IDEMPOTENT'))) ??
    (await run('change', async () => {
      const next = program.change;
      if (!next) return 'skipped';
      const files: ProjectFiles = next.kind === 'property' ? next.files : program.files;
      const config: ConfigOverrides = next.kind === 'config' ? next.config : program.config;
      change = next.kind === 'property' ? `resources.${next.resource}.properties.${next.property}: ${show(next.from)} -> ${show(next.to)}` : `config ${next.key}: ${show(next.from)} -> ${show(next.to)}`;
      const plan = await engine.preview(stack, files, config);
      const seen = next.kind === 'property' ? plan.steps.some((s) => s.name === next.resource && (s.op === 'update' || s.op === 'replace')) : plan.steps.some((s) => s.op !== 'same');
      if (!seen) return { stage: 'change', code: 'CORPUS.CHANGE_NOT_SEEN', message: `${change} planned ${steps(plan)}` };
      const result = await engine.apply(stack, files, config, plan, resolve);
      return applyFailure('change', result) ?? notSame('change', await engine.preview(stack, files, config), 'CORPUS.NOT_CONVERGED');
    })) ??
    (await run('outputs', () => {
      const expected = program.expectation.kind === 'run' ? program.expectation : undefined;
      if (!expected || !applied) return Promise.resolve('not-checked');
      if (!expected.outputs) {
        // Values only a provider knows are not checked, but Pulumi gives every output the program declares.
        const actual = Object.keys(applied.outputs);
        const missing = expected.outputKeys.filter((k) => !actual.includes(k));
        const extra = actual.filter((k) => !expected.outputKeys.includes(k));
        if (missing.length === 0 && extra.length === 0) return Promise.resolve('not-checked');
        return Promise.resolve({ stage: 'outputs', code: 'CORPUS.OUTPUTS_MISSING', message: clip(`missing: ${missing.join(', ') || 'none'}; not declared: ${extra.join(', ') || 'none'}`) });
      }
      const equal = jsonEqual(applied.outputs, expected.outputs);
      outputs = { from: expected.outputsFrom ?? 'pulumi-tests', equal, expected: expected.outputs, actual: applied.outputs };
      return Promise.resolve(equal ? undefined : { stage: 'outputs', code: 'CORPUS.OUTPUTS_DIFFER', message: outputsDiff(expected.outputs, applied.outputs) });
    }));
  if (failure && !outputs && applied?.status === 'applied' && program.expectation.kind === 'run' && program.expectation.outputs) {
    // Outputs are known from the first apply even when a later stage failed: keep them in the row.
    outputs = { from: program.expectation.outputsFrom ?? 'pulumi-tests', equal: jsonEqual(applied.outputs, program.expectation.outputs), expected: program.expectation.outputs, actual: applied.outputs };
  }
  return report(failure);
}

/**
 * Plans and applies `steps` in order on one new stack (`tenant`'s), each followed by a re-plan that must be all
 * `same`: what the fresh-stack stages cannot see, a change as Pulumi's own multi-step tests make it (a resource
 * deleted, replaced, aliased).
 */
export async function measureSequence(engine: LocalEngine, steps: readonly CorpusProgram[], tenant: string): Promise<SequenceResult> {
  for (const step of steps) {
    const stack: StackRef = { tenant, project: step.project, stack: step.stack };
    const resolve: ResolveReferences = (reference) => Promise.reject(new AppError('CORPUS.REFERENCE_UNRESOLVED', 'not-found', `the corpus gives no value for ${JSON.stringify(reference)}`));
    const fail = (failure: StageFailure): SequenceResult => ({ steps: steps.length, converged: false, failure: { ...failure, step: step.id.replace(/^.*testdata\/projects\//, '') } });
    let stage: Stage = 'plan';
    try {
      const plan = await engine.preview(stack, step.files, step.config);
      if (plan.steps.filter((s) => s.op !== 'delete').length < step.declaredResources) {
        return fail({ stage, code: 'CORPUS.EMPTY_PLAN', message: `the step declares ${step.declaredResources} resources, its plan keeps or creates ${plan.steps.filter((s) => s.op !== 'delete').length}` });
      }
      stage = 'apply';
      const failed = applyFailure('apply', await engine.apply(stack, step.files, step.config, plan, resolve));
      if (failed) return fail(failed);
      stage = 'replan';
      const again = notSame('replan', await engine.preview(stack, step.files, step.config), 'CORPUS.NOT_CONVERGED');
      if (again) return fail(again);
    } catch (thrown) {
      return fail(failureOf(stage, thrown));
    }
  }
  return { steps: steps.length, converged: true };
}

function failureOf(stage: Stage, thrown: unknown): StageFailure {
  if (thrown instanceof AppError) return { stage, code: thrown.code, message: clip(thrown.message) };
  const error = ensureError(thrown);
  return { stage, code: `UNEXPECTED.${error.name}`, message: clip(error.message) };
}

function applyFailure(stage: Stage, result: ApplyResult): StageFailure | undefined {
  if (result.status === 'applied') return undefined;
  return { stage, code: result.error?.code ?? 'CORPUS.APPLY_NOT_APPLIED', message: clip(result.error?.message ?? `the apply ended ${result.status}`) };
}

function notSame(stage: Stage, plan: Plan, code: string): StageFailure | undefined {
  if (plan.steps.every((s) => s.op === 'same')) return undefined;
  return { stage, code, message: clip(`the plan after apply is not all same: ${steps(plan)}`) };
}

function steps(plan: Plan): string {
  return plan.steps.map((s) => `${s.op} ${s.name}${s.changedPaths.length > 0 ? ` (${s.changedPaths.join(', ')})` : ''}`).join('; ') || 'no steps';
}

function outputsDiff(expected: JsonObject, actual: JsonObject): string {
  const keys = [...new Set([...Object.keys(expected), ...Object.keys(actual)])].sort();
  const differing = keys.filter((k) => !jsonEqual(expected[k], actual[k]));
  return clip(differing.map((k) => `${k}: Pulumi ${show(expected[k])}, engine ${show(actual[k])}`).join('; '));
}

function show(value: JsonValue | undefined): string {
  return value === undefined ? '(absent)' : clip(JSON.stringify(value), 80);
}

function clip(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
