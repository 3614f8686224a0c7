import * as df from 'durable-functions';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { localDurable } from '../../local/durable/durable-component';
import { durableDb, getInstance, loadHistory } from '../../local/durable/durable.repository';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { startTestHost, type TestHost } from '../support/local-host';

// The sample app's functions, registered in this process as `runtime-cloud start --app` registers them.
import '../apps/durable-sample/src/hello.js';
import '../apps/durable-sample/src/client.js';
import '../apps/durable-sample/src/error-handling.js';
import '../apps/durable-sample/src/sub-orchestrations.js';

interface Status {
  runtimeStatus: string;
  output: unknown;
  customStatus: unknown;
}

/**
 * Sub-orchestrations on the local Durable host, checked in the store: each child is an instance of its own (id
 * given or derived as DurableTask.Core derives it), the parent receives SubOrchestrationInstanceCompleted/Failed on
 * the task's id, retries re-create the child after durable timers, termination does not propagate, a suspended child
 * holds its parent, and purging the parent leaves the child.
 */
function subOrchestrationSuite(dialect: (typeof DIALECTS)[number], clock?: ManualClock) {
  let db: TestDatabase;
  let host: TestHost;
  const store = () => durableDb(db.store.db);

  // In process, the project's own host.json applies: no route prefix (hosted with --app, the app's gives `api`).
  async function call(operation: string, instanceId: string, body?: unknown): Promise<{ ok: boolean; error?: string; status?: Status }> {
    const response = await host.fetch(`/client/${operation}/${encodeURIComponent(instanceId)}`, {
      method: 'POST',
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    expect(response.status).toBe(200);
    return (await response.json()) as { ok: boolean; error?: string; status?: Status };
  }
  const start = async (instanceId: string, orchestration: string, input?: unknown) =>
    expect(await call('start', instanceId, { name: orchestration, input })).toMatchObject({ ok: true });
  const waitFor = (instanceId: string, done: (s: Status) => boolean) =>
    vi.waitFor(
      async () => {
        const { status } = await call('status', instanceId);
        if (!status || !done(status)) throw new Error(`not yet: ${JSON.stringify(status?.runtimeStatus)}`);
        return status;
      },
      { timeout: 15_000, interval: 20 },
    );
  const ended = (s: Status) => !['Pending', 'Running'].includes(s.runtimeStatus);
  const history = (instanceId: string): Promise<HistoryEvent[]> => loadHistory(store(), instanceId);
  const ofType = (events: readonly HistoryEvent[], type: number) => events.filter((e) => e.EventType === type);

  beforeAll(async () => {
    db = await createTestDatabase(dialect);
    host = await startTestHost({
      settings: db.settings,
      depsOverrides: { ...db.overrides, ...(clock ? { clock } : {}) },
      components: [localDurable({ pollMs: 20 })],
    });
  });
  afterAll(async () => {
    await host?.stop();
    await db?.drop();
  });
  return { store, call, start, waitFor, ended, history, ofType, db: () => db };
}

describe.each(DIALECTS)('local Durable sub-orchestrations on %s', (dialect) => {
  describe.skipIf(skipDialect(dialect))('', () => {
    const s = subOrchestrationSuite(dialect);
    const id = (name: string) => `${name}-${dialect}`;

    it('when a parent calls children in parallel, one with an id and one without, then each runs as its own instance and the parent gets their outputs', async () => {
      await s.start(id('parent-1'), 'SubOrchestratorParent', { names: ['Tokyo', 'London'], ids: [id('given-child')] });
      const status = await s.waitFor(id('parent-1'), s.ended);
      const parent = await getInstance(s.store(), id('parent-1'));
      // Without an id the child's is the parent's execution id and the task's sequence number (DurableTask.Core).
      const derived = `${parent?.executionId ?? ''}:1`;
      expect(status).toMatchObject({
        runtimeStatus: 'Completed',
        output: [
          { greeting: 'Hello Tokyo!', instanceId: id('given-child'), parentInstanceId: id('parent-1') },
          { greeting: 'Hello London!', instanceId: derived, parentInstanceId: id('parent-1') },
        ],
      });
      const events = await s.history(id('parent-1'));
      expect(s.ofType(events, HistoryEventType.SubOrchestrationInstanceCreated)).toEqual([
        expect.objectContaining({ EventId: 0, Name: 'SayHelloInline', InstanceId: id('given-child'), Input: '"Tokyo"' }),
        expect.objectContaining({ EventId: 1, Name: 'SayHelloInline', InstanceId: derived, Input: '"London"' }),
      ]);
      expect(s.ofType(events, HistoryEventType.SubOrchestrationInstanceCompleted).map((e) => e.TaskScheduledId).sort()).toEqual([0, 1]);
      for (const child of [id('given-child'), derived]) {
        expect(await getInstance(s.store(), child)).toMatchObject({
          status: 'Completed',
          name: 'SayHelloInline',
          parent: { instanceId: id('parent-1'), executionId: parent?.executionId, taskId: child === derived ? 1 : 0 },
        });
        expect(s.ofType(await s.history(child), HistoryEventType.ExecutionCompleted)).toHaveLength(1);
      }
    });

    it('when a child fails, then the parent catches the failure in the extension form', async () => {
      await s.start(id('catch-1'), 'SubOrchestratorCatch');
      const status = await s.waitFor(id('catch-1'), s.ended);
      expect(status).toMatchObject({
        runtimeStatus: 'Completed',
        output: { caught: "Sub orchestrator function 'SayHelloInline' failed: Result: Failure \n ", type: 'Error' },
      });
      const [created] = s.ofType(await s.history(id('catch-1')), HistoryEventType.SubOrchestrationInstanceCreated);
      const child = await s.call('status', created?.InstanceId ?? '');
      expect(child.status).toMatchObject({ runtimeStatus: 'Failed', output: "Orchestrator function 'SayHelloInline' failed: Result: Failure" });
    });

    it('when the parent is terminated, then its waiting child runs on to the end, and the parent stays terminated', async () => {
      await s.start(id('terminated-parent'), 'ParentOfWaitingChild', { childId: id('orphan') });
      await s.waitFor(id('orphan'), (st) => st.customStatus === 'waiting');
      expect(await s.call('terminate', id('terminated-parent'), { reason: 'parent stopped' })).toMatchObject({ ok: true });
      await s.waitFor(id('terminated-parent'), (st) => st.runtimeStatus === 'Terminated');
      expect((await s.call('status', id('orphan'))).status?.runtimeStatus).toBe('Running');
      expect(await s.call('raise', id('orphan'), { eventName: 'go', data: 'late' })).toMatchObject({ ok: true });
      expect(await s.waitFor(id('orphan'), s.ended)).toMatchObject({ runtimeStatus: 'Completed', output: 'child got late' });
      expect((await s.call('status', id('terminated-parent'))).status).toMatchObject({ runtimeStatus: 'Terminated', output: 'parent stopped' });
      expect(s.ofType(await s.history(id('terminated-parent')), HistoryEventType.SubOrchestrationInstanceCompleted)).toEqual([]);
    });

    it('when the child is terminated, then the parent task fails with the termination reason', async () => {
      await s.start(id('parent-of-terminated'), 'ParentOfWaitingChild', { childId: id('terminated-child') });
      await s.waitFor(id('terminated-child'), (st) => st.customStatus === 'waiting');
      await s.call('terminate', id('terminated-child'), { reason: 'child stopped' });
      const status = await s.waitFor(id('parent-of-terminated'), s.ended);
      expect(status).toMatchObject({
        runtimeStatus: 'Failed',
        output:
          "Orchestrator function 'ParentOfWaitingChild' failed: Sub orchestrator function 'WaitingChild' failed: the sub-orchestration was terminated: child stopped \n ",
      });
    });

    it('when the child is suspended, then the parent waits; once the child resumes and ends, the parent completes', async () => {
      await s.start(id('parent-of-suspended'), 'ParentOfWaitingChild', { childId: id('suspended-child') });
      await s.waitFor(id('suspended-child'), (st) => st.customStatus === 'waiting');
      await s.call('suspend', id('suspended-child'));
      await s.call('raise', id('suspended-child'), { eventName: 'go', data: 'while suspended' });
      expect((await s.call('status', id('suspended-child'))).status?.runtimeStatus).toBe('Suspended');
      expect((await s.call('status', id('parent-of-suspended'))).status?.runtimeStatus).toBe('Running');
      await s.call('resume', id('suspended-child'));
      expect(await s.waitFor(id('parent-of-suspended'), s.ended)).toMatchObject({ runtimeStatus: 'Completed', output: 'parent saw: child got while suspended' });
    });

    it('when a child id is taken by a running instance, then the parent task fails naming it; the running one is untouched', async () => {
      await s.start(id('holder'), 'ParentOfWaitingChild', { childId: id('taken') });
      await s.waitFor(id('taken'), (st) => st.customStatus === 'waiting');
      await s.start(id('second-parent'), 'ParentOfWaitingChild', { childId: id('taken') });
      const status = await s.waitFor(id('second-parent'), s.ended);
      expect(status.runtimeStatus).toBe('Failed');
      expect(String(status.output)).toContain(`an orchestration instance with the ID '${id('taken')}' is already pending, running or suspended`);
      expect(await getInstance(s.store(), id('taken'))).toMatchObject({ status: 'Running', parent: { instanceId: id('holder') } });
      await s.call('terminate', id('holder'));
      await s.call('terminate', id('taken'));
    });

    it('when a child names an orchestration this host lacks or the parent\'s own id, then each call fails as a task the parent catches', async () => {
      await s.start(id('refusals'), 'SubOrchestratorRefusals');
      expect(await s.waitFor(id('refusals'), s.ended)).toMatchObject({
        runtimeStatus: 'Completed',
        output: [
          "Sub orchestrator function 'NoSuchOrchestrator' failed: The function 'NoSuchOrchestrator' doesn't exist, is disabled, or is not an orchestrator function. \n ",
          "Sub orchestrator function 'SayHelloInline' failed: The instance ID of a sub-orchestration must be different than the instance ID of a parent orchestration. \n ",
        ],
      });
      // Neither child was created.
      expect(s.ofType(await s.history(id('refusals')), HistoryEventType.SubOrchestrationInstanceFailed)).toHaveLength(2);
      expect(await s.store().selectFrom('durable_instances').select('instance_id').where('parent_instance_id', '=', id('refusals')).execute()).toEqual([]);
    });

    it('when a parent is purged, then its children stay, as the Durable client purges one instance', async () => {
      await s.start(id('purged-parent'), 'SubOrchestratorParent', { names: ['Cairo'], ids: [id('kept-child')] });
      await s.waitFor(id('purged-parent'), s.ended);
      expect(await s.call('purge', id('purged-parent'))).toMatchObject({ ok: true, result: { instancesDeleted: 1 } });
      expect((await s.call('status', id('purged-parent'))).ok).toBe(false);
      expect((await s.call('status', id('kept-child'))).status?.runtimeStatus).toBe('Completed');
    });
  });
});

describe('local Durable sub-orchestration retries on a manual clock', () => {
  const clock = new ManualClock('2026-03-01T00:00:00.000Z');
  const s = subOrchestrationSuite('sqlite', clock);

  /** Waits until the parent has `count` retry timers; returns their due times in ms after `t0`. */
  const timers = (instanceId: string, count: number, t0: number) =>
    vi.waitFor(
      async () => {
        const created = s.ofType(await s.history(instanceId), HistoryEventType.TimerCreated);
        expect(created.length).toBeGreaterThanOrEqual(count);
        return created.map((e) => Date.parse(e.FireAt ?? '') - t0);
      },
      { timeout: 10_000, interval: 20 },
    );

  it('when the child fails twice, then each retry re-creates it after first × backoff^(n−1), and the third attempt returns', async () => {
    const t0 = clock.now().getTime();
    await s.start('retry-1', 'SubOrchestratorRetry', { failures: 2, attempts: 3, first: 1000, backoff: 2 });
    expect(await timers('retry-1', 1, t0)).toEqual([1000]);
    clock.advance(999);
    // Not due yet: no second child after more than one poll round trip.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(s.ofType(await s.history('retry-1'), HistoryEventType.SubOrchestrationInstanceCreated)).toHaveLength(1);
    clock.advance(1);
    expect(await timers('retry-1', 2, t0)).toEqual([1000, 3000]);
    clock.advance(2000);
    expect(await s.waitFor('retry-1', s.ended)).toMatchObject({ runtimeStatus: 'Completed', output: 'succeeded on attempt 3' });

    // Each attempt is a new child, on the task id it was scheduled with (attempt, timer, attempt, timer, attempt).
    const parent = await getInstance(s.store(), 'retry-1');
    const created = s.ofType(await s.history('retry-1'), HistoryEventType.SubOrchestrationInstanceCreated);
    expect(created.map((e) => [e.EventId, e.InstanceId])).toEqual([0, 2, 4].map((n) => [n, `${parent?.executionId ?? ''}:${n}`]));
    const children = await Promise.all(created.map((e) => getInstance(s.store(), e.InstanceId ?? '')));
    expect(children.map((c) => c?.status)).toEqual(['Failed', 'Failed', 'Completed']);
  });

  it('when attempts run out with a given child id, then that one child was restarted each attempt and the last failure is caught', async () => {
    const t0 = clock.now().getTime();
    await s.start('retry-2', 'SubOrchestratorRetry', { failures: 5, attempts: 2, first: 500, childId: 'retry-2-child' });
    expect(await timers('retry-2', 1, t0)).toEqual([500]);
    clock.advance(500);
    const status = await s.waitFor('retry-2', s.ended);
    expect(status).toMatchObject({
      runtimeStatus: 'Completed',
      // The child's failure is the activity's, which the SDK threw into it as an Error (message, then stack).
      output: {
        caught: expect.stringMatching(/^Sub orchestrator function 'FlakyChild' failed: Activity function 'flaky_activity' failed: attempt 2 failed \n Error: attempt 2 failed\n/) as unknown,
      },
    });
    const created = s.ofType(await s.history('retry-2'), HistoryEventType.SubOrchestrationInstanceCreated);
    expect(created.map((e) => e.InstanceId)).toEqual(['retry-2-child', 'retry-2-child']);
    expect(s.ofType(await s.history('retry-2'), HistoryEventType.SubOrchestrationInstanceFailed)).toHaveLength(2);
    expect(await getInstance(s.store(), 'retry-2-child')).toMatchObject({ status: 'Failed', parent: { instanceId: 'retry-2', taskId: 2 } });
  });
});

describe('local Durable sub-orchestrations with an exception properties provider', () => {
  const s = subOrchestrationSuite('sqlite');
  // The provider is the SDK's, for the whole process: set for this block only (the file's tests run one at a time).
  beforeAll(() => df.app.setExceptionPropertiesProvider({ getExceptionProperties: (error) => ({ source: 'provider', was: (error as Error).message }) }));
  afterAll(() => df.app.setExceptionPropertiesProvider(undefined));

  it('when the child fails on an activity failure it did not catch, then the parent catches a TaskFailedError with its details', async () => {
    await s.start('details-1', 'SubOrchestratorRetry', { failures: 5, attempts: 1, first: 10 });
    expect(await s.waitFor('details-1', s.ended)).toMatchObject({
      runtimeStatus: 'Completed',
      output: { caught: 'Error: attempt 1 failed', type: 'TaskFailedError', properties: { source: 'provider', was: 'attempt 1 failed' } },
    });
    const [failed] = s.ofType(await s.history('details-1'), HistoryEventType.SubOrchestrationInstanceFailed);
    expect(failed).toMatchObject({
      Reason: "Sub orchestrator function 'FlakyChild' failed: Error: attempt 1 failed",
      FailureDetails: { ErrorType: 'Error', ErrorMessage: 'attempt 1 failed' },
    });
  });
});

describe.skipIf(skipDialect('postgres'))('local Durable sub-orchestrations on two hosts sharing one PostgreSQL', () => {
  let db: TestDatabase;
  const hosts: TestHost[] = [];
  // What either host logged at warning or above: contention the clients never saw (a lost lease, a failed commit).
  const warnings: string[] = [];
  beforeAll(async () => {
    db = await createTestDatabase('postgres');
    for (let i = 0; i < 2; i++) {
      hosts.push(
        await startTestHost({
          settings: db.settings,
          depsOverrides: db.overrides,
          components: [localDurable({ pollMs: 20 })],
          log: (level, category, ...args) => {
            if (['warning', 'error', 'critical'].includes(level)) warnings.push(`host ${i} ${level} ${category} ${args.map((a) => (a instanceof Error ? a.message : String(a))).join(' ')}`);
          },
        }),
      );
    }
  });
  afterAll(async () => {
    for (const host of hosts) await host.stop();
    await db?.drop();
  });

  it('when parents and their children run on either host, then each child is created once and each output reaches its parent once', async () => {
    const parents = Array.from({ length: 10 }, (_, i) => `two-hosts-${i}`);
    await Promise.all(
      parents.map(async (instanceId, i) => {
        const response = await hosts[i % 2]?.fetch(`/client/start/${instanceId}`, {
          method: 'POST',
          body: JSON.stringify({ name: 'SubOrchestratorParent', input: { names: ['a', 'b', 'c'].map((n) => `${n}${i}`) } }),
        });
        expect(await response?.json()).toMatchObject({ ok: true });
      }),
    );
    const store = durableDb(db.store.db);
    await vi.waitFor(
      async () => expect(await store.selectFrom('durable_instances').select('instance_id').where('status', '=', 'Completed').execute()).toHaveLength(40),
      { timeout: 60_000, interval: 100 },
    );
    for (const [i, parentId] of parents.entries()) {
      const parent = await getInstance(store, parentId);
      expect((JSON.parse(parent?.output ?? 'null') as { greeting: string }[]).map((o) => o.greeting)).toEqual(['a', 'b', 'c'].map((n) => `Hello ${n}${i}!`));
      const events = await loadHistory(store, parentId);
      const created = events.filter((e) => e.EventType === HistoryEventType.SubOrchestrationInstanceCreated);
      expect(created.map((e) => e.InstanceId)).toEqual([0, 1, 2].map((n) => `${parent?.executionId ?? ''}:${n}`));
      expect(events.filter((e) => e.EventType === HistoryEventType.SubOrchestrationInstanceCompleted).map((e) => e.TaskScheduledId).sort()).toEqual([0, 1, 2]);
      for (const child of created) {
        expect((await loadHistory(store, child.InstanceId ?? '')).filter((e) => e.EventType === HistoryEventType.ExecutionCompleted)).toHaveLength(1);
      }
    }
    // Both hosts took part, and nothing is left pending.
    const recorders = await store.selectFrom('durable_history').select('recorded_by').distinct().execute();
    expect(recorders).toHaveLength(2);
    expect(await store.selectFrom('durable_inbox').select('seq').execute()).toEqual([]);
    expect(warnings).toEqual([]);
  });
});
