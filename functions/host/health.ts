import { app } from '@azure/functions';
import { runHealthChecks } from '../../shared/platform/health/health';
import { endpoint } from '../http/endpoint';

/**
 * Liveness, readiness and dependency health. `?probe=live` answers from the process alone (for liveness probes);
 * otherwise every dependency is checked and the answer is 503 when the host is unhealthy.
 */
export const runtimeCloudHealth = endpoint({ scope: 'factory.health.read' }, async ({ request, deps }) => {
  if (request.query.get('probe') === 'live') {
    return { status: 200, jsonBody: { status: 'healthy', probe: 'live', checks: [] } };
  }
  const report = await runHealthChecks(deps.healthChecks);
  return {
    status: report.status === 'unhealthy' ? 503 : 200,
    headers: { 'cache-control': 'no-store' },
    jsonBody: { status: report.status, checkedAt: deps.clock.now().toISOString(), checks: report.checks },
  };
});

app.http('RuntimeCloudHealth', { route: 'runtime-cloud/health', methods: ['GET'], authLevel: 'anonymous', handler: runtimeCloudHealth });
