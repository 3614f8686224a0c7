import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { localDurable } from '../../local/durable/durable-component';
import { durableDb, loadHistory } from '../../local/durable/durable.repository';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { alwaysFailsRuns, SampleOrchestrations } from '../support/durable-sample';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * Retry options of CallActivityWithRetry, honoured by the host: on a manual clock, each retry timer's due time is
 * checked exactly, and retry timers fire only when the clock reaches them.
 */
describe('local Durable runner retries on a manual clock', () => {
  const clock = new ManualClock('2026-03-01T00:00:00.000Z');
  let db: TestDatabase;
  let host: TestHost;
  beforeAll(async () => {
    db = await createTestDatabase('sqlite');
    host = await startTestHost({
      settings: db.settings,
      depsOverrides: { ...db.overrides, clock },
      components: [localDurable({ pollMs: 20 })],
    });
  });
  afterAll(async () => {
    await host?.stop();
    await db?.drop();
  });

  function history(instanceId: string): Promise<HistoryEvent[]> {
    return loadHistory(durableDb(db.store.db), instanceId);
  }

  async function start(instanceId: string, input: unknown): Promise<number> {
    const startedAt = clock.now().getTime();
    const response = await host.fetch(`/test/durable/start/${SampleOrchestrations.backoff}/${instanceId}`, {
      method: 'POST',
      body: JSON.stringify(input),
    });
    expect(response.status).toBe(202);
    return startedAt;
  }

  /** Waits until the instance's history holds `count` retry timers, and returns their due times (ms after `t0`). */
  async function retryTimers(instanceId: string, count: number, t0: number): Promise<number[]> {
    return vi.waitFor(
      async () => {
        const timers = (await history(instanceId)).filter((e) => e.EventType === HistoryEventType.TimerCreated);
        expect(timers.length).toBeGreaterThanOrEqual(count);
        return timers.map((e) => Date.parse(e.FireAt ?? '') - t0);
      },
      { timeout: 10_000, interval: 20 },
    );
  }

  async function waitForFailed(instanceId: string): Promise<HistoryEvent[]> {
    return vi.waitFor(
      async () => {
        const events = await history(instanceId);
        expect(events.at(-1)).toMatchObject({ EventType: HistoryEventType.ExecutionCompleted, OrchestrationStatus: 'Failed' });
        return events;
      },
      { timeout: 10_000, interval: 20 },
    );
  }

  it('when attempts fail, then each retry waits first × backoff^(n−1), capped, and the last failure fails the orchestration', async () => {
    const t0 = await start('backoff-1', { first: 1000, attempts: 3, backoff: 2, maxInterval: 1500 });
    expect(await retryTimers('backoff-1', 1, t0)).toEqual([1000]);
    clock.advance(999);
    // Not yet due: the second attempt has not been scheduled after another poll round trip.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect((await history('backoff-1')).filter((e) => e.EventType === HistoryEventType.TaskScheduled)).toHaveLength(1);
    clock.advance(1);
    expect(await retryTimers('backoff-1', 2, t0)).toEqual([1000, 1000 + 1500]);
    clock.advance(1500);
    const events = await waitForFailed('backoff-1');
    // After the last failure the SDK still waits for a timer, which the host fires at once.
    expect(events.filter((e) => e.EventType === HistoryEventType.TimerCreated).map((e) => Date.parse(e.FireAt ?? '') - t0)).toEqual([1000, 2500, 2500]);
    expect(events.filter((e) => e.EventType === HistoryEventType.TaskFailed)).toHaveLength(3);
    expect(alwaysFailsRuns.get('backoff-1')).toBe(3);
  });

  it('when the retry timeout has passed, then the remaining attempts fail without running the activity', async () => {
    const t0 = await start('timeout-1', { first: 1000, attempts: 5, timeout: 1500 });
    expect(await retryTimers('timeout-1', 1, t0)).toEqual([1000]);
    clock.advance(1000);
    expect(await retryTimers('timeout-1', 2, t0)).toEqual([1000, 2000]);
    clock.advance(1000);
    const events = await waitForFailed('timeout-1');
    expect(events.filter((e) => e.EventType === HistoryEventType.TaskScheduled)).toHaveLength(5);
    expect(events.filter((e) => e.EventType === HistoryEventType.TaskFailed)).toHaveLength(5);
    expect(alwaysFailsRuns.get('timeout-1')).toBe(3);
  });
});
