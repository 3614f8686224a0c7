import { hostApp } from '../app';
import { endpoint } from '../http/endpoint';

/** Prometheus text exposition format 0.0.4. */
const PROMETHEUS_TEXT = 'text/plain; version=0.0.4; charset=utf-8';

/**
 * This host's OpenTelemetry metrics in Prometheus text format: lease grants and refusals, lease sweeps, run
 * durations, drift findings, outbox publish lag and the inbox lag per module (shared/platform/telemetry/metrics.ts).
 */
export const runtimeCloudMetrics = endpoint(
  {
    tag: 'Health',
    summary: "Scrape this host's metrics",
    description:
      "This host's OpenTelemetry metrics in Prometheus text exposition format 0.0.4 (`text/plain; version=0.0.4`): lease grants and " +
      'refusals, lease sweeps, run durations, drift findings, outbox publish lag and dead letters, and the inbox lag per module. ' +
      'Each host answers for itself: scrape every instance. Never cached.',
    scope: 'factory.health.read',
  },
  async () => {
    // The serializer comes with the OpenTelemetry SDK: loaded on the first scrape, never when the functions register.
    const { prometheusText } = await import('../../shared/platform/telemetry/telemetry.js');
    return { status: 200, headers: { 'content-type': PROMETHEUS_TEXT, 'cache-control': 'no-store' }, body: await prometheusText() };
  },
);

hostApp.http('RuntimeCloudMetrics', { route: 'runtime-cloud/metrics', methods: ['GET'], authLevel: 'anonymous', handler: runtimeCloudMetrics });
