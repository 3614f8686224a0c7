import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startChildHost, type RunningChild } from '../support/child-process';

const APP = join(__dirname, '..', 'apps', 'durable-sample');

/** What the sample app's client function answers (tests/apps/durable-sample/src/client.js). */
interface ClientAnswer {
  ok: boolean;
  error?: string;
  id?: string;
  links?: Links;
  /** What `createHttpManagementPayload` gives for the started instance. */
  payload?: Links;
  status?: Status;
  result?: { instancesDeleted: number };
}
/** The management URLs of `createHttpManagementPayload`. */
interface Links {
  statusQueryGetUri: string;
  sendEventPostUri: string;
  terminatePostUri: string;
  suspendPostUri: string;
  resumePostUri: string;
  purgeHistoryDeleteUri: string;
}
interface Status {
  runtimeStatus: string;
  output: unknown;
  customStatus: unknown;
  history?: { type: string }[];
}

/**
 * Conformance of the local Durable host with the Durable Functions end-to-end suite's scenarios
 * (azure-functions-durable-extension test/e2e, its BasicNode app): our sample app (tests/apps/durable-sample), in
 * one `runtime-cloud start --app` process for the whole file, driven through its HTTP functions (the SDK's client)
 * and through the Durable HTTP management API by the URLs the client hands out.
 */
