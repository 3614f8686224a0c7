import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningTableServer } from '../../local/azurite/table-server';
import { specificationApplied } from '../support/inventory';
import { startTestHost, type TestHost } from '../support/local-host';
import { expectProblem } from '../support/problems';
import { startAzuriteTableProcess } from '../support/table-servers';

const ENVIRONMENT = 'env-tables-down';
const operator = { tenant: 'tenant-a', roles: ['Operator'], subject: 'operator-1' };

/**
 * A local host whose Table storage is Azurite's Table service in its own process, stopped under the test: the
 * inventory endpoints that read Table storage answer 503 problem+json with Retry-After (never 500), the ones that
 * do not still answer, and a scan that could not store what it saw leaves the environment stale.
 */
describe('inventory endpoints when Table storage is down', () => {
  let azurite: RunningTableServer;
  let host: TestHost;

  beforeAll(async () => {
    azurite = await startAzuriteTableProcess();
    host = await startTestHost({ settings: { RuntimeCloud__Tables__Connection: azurite.connectionString } });
    const recorded = await host.host.deps.inventory.recordSpecification({
      id: 'event-tables-down',
      time: host.host.deps.clock.now().toISOString(),
      data: specificationApplied({ id: ENVIRONMENT, stack: 'stack-tables-down' }, []),
    });
    expect(recorded.outcome).toBe('recorded');
  });
  afterAll(async () => {
    await host?.stop();
    await azurite?.close();
  });

  const get = (path: string) => host.fetch(`/runtime-cloud/environments/${ENVIRONMENT}${path}`, { claims: operator });

  it('when Table storage stops, then the inventory, drift and scan endpoints answer 503 with Retry-After, the environment itself still answers, and it is stale', async () => {
    expect((await host.fetch(`/runtime-cloud/environments/${ENVIRONMENT}/scan`, { method: 'POST', claims: operator })).status).toBe(200);
    expect((await get('/inventory')).status).toBe(200);
    expect((await get('/drift')).status).toBe(200);

    await azurite.close();

    for (const response of [await get('/inventory'), await get('/drift'), await host.fetch(`/runtime-cloud/environments/${ENVIRONMENT}/scan`, { method: 'POST', claims: operator })]) {
      await expectProblem(response, 503, 'INVENTORY.TABLES_UNAVAILABLE');
      expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    const environment = await get('');
    expect(environment.status).toBe(200);
    const body = (await environment.json()) as { drift: { status: string; stale: boolean; reason?: string } };
    // The scan observed the target but could not store what it saw: stale, never in sync.
    expect(body.drift).toMatchObject({ status: 'unknown', stale: true });
    expect(body.drift.reason).toContain('the observed inventory could not be stored');
  }, 120_000);
});
