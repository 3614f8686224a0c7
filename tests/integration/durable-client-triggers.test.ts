import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { localDurable } from '../../local/durable/durable-component';
import { ServiceBusBinding } from '../../local/service-bus/service-bus-binding';
import { enqueue } from '../../local/bus/queue.repository';
import { busDb } from '../../shared/platform/bus/bus-db';
import { SAMPLE_START_QUEUE, SampleOrchestrations } from '../support/durable-sample';
import { startTestHost, type TestHost } from '../support/local-host';

describe('the durable client in non-HTTP triggers', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost({ components: [localDurable({ pollMs: 25 }), new ServiceBusBinding({ pollIntervalMs: 25 })] });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when a queue-triggered function starts an orchestration through df.getClient, then it runs to completion', async () => {
    const db = busDb(host.host.deps.sql.db);
    const body = JSON.stringify({ instanceId: 'from-queue-1', n: 2 });
    await enqueue(db, host.host.deps.sql.dialect, SAMPLE_START_QUEUE, { messageId: 'start-1', body, contentType: 'application/json' }, { now: Date.now(), duplicateDetectionWindowMs: 600_000 });
    const status = await vi.waitFor(
      async () => {
        const response = await host.fetch('/runtime-cloud/local/durable/instances/from-queue-1', { claims: { roles: ['PlatformAdmin'] } });
        const instance = (await response.json()) as { name?: string; runtimeStatus?: string; output?: unknown };
        if (instance.runtimeStatus !== 'Completed') throw new Error(`not yet: ${JSON.stringify(instance)}`);
        return instance;
      },
      { timeout: 20_000, interval: 50 },
    );
    expect(status.name).toBe(SampleOrchestrations.fanOut);
    expect(status.output).toEqual({ greeting: 'Hello, #2', sum: 4 + 9 + 16 });
  });
});