describe('Durable Functions conformance of runtime-cloud start --app (end-to-end scenarios, one host process)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-durable-conformance-'));
  let host: RunningChild;
  let n = 0;

  beforeAll(async () => {
    host = await startChildHost(stateDir, {}, 60_000, ['--app', APP]);
  }, 90_000);
  afterAll(async () => {
    await host?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  async function client(operation: string, instanceId = '', body?: unknown): Promise<ClientAnswer> {
    const response = await fetch(new URL(`/api/client/${operation}/${encodeURIComponent(instanceId)}`, host.url), {
      method: 'POST',
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    expect(response.status).toBe(200);
    return (await response.json()) as ClientAnswer;
  }
  /** Starts an orchestration through the client; returns its id and management URLs. */
  async function start(name: string, input?: unknown, instanceId = `${name}-${++n}`): Promise<{ id: string; links: Links }> {
    const answer = await client('start', instanceId, { name, input });
    expect(answer).toMatchObject({ ok: true, id: instanceId });
    return { id: instanceId, links: answer.links as Links };
  }
  /** Polls the status URL until `done` holds (no fixed sleeps). */
  async function waitFor(links: Links, done: (s: Status) => boolean = (s) => !['Pending', 'Running'].includes(s.runtimeStatus)): Promise<Status> {
    return vi.waitFor(
      async () => {
        const status = (await (await fetch(`${links.statusQueryGetUri}&showHistory=true`)).json()) as Status;
        if (!done(status)) throw new Error(`not yet: ${status.runtimeStatus} ${JSON.stringify(status.customStatus)}`);
        return status;
      },
      { timeout: 15_000, interval: 25 },
    );
  }
  const post = (url: string) => fetch(url, { method: 'POST' });
  const raiseUrl = (links: Links, eventName: string) => links.sendEventPostUri.replace('{eventName}', eventName);
  const withReason = (url: string, reason: string) => url.replace('{text}', encodeURIComponent(reason));
  const count = (status: Status, type: string) => (status.history ?? []).filter((e) => e.type === type).length;

  describe('the app as the Functions host loads it', () => {
    it('when the app is started over HTTP, then its functions (found by its main glob) run a hello sequence under the api prefix', async () => {
      const started = await fetch(new URL('/api/orchestrators/helloCities', host.url), { method: 'POST' });
      expect(started.status).toBe(202);
      const status = await waitFor((await started.json()) as Links);
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: ['Hello Tokyo!', 'Hello London!', 'Hello Seattle!'] });
    });

    it('when a function of the app is called with a query, then request.params carries the query values', async () => {
      const response = await fetch(new URL('/api/params/x?instanceId=abc', host.url));
      expect(await response.json()).toEqual({ name: 'x', instanceId: 'abc' });
    });

    it("when the client hands out an instance's URLs, then they name host.json's task hub", async () => {
      const { links } = await start('helloCities');
      expect(new URL(links.statusQueryGetUri).searchParams.get('taskHub')).toBe('DurableSampleHub');
    });

    it("when the host status is asked, then it answers Running; nothing of this project runs: its routes, local cloud, seeds and runner agents are not there", async () => {
      expect(await (await fetch(new URL('/admin/host/status', host.url))).json()).toMatchObject({ state: 'Running' });
      expect((await fetch(new URL('/runtime-cloud/health', host.url))).status).toBe(404);
      expect((await fetch(new URL('/runtime-cloud/local/cloud/resources', host.url))).status).toBe(404);
      expect(existsSync(join(stateDir, 'desired-state.git'))).toBe(false);
      expect(host.output()).not.toMatch(/"function":"runner /);
    });
  });

  it('when an app builds management URLs with createHttpManagementPayload, then they name this host, not localhost:7071', async () => {
    const answer = await client('start', `payload-${++n}`, { name: 'helloCities' });
    expect(answer.ok).toBe(true);
    expect(new URL(answer.payload?.statusQueryGetUri ?? '').host).toBe(host.url.host);
    expect(new URL(answer.payload?.statusQueryGetUri ?? '').pathname).toBe(new URL(answer.links?.statusQueryGetUri ?? '').pathname);
  });

  describe('external events', () => {
    it('when the event is raised through the HTTP API before the timeout, then the event wins', async () => {
      const { links } = await start('ExternalEventOrchestrator', { timeoutMs: 60_000 });
      await waitFor(links, (s) => s.customStatus === 'waiting');
      const raised = await fetch(raiseUrl(links, 'Approval'), { method: 'POST', body: JSON.stringify(true) });
      expect(raised.status).toBe(202);
      const status = await waitFor(links);
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: 'Approved: true' });
      expect(count(status, 'EventRaised')).toBe(1);
    });

    it('when no event comes, then the durable timer wins', async () => {
      const { links } = await start('ExternalEventOrchestrator', { timeoutMs: 200 });
      const status = await waitFor(links);
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: 'Timed out waiting for approval' });
      expect(count(status, 'EventRaised')).toBe(0);
    });

    it('when an event is raised for an unknown instance, then the client fails with the not-found answer', async () => {
      const answer = await client('raise', 'no-such-instance', { eventName: 'Approval', data: true });
      expect(answer.ok).toBe(false);
      expect(answer.error).toContain('no-such-instance');
    });
  });

  describe('timeouts', () => {
    it('when the activity finishes before the timer, then its result wins', async () => {
      const { links } = await start('TimeoutOrchestrator', { activityMs: 10, timeoutMs: 60_000 });
      expect(await waitFor(links)).toMatchObject({ runtimeStatus: 'Completed', output: 'The activity function completed successfully' });
    });

    it('when the timer fires before the activity finishes, then the orchestration times out', async () => {
      const { links } = await start('TimeoutOrchestrator', { activityMs: 1500, timeoutMs: 100 });
      expect(await waitFor(links)).toMatchObject({ runtimeStatus: 'Completed', output: 'The activity function timed out' });
    });
  });

  describe('terminate', () => {
    it('when a long-running orchestration is terminated through the HTTP API, then it ends Terminated with the reason', async () => {
      const { links } = await start('LongRunningOrchestrator');
      await waitFor(links, (s) => ((s.customStatus as { completed?: number } | null)?.completed ?? 0) >= 3);
      expect((await post(withReason(links.terminatePostUri, 'Long-running orchestration was terminated early.'))).status).toBe(202);
      const status = await waitFor(links, (s) => s.runtimeStatus === 'Terminated');
      expect(status.output).toBe('Long-running orchestration was terminated early.');
      // A second terminate of an ended instance is answered 410 Gone.
      expect((await post(withReason(links.terminatePostUri, 'again'))).status).toBe(410);
    });
  });

  describe('suspend and resume', () => {
    it('when suspended and resumed through the HTTP API, then it holds a raised event until resumed, then completes', async () => {
      const { id, links } = await start('ExternalEventOrchestrator', { timeoutMs: 60_000 });
      await waitFor(links, (s) => s.customStatus === 'waiting');
      expect((await post(withReason(links.suspendPostUri, 'Suspending the instance for test.'))).status).toBe(202);
      await waitFor(links, (s) => s.runtimeStatus === 'Suspended');
      expect(await client('raise', id, { eventName: 'Approval', data: 'while suspended' })).toMatchObject({ ok: true });
      expect((await waitFor(links, () => true)).runtimeStatus).toBe('Suspended');
      expect((await post(withReason(links.resumePostUri, 'Resuming the instance for test.'))).status).toBe(202);
      expect(await waitFor(links)).toMatchObject({ runtimeStatus: 'Completed', output: 'Approved: "while suspended"' });
    });

    it('when suspended and resumed by the client from an HTTP function, then it does the same', async () => {
      const { id, links } = await start('ExternalEventOrchestrator', { timeoutMs: 60_000 });
      await waitFor(links, (s) => s.customStatus === 'waiting');
      expect(await client('suspend', id)).toMatchObject({ ok: true });
      expect((await client('status', id)).status?.runtimeStatus).toBe('Suspended');
      await client('raise', id, { eventName: 'Approval', data: 1 });
      expect((await client('status', id)).status?.runtimeStatus).toBe('Suspended');
      expect(await client('resume', id)).toMatchObject({ ok: true });
      expect(await waitFor(links)).toMatchObject({ runtimeStatus: 'Completed', output: 'Approved: 1' });
    });
  });

  describe('purge', () => {
    it('when one ended instance is purged through the HTTP API, then its status is gone', async () => {
      const { links } = await start('helloCities');
      await waitFor(links);
      const purged = await fetch(links.purgeHistoryDeleteUri, { method: 'DELETE' });
      expect(purged.status).toBe(200);
      expect(await purged.json()).toEqual({ instancesDeleted: 1 });
      expect((await fetch(links.statusQueryGetUri)).status).toBe(404);
    });

    it('when history is purged by filter, then ended instances in the window go and a running one stays', async () => {
      const from = new Date().toISOString();
      const done = await Promise.all([start('helloCities'), start('helloCities')]);
      const running = await start('ExternalEventOrchestrator', { timeoutMs: 60_000 });
      for (const d of done) await waitFor(d.links);
      await waitFor(running.links, (s) => s.customStatus === 'waiting');
      expect(await client('purge-by', '-', { from, statuses: ['Completed', 'Running'] })).toMatchObject({ ok: true, result: { instancesDeleted: 2 } });
      for (const d of done) expect((await fetch(d.links.statusQueryGetUri)).status).toBe(404);
      expect((await fetch(running.links.statusQueryGetUri)).status).toBe(202);
      await post(withReason(running.links.terminatePostUri, 'done'));
    });
  });

  describe('large outputs', () => {
    it('when an activity returns about 1 MB, then the orchestration output carries it whole', async () => {
      const { links } = await start('LargeOutputOrchestrator', 1024);
      const status = await waitFor(links);
      expect(status.runtimeStatus).toBe('Completed');
      const [hello, large] = status.output as [string, string];
      expect(hello).toBe('Hello Tokyo!');
      expect(large).toHaveLength(1024 * 1024);
      expect(large).toBe('A'.repeat(1024 * 1024));
    });

    it('when 100 activities fan out and fan in, then every result is gathered', async () => {
      const { links } = await start('FanOutFanIn', 100);
      const status = await waitFor(links);
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: { count: 100, sum: 338_350 } });
      expect(count(status, 'TaskCompleted')).toBe(100);
    });
  });

  describe('error handling', () => {
    it('when an activity throws and the orchestrator catches it, then it completes with the activity failure in the extension form', async () => {
      const { links } = await start('CatchActivityException');
      const status = await waitFor(links);
      expect(status.runtimeStatus).toBe('Completed');
      expect(status.output).toMatch(/^Caught exception: Activity function 'raise_exception' failed: This activity failed \n Error: This activity failed\n/);
    });

    it('when an activity throws and the orchestrator does not catch it, then the orchestration fails wrapping it', async () => {
      const { links } = await start('RethrowActivityException');
      const status = await waitFor(links);
      expect(status.runtimeStatus).toBe('Failed');
      expect(status.output).toMatch(/^Orchestrator function 'RethrowActivityException' failed: Activity function 'raise_exception' failed: This activity failed \n Error/);
    });

    it('when the orchestrator itself throws, then it fails with the real host message form', async () => {
      const { links } = await start('ThrowingOrchestrator');
      expect(await waitFor(links)).toMatchObject({ runtimeStatus: 'Failed', output: "Orchestrator function 'ThrowingOrchestrator' failed: The orchestrator gave up" });
    });

    it('when an activity fails twice under retry options, then the third attempt succeeds', async () => {
      const { links } = await start('RetryActivityFunction', { failures: 2, attempts: 3 });
      const status = await waitFor(links);
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: 'succeeded on attempt 3' });
      expect(count(status, 'TaskFailed')).toBe(2);
    });
  });

  describe('sub-orchestrations', () => {
    it('when a parent calls children without retry, then each child is an instance of its own and the parent gets their outputs', async () => {
      const { id, links } = await start('SubOrchestratorParent', { names: ['Tokyo', 'Seattle'], ids: ['conformance-child'] });
      const status = await waitFor(links);
      expect(status.runtimeStatus).toBe('Completed');
      const [given, derived] = status.output as { greeting: string; instanceId: string; parentInstanceId: string }[];
      expect(given).toEqual({ greeting: 'Hello Tokyo!', instanceId: 'conformance-child', parentInstanceId: id });
      expect(derived).toMatchObject({ greeting: 'Hello Seattle!', parentInstanceId: id });
      expect(derived?.instanceId).toMatch(/^[0-9a-f-]{36}:1$/);
      expect(count(status, 'SubOrchestrationInstanceCreated')).toBe(2);
      expect(count(status, 'SubOrchestrationInstanceCompleted')).toBe(2);
      const child = await client('status', 'conformance-child');
      expect(child.status).toMatchObject({ runtimeStatus: 'Completed', output: given });
    });

    it('when a child fails, then the parent catches it', async () => {
      const { links } = await start('SubOrchestratorCatch');
      expect(await waitFor(links)).toMatchObject({
        runtimeStatus: 'Completed',
        output: { caught: "Sub orchestrator function 'SayHelloInline' failed: Result: Failure \n ", type: 'Error' },
      });
    });

    it('when a child fails twice under retry options, then the third child succeeds', async () => {
      const { links } = await start('SubOrchestratorRetry', { failures: 2, attempts: 3, first: 50 });
      const status = await waitFor(links);
      expect(status).toMatchObject({ runtimeStatus: 'Completed', output: 'succeeded on attempt 3' });
      expect(count(status, 'SubOrchestrationInstanceFailed')).toBe(2);
      expect(count(status, 'SubOrchestrationInstanceCompleted')).toBe(1);
    });
  });

  // VersioningTests of the end-to-end suite, with the sample's host.json: defaultVersion 2.0, CurrentOrOlder, Fail.
  describe('orchestration versioning', () => {
    it.each([
      [undefined, "Version: '2.0'"],
      ['1.0', "Version: '1.0'"],
      ['2.0', "Version: '2.0'"],
    ])('when an orchestration is started with version %s, then it runs with that version, or the default', async (version, output) => {
      const answer = await client('start', `versioned-${++n}`, { name: 'VersionedOrchestration', ...(version ? { version } : {}) });
      expect(await waitFor(answer.links as Links)).toMatchObject({ runtimeStatus: 'Completed', output });
    });

    it.each([
      [undefined, "Parent Version: '2.0' | Sub Version: '2.0'"],
      ['1.0', "Parent Version: '2.0' | Sub Version: '1.0'"],
    ])('when a sub-orchestration is started with version %s, then it runs with that version, or the default', async (subVersion, output) => {
      const { links } = await start('VersionedParent', subVersion ? { subVersion } : {});
      expect(await waitFor(links)).toMatchObject({ runtimeStatus: 'Completed', output });
    });

    it('when an orchestration is newer than the worker (3.0 over 2.0), then it fails naming both versions, and so does its parent', async () => {
      const answer = await client('start', `versioned-${++n}`, { name: 'VersionedOrchestration', version: '3.0' });
      const parent = await start('VersionedParent', { subVersion: '3.0' });
      const failed = await waitFor(answer.links as Links);
      expect(failed.runtimeStatus).toBe('Failed');
      expect(failed.output).toBe("Orchestrator function 'VersionedOrchestration' failed: the orchestration has version '3.0', newer than this worker's version '2.0' (versionMatchStrategy CurrentOrOlder)");
      const parentStatus = await waitFor(parent.links);
      expect(parentStatus.runtimeStatus).toBe('Failed');
      expect(parentStatus.output).toContain("newer than this worker's version '2.0'");
    });

  });

  describe('features the local host refuses', () => {
    it('when an orchestration calls an entity and a durable HTTP endpoint, then each fails as a catchable task naming the feature', async () => {
      const { links } = await start('RefusedFeatures');
      const status = await waitFor(links);
      expect(status.runtimeStatus).toBe('Completed');
      expect(status.output).toEqual([
        expect.stringMatching(/^callEntity \(durable entities\) is not supported by the local Durable host \(runtime-cloud\)/),
        expect.stringMatching(/^callHttp \(durable HTTP calls\) is not supported by the local Durable host \(runtime-cloud\)/),
      ]);
    });
  });
});

