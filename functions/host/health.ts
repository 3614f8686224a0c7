import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { hostApp } from '../app';
import { runHealthChecks } from '../../shared/platform/health/health';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { describeHandler, endpoint } from '../http/endpoint';

/** Every dependency checked; 503 when the host is unhealthy. Dependency details are for holders of the scope. */
const fullHealth = endpoint({ scope: 'factory.health.read' }, async ({ deps }) => {
  const report = await runHealthChecks(deps.healthChecks);
  return {
    status: report.status === 'unhealthy' ? 503 : 200,
    headers: { 'cache-control': 'no-store' },
    jsonBody: { status: report.status, checkedAt: deps.clock.now().toISOString(), checks: report.checks },
  };
});

/**
 * Liveness, readiness and dependency health. `?probe=live` answers from the process alone, without a token and
 * with the status only: platform liveness probes send no credentials, and it reveals nothing about dependencies.
 */
export async function runtimeCloudHealth(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  if (request.query.get('probe') === 'live') {
    return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: { status: 'healthy' } };
  }
  return fullHealth(request, context);
}

describeHandler(runtimeCloudHealth, {
  scope: 'factory.health.read',
  summary: 'Dependency health; with ?probe=live, liveness without a token',
  query: lazySchema((z) => z.object({ probe: z.enum(['live']).optional() })),
});
hostApp.http('RuntimeCloudHealth', { route: 'runtime-cloud/health', methods: ['GET'], authLevel: 'anonymous', handler: runtimeCloudHealth });
