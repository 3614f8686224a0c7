import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { parseConfig } from '../../shared/platform/config/config';
import { startChildHost, startPeersProcess, type RunningChild, type RunningPeers } from '../support/child-process';
import { aStackPromotion, provisioningExample, writeExampleReferences } from '../support/provisioning';
import { untilEveryPromotionEnded, type TopicEvent } from '../support/topic-events';

interface HealthBody {
  status: string;
  checks: { name: string; status: string }[];
}

/**
 * `runtime-cloud peers` runs Azurite and the external services' stand-ins in a process of their own, as they run
 * beside a deployed host (the provisioning bench counts the host's CPU without them): a host started with the
 * settings it prints starts none of its own, and a promotion goes through the peers' stand-ins, which answer from
 * the store the host shares with them.
 */
describe('the peers in a process of their own', () => {
  const root = mkdtempSync(join(tmpdir(), 'rch-local-peers-'));
  const stateDir = join(root, 'state');
  let peers: RunningPeers;
  let host: RunningChild;
  let admin: string;

  beforeAll(async () => {
    const example = await provisioningExample(root, stateDir, 0);
    writeExampleReferences(stateDir);
    peers = await startPeersProcess(stateDir);
    host = await startChildHost(stateDir, { ...peers.settings });
    const config = parseConfig({});
    admin = await issueLocalToken(await ensureLocalKeys(stateDir), { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 600, roles: ['PlatformAdmin'] });
    promotion = aStackPromotion(example.repository, 'development');
  }, 120_000);
  let promotion: ReturnType<typeof aStackPromotion>;

  afterAll(async () => {
    await host?.stop();
    await peers?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  const call = (path: string, init: RequestInit = {}) => fetch(new URL(path, host.url), { ...init, headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json', ...init.headers } });
  const health = async (): Promise<HealthBody> => (await (await call('/runtime-cloud/health')).json()) as HealthBody;

  it('when a host starts with their settings, then it runs no Azurite and no stand-in of its own', () => {
    expect(Object.keys(peers.settings).sort()).toEqual(
      [
        'RuntimeCloud__ConfigPlatform__Endpoint',
        'RuntimeCloud__ControlPlane__Endpoint',
        'RuntimeCloud__Delivery__Endpoint',
        'RuntimeCloud__Governance__Endpoint',
        'RuntimeCloud__Knowledge__Endpoint',
        'RuntimeCloud__Outbox__Bodies__Connection',
        'RuntimeCloud__Tables__Connection',
      ].sort(),
    );
    expect(existsSync(join(stateDir, 'azurite', 'peers', '__azurite_db_table__.json'))).toBe(true);
    expect(existsSync(join(stateDir, 'azurite', '__azurite_db_table__.json'))).toBe(false);
  });

  it('when a promotion is sent, then it is applied through the peers, whose governance stand-in records evidence in the shared store', { timeout: 120_000 }, async () => {
    const sent = await call('/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { method: 'POST', body: JSON.stringify({ body: promotion, messageId: promotion.promotionId }) });
    expect(sent.status).toBeLessThan(300);
    const events = await untilEveryPromotionEnded(
      async () => ((await (await call('/runtime-cloud/local/topics/runtime-cloud-events/messages?after=0&limit=1000')).json()) as { items: TopicEvent[] }).items,
      [promotion.promotionId],
    );
    const ended = events.find((e) => e.body.data.promotionId === promotion.promotionId && ['ProvisioningApplied', 'ProvisioningFailed'].includes(e.body.type));
    expect(ended?.body.type).toBe('ProvisioningApplied');
    const runId = (ended?.body.data as { runId?: string }).runId ?? '';
    // The evidence is archived once the apply has ended (apply.service.ts archiveApply), not before the event.
    const evidence = await vi.waitFor(
      async () => {
        const found = (await (await call(`/runtime-cloud/local/external-services/governance/evidence?runId=${runId}`)).json()) as { items: unknown[] };
        if (found.items.length === 0) throw new Error(`no evidence of ${runId} yet`);
        return found.items;
      },
      { timeout: 60_000, interval: 200 },
    );
    expect(evidence).toEqual([expect.objectContaining({ runId })]);
    expect((await health()).status).toBe('healthy');
  });

  it('when the peers stop, then the host reports its Table storage and external services unhealthy', { timeout: 60_000 }, async () => {
    await peers.stop();
    const body = await health();
    const status = Object.fromEntries(body.checks.map((c) => [c.name, c.status]));
    expect(body.status).toBe('unhealthy');
    expect(status['table-storage']).toBe('unhealthy');
    expect(status['governance-host']).toBe('unhealthy');
  });
});
