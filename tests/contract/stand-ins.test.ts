import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { startStandIns, type StandIns } from '../../local/external-services/stand-in-servers';
import { parseConfig } from '../../shared/platform/config/config';
import { systemClock } from '../../shared/platform/time/clock';
import { createLocalExternalServices } from '../../shared/provisioning/local-external-services.adapter';
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
};

describe('the external services contract suite, against the local stand-ins', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-contract-'));
  let database: TestDatabase;
  let standIns: StandIns;
  let issue: (audience: string) => Promise<string>;

  beforeAll(async () => {
    database = await createTestDatabase('sqlite');
    const keys = await ensureLocalKeys(stateDir);
    issue = (audience) => issueLocalToken(keys, { issuer: config.auth.issuer, audience, subject: 'contract-suite' });
    standIns = await startStandIns({ issuer: config.auth.issuer, jwks: keys.jwks, audiences });
    standIns.bind(createLocalExternalServices({ store: database.store, clock: systemClock, stateDir }));
  });
  afterAll(async () => {
    await standIns?.close();
    await database?.drop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  // The cases are made once the stand-ins listen; their names are known before.
  const names = contractCases({ governance: peer(), controlPlane: peer(), knowledge: peer(), configPlatform: peer() }, () => Promise.resolve(''));
  for (const { service, name } of names) {
    it(`${service}: ${name}`, async () => {
      const cases = contractCases(
        {
          governance: { url: standIns.endpoints.governance, audience: audiences.governance },
          controlPlane: { url: standIns.endpoints.controlPlane, audience: audiences.controlPlane },
          knowledge: { url: standIns.endpoints.knowledge, audience: audiences.knowledge },
          configPlatform: { url: standIns.endpoints.configPlatform, audience: audiences.configPlatform },
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
});

function peer() {
  return { url: 'http://127.0.0.1:1', audience: 'unused' };
}
