import { hostApp } from '../app';
import { endpoint } from '../http/endpoint';

/**
 * Provisioning targets configured for this installation, each with its runner pool (agents online, jobs running
 * and waiting, and whether an agent answered lately), and the IaC runner's name and version.
 */
export const runtimeCloudTargets = endpoint({ scope: 'factory.meta.read' }, async ({ deps }) => {
  const pools = deps.config.iac.execution === 'runner-jobs' && deps.config.host.enabledModules.includes('provisioning') ? await deps.provisioning.runners.pools() : [];
  let version: string | null = null;
  let versionError: string | undefined;
  try {
    version = await deps.iac.version();
  } catch (error) {
    versionError = error instanceof Error ? error.message : String(error);
  }
  return {
    status: 200,
    jsonBody: {
      targets: deps.config.targets.map((target) => {
        const pool = pools.find((p) => p.target === target.id);
        return pool
          ? { ...target, runners: { pool: pool.pool, engine: pool.engine, agentsOnline: pool.agentsOnline, jobsRunning: pool.jobsRunning, jobsWaiting: pool.jobsWaiting, answered: pool.agentsOnline > 0 } }
          : target;
      }),
      iacRunner: { name: deps.iac.name, version, ...(versionError ? { error: versionError } : {}) },
    },
  };
});

hostApp.http('RuntimeCloudTargets', {
  route: 'runtime-cloud/meta/targets',
  methods: ['GET'],
  authLevel: 'anonymous',
  handler: runtimeCloudTargets,
});
