import { AppError } from '../errors/app-error';
import type { JobBackend } from '../iac/runner-job';
import type { ProvisioningTarget } from './setting-schemas';

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

/** How long a runner job of each kind may run when its target does not say (`jobMaxMinutes`), in minutes. */
export const DEFAULT_JOB_MAX_MINUTES = { plan: 30, apply: 120 } as const;

/**
 * A target's runner pools: its capacity pool (default `<id>-runner`), its explicit agent pools (`runnerPools`), the
 * engine its runners use and, for `pulumi`, their state backend; and how long each kind of its jobs may run.
 */
export function runnerTargetOf(target: ProvisioningTarget): RunnerTarget {
  const pool = target.runnerPool ?? `${target.id}-runner`;
  const groups = (target.runnerPools ?? []).map((g) => ({ id: g.id, tenants: [...g.tenants] }));
  const minutes = { ...DEFAULT_JOB_MAX_MINUTES, ...target.jobMaxMinutes };
  const maxJobMs = { plan: minutes.plan * 60_000, apply: minutes.apply * 60_000 };
  if (target.kind === 'local-cloud') return { target: target.id, pool, groups, engine: 'local', maxJobMs };
  return { target: target.id, pool, groups, engine: 'pulumi', maxJobMs, ...(target.backend ? { backend: target.backend } : {}) };
}

export interface RunnerTarget {
  readonly target: string;
  /** The target's capacity pool of kind `runner`: every claimed job holds one lease of it. Example: `local-runner`. */
  readonly pool: string;
  /** Agent pools serving several tenants, as the installation grouped them; every other tenant has its own. */
  readonly groups: readonly AgentPoolGroup[];
  readonly engine: 'local' | 'pulumi';
  /** `pulumi` targets: the state backend and secrets provider of the target's runners, `{tenant}` still in them. */
  readonly backend?: JobBackend;
  /** How long a job of each kind may run from its claim. Example: `{ plan: 1_800_000, apply: 7_200_000 }`. */
  readonly maxJobMs: Readonly<Record<'plan' | 'apply', number>>;
}

export interface AgentPoolGroup {
  readonly id: string;
  readonly tenants: readonly string[];
}

/** An agent pool: the target it runs jobs on and the only tenants whose jobs its agents may claim and call for. */
export interface AgentPool {
  readonly id: string;
  readonly runner: RunnerTarget;
  readonly tenants: readonly string[];
}

/**
 * The agent pool that runs a tenant's jobs on a target: the group the installation put the tenant in, else the
 * tenant's own pool `<capacity pool>.<tenant>`; refused for a tenant id that cannot be a segment of a pool id.
 */
export function agentPoolOf(runner: RunnerTarget, tenant: string): string {
  const group = runner.groups.find((g) => g.tenants.includes(tenant));
  if (group) return group.id;
  const problem = tenantSegmentProblem(tenant);
  if (problem) throw new AppError(TENANT_NOT_ADDRESSABLE, 'validation', problem, { tenant });
  return `${runner.pool}.${tenant}`;
}

/**
 * The agent pool an id names, or undefined when it names none: a group of a target, or a tenant's own pool on a
 * target (which a tenant in a group of that target does not have). The inverse of `agentPoolOf`.
 */
export function agentPoolNamed(runners: readonly RunnerTarget[], id: string): AgentPool | undefined {
  for (const runner of runners) {
    const group = runner.groups.find((g) => g.id === id);
    if (group) return { id, runner, tenants: group.tenants };
  }
  const dot = id.lastIndexOf('.');
  if (dot < 0) return undefined;
  const tenant = id.slice(dot + 1);
  const runner = runners.find((r) => r.pool === id.slice(0, dot));
  if (!runner || tenantSegmentProblem(tenant) !== undefined || runner.groups.some((g) => g.tenants.includes(tenant))) return undefined;
  return { id, runner, tenants: [tenant] };
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
