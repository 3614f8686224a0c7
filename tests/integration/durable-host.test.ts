import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { REWIND_NOT_SUPPORTED } from '../../local/durable/durable-api';
import { localDurable } from '../../local/durable/durable-component';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { SampleOrchestrations, type SampleOutput } from '../support/durable-sample';
import { startTestHost, type TestHost } from '../support/local-host';

interface ClientAnswer {
  ok: boolean;
  error?: string;
  id?: string;
  status?: { runtimeStatus: string; output: unknown; customStatus: unknown; input: unknown; history?: HistoryItem[] };
  result?: { instancesDeleted: number };
}
interface HistoryItem {
  type: string;
  id?: number;
  taskId?: number;
  timerId?: number;
  name?: string;
}

/** Waits (polling, no timing assertion) until the instance reaches a status that satisfies `done`. */
async function waitForStatus(host: TestHost, instanceId: string, done: (s: NonNullable<ClientAnswer['status']>) => boolean) {
  return vi.waitFor(
    async () => {
      const answer = await client(host, 'status', instanceId);
      if (!answer.status || !done(answer.status)) throw new Error(`not yet: ${JSON.stringify(answer.status?.runtimeStatus)}`);
      return answer.status;
    },
    { timeout: 20_000, interval: 50 },
  );
}

