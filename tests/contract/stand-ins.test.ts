import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Health, HealthCheckResponse_ServingStatus } from '../../contracts/gen/grpc/health/v1/health_pb';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { startStandIns, type StandIns } from '../../local/external-services/stand-in-servers';
import { parseConfig } from '../../shared/platform/config/config';
import { systemClock } from '../../shared/platform/time/clock';
import { peerTransport } from '../../shared/platform/contracts/peer-transport';
import { createLocalExternalServices, type LocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { contractCases } from './suite';

/**
 * The contract suite (suite.ts) against the local host's stand-ins, as servers on loopback: what `npm run contract`
 * checks of the sibling services' own endpoints holds for ours.
 */
const config = parseConfig({});
const audiences = {
  governance: config.peers.governance.audience,
  controlPlane: config.peers.controlPlane.audience,
  knowledge: config.peers.knowledge.audience,
  configPlatform: config.peers.configPlatform.audience,
  delivery: config.peers.delivery.audience,
};

describe('the external services contract suite, against the local stand-ins', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-contract-'));
  let database: TestDatabase;
  let standIns: StandIns;
  let issue: (audience: string) => Promise<string>;
  let local: LocalExternalServices;

  beforeAll(async () => {
    database = await createTestDatabase('sqlite');
    const keys = await ensureLocalKeys(stateDir);
    issue = (audience) => issueLocalToken(keys, { issuer: config.auth.issuer, audience, subject: 'contract-suite' });
    standIns = await startStandIns({ issuer: config.auth.issuer, jwks: keys.jwks, audiences });
    local = createLocalExternalServices({ store: database.store, clock: systemClock, stateDir });
    standIns.bind(local);
  });
  afterAll(async () => {
    await standIns?.close();
    await database?.drop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  // The cases are made once the stand-ins listen; their names are known before.
  const names = contractCases({ governance: peer(), controlPlane: peer(), knowledge: peer(), configPlatform: peer(), delivery: peer() }, () => Promise.resolve(''));
  for (const { service, name } of names) {
    it(`${service}: ${name}`, async () => {
      const cases = contractCases(
        {
          governance: { url: standIns.endpoints.governance, audience: audiences.governance },
          controlPlane: { url: standIns.endpoints.controlPlane, audience: audiences.controlPlane },
          knowledge: { url: standIns.endpoints.knowledge, audience: audiences.knowledge },
          configPlatform: { url: standIns.endpoints.configPlatform, audience: audiences.configPlatform },
          delivery: { url: standIns.endpoints.delivery, audience: audiences.delivery },
        },
        issue,
      );
      await cases.find((c) => c.service === service && c.name === name)!.run();
    });
  }

  it('a token for another service is refused: each stand-in checks its own audience', async () => {
    const [governanceCase] = contractCases({ governance: { url: standIns.endpoints.governance, audience: audiences.governance } }, () => issue(audiences.knowledge)).filter((c) =>
      c.name.includes('NOT_FOUND for a policy check'),
    );
    await governanceCase!.run().then(
      () => {
        throw new Error('a knowledge token opened the GovernanceHost');
      },
      (error: Error) => {
        if (!/Unauthenticated|UNAUTHENTICATED/.test(error.message)) throw error;
      },
    );
  });

  /** The gRPC health protocol's answer for `service` at a stand-in: its status, or the code it failed with. */
  const healthOf = async (url: string, service: string): Promise<string> => {
    const transport = peerTransport({ url, audience: 'unused', tokens: () => Promise.resolve(''), deadlineMs: 10_000, attempts: 1 });
    try {
      return HealthCheckResponse_ServingStatus[(await createClient(Health, transport).check({ service })).status];
    } catch (thrown) {
      return Code[ConnectError.from(thrown).code];
    }
  };
  const configHealth = async () => (await fetch(`${standIns.endpoints.configPlatform}/health`, { headers: { authorization: `Bearer ${await issue(audiences.configPlatform)}` } })).status;

  it('when the GovernanceHost is switched unreachable, then its health protocol answers UNAVAILABLE, the others SERVING; switched back, SERVING', async () => {
    await local.setReachable('governance', false);
    const down = await healthOf(standIns.endpoints.governance, 'connectsoft.governance.v1.GovernanceService');
    const other = await healthOf(standIns.endpoints.knowledge, 'connectsoft.knowledge.v1.KnowledgeService');
    await local.setReachable('governance', true);
    const back = await healthOf(standIns.endpoints.governance, 'connectsoft.governance.v1.GovernanceService');

    expect(down).toBe('Unavailable');
    expect(other).toBe('SERVING');
    expect(back).toBe('SERVING');
  });

  it('when the ControlPlaneApi, the KnowledgeHost and the DeliveryHost are switched unreachable, then each answers its health protocol UNAVAILABLE', async () => {
    await local.setReachable('control-plane', false);
    await local.setReachable('knowledge', false);
    await local.setReachable('delivery', false);
    const controlPlane = await healthOf(standIns.endpoints.controlPlane, 'connectsoft.controlplane.v1.ControlPlaneService');
    const knowledge = await healthOf(standIns.endpoints.knowledge, 'connectsoft.knowledge.v1.KnowledgeService');
    const delivery = await healthOf(standIns.endpoints.delivery, 'connectsoft.delivery.v1.DeliveryService');
    await local.setReachable('control-plane', true);
    await local.setReachable('knowledge', true);
    await local.setReachable('delivery', true);

    expect(controlPlane).toBe('Unavailable');
    expect(knowledge).toBe('Unavailable');
    expect(delivery).toBe('Unavailable');
  });

  it('when the Config Platform is switched unreachable, then GET /health answers 503; switched back, 200', async () => {
    await local.setReachable('config-platform', false);
    const down = await configHealth();
    await local.setReachable('config-platform', true);

    expect(down).toBe(503);
    expect(await configHealth()).toBe(200);
  });
});

function peer() {
  return { url: 'http://127.0.0.1:1', audience: 'unused' };
}
