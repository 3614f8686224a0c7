import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { durableDb, loadHistory } from '../../local/durable/durable.repository';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import { createTestDatabase, type TestDatabase } from '../support/databases';
import { startChildHost, type ChildHost } from '../support/durable-child';
import { SampleOrchestrations } from '../support/durable-sample';

/**
 * SIGKILL a child local host while instances wait on an activity in flight, an external event and a durable timer;
 * a new host on the same store finishes them all.
 */
describe('local Durable runner across a SIGKILL', () => {
  let db: TestDatabase;
  let markers: string;
  const children: ChildHost[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('sqlite');
    markers = mkdtempSync(join(tmpdir(), 'rch-durable-markers-'));
  });
  afterAll(async () => {
    await Promise.all(children.map((c) => c.kill()));
    await db?.drop();
    rmSync(markers, { recursive: true, force: true });
  });

  function history(instanceId: string): Promise<HistoryEvent[]> {
    return loadHistory(durableDb(db.store.db), instanceId);
  }

  async function statusOf(instanceId: string) {
    return durableDb(db.store.db)
      .selectFrom('durable_instances')
      .select(['status', 'custom_status', 'output'])
      .where('instance_id', '=', instanceId)
      .executeTakeFirst();
  }

  it('when the host is killed mid-flight and another starts on the same store, then every instance completes', async () => {
    const first = await startChildHost({ settings: db.settings, leaseMs: 1500, workerId: 'first' });
    children.push(first);
    for (const mode of ['activity', 'event', 'timer'] as const) {
      const response = await fetch(new URL(`test/durable/start/${SampleOrchestrations.crash}/crash-${mode}`, first.url), {
        method: 'POST',
        body: JSON.stringify({ mode, dir: markers }),
      });
      expect(response.status).toBe(202);
    }
    // Mid-flight: the activity has started running, the other two wait (for the event, for the 2 s timer).
    await vi.waitFor(
      async () => {
        expect(readFileSync(join(markers, 'crash-activity.started'), 'utf8')).toBe('run\n');
        for (const mode of ['event', 'timer']) expect((await statusOf(`crash-${mode}`))?.custom_status).toBe('"waiting"');
      },
      { timeout: 20_000, interval: 25 },
    );
    await first.kill();

    const typesOf = async (id: string) => (await history(id)).map((e) => e.EventType);
    expect(await typesOf('crash-activity')).not.toContain(HistoryEventType.TaskCompleted);
    expect(await typesOf('crash-event')).not.toContain(HistoryEventType.EventRaised);
    expect(await typesOf('crash-timer')).not.toContain(HistoryEventType.TimerFired);

    const second = await startChildHost({ settings: db.settings, leaseMs: 1500, workerId: 'second' });
    children.push(second);
    const raised = await fetch(new URL('test/durable-client/raise/crash-event/go', second.url), { method: 'POST', body: '"after-restart"' });
    expect(await raised.json()).toEqual({ ok: true });
    writeFileSync(join(markers, 'crash-activity.release'), '');

    await vi.waitFor(
      async () => {
        for (const mode of ['activity', 'event', 'timer']) expect((await statusOf(`crash-${mode}`))?.status).toBe('Completed');
      },
      { timeout: 30_000, interval: 50 },
    );
    const outputs = await Promise.all(['activity', 'event', 'timer'].map(async (m) => JSON.parse((await statusOf(`crash-${m}`))?.output ?? 'null') as unknown));
    expect(outputs).toEqual([
      { mode: 'activity', result: 'released', squared: 49 },
      { mode: 'event', result: 'after-restart', squared: 49 },
      { mode: 'timer', result: 'fired', squared: 49 },
    ]);
    // The interrupted activity ran again (at least once), and its completion is recorded once.
    expect(readFileSync(join(markers, 'crash-activity.started'), 'utf8')).toBe('run\nrun\n');
    const completions = (await history('crash-activity')).filter((e) => e.EventType === HistoryEventType.TaskCompleted);
    expect(completions.map((e) => e.TaskScheduledId)).toEqual([0, 1]);
    for (const mode of ['activity', 'event', 'timer']) {
      expect((await typesOf(`crash-${mode}`)).filter((t) => t === HistoryEventType.ExecutionCompleted)).toHaveLength(1);
    }
  });
});
