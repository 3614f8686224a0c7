import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { localDurable, type LocalDurableComponent } from '../../local/durable/durable-component';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { SampleOrchestrations } from '../support/durable-sample';
import { startTestHost, type TestHost } from '../support/local-host';

const DAY_MS = 24 * 60 * 60 * 1000;

async function clientCall(host: TestHost, operation: string, instanceId: string, body?: unknown) {
  const response = await host.fetch(`/test/durable-client/${operation}/${instanceId}`, {
    method: 'POST',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return (await response.json()) as { ok: boolean; status?: { runtimeStatus: string; customStatus: unknown } };
}

describe.each(DIALECTS)('durable history retention on %s', (dialect) => {
  describe.skipIf(skipDialect(dialect))('', () => {
    let db: TestDatabase;
    let host: TestHost;
    let durable: LocalDurableComponent;
    const clock = new ManualClock();
    beforeAll(async () => {
      db = await createTestDatabase(dialect);
      durable = localDurable({ pollMs: 25 });
      host = await startTestHost({ settings: db.settings, depsOverrides: { ...db.overrides, clock }, components: [durable] });
    });
    afterAll(async () => {
      await host?.stop();
      await db?.drop();
    });

    it('when an ended instance is older than the default 30 days, then the retention sweep purges it and keeps a running one', async () => {
      await clientCall(host, 'start', `ended-${dialect}`, { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      await clientCall(host, 'start', `running-${dialect}`, { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      for (const instanceId of [`ended-${dialect}`, `running-${dialect}`]) {
        await vi.waitFor(async () => expect((await clientCall(host, 'status', instanceId)).status?.customStatus).toBe('waiting'), { timeout: 20_000, interval: 25 });
      }
      await clientCall(host, 'terminate', `ended-${dialect}`);

      clock.advance(29 * DAY_MS);
      expect(await durable.purgeExpiredHistory()).toBe(0);
      clock.advance(2 * DAY_MS);
      expect(await durable.purgeExpiredHistory()).toBe(1);
      expect((await clientCall(host, 'status', `ended-${dialect}`)).ok).toBe(false);
      expect((await clientCall(host, 'status', `running-${dialect}`)).status?.runtimeStatus).toBe('Running');
    });
  });
});
