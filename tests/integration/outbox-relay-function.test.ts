import { InvocationContext, type Timer } from '@azure/functions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { outboxRelay } from '../../functions/host/outbox-relay';
import { readTopic } from '../../local/bus/topic.repository';
import { busDb } from '../../shared/platform/bus/bus-db';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { appendToOutbox } from '../../shared/platform/bus/outbox';
import { pendingSummary } from '../../shared/platform/bus/outbox-relay.repository';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * The outboxRelay timer function (functions/host/outbox-relay.ts), called as the Functions host calls it, on a local
 * host that publishes through the relay only (`RuntimeCloud__Outbox__Publish=relay`) and binds no timer, so nothing
 * but the call publishes. The relay's own behaviour is in outbox-relay.test.ts.
 */
describe('the outboxRelay timer function', () => {
  let host: TestHost;

  beforeAll(async () => {
    host = await startTestHost({ components: [], settings: { RuntimeCloud__Outbox__Publish: 'relay' } });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when the timer fires, then the events pending in the outbox are published to the events topic', async () => {
    // Arrange
    const { deps } = host.host;
    const db = busDb(deps.sql.db);
    await deps.sql.db.transaction().execute(async (trx) => {
      const data = { leaseId: 'lease-relay-function', tenantId: 'contoso', kind: 'build', pool: 'local-build', units: 1, holder: 'relay-function', fencingToken: 1, expiresAt: '2026-12-01T08:00:00.000Z' };
      await appendToOutbox(busDb(trx), [{ type: 'LeaseExpired', subject: 'leases/lease-relay-function', correlationId: 'lease-relay-function', tenant: 'contoso', data }], deps.clock, deps.ids);
    });
    expect((await pendingSummary(db)).count).toBe(1);
    const timer: Timer = { isPastDue: false, schedule: { adjustForDST: false }, scheduleStatus: { last: '', next: '', lastUpdated: '' } };

    // Act
    await outboxRelay(timer, new InvocationContext({ functionName: 'outboxRelay' }));

    // Assert
    expect((await pendingSummary(db)).count).toBe(0);
    const published = (await readTopic(db, deps.sql.dialect, EVENTS_TOPIC, { limit: 1000 })).map((m) => JSON.parse(m.body) as { type: string; data: { leaseId?: string } });
    expect(published.filter((e) => e.data.leaseId === 'lease-relay-function').map((e) => e.type)).toEqual(['LeaseExpired']);
  });
});
