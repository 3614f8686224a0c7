import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import {
  LeaseLostError,
  acquireInstanceLease,
  claimActivity,
  commitEpisode,
  completeActivity,
  durableDb,
  findDueActivities,
  findRunnableInstances,
  getInstance,
  startInstance,
  terminateInstance,
  type EpisodeCommit,
} from '../../local/durable/durable.repository';
import { initialRunnerState } from '../../local/durable/durable-runner';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

const LEASE = 1000;
const T0 = Date.parse('2026-01-01T00:00:00Z');

const event = (type: HistoryEvent['EventType'], extra: Partial<HistoryEvent> = {}): HistoryEvent => ({
  EventType: type,
  EventId: -1,
  Timestamp: new Date(T0).toISOString(),
  IsPlayed: false,
  ...extra,
});

describe.each(REPOSITORY_DIALECTS)('local Durable store on %s', (dialect) => {
  describe.skipIf(skipDialect(dialect))('', () => {
    let db: TestDatabase;
    const store = () => durableDb(db.store.db);
    let n = 0;
    async function aStartedInstance(): Promise<string> {
      const instanceId = `store-${dialect}-${++n}`;
      const outcome = await startInstance(store(), {
        instanceId,
        name: 'anOrchestration',
        executionId: `exec-${n}`,
        input: null,
        runnerState: JSON.stringify(initialRunnerState()),
        now: T0,
      });
      expect(outcome).toBe('started');
      return instanceId;
    }
    function anEpisode(instanceId: string, owner: string, version: number): EpisodeCommit {
      return {
        instanceId,
        owner,
        expectedVersion: version,
        now: T0,
        instance: {
          status: 'Running',
          executionId: `exec-${instanceId}`,
          input: null,
          output: null,
          customStatus: null,
          failure: null,
          runnerState: JSON.stringify(initialRunnerState()),
          historyLength: 2,
        },
        appendAt: 0,
        append: [event(HistoryEventType.OrchestratorStarted), event(HistoryEventType.ExecutionStarted)],
        activities: [{ taskId: 0, name: 'anActivity', input: '"x"' }],
        inbox: [],
        cancelTimers: [],
        finished: false,
      };
    }

    beforeAll(async () => {
      db = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await db?.drop();
    });

    it('when workers race for a free instance, then exactly one gets the lease', async () => {
      const instanceId = await aStartedInstance();
      const other = db.connectAgain();
      try {
        const results = await Promise.all(
          Array.from({ length: 8 }, (_, i) => acquireInstanceLease(i % 2 ? durableDb(other.db) : store(), instanceId, `w${i}`, T0, LEASE)),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
      } finally {
        await other.close();
      }
    });

    it('when a lease has expired, then another worker takes it and the old holder commits nothing', async () => {
      const instanceId = await aStartedInstance();
      expect(await acquireInstanceLease(store(), instanceId, 'old', T0, LEASE)).toBe(true);
      expect(await acquireInstanceLease(store(), instanceId, 'new', T0 + LEASE - 1, LEASE)).toBe(false);
      expect(await findRunnableInstances(store(), dialect, T0 + LEASE - 1, 100, ['anOrchestration'])).not.toContain(instanceId);
      expect(await findRunnableInstances(store(), dialect, T0 + LEASE + 1, 100, ['anOrchestration'])).toContain(instanceId);
      expect(await findRunnableInstances(store(), dialect, T0 + LEASE + 1, 100, ['another'])).not.toContain(instanceId);
      expect(await acquireInstanceLease(store(), instanceId, 'new', T0 + LEASE + 1, LEASE)).toBe(true);
      const version = (await getInstance(store(), instanceId))?.version ?? -1;

      await expect(commitEpisode(store(), anEpisode(instanceId, 'old', version))).rejects.toBeInstanceOf(LeaseLostError);
      expect(await store().selectFrom('durable_history').select('position').where('instance_id', '=', instanceId).execute()).toEqual([]);
      await commitEpisode(store(), anEpisode(instanceId, 'new', version));
      expect(await store().selectFrom('durable_history').select('position').where('instance_id', '=', instanceId).execute()).toHaveLength(2);
    });

    it('when a running instance has an inbox message, then it is runnable once that message is due, and another instance\'s due message does not make it so', async () => {
      const names = ['anOrchestration'];
      const [waiting, woken] = [await aStartedInstance(), await aStartedInstance()];
      const timer = (instanceId: string, visibleAt: number): EpisodeCommit => ({
        ...anEpisode(instanceId, 'w', 0),
        activities: [],
        inbox: [{ executionId: `exec-${instanceId}`, dedupeKey: null, event: event(HistoryEventType.TimerFired, { TimerId: 0 }), visibleAt }],
      });
      for (const instanceId of [waiting, woken]) expect(await acquireInstanceLease(store(), instanceId, 'w', T0, LEASE)).toBe(true);
      await commitEpisode(store(), timer(waiting, T0 + 10 * LEASE));
      await commitEpisode(store(), timer(woken, T0 + 2 * LEASE));
      // Both leases lapse at T0 + LEASE; each now waits for its timer.
      const runnable = (at: number) => findRunnableInstances(store(), dialect, at, 100, names);
      expect(await runnable(T0 + LEASE + 1)).not.toContain(waiting);
      expect(await runnable(T0 + LEASE + 1)).not.toContain(woken);
      expect(await runnable(T0 + 2 * LEASE)).toContain(woken);
      expect(await runnable(T0 + 2 * LEASE)).not.toContain(waiting);
      expect(await runnable(T0 + 10 * LEASE)).toEqual(expect.arrayContaining([waiting, woken]));
    });

    it('when terminate lands while an episode runs, then the episode commit fails on the version', async () => {
      const instanceId = await aStartedInstance();
      expect(await acquireInstanceLease(store(), instanceId, 'w', T0, LEASE)).toBe(true);
      const version = (await getInstance(store(), instanceId))?.version ?? -1;
      expect(await terminateInstance(store(), instanceId, 'stop', 'admin', T0)).toBe('terminated');
      await expect(commitEpisode(store(), anEpisode(instanceId, 'w', version))).rejects.toBeInstanceOf(LeaseLostError);
      expect((await getInstance(store(), instanceId))?.status).toBe('Terminated');
      expect(await startInstance(store(), { instanceId, name: 'anOrchestration', executionId: 'again', input: null, runnerState: '{}', now: T0 })).toBe(
        'started',
      );
      expect(await startInstance(store(), { instanceId, name: 'anOrchestration', executionId: 'twice', input: null, runnerState: '{}', now: T0 })).toBe(
        'conflict',
      );
    });

    it('when an activity lease is taken over, then only the current holder records the result, once', async () => {
      const instanceId = await aStartedInstance();
      expect(await acquireInstanceLease(store(), instanceId, 'w', T0, LEASE)).toBe(true);
      const version = (await getInstance(store(), instanceId))?.version ?? -1;
      await commitEpisode(store(), anEpisode(instanceId, 'w', version));
      const [seq] = (await findDueActivities(store(), dialect, T0, 100, ['anActivity'])).slice(-1);
      const first = await claimActivity(store(), seq ?? -1, 'a', T0, LEASE);
      expect(first).toMatchObject({ taskId: 0, name: 'anActivity', input: '"x"', claims: 1 });
      expect(await claimActivity(store(), seq ?? -1, 'b', T0 + 1, LEASE)).toBeUndefined();
      const second = await claimActivity(store(), seq ?? -1, 'b', T0 + LEASE + 1, LEASE);
      expect(second?.claims).toBe(2);

      const done = event(HistoryEventType.TaskCompleted, { TaskScheduledId: 0, Result: '1' });
      expect(first && (await completeActivity(store(), first, 'a', done, T0 + LEASE + 2))).toBe(false);
      expect(second && (await completeActivity(store(), second, 'b', done, T0 + LEASE + 2))).toBe(true);
      const inbox = await store().selectFrom('durable_inbox').select('dedupe_key').where('instance_id', '=', instanceId).execute();
      expect(inbox).toEqual([{ dedupe_key: 'task:0' }]);
    });
  });
});
