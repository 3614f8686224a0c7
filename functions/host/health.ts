import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { hostApp } from '../app';
import { runHealthChecks } from '../../shared/platform/health/health';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { describeHandler, endpoint, type OperationText } from '../http/endpoint';

/** One operation in the document: the full check, and the handler that also answers liveness. */
const HEALTH: OperationText = {
  tag: 'Health',
  summary: 'Check the host and its dependencies',
  description:
    'Checks each dependency (the store, Table storage, targets, runner pools, each external service, inbox lag, the IaC runner where ' +
    "the host runs the engine itself, the store's recovery after a restore, among others) and answers each one's status and details: " +
    '200 while the host is healthy or degraded, 503 when it is unhealthy. Never cached. With `probe=live` it is a liveness probe ' +
    'instead: 200 with the status alone, answered from the process without touching dependencies and without a token, since platform ' +
    'probes send no credentials (the scope is needed for the full check only).',
};

/** Every dependency checked; 503 when the host is unhealthy. Dependency details are for holders of the scope. */
const fullHealth = endpoint({ ...HEALTH, scope: 'factory.health.read' }, async ({ deps }) => {
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
  ...HEALTH,
  scope: 'factory.health.read',
  query: lazySchema((z) => z.object({ probe: z.enum(['live']).optional() })),
});
hostApp.http('RuntimeCloudHealth', { route: 'runtime-cloud/health', methods: ['GET'], authLevel: 'anonymous', handler: runtimeCloudHealth });
