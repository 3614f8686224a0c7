import type { JsonValue } from './iac-values';
import type { ApplyResult, HeldIgnoreRule, Plan, ResolveReferences } from './plan';
import type { ProjectFiles } from './pulumi-yaml-source';
import type { StackRef } from './stack-ref';

export type { HeldIgnoreRule };

/** Config set by the caller over the stack file's values, by key (`poolSize` or `project:poolSize`). */
export type ConfigOverrides = Readonly<Record<string, JsonValue>>;

/** How a preview plans (an apply re-plans the same way, so pass it the same options). */
export interface PlanOptions {
  /**
   * Plan against what the target really holds rather than what the state recorded: each resource of the state is
   * read from the target first. One gone from the target is created again; one whose type changed is replaced;
   * one whose properties differ from its recorded inputs is updated at the differing paths (ignoreChanges and
   * `ignore` still hold; where the state holds a reference or a computed marker the target is not compared).
   * A target that cannot be read fails as an apply to it does (`PROVISIONING.TARGET_UNREACHABLE`). Default false:
   * plan against the state. Example: `{ refresh: true }` for a reconciliation run.
   */
  readonly refresh?: boolean;
  /**
   * Operator ignore rules that hold on apply, over the project's own `ignoreChanges`: a matched path keeps what
   * the resource has (plan.ts `HeldIgnoreRule`). A path that cannot be read is `IAC.INVALID_IGNORE_RULE`.
   * Example: `[{ scope: { type: 'local:compute:Service' }, path: 'tags.*' }]`.
   */
  readonly ignore?: readonly HeldIgnoreRule[];
}

/** How a caller takes part in an apply: the plan options the preview had, and a say before each step. */
export interface ApplyOptions extends PlanOptions {
  /**
   * Awaited before each step. An AppError thrown here stops the apply before that step: it and the rest are
   * skipped and the result fails with the error's code. Example: renew the stack lock, throw when it was lost.
   */
  readonly beforeStep?: () => Promise<void>;
}

/** The IaC runner port, as far as health and target metadata need it. */
export interface IacRunner {
  readonly name: 'local' | 'pulumi';
  version(): Promise<string>;
}

/**
 * The IaC runner port of ARCHITECTURE.md: a runner that plans and applies.
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
