import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busDb } from '../../shared/platform/bus/bus-db';
import { recordInbound } from '../../shared/platform/bus/inbox.repository';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * Issue 10 (telemetry): the local host serves its OpenTelemetry metrics at GET /runtime-cloud/metrics in Prometheus
 * text format. The values are this process's: vitest runs each test file in its own process.
 */
const LEASE = { tenant: 'demo-free', scopes: ['factory.capacity.lease'] };
const HEALTH = { scopes: ['factory.health.read'] };

describe('GET /runtime-cloud/metrics on the local host', () => {
  let host: TestHost;
  let metrics: string;

  const acquire = async (holder: string) =>
    host.fetch('/runtime-cloud/leases', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'sandbox', ttlSeconds: 300, holder, pool: 'local-sandbox' }),
      claims: LEASE,
    });

  beforeAll(async () => {
    host = await startTestHost();
    // The free edition allows one sandbox unit at once: granted, refused, released, granted again.
    const first = await acquire('w1');
    expect(first.status).toBe(201);
    const lease = (await first.json()) as { leaseId: string; fencingToken: number };
    const refused = await acquire('w2');
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ code: 'CAPACITY.QUOTA_EXCEEDED' });
    const released = await host.fetch(`/runtime-cloud/leases/${lease.leaseId}`, {
      method: 'DELETE',
      headers: { 'fencing-token': String(lease.fencingToken) },
      claims: LEASE,
    });
    expect(released.status).toBe(204);
    expect((await acquire('w3')).status).toBe(201);
    // An inventory message taken in two minutes ago and not processed yet.
    const twoMinutesAgo = { now: () => new Date(Date.now() - 120_000) };
    await recordInbound(busDb(host.host.deps.sql.db), { module: 'inventory', messageId: 'metrics-m1', businessKey: 'metrics-k1' }, twoMinutesAgo);

    const response = await host.fetch('/runtime-cloud/metrics', { claims: HEALTH });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    metrics = await response.text();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when leases were granted, then the grant counter counts them by kind and pool', () => {
    expect(metrics).toContain('# TYPE connectsoft_factory_runtime_cloud_capacity_lease_grants_total counter');
    expect(metrics).toMatch(/^connectsoft_factory_runtime_cloud_capacity_lease_grants_total\{kind="sandbox",pool="local-sandbox"\} 2$/m);
  });

  it('when a lease was refused for the quota, then the refusal counter counts it by code', () => {
    expect(metrics).toMatch(/^connectsoft_factory_runtime_cloud_capacity_lease_refusals_total\{code="CAPACITY.QUOTA_EXCEEDED",kind="sandbox"\} 1$/m);
  });

  it('when a module has an unprocessed message, then the inbox lag gauge shows its age, and 0 for the others', () => {
    expect(metrics).toContain('# TYPE connectsoft_factory_runtime_cloud_host_inbox_lag gauge');
    expect(metrics).toContain('# UNIT connectsoft_factory_runtime_cloud_host_inbox_lag s');
    const lag = (module: string) => Number(new RegExp(`^connectsoft_factory_runtime_cloud_host_inbox_lag\\{module="${module}"\\} (\\S+)$`, 'm').exec(metrics)?.[1]);
    expect(lag('inventory')).toBeGreaterThanOrEqual(120);
    expect(lag('inventory')).toBeLessThan(180);
    expect(lag('provisioning')).toBe(0);
    expect(lag('capacity')).toBe(0);
  });

  it('when called without a token, then 401', async () => {
    const response = await host.fetch('/runtime-cloud/metrics');
    expect(response.status).toBe(401);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
  });

  it('when the token lacks factory.health.read, then 403', async () => {
    const response = await host.fetch('/runtime-cloud/metrics', { claims: { scopes: ['factory.runtime.read'] } });
    expect(response.status).toBe(403);
  });
});
