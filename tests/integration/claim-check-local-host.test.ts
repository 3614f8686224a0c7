import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { appendToOutbox } from '../../shared/platform/bus/outbox';
import { relayOutbox } from '../../shared/platform/bus/outbox-relay.service';
import { readTopic } from '../../local/bus/topic.repository';
import { busDb } from '../../shared/platform/bus/bus-db';
import { eventually } from '../support/eventually';
import { startTestHost, type TestHost } from '../support/local-host';
import { aStackPromotion, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';

/**
 * Claim checks end to end on a local host whose threshold is low enough that every SpecificationApplied is published
 * as one: the relay stores its data in the host's own Azurite Blob server, the embedded topic carries the envelope,
 * and inventory, reading it through `openEvent`, learns the desired state and shows the environment in sync.
 */
describe('claim-checked events on the local host', () => {
  let host: TestHost;
  let example: ProvisioningExample;
  let root: string;
  const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator-1' };

  beforeAll(async () => {
    root = fs.mkdtempSync(join(tmpdir(), 'rch-claim-check-'));
    host = await startTestHost({ settings: { RuntimeCloud__Outbox__ClaimCheckBytes: '1024' } });
    example = await provisioningExample(root, host.stateDir, 1);
    writeExampleReferences(host.stateDir);
  });
  afterAll(async () => {
    await host?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('when a promotion is applied, then its SpecificationApplied travels as a claim check and inventory takes it in', async () => {
    // Arrange
    const promotion = aStackPromotion(example.repository, 'development', { stack: 'development-1', environmentId: 'env-claim-check' });

    // Act
    await sendToPromotions(host, promotion, `claim-check-${promotion.promotionId}`);

    // Assert: inventory learnt the desired state (and noted the run's end) from the events it read.
    const environment = await eventually(async () => {
      const response = await host.fetch('/runtime-cloud/environments/env-claim-check', { claims: operator });
      if (response.status !== 200) return undefined;
      const body = (await response.json()) as { drift: { status: string }; lastRun?: { state: string } };
      return body.drift.status === 'in-sync' && body.lastRun?.state === 'applied' ? body : undefined;
    });
    expect(environment.drift.status).toBe('in-sync');
    // What the topic carried was the envelope, its data stored apart.
    const messages = await readTopic(busDb(host.host.deps.sql.db), host.host.deps.sql.dialect, EVENTS_TOPIC, { limit: 1000 });
    const specification = messages.map((m) => JSON.parse(m.body) as Record<string, unknown>).find((e) => e.type === 'SpecificationApplied');
    expect(specification).toMatchObject({ tenant: 'demo-team', dataref: expect.stringMatching(/^tenants\/demo-team\/events\//), datadigest: expect.stringMatching(/^sha256:/) });
    expect(specification).not.toHaveProperty('data');
  });

  it('when a claim-checked PoolResizeRequested reaches provisioning, then it reads the data back and refuses the resize for what the data says', async () => {
    // Arrange: a resize of a stack no run applied, padded over the threshold so it travels as a claim check.
    const data = { pool: 'claim-checked-pool', kind: 'build', target: 'local', iacStack: 'demo-team/pools/never-applied', fromCapacity: 1, toCapacity: 2, used: 0, note: 'x'.repeat(2048) };

    // Act
    await host.host.deps.sql.db.transaction().execute(async (trx) => {
      await appendToOutbox(busDb(trx), [{ type: 'PoolResizeRequested', subject: 'pools/claim-checked-pool', correlationId: 'claim-checked-pool', tenant: 'demo-team', data }], host.host.deps.clock, host.host.deps.ids);
    });
    await relayOutbox(busDb(host.host.deps.sql.db), host.host.deps.events, { dialect: host.host.deps.sql.dialect, clock: host.host.deps.clock, ids: host.host.deps.ids });

    // Assert: refused as a stack nothing applied (read from the stored data), not as a resize without data.
    const topic = async () =>
      (await readTopic(busDb(host.host.deps.sql.db), host.host.deps.sql.dialect, EVENTS_TOPIC, { limit: 1000 })).map((m) => JSON.parse(m.body) as { type: string; dataref?: string; data?: { pool?: string; code?: string } });
    const failed = await eventually(async () => (await topic()).find((e) => e.type === 'ProvisioningFailed' && e.data?.pool === 'claim-checked-pool'));
    expect(failed.data?.code).toBe('PROVISIONING.UNKNOWN_STACK');
    expect((await topic()).find((e) => e.type === 'PoolResizeRequested')).toMatchObject({ dataref: expect.any(String) });
  });
});
