import { agentPoolNamed } from '../platform/config/targets';
import { AppError } from '../platform/errors/app-error';
import { retryingContention } from '../platform/sql/transaction';
import { nowOf, type ProvisioningContext, type RunnerExecution } from './provisioning.context';
import { jobCounts, listAgents } from './runner-jobs.repository';
import { JobErrors, requireRunners, servedPool } from './runner-jobs';

/** What operators see of runner agent pools: their targets, tenants, agents online and jobs. */

/** An agent pool as operators see it: its target, the tenants it serves, agents online, jobs running and waiting. */
export interface RunnerPoolView {
  readonly pool: string;
  readonly target: string;
  readonly engine: 'local' | 'pulumi';
  /** The target's capacity pool, whose `runner` leases the pool's jobs hold. Example: `local-runner`. */
  readonly capacityPool: string;
  readonly tenants: readonly string[];
  /** Agents heard from within two job leases. */
  readonly agentsOnline: number;
  readonly jobsRunning: number;
  readonly jobsWaiting: number;
}

export interface RunnerAgentView {
  readonly agent: string;
  readonly online: boolean;
  readonly jobId?: string;
  /** ISO-8601 UTC. */
  readonly lastHeartbeat: string;
}

/**
 * The agent pools: every group the installation configured, and every tenant's own pool with open jobs or agents
 * online; only those serving `tenant` when one is given (a tenant sees no other tenant's pool).
 */
export async function runnerPools(ctx: ProvisioningContext, tenant?: string): Promise<RunnerPoolView[]> {
  const runners = requireRunners(ctx);
  const counts = await retryingContention(() => jobCounts(ctx.db));
  const online = onlineSince(ctx, runners);
  const agents = (await retryingContention(() => listAgents(ctx.db))).filter((a) => a.lastSeen.getTime() >= online);
  const ids = new Set([...runners.targets.flatMap((t) => t.groups.map((g) => g.id)), ...counts.map((c) => c.pool), ...agents.map((a) => a.pool)]);
  // A row of a pool no target has any longer (its configuration changed) is nobody's pool: not listed.
  const pools = [...ids].flatMap((id) => agentPoolNamed(runners.targets, id) ?? []).filter((p) => tenant === undefined || p.tenants.includes(tenant));
  return pools
    .sort((a, b) => a.runner.target.localeCompare(b.runner.target) || a.id.localeCompare(b.id))
    .map(({ id, runner, tenants }) => ({
      pool: id,
      target: runner.target,
      engine: runner.engine,
      capacityPool: runner.pool,
      tenants,
      agentsOnline: agents.filter((a) => a.pool === id).length,
      jobsRunning: counts.find((c) => c.pool === id && c.state === 'running')?.n ?? 0,
      jobsWaiting: counts.find((c) => c.pool === id && c.state === 'queued')?.n ?? 0,
    }));
}

/** An agent pool's agents; `RUNNER.POOL_NOT_FOUND` for a pool no target has, or one not serving `tenant` when given. */
export async function runnerAgents(ctx: ProvisioningContext, pool: string, tenant?: string): Promise<RunnerAgentView[]> {
  const runners = requireRunners(ctx);
  const served = servedPool(runners, pool);
  if (tenant !== undefined && !served.tenants.includes(tenant)) throw new AppError(JobErrors.unknownPool, 'not-found', `there is no runner pool ${pool}`, { pool });
  const online = onlineSince(ctx, runners);
  return (await retryingContention(() => listAgents(ctx.db, pool))).map((a) => ({
    agent: a.agent,
    online: a.lastSeen.getTime() >= online,
    ...(a.jobId !== undefined ? { jobId: a.jobId } : {}),
    lastHeartbeat: a.lastSeen.toISOString(),
  }));
}

function onlineSince(ctx: ProvisioningContext, runners: RunnerExecution): number {
  return nowOf(ctx) - 2 * runners.leaseTtlMs;
}
