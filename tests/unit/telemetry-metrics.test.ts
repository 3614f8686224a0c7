import { metrics } from '@opentelemetry/api';
import { AggregationTemporality, MeterProvider, MetricReader, type Histogram, type MetricData } from '@opentelemetry/sdk-metrics';
import { beforeAll, describe, expect, it } from 'vitest';
import { INBOX_LAG_METRIC } from '../../shared/platform/bus/bus.health';
import {
  METRICS,
  recordDriftFindings,
  recordLeaseGrant,
  recordLeaseRefusal,
  recordOutboxPublishLag,
  recordQueueWait,
  recordRunEnded,
  recordSweep,
  registerInboxLagGauge,
  registerQueueDepthGauge,
} from '../../shared/platform/telemetry/metrics';
import { securityEvent } from '../../shared/platform/telemetry/security-events';

/** Issue 10: the instruments the use cases record through the global API, read back through an SDK reader. */
class TestReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

describe('telemetry metrics', () => {
  const reader = new TestReader({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });

  async function metric(name: string): Promise<MetricData | undefined> {
    const { resourceMetrics } = await reader.collect();
    return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name);
  }

  beforeAll(() => {
    // Recorded before a provider exists: dropped, as when telemetry was never started.
    recordLeaseGrant('attempt', 'before-start');
    // This file runs in its own process: the global provider is this test's.
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  });

  it('when the inbox lag gauge is named, then it is the seed name the health check reports', () => {
    expect(METRICS.inboxLag).toBe(INBOX_LAG_METRIC);
  });

  it('when recorded before the provider was registered, then nothing was kept; after, grants count by kind and pool', async () => {
    recordLeaseGrant('attempt', 'pool-a');
    recordLeaseGrant('attempt', 'pool-a');
    recordLeaseGrant('build', 'pool-b');
    const grants = await metric(METRICS.leaseGrants);
    expect(grants?.descriptor.unit).toBe('{lease}');
    expect(grants?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([
      [{ kind: 'attempt', pool: 'pool-a' }, 2],
      [{ kind: 'build', pool: 'pool-b' }, 1],
    ]);
  });

  it('when a lease is refused, then the refusal counts by code and kind', async () => {
    recordLeaseRefusal('CAPACITY.EXHAUSTED', 'sandbox');
    const refusals = await metric(METRICS.leaseRefusals);
    expect(refusals?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([[{ code: 'CAPACITY.EXHAUSTED', kind: 'sandbox' }, 1]]);
  });

  it('when a run ends, then its duration is recorded in seconds by outcome', async () => {
    recordRunEnded('applied', 90_000);
    recordRunEnded('failed', 2_500);
    const runs = await metric(METRICS.runDuration);
    expect(runs?.descriptor.unit).toBe('s');
    const byOutcome = Object.fromEntries(runs?.dataPoints.map((p) => [p.attributes.outcome, (p.value as Histogram).sum]) ?? []);
    expect(byOutcome).toEqual({ applied: 90, failed: 2.5 });
  });

  it('when a scan completes with findings, then they count by kind', async () => {
    recordDriftFindings([{ kind: 'modified' }, { kind: 'missing' }, { kind: 'modified' }]);
    recordDriftFindings([]);
    const findings = await metric(METRICS.driftFindings);
    expect(Object.fromEntries(findings?.dataPoints.map((p) => [p.attributes.kind, p.value]) ?? [])).toEqual({ modified: 2, missing: 1 });
  });

  it('when sweeps run and events are published, then sweep sizes and publish lags are histograms', async () => {
    recordSweep(0);
    recordSweep(12);
    recordOutboxPublishLag('runtime-cloud-events', 0.4);
    const sweeps = (await metric(METRICS.leaseSweepSize))?.dataPoints[0]?.value as Histogram | undefined;
    expect(sweeps).toMatchObject({ count: 2, sum: 12 });
    const lag = (await metric(METRICS.outboxPublishLag))?.dataPoints[0];
    expect(lag?.attributes).toEqual({ topic: 'runtime-cloud-events' });
    expect(lag?.value).toMatchObject({ count: 1, sum: 0.4 });
  });

  it('when the host refuses to believe an agent, then one security: line names the tenant, run, job, pool and agent, and the refusal counts by code', async () => {
    const lines: string[] = [];
    const event = { code: 'PROVISIONING.APPLY_DIVERGED', reason: 'it reports create x, which is no step of the approved plan', tenant: 'tenant-a', runId: 'run-1', jobId: 'job-1', pool: 'pool-a', agent: 'agent-1' };

    securityEvent((line) => lines.push(line), event, new Date('2026-12-06T05:00:00.000Z'));
    securityEvent((line) => lines.push(line), { ...event, code: 'RUNNER.PLAN_SUMMARY_IGNORED' }, new Date('2026-12-06T05:00:01.000Z'));

    expect(JSON.parse(lines[0] ?? '')).toEqual({
      time: '2026-12-06T05:00:00.000Z',
      level: 'warning',
      message: 'security: it reports create x, which is no step of the approved plan',
      code: 'PROVISIONING.APPLY_DIVERGED',
      tenant: 'tenant-a',
      runId: 'run-1',
      jobId: 'job-1',
      pool: 'pool-a',
      agent: 'agent-1',
    });
    const refused = await metric(METRICS.agentReportsRefused);
    expect(refused?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([
      [{ code: 'PROVISIONING.APPLY_DIVERGED' }, 1],
      [{ code: 'RUNNER.PLAN_SUMMARY_IGNORED' }, 1],
    ]);
  });

  it("when lease requests wait in pools' queues, then waits are a histogram and the depth a gauge, each by pool and tenant", async () => {
    recordQueueWait('pool-q', 'tenant-a', 1.5);
    recordQueueWait('pool-q', 'tenant-a', 0.5);
    recordQueueWait('pool-q', 'tenant-b', 2);
    const waits = await metric(METRICS.leaseQueueWait);
    expect(waits?.descriptor.unit).toBe('s');
    expect(waits?.dataPoints.map((p) => [p.attributes, (p.value as Histogram).count, (p.value as Histogram).sum])).toEqual([
      [{ pool: 'pool-q', tenant: 'tenant-a' }, 2, 2],
      [{ pool: 'pool-q', tenant: 'tenant-b' }, 1, 2],
    ]);
    const stop = registerQueueDepthGauge(() => Promise.resolve([{ pool: 'pool-q', tenant: 'tenant-a', waiting: 3 }, { pool: 'pool-q', tenant: 'tenant-b', waiting: 1 }]));
    const depth = await metric(METRICS.leaseQueueDepth);
    expect(depth?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([
      [{ pool: 'pool-q', tenant: 'tenant-a' }, 3],
      [{ pool: 'pool-q', tenant: 'tenant-b' }, 1],
    ]);
    stop();
  });

  it('when inbox lag sources are registered, then the gauge observes each module at collection until its source is removed', async () => {
    let reads = 0;
    const stop = registerInboxLagGauge(() => {
      reads++;
      return Promise.resolve([{ module: 'provisioning', lagSeconds: 42 }, { module: 'capacity', lagSeconds: 0 }]);
    });
    // A store that fails leaves only its own modules out.
    const stopFailing = registerInboxLagGauge(() => Promise.reject(new Error('store down')));
    const gauge = await metric(METRICS.inboxLag);
    expect(gauge?.descriptor.unit).toBe('s');
    expect(gauge?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([
      [{ module: 'provisioning' }, 42],
      [{ module: 'capacity' }, 0],
    ]);
    expect(reads).toBe(1);
    stop();
    stopFailing();
    await metric(METRICS.inboxLag);
    expect(reads).toBe(1);
  });
});
