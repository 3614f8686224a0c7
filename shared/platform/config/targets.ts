import { AppError } from '../errors/app-error';
import type { JobBackend } from '../iac/runner-job';
import type { ProvisioningTarget } from './config';

/** A tenant whose id cannot be put in its target's backend URL (`tenantSegmentProblem`). */
export const TENANT_NOT_ADDRESSABLE = 'PROVISIONING.TENANT_NOT_ADDRESSABLE';

/** An environment as targets are matched against it. */
export interface TargetedEnvironment {
  readonly tenant: string;
  readonly environment: string;
  readonly tier: string;
}

/**
 * The target an environment lives on: the first of `targets` with an `environments` rule that matches it (every
 * field a rule gives must match), else the first target. Provisioning and inventory both ask here, so a run applies
 * where the scans look.
 */
export function targetOfEnvironment(targets: readonly ProvisioningTarget[], environment: TargetedEnvironment): ProvisioningTarget {
  const matches = (rule: NonNullable<ProvisioningTarget['environments']>[number]) =>
    (rule.tenant === undefined || rule.tenant === environment.tenant) &&
    (rule.environment === undefined || rule.environment === environment.environment) &&
    (rule.tier === undefined || rule.tier === environment.tier);
  const first = targets[0];
  if (!first) throw new Error('RuntimeCloud__Targets names no target');
  return targets.find((t) => t.environments?.some(matches)) ?? first;
}

/** A target's runner pool (default `<id>-runner`), the engine its runners use and, for `pulumi`, their state backend. */
export function runnerTargetOf(target: ProvisioningTarget): RunnerTarget {
  const pool = target.runnerPool ?? `${target.id}-runner`;
  if (target.kind === 'local-cloud') return { target: target.id, pool, engine: 'local' };
  return { target: target.id, pool, engine: 'pulumi', ...(target.backend ? { backend: target.backend } : {}) };
}

export interface RunnerTarget {
  readonly target: string;
  readonly pool: string;
  readonly engine: 'local' | 'pulumi';
  /** `pulumi` targets: the state backend and secrets provider of the target's runners, `{tenant}` still in them. */
  readonly backend?: JobBackend;
}

/**
 * Why a tenant id cannot be put in a backend's URL, or undefined when it can: only letters, digits, `_` and `-`, so
 * that no id (`..`, `a/b`, `x?storage_account=y`) can point a job at a state location or key that is not its own.
 */
export function tenantSegmentProblem(tenant: string): string | undefined {
  return /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/.test(tenant)
    ? undefined
    : `the tenant id ${JSON.stringify(tenant)} cannot name a state location or key: it must be 1 to 63 letters, digits, "_" and "-", starting with a letter or digit`;
}

/** The backend of one job: the target's, with the job's tenant in place of `{tenant}`; refused for a tenant id that cannot be a URL segment. */
export function backendOfTenant(backend: JobBackend, tenant: string): JobBackend {
  const problem = tenantSegmentProblem(tenant);
  if (problem) throw new AppError(TENANT_NOT_ADDRESSABLE, 'validation', problem, { tenant });
  const url = backend.url.replaceAll('{tenant}', tenant);
  const secretsProvider = backend.secretsProvider?.replaceAll('{tenant}', tenant);
  return { url, ...(secretsProvider !== undefined ? { secretsProvider } : {}) };
}
