import { createLocalEngine, type ApplyOptions, type ConfigOverrides, type LocalEngineOptions, type PlanOptions } from './local-engine';
import type { ApplyResult, HeldIgnoreRule, Plan, ResolveReferences } from './plan';
import { createPulumiRunner, type PulumiRunnerOptions } from './pulumi-runner';
import type { ProjectFiles } from './pulumi-yaml';
import type { StackRef } from './stack-ref';

export type { ApplyOptions, ConfigOverrides, HeldIgnoreRule, LocalEngineOptions, PlanOptions };

/** The IaC runner port, as far as health and target metadata need it. */
export interface IacRunner {
  readonly name: 'local' | 'pulumi';
  version(): Promise<string>;
}

/**
 * The IaC port (docs/architecture.md, "IaC: targets, runner agents and engines"): a runner that plans and applies.
 *
 * - `stack` is the stack's identity, `tenant/project/stack` (stack-ref.ts): its state and its resources are that
 *   tenant's, never another's of the same project and stack names.
 * - `preview` plans the project in `files` (`Pulumi.yaml`, `Pulumi.<stack>.yaml`) with `config` over the stack
 *   file's values, against the stack's current state (with `options.refresh`, against what the target holds;
 *   `options.ignore` adds operator ignore rules that hold on apply). Plan errors are AppErrors with `IAC.*` codes.
 * - `apply` re-plans against the current state and carries the plan out only if its digest is the approved one
 *   (else `PROVISIONING.PLAN_CHANGED`, nothing applied); it re-plans with the `refresh` and `ignore` it is given,
 *   which must be the preview's for the digests to agree. References are resolved here, through
 *   `resolveReferences`, and nowhere else. Expected failures (plan changed, target unreachable, a step refused)
 *   are a result with status `failed` and each resource's status; a store fault is thrown. `options.beforeStep`
 *   is awaited before each step; when it throws an AppError the apply stops there (that step and the rest
 *   skipped) and fails with the error's code: how a caller that lost its right to apply stops a long apply.
 */
export interface IacEngine extends IacRunner {
  preview(stack: StackRef, files: ProjectFiles, config?: ConfigOverrides, options?: PlanOptions): Promise<Plan>;
  apply(stack: StackRef, files: ProjectFiles, config: ConfigOverrides, approvedPlan: Plan, resolveReferences: ResolveReferences, options?: ApplyOptions): Promise<ApplyResult>;
}

/** The embedded runner: the local engine, whose `version()` also checks that its state store answers. */
export function localIacRunner(options: LocalEngineOptions): IacEngine {
  return createLocalEngine(options);
}

/**
 * The production runner: the Pulumi Automation API (pulumi-runner.ts), chosen by `RuntimeCloud__IaC__Runner=pulumi`.
 * Every workspace call runs the `pulumi` CLI, and so does `version()` (the `iac-runner` health probe): without
 * it they fail with `PROVISIONING.RUNNER_UNAVAILABLE`.
 */
export function pulumiIacRunner(options: PulumiRunnerOptions = {}): IacEngine {
  return createPulumiRunner(options);
}
