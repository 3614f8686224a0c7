import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { durableDb } from '../../local/durable/durable.repository';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import { createTestDatabase, postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';
import { startChildHost, type ChildHost } from '../support/durable-child';
import { SampleOrchestrations } from '../support/durable-sample';

const INSTANCES = 50;

/** Two local hosts (child processes) on one PostgreSQL share 50 instances; leases keep each one on one worker at a time. */
describe.skipIf(skipDialect('postgres'))(`two local Durable hosts on one PostgreSQL${skipDialect('postgres') ? ` (skipped: ${postgresSkipReason()})` : ''}`, () => {
  let db: TestDatabase;
  const hosts: ChildHost[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('postgres');
    hosts.push(
      ...(await Promise.all([
        startChildHost({ settings: db.settings, leaseMs: 3000, workerId: 'host-a' }),
        startChildHost({ settings: db.settings, leaseMs: 3000, workerId: 'host-b' }),
      ])),
    );
  });
  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.kill()));
    await db?.drop();
  });

  it('when 50 instances run on two hosts, then each completes exactly once with each activity result recorded once', async () => {
    const ids = Array.from({ length: INSTANCES }, (_, i) => `fan-${i}`);
    await Promise.all(
      ids.map(async (id, i) => {
        const host = hosts[i % hosts.length];
        const response = await fetch(new URL(`test/durable/start/${SampleOrchestrations.fanOut}/${id}`, host?.url), {
          method: 'POST',
          body: JSON.stringify(i),
        });
        expect(response.status).toBe(202);
      }),
    );
    const store = durableDb(db.store.db);
    await vi.waitFor(
      async () => {
        const done = await store.selectFrom('durable_instances').select('instance_id').where('status', '=', 'Completed').execute();
        expect(done).toHaveLength(INSTANCES);
      },
      { timeout: 90_000, interval: 200 },
    );

    const instances = await store.selectFrom('durable_instances').select(['instance_id', 'output']).execute();
    for (const row of instances) {
      const n = Number(row.instance_id.slice('fan-'.length));
      expect(JSON.parse(row.output ?? 'null')).toEqual({ greeting: `Hello, #${n}`, sum: n * n + (n + 1) ** 2 + (n + 2) ** 2 });
    }
    const rows = await store.selectFrom('durable_history').select(['instance_id', 'event', 'recorded_by']).execute();
    const byInstance = new Map<string, HistoryEvent[]>();
    for (const row of rows) byInstance.set(row.instance_id, [...(byInstance.get(row.instance_id) ?? []), JSON.parse(row.event) as HistoryEvent]);
    expect(byInstance.size).toBe(INSTANCES);
    for (const [id, events] of byInstance) {
      const completions = events.filter((e) => e.EventType === HistoryEventType.TaskCompleted).map((e) => e.TaskScheduledId);
      expect({ id, completions: [...completions].sort() }).toEqual({ id, completions: [0, 1, 2, 3] });
      expect({ id, ended: events.filter((e) => e.EventType === HistoryEventType.ExecutionCompleted).length }).toEqual({ id, ended: 1 });
    }
    // Both hosts took part (each committed episodes), without any leftover work or lease.
    expect(new Set(rows.map((r) => r.recorded_by))).toEqual(new Set(['host-a', 'host-b']));
    expect(await store.selectFrom('durable_activities').select('seq').execute()).toEqual([]);
    expect(await store.selectFrom('durable_inbox').select('seq').execute()).toEqual([]);
  });
});
