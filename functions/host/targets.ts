import { hostApp } from '../app';
import { endpoint } from '../http/endpoint';

export const runtimeCloudTargets = endpoint({
  tag: 'Meta',
  summary: 'List provisioning targets and the IaC runner',
  description:
    'The provisioning targets configured for this installation (Azure subscription scopes, AKS and on-prem clusters, local clouds), ' +
    'each with its runners where plans and applies run in runner jobs: its capacity pool and engine, how many agent pools it has now, ' +
    "agents online, jobs running and waiting, and whether an agent answered lately. Also the IaC runner's name, and its version where " +
    'the host runs the engine itself (`runsIn: runner-jobs` where it does not; `error` when the version could not be read).',
  scope: 'factory.meta.read',
}, async ({ deps }) => {
  // Loaded on the first request, not when the functions register (docs/benchmarks.md, "Cold start").
  const { runnerTargetOf } = await import('../../shared/platform/config/targets.js');
  const pools = deps.config.iac.execution === 'runner-jobs' && deps.config.host.enabledModules.includes('provisioning') ? await deps.provisioning.runners.pools() : [];
  let version: string | null = null;
  let versionError: string | undefined;
  try {
    // Where the engine runs in runner jobs only (Azure), the host has none to ask: its agents' pools are listed above.
    version = deps.iac ? await deps.iac.version() : null;
  } catch (error) {
    versionError = error instanceof Error ? error.message : String(error);
  }
  return {
    status: 200,
    jsonBody: {
      targets: deps.config.targets.map((target) => {
        if (deps.config.iac.execution !== 'runner-jobs' || !deps.config.host.enabledModules.includes('provisioning')) return target;
        // The target's runners in sum over its agent pools (one per tenant or group), under its capacity pool's name.
        const runner = runnerTargetOf(target);
        const own = pools.filter((p) => p.target === target.id);
        const sum = (count: (p: (typeof own)[number]) => number) => own.reduce((total, p) => total + count(p), 0);
        const agentsOnline = sum((p) => p.agentsOnline);
        return { ...target, runners: { pool: runner.pool, engine: runner.engine, agentPools: own.length, agentsOnline, jobsRunning: sum((p) => p.jobsRunning), jobsWaiting: sum((p) => p.jobsWaiting), answered: agentsOnline > 0 } };
      }),
      iacRunner: { name: deps.config.iac.engine, version, ...(deps.iac ? {} : { runsIn: 'runner-jobs' }), ...(versionError ? { error: versionError } : {}) },
    },
  };
});

hostApp.http('RuntimeCloudTargets', {
  route: 'runtime-cloud/meta/targets',
  methods: ['GET'],
  authLevel: 'anonymous',
  handler: runtimeCloudTargets,
});