async function client(host: TestHost, operation: string, instanceId: string, body?: unknown, eventName?: string): Promise<ClientAnswer> {
  const response = await host.fetch(`/test/durable-client/${operation}/${instanceId}${eventName ? `/${eventName}` : ''}`, {
    method: 'POST',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as ClientAnswer;
}

const count = (history: readonly HistoryItem[] | undefined, type: string) => (history ?? []).filter((e) => e.type === type).length;

describe.each(DIALECTS)('local Durable runner on %s', (dialect) => {
  describe.skipIf(skipDialect(dialect))('', () => {
    let db: TestDatabase;
    let host: TestHost;
    // Instance ids differ per dialect: the sample's flaky activity counts calls per instance id in this process.
    const id = (name: string) => `${name}-${dialect}`;
    beforeAll(async () => {
      db = await createTestDatabase(dialect);
      host = await startTestHost({ settings: db.settings, depsOverrides: db.overrides, components: [localDurable({ pollMs: 25 })] });
    });
    afterAll(async () => {
      await host?.stop();
      await db?.drop();
    });

    it('when the sample runs and is approved, then activities, retries, the timer and the fan-out complete it', async () => {
      const input = { name: 'Ada', failures: 2, approvalTimeoutMs: 60_000 };
      const started = await host.fetch(`/test/durable/start/${SampleOrchestrations.main}/${id('approved-1')}`, {
        method: 'POST',
        body: JSON.stringify(input),
      });
      expect(started.status).toBe(202);
      const links = (await started.json()) as { id: string; statusQueryGetUri: string };
      expect(links.id).toBe(id('approved-1'));
      expect(new URL(links.statusQueryGetUri).origin).toBe(host.url.origin);

      await waitForStatus(host, id('approved-1'), (s) => (s.customStatus as { step?: string } | null)?.step === 'awaiting-approval');
      expect((await client(host, 'raise', id('approved-1'), 'approved', 'approval')).ok).toBe(true);
      const status = await waitForStatus(host, id('approved-1'), (s) => s.runtimeStatus !== 'Running' && s.runtimeStatus !== 'Pending');

      const expected: SampleOutput = { greeting: 'Hello, Ada', flaky: 'ok after 2 failures', decision: 'approved', squares: [1, 4, 9], sum: 14 };
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: expected, customStatus: { step: 'done' }, input });
      // Two failed attempts, each followed by a retry timer, then the successful third attempt.
      expect(count(status.history, 'TaskFailed')).toBe(2);
      expect(count(status.history, 'TaskCompleted')).toBe(5);
      expect(count(status.history, 'ExecutionCompleted')).toBe(1);

      // The status URL handed to HTTP callers works too.
      const byUrl = await fetch(links.statusQueryGetUri);
      expect(byUrl.status).toBe(200);
      expect(await byUrl.json()).toMatchObject({ runtimeStatus: 'Completed', output: expected });
    });

    it('when no approval comes, then the timeout wins the race', async () => {
      const started = await client(host, 'start', id('timeout-1'), {
        name: SampleOrchestrations.main,
        input: { name: 'Bob', failures: 0, approvalTimeoutMs: 300 },
      });
      expect(started).toMatchObject({ ok: true, id: id('timeout-1') });
      const status = await waitForStatus(host, id('timeout-1'), (s) => s.runtimeStatus === 'Completed');
      expect(status.output).toMatchObject({ greeting: 'Hello, Bob', flaky: 'ok after 0 failures', decision: 'timed-out', sum: 14 });
    });

    it('when the approval wins and the timeout is cancelled, then the cancelled timer never fires', async () => {
      await client(host, 'start', id('race-1'), { name: SampleOrchestrations.race });
      // Raised at once: queued before the 1 s timeout falls due, so the approval wins.
      expect((await client(host, 'raise', id('race-1'), 'yes', 'approval')).ok).toBe(true);
      const status = await waitForStatus(host, id('race-1'), (s) => s.runtimeStatus === 'Completed');
      expect(status.output).toBe('approved');
      const fired = (status.history ?? []).filter((e) => e.type === 'TimerFired').map((e) => e.timerId);
      expect(fired).toEqual([1]);
    });

    it('when an instance with that id is running, then starting it again is refused; once ended it may restart', async () => {
      expect(await client(host, 'start', id('dup-1'), { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } })).toMatchObject({ ok: true });
      const again = await client(host, 'start', id('dup-1'), { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      expect(again.ok).toBe(false);
      expect(again.error).toContain('409');
      expect((await client(host, 'raise', id('dup-1'), 'now', 'go')).ok).toBe(true);
      const done = await waitForStatus(host, id('dup-1'), (s) => s.runtimeStatus === 'Completed');
      expect(done.output).toEqual({ mode: 'event', result: 'now', squared: 49 });
      expect(await client(host, 'start', id('dup-1'), { name: SampleOrchestrations.counter, input: 3 })).toMatchObject({ ok: true });
      expect((await waitForStatus(host, id('dup-1'), (s) => s.runtimeStatus === 'Completed')).output).toBe('counted to 3');
    });

    it('when an orchestration continues as new, then it restarts with the new input until it returns', async () => {
      await client(host, 'start', id('counter-1'), { name: SampleOrchestrations.counter, input: 1 });
      const status = await waitForStatus(host, id('counter-1'), (s) => s.runtimeStatus === 'Completed');
      expect(status.output).toBe('counted to 3');
      expect(status.input).toBe(3);
      // Only the last execution's history is kept.
      expect(count(status.history, 'ExecutionStarted')).toBe(1);
    });

    it('when a retried activity never succeeds, then the orchestration fails with its error and custom status', async () => {
      await client(host, 'start', id('failing-1'), { name: SampleOrchestrations.failing });
      const status = await waitForStatus(host, id('failing-1'), (s) => s.runtimeStatus === 'Failed');
      // The extension's forms: the orchestrator's failure wraps the activity's, which the SDK threw as a plain Error.
      expect(String(status.output)).toMatch(
        new RegExp(`^Orchestrator function '${SampleOrchestrations.failing}' failed: Activity function 'durableSampleAlwaysFails' failed: the activity always fails \\n Error: the activity always fails`),
      );
      expect(status.customStatus).toBe('about to fail');
      expect(count(status.history, 'TaskFailed')).toBe(2);
    });

    it('when a function is called with a query, then request.params carries its values beside the route values, the route winning', async () => {
      const response = await host.fetch('/test/durable/params/from-route?instanceId=abc&name=from-query&tag=a&tag=b');
      expect(await response.json()).toEqual({ name: 'from-route', instanceId: 'abc', tag: 'a,b' });
    });

    it('when an orchestration calls a sub-orchestration that continues as new, and callHttp, then the child completes and only callHttp fails, naming the feature', async () => {
      await client(host, 'start', id('sub-1'), { name: SampleOrchestrations.subOrchestrator });
      const status = await waitForStatus(host, id('sub-1'), (s) => s.runtimeStatus !== 'Running' && s.runtimeStatus !== 'Pending');
      expect(status.runtimeStatus).toBe('Completed');
      // The child (the counter, which continues as new until 3) keeps its parent across ContinueAsNew.
      expect(status.output).toEqual([expect.stringMatching(/^callHttp \(durable HTTP calls\) is not supported by the local Durable host/)]);
      expect(count(status.history, 'SubOrchestrationInstanceCreated')).toBe(1);
      expect(count(status.history, 'SubOrchestrationInstanceCompleted')).toBe(1);
      expect(count(status.history, 'TaskFailed')).toBe(1);
    });

    it('when an instance is terminated, then it ends, late events are accepted and dropped, and purge removes it', async () => {
      await client(host, 'start', id('terminate-1'), { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      await waitForStatus(host, id('terminate-1'), (s) => s.customStatus === 'waiting');
      expect((await client(host, 'terminate', id('terminate-1'))).ok).toBe(true);
      const status = await waitForStatus(host, id('terminate-1'), (s) => s.runtimeStatus === 'Terminated');
      expect(status.output).toBe('stopped by test');
      expect((await client(host, 'raise', id('terminate-1'), 'late', 'go')).ok).toBe(true);
      expect((await client(host, 'purge', id('terminate-1'))).result).toEqual({ instancesDeleted: 1 });
      const gone = await client(host, 'status', id('terminate-1'));
      expect(gone.ok).toBe(false);
      expect(gone.error).toContain('404');
      expect((await client(host, 'raise', id('terminate-1'), 'x', 'go')).ok).toBe(false);
    });

    it('when an instance is suspended, then it reports Suspended and runs nothing until resumed, then completes', async () => {
      await client(host, 'start', id('suspend-1'), { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      await waitForStatus(host, id('suspend-1'), (s) => s.customStatus === 'waiting');
      expect((await client(host, 'suspend', id('suspend-1'))).ok).toBe(true);
      expect((await client(host, 'status', id('suspend-1'))).status?.runtimeStatus).toBe('Suspended');
      // The event is accepted and waits: a suspended instance takes no step.
      expect((await client(host, 'raise', id('suspend-1'), 'while suspended', 'go')).ok).toBe(true);
      expect((await client(host, 'status', id('suspend-1'))).status?.runtimeStatus).toBe('Suspended');
      expect((await client(host, 'resume', id('suspend-1'))).ok).toBe(true);
      const status = await waitForStatus(host, id('suspend-1'), (s) => s.runtimeStatus === 'Completed');
      expect(status.output).toEqual({ mode: 'event', result: 'while suspended', squared: 49 });
      // Suspending an ended instance resolves (410), as the SDK's client treats it; an unknown one rejects.
      expect((await client(host, 'suspend', id('suspend-1'))).ok).toBe(true);
      expect((await client(host, 'suspend', id('no-such'))).error).toBe(`No instance with ID '${id('no-such')}' found.`);
    });

    it('when a rewind is asked, then the client is refused with a message naming the feature', async () => {
      await client(host, 'start', id('rewind-1'), { name: SampleOrchestrations.failing });
      await waitForStatus(host, id('rewind-1'), (s) => s.runtimeStatus === 'Failed');
      const answer = await client(host, 'rewind', id('rewind-1'));
      expect(answer).toEqual({ ok: false, error: REWIND_NOT_SUPPORTED });
    });

    it('when history is purged by filter, then ended instances of those statuses in the window go and the others stay', async () => {
      const from = new Date().toISOString();
      await client(host, 'start', id('purge-by-done'), { name: SampleOrchestrations.counter, input: 3 });
      await client(host, 'start', id('purge-by-stopped'), { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      await client(host, 'start', id('purge-by-running'), { name: SampleOrchestrations.crash, input: { mode: 'event', dir: '' } });
      await waitForStatus(host, id('purge-by-done'), (s) => s.runtimeStatus === 'Completed');
      await waitForStatus(host, id('purge-by-stopped'), (s) => s.customStatus === 'waiting');
      await client(host, 'terminate', id('purge-by-stopped'));
      await waitForStatus(host, id('purge-by-stopped'), (s) => s.runtimeStatus === 'Terminated');

      expect((await client(host, 'purge-by', '-', { from, statuses: ['Completed'] })).result).toEqual({ instancesDeleted: 1 });
      expect((await client(host, 'status', id('purge-by-done'))).ok).toBe(false);
      expect((await client(host, 'status', id('purge-by-stopped'))).status?.runtimeStatus).toBe('Terminated');
      // Running instances are never purged, whatever the filter says.
      expect((await client(host, 'purge-by', '-', { from, statuses: ['Terminated', 'Running'] })).result).toEqual({ instancesDeleted: 1 });
      expect((await client(host, 'status', id('purge-by-running'))).ok).toBe(true);
      await client(host, 'terminate', id('purge-by-running'));
    });

    it('when the host status is asked, then it answers as the Functions host does', async () => {
      const response = await host.fetch('/admin/host/status');
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ state: 'Running', version: expect.stringMatching(/^4\./) as unknown });
    });

    it('when the local view is asked, then it needs an admin token and pages instances with a cursor', async () => {
      expect((await host.fetch('/runtime-cloud/local/durable/instances')).status).toBe(401);
      expect((await host.fetch('/runtime-cloud/local/durable/instances', { claims: { roles: ['Observer'] } })).status).toBe(403);
      const admin = { claims: { roles: ['PlatformAdmin'] } };
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const page = await host.fetch(`/runtime-cloud/local/durable/instances?limit=2${cursor ? `&cursor=${cursor}` : ''}`, admin);
        expect(page.status).toBe(200);
        const body = (await page.json()) as { items: { instanceId: string; runtimeStatus: string }[]; nextCursor: string | null };
        expect(body.items.length).toBeLessThanOrEqual(2);
        seen.push(...body.items.map((i) => i.instanceId));
        cursor = body.nextCursor;
      } while (cursor);
      expect(seen).toEqual(expect.arrayContaining([id('approved-1'), id('timeout-1'), id('counter-1'), id('failing-1')]));
      expect(new Set(seen).size).toBe(seen.length);

      const one = await host.fetch(`/runtime-cloud/local/durable/instances/${id('approved-1')}`, admin);
      expect(one.status).toBe(200);
      const detail = (await one.json()) as { runtimeStatus: string; customStatus: unknown; history: HistoryItem[] };
      expect(detail).toMatchObject({ runtimeStatus: 'Completed', customStatus: { step: 'done' } });
      expect(detail.history[0]).toMatchObject({ type: 'OrchestratorStarted' });
      expect(detail.history.at(-1)).toMatchObject({ type: 'ExecutionCompleted' });
      expect((await host.fetch('/runtime-cloud/local/durable/instances?limit=0', admin)).status).toBe(400);
    });
  });
});