/**
 * versionFailureStrategy Reject (the extension's default): a worker leaves an instance newer than its version for a
 * worker that runs it. Two hosts of the sample app, one after the other, on one store: the first at 2.0, the second
 * at 3.0 (host.json's values overridden by app settings, as in Azure).
 */
describe('orchestration versioning with versionFailureStrategy Reject (two hosts, one store)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-durable-versions-'));
  const setting = (name: string) => `AzureFunctionsJobHost__extensions__durableTask__${name}`;
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

  async function client(host: RunningChild, operation: string, instanceId: string, body?: unknown): Promise<ClientAnswer> {
    const response = await fetch(new URL(`/api/client/${operation}/${encodeURIComponent(instanceId)}`, host.url), { method: 'POST', ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    return (await response.json()) as ClientAnswer;
  }
  const statusOf = async (host: RunningChild, instanceId: string) => (await client(host, 'status', instanceId)).status;

  it('when an instance is newer than the worker, then it stays pending with a warning while others run, and a worker of its version runs it', async () => {
    // Arrange
    const older = await startChildHost(stateDir, { [setting('versionFailureStrategy')]: 'Reject' }, 60_000, ['--app', APP]);
    let newer: RunningChild | undefined;
    try {
      // Act
      await client(older, 'start', 'v3', { name: 'VersionedOrchestration', version: '3.0' });
      await client(older, 'start', 'v2', { name: 'VersionedOrchestration' });
      const current = await vi.waitFor(async () => {
        const status = await statusOf(older, 'v2');
        if (status?.runtimeStatus !== 'Completed') throw new Error('not yet');
        return status;
      });
      await vi.waitFor(() => expect(older.output()).toContain('durable instance v3 is left for another worker'));
      const left = await statusOf(older, 'v3');
      await older.stop();
      newer = await startChildHost(stateDir, { [setting('defaultVersion')]: '3.0' }, 60_000, ['--app', APP]);
      const taken = await vi.waitFor(
        async () => {
          const status = await statusOf(newer as RunningChild, 'v3');
          if (status?.runtimeStatus !== 'Completed') throw new Error('not yet');
          return status;
        },
        { timeout: 15_000, interval: 50 },
      );

      // Assert
      expect(current.output).toBe("Version: '2.0'");
      expect(left?.runtimeStatus).toBe('Pending');
      expect(older.output()).toContain("the orchestration has version '3.0', newer than this worker's version '2.0'");
      expect(taken.output).toBe("Version: '3.0'");
    } finally {
      await older.stop().catch(() => undefined);
      await newer?.stop();
    }
  }, 120_000);
});
