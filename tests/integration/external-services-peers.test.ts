import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePromotion } from '../../local/example-repository';
import { createLocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import { eventually } from '../support/eventually';
import { startTestHost, type TestHost } from '../support/local-host';
import { provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';

/**
 * The local host reaches its external services' stand-ins as servers on loopback, through the clients Azure uses
 * (issue 18): a promotion goes through them, and when one of them stops, runs fail fast with its code and health
 * turns unhealthy for it.
 */
const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator' };

interface RunBody {
  runId: string;
  promotionId: string;
  state: string;
  error?: { code: string; message: string };
}
interface HealthBody {
  status: string;
  checks: { name: string; status: string; error?: string; details?: { endpoint?: string } }[];
}

describe('external services as servers on loopback', () => {
  let host: TestHost;
  let root: string;
  let example: ProvisioningExample;

  beforeAll(async () => {
    host = await startTestHost();
    root = fs.mkdtempSync(join(tmpdir(), 'rch-peers-'));
    example = await provisioningExample(root, host.stateDir, 0);
    writeExampleReferences(host.stateDir);
  });
  afterAll(async () => {
    await host?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  const runOf = async (promotionId: string) =>
    ((await (await host.fetch('/runtime-cloud/runs?limit=1000', { claims: operator })).json()) as { items: RunBody[] }).items.find((r) => r.promotionId === promotionId);
  const health = async () => {
    const response = await host.fetch('/runtime-cloud/health', { claims: { scopes: ['factory.health.read'] } });
    return { status: response.status, body: (await response.json()) as HealthBody };
  };

  it('when every stand-in answers, then a promotion is applied through them and each is healthy on its own port', async () => {
    const promotion = examplePromotion('development', example.repository);
    await sendToPromotions(host, promotion, 'peers-1');

    const run = await eventually(async () => {
      const found = await runOf(promotion.promotionId);
      return found?.state === 'applied' ? found : undefined;
    }, 30_000);
    const { status, body } = await health();

    expect(run.state).toBe('applied');
    expect(status).toBe(200);
    // The DeliveryHost stand-in is told how the run ended, by the host's report timer over the same client Azure uses.
    const stand = createLocalExternalServices({ store: host.host.deps.sql, clock: host.host.deps.clock, stateDir: host.stateDir });
    const reports = await eventually(async () => {
      const found = await stand.reportsOf('demo-team', run.runId);
      return found.length > 0 ? found : undefined;
    }, 30_000);
    expect(reports).toEqual([expect.objectContaining({ runId: run.runId, promotionId: promotion.promotionId, outcome: 'applied', state: 'applied' })]);
    const endpoints = host.host.standIns!.endpoints;
    for (const [name, endpoint] of [
      ['governance-host', endpoints.governance],
      ['control-plane-api', endpoints.controlPlane],
      ['knowledge-host', endpoints.knowledge],
      ['config-platform', endpoints.configPlatform],
      ['delivery-host', endpoints.delivery],
    ] as const) {
      expect(body.checks.find((c) => c.name === name)).toMatchObject({ status: 'healthy', details: { endpoint } });
      expect(endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    }
    expect(new Set(Object.values(endpoints)).size).toBe(5);
  });

  it('when the DeliveryHost stand-in has the promotion\'s release cut from another path, then the promotion is refused with RELEASE_MISMATCH and the DeliveryHost is told so', async () => {
    const promotion = { ...examplePromotion('development', example.repository), promotionId: 'prm-peers-release-mismatch' };
    const releases = [{ tenant: 'demo-team', ...promotion.release, repository: promotion.desiredState.repository, commit: promotion.desiredState.commit, path: 'pools' }];
    fs.writeFileSync(join(host.stateDir, 'delivery.json'), JSON.stringify({ releases }));
    try {
      await sendToPromotions(host, promotion, 'peers-release');
      const run = await eventually(async () => {
        const found = await runOf(promotion.promotionId);
        return found?.state === 'rejected' ? found : undefined;
      }, 30_000);
      const stand = createLocalExternalServices({ store: host.host.deps.sql, clock: host.host.deps.clock, stateDir: host.stateDir });
      const reports = await eventually(async () => {
        const found = await stand.reportsOf('demo-team', run.runId);
        return found.length > 0 ? found : undefined;
      }, 30_000);

      expect(run.error).toMatchObject({ code: 'PROVISIONING.RELEASE_MISMATCH', message: expect.stringContaining('path app where the release has pools') });
      expect(reports).toEqual([expect.objectContaining({ outcome: 'failed', state: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH', receipts: [] })]);
    } finally {
      fs.rmSync(join(host.stateDir, 'delivery.json'), { force: true });
    }
  });

  it('when the GovernanceHost stand-in is switched unreachable, then health turns unhealthy for it (its health protocol no longer SERVING), and healthy again once switched back', async () => {
    const outage = (unreachable: boolean) =>
      host.fetch('/runtime-cloud/local/external-services/governance/outage', { method: 'POST', body: JSON.stringify({ unreachable }), claims: { roles: ['PlatformAdmin'] } });

    expect((await outage(true)).status).toBe(200);
    const down = await health();
    expect((await outage(false)).status).toBe(200);
    const back = await health();

    expect(down.status).toBe(503);
    expect(down.body.status).toBe('unhealthy');
    expect(down.body.checks.find((c) => c.name === 'governance-host')).toMatchObject({ status: 'unhealthy', error: expect.stringMatching(/switched unreachable/) });
    expect(down.body.checks.find((c) => c.name === 'control-plane-api')?.status).toBe('healthy');
    expect(back.status).toBe(200);
    expect(back.body.checks.find((c) => c.name === 'governance-host')?.status).toBe('healthy');
  });

  it('when the Config Platform stand-in is switched unreachable, then its check is degraded (the platform degrades), not unhealthy', async () => {
    const outage = (unreachable: boolean) =>
      host.fetch('/runtime-cloud/local/external-services/config-platform/outage', { method: 'POST', body: JSON.stringify({ unreachable }), claims: { roles: ['PlatformAdmin'] } });

    await outage(true);
    const down = await health();
    await outage(false);

    expect(down.body.checks.find((c) => c.name === 'config-platform')).toMatchObject({ status: 'degraded', error: 'GET /health answered 503' });
    expect(down.body.status).toBe('degraded');
  });

  it('when the GovernanceHost stand-in stops, then health turns unhealthy for it and a run fails fast with GOVERNANCE_UNAVAILABLE', async () => {
    await host.host.standIns!.stop('governance');
    const promotion = { ...examplePromotion('development', example.repository), promotionId: 'prm-peers-governance-down' };

    const { status, body } = await health();
    await sendToPromotions(host, promotion, 'peers-2');
    const run = await eventually(async () => {
      const found = await runOf(promotion.promotionId);
      return found?.state === 'failed' ? found : undefined;
    }, 60_000);

    expect(status).toBe(503);
    expect(body.status).toBe('unhealthy');
    expect(body.checks.find((c) => c.name === 'governance-host')).toMatchObject({ status: 'unhealthy', error: expect.stringMatching(/ECONNREFUSED|unavailable/i) });
    expect(body.checks.find((c) => c.name === 'knowledge-host')?.status).toBe('healthy');
    expect(run.error?.code).toBe('PROVISIONING.GOVERNANCE_UNAVAILABLE');
  }, 90_000);
});
