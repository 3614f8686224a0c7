/**
 * Sample orchestrations and activities for the local Durable runner's tests, registered exactly as product code
 * registers them (df.app.orchestration / df.app.activity), plus HTTP functions that use the durable client.
 * Import it after `@azure/functions-core` is installed (tests/support/setup.ts does so in vitest) and before the
 * local host starts.
 */
import { app, type HttpRequest, type InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import type { OrchestrationContext, OrchestrationHandler } from 'durable-functions';
import { appendFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

export const SampleActivities = {
  greet: 'durableSampleGreet',
  flaky: 'durableSampleFlaky',
  square: 'durableSampleSquare',
  alwaysFails: 'durableSampleAlwaysFails',
  waitForFile: 'durableSampleWaitForFile',
} as const;

export const SampleOrchestrations = {
  main: 'durableSampleOrchestration',
  counter: 'durableSampleCounter',
  failing: 'durableSampleFailing',
  crash: 'durableSampleCrash',
  fanOut: 'durableSampleFanOut',
  race: 'durableSampleRace',
  backoff: 'durableSampleBackoff',
  subOrchestrator: 'durableSampleSubOrchestrator',
} as const;

/** Input of the main sample. Serialized: changing it is a breaking change for stored instances. */
export interface SampleInput {
  readonly name: string;
  /** How many times the flaky activity fails before it succeeds. */
  readonly failures: number;
  /** How long the approval may take before the timeout wins. */
  readonly approvalTimeoutMs: number;
}

export interface SampleOutput {
  readonly greeting: string;
  readonly flaky: string;
  readonly decision: string;
  readonly squares: number[];
  readonly sum: number;
}

const flakyCalls = new Map<string, number>();

df.app.activity(SampleActivities.greet, { handler: (name: string) => `Hello, ${name}` });

df.app.activity(SampleActivities.flaky, {
  handler: (input: { key: string; failures: number }) => {
    const calls = (flakyCalls.get(input.key) ?? 0) + 1;
    flakyCalls.set(input.key, calls);
    if (calls <= input.failures) throw new Error(`flaky failure ${calls}`);
    return `ok after ${calls - 1} failures`;
  },
});

df.app.activity(SampleActivities.square, { handler: (n: number) => n * n });

/** How often the always-failing activity really ran, per instance id (in this process). */
export const alwaysFailsRuns = new Map<string, number>();

df.app.activity(SampleActivities.alwaysFails, {
  handler: (_input: unknown, context: InvocationContext) => {
    const instanceId = typeof context.triggerMetadata?.instanceId === 'string' ? context.triggerMetadata.instanceId : '';
    alwaysFailsRuns.set(instanceId, (alwaysFailsRuns.get(instanceId) ?? 0) + 1);
    throw new Error('the activity always fails');
  },
});

/**
 * Appends a line to `<dir>/<id>.started` on each run, then waits until `<dir>/<id>.release` exists: a test can kill
 * the host while it waits, and count how often it ran.
 */
df.app.activity(SampleActivities.waitForFile, {
  handler: async (input: { dir: string; id: string }) => {
    appendFileSync(join(input.dir, `${input.id}.started`), 'run\n');
    while (!existsSync(join(input.dir, `${input.id}.release`))) await new Promise((r) => setTimeout(r, 25));
    return 'released';
  },
});

/** Activities, a retry, a timer, an approval racing a timeout, and a fan-out/fan-in. */
export const sampleOrchestrator: OrchestrationHandler = function* (context: OrchestrationContext) {
  const input = context.df.getInput<SampleInput>();
  context.df.setCustomStatus({ step: 'greeting' });
  const greeting = (yield context.df.callActivity(SampleActivities.greet, input.name)) as string;

  context.df.setCustomStatus({ step: 'flaky' });
  const retry = new df.RetryOptions(50, 4);
  retry.backoffCoefficient = 2;
  const flaky = (yield context.df.callActivityWithRetry(SampleActivities.flaky, retry, {
    key: context.df.instanceId,
    failures: input.failures,
  })) as string;

  context.df.setCustomStatus({ step: 'pause' });
  yield context.df.createTimer(new Date(context.df.currentUtcDateTime.getTime() + 200));

  context.df.setCustomStatus({ step: 'awaiting-approval' });
  const approval = context.df.waitForExternalEvent('approval');
  const timeout = context.df.createTimer(new Date(context.df.currentUtcDateTime.getTime() + input.approvalTimeoutMs));
  const winner: unknown = yield context.df.Task.any([approval, timeout]);
  let decision: string;
  if (winner === approval) {
    timeout.cancel();
    decision = String(approval.result);
  } else {
    decision = 'timed-out';
  }

  context.df.setCustomStatus({ step: 'fan-out' });
  const squares = (yield context.df.Task.all([1, 2, 3].map((n) => context.df.callActivity(SampleActivities.square, n)))) as number[];
  context.df.setCustomStatus({ step: 'done' });
  const output: SampleOutput = { greeting, flaky, decision, squares, sum: squares.reduce((a, b) => a + b, 0) };
  return output;
};
df.app.orchestration(SampleOrchestrations.main, sampleOrchestrator);

/** ContinueAsNew until the counter reaches 3. */
df.app.orchestration(SampleOrchestrations.counter, function* (context: OrchestrationContext) {
  const n = context.df.getInput<number>();
  yield context.df.callActivity(SampleActivities.square, n);
  if (n < 3) {
    context.df.continueAsNew(n + 1);
    return undefined;
  }
  return `counted to ${n}`;
});

/** A retried activity that never succeeds: the orchestration fails with its error. */
df.app.orchestration(SampleOrchestrations.failing, function* (context: OrchestrationContext) {
  context.df.setCustomStatus('about to fail');
  yield context.df.callActivityWithRetry(SampleActivities.alwaysFails, new df.RetryOptions(20, 2), null);
  return 'unreachable';
});

/** One wait of the given kind, for the restart tests. */
df.app.orchestration(SampleOrchestrations.crash, function* (context: OrchestrationContext) {
  const input = context.df.getInput<{ mode: 'activity' | 'event' | 'timer'; dir: string }>();
  context.df.setCustomStatus('waiting');
  let result: unknown;
  if (input.mode === 'activity') {
    result = yield context.df.callActivity(SampleActivities.waitForFile, { dir: input.dir, id: context.df.instanceId });
  } else if (input.mode === 'event') {
    result = yield context.df.waitForExternalEvent('go');
  } else {
    yield context.df.createTimer(new Date(context.df.currentUtcDateTime.getTime() + 2000));
    result = 'fired';
  }
  const squared = (yield context.df.callActivity(SampleActivities.square, 7)) as number;
  return { mode: input.mode, result, squared };
});

/** A small fan-out/fan-in for the many-instances test. */
df.app.orchestration(SampleOrchestrations.fanOut, function* (context: OrchestrationContext) {
  const n = context.df.getInput<number>();
  const squares = (yield context.df.Task.all([n, n + 1, n + 2].map((x) => context.df.callActivity(SampleActivities.square, x)))) as number[];
  const greeting = (yield context.df.callActivity(SampleActivities.greet, `#${n}`)) as string;
  return { greeting, sum: squares.reduce((a, b) => a + b, 0) };
});

/**
 * An approval racing a 1 s timeout, then a 1.2 s pause: when the approval wins, the cancelled timeout must not fire
 * during the pause.
 */
df.app.orchestration(SampleOrchestrations.race, function* (context: OrchestrationContext) {
  const start = context.df.currentUtcDateTime.getTime();
  const approval = context.df.waitForExternalEvent('approval');
  const timeout = context.df.createTimer(new Date(start + 1000));
  const winner: unknown = yield context.df.Task.any([approval, timeout]);
  if (winner === approval) timeout.cancel();
  yield context.df.createTimer(new Date(context.df.currentUtcDateTime.getTime() + 1200));
  return winner === approval ? 'approved' : 'timed-out';
});

/** Retry options as given: the always-failing activity with them, so a test can watch each retry timer. */
df.app.orchestration(SampleOrchestrations.backoff, function* (context: OrchestrationContext) {
  const input = context.df.getInput<{ first: number; attempts: number; backoff?: number; maxInterval?: number; timeout?: number }>();
  const options = new df.RetryOptions(input.first, input.attempts);
  if (input.backoff !== undefined) options.backoffCoefficient = input.backoff;
  if (input.maxInterval !== undefined) options.maxRetryIntervalInMilliseconds = input.maxInterval;
  if (input.timeout !== undefined) options.retryTimeoutInMilliseconds = input.timeout;
  yield context.df.callActivityWithRetry(SampleActivities.alwaysFails, options, null);
  return 'unreachable';
});

/** Calls a sub-orchestration and a durable HTTP endpoint, which the local runner refuses: it catches both failures. */
df.app.orchestration(SampleOrchestrations.subOrchestrator, function* (context: OrchestrationContext) {
  const caught: string[] = [];
  try {
    yield context.df.callSubOrchestratorWithRetry(SampleOrchestrations.counter, new df.RetryOptions(10, 2), 3);
  } catch (error) {
    caught.push(error instanceof Error ? error.message : String(error));
  }
  try {
    yield context.df.callHttp({ method: 'GET', url: 'http://127.0.0.1:1/' });
  } catch (error) {
    caught.push(error instanceof Error ? error.message : String(error));
  }
  return caught;
});

/** Starts an orchestration through the durable client: POST /api-less route, body = input. */
app.http('durableSampleStart', {
  route: 'test/durable/start/{name}/{instanceId?}',
  methods: ['POST'],
  authLevel: 'anonymous',
  extraInputs: [df.input.durableClient()],
  handler: async (request: HttpRequest, context: InvocationContext) => {
    const client = df.getClient(context);
    const text = await request.text();
    const instanceId = await client.startNew(request.params.name ?? '', {
      ...(request.params.instanceId ? { instanceId: request.params.instanceId } : {}),
      ...(text ? { input: JSON.parse(text) as unknown } : {}),
    });
    return client.createCheckStatusResponse(request, instanceId);
  },
});

/** Answers `request.params` as the function sees it (route and query values, as the real host gives them). */
app.http('durableSampleParams', {
  route: 'test/durable/params/{name}',
  methods: ['GET'],
  authLevel: 'anonymous',
  handler: (request: HttpRequest) => Promise.resolve({ jsonBody: { ...request.params } }),
});

/** The other durable client operations: start, raise, status, terminate, purge (answers what the client returned or threw). */
app.http('durableSampleClient', {
  route: 'test/durable-client/{operation}/{instanceId}/{eventName?}',
  methods: ['POST'],
  authLevel: 'anonymous',
  extraInputs: [df.input.durableClient()],
  handler: async (request: HttpRequest, context: InvocationContext) => {
    const client = df.getClient(context);
    const instanceId = request.params.instanceId ?? '';
    try {
      switch (request.params.operation) {
        case 'start': {
          const body = JSON.parse(await request.text()) as { name: string; input?: unknown };
          const id = await client.startNew(body.name, { instanceId, ...(body.input !== undefined ? { input: body.input } : {}) });
          return { jsonBody: { ok: true, id } };
        }
        case 'raise':
          await client.raiseEvent(instanceId, request.params.eventName ?? '', JSON.parse((await request.text()) || 'null'));
          return { jsonBody: { ok: true } };
        case 'status':
          return { jsonBody: { ok: true, status: await client.getStatus(instanceId, { showHistory: true }) } };
        case 'terminate':
          await client.terminate(instanceId, 'stopped by test');
          return { jsonBody: { ok: true } };
        case 'purge':
          return { jsonBody: { ok: true, result: await client.purgeInstanceHistory(instanceId) } };
        case 'purge-by': {
          const body = JSON.parse(await request.text()) as { from: string; statuses: df.OrchestrationRuntimeStatus[] };
          return { jsonBody: { ok: true, result: await client.purgeInstanceHistoryBy({ createdTimeFrom: new Date(body.from), runtimeStatus: body.statuses }) } };
        }
        case 'suspend':
          await client.suspend(instanceId, 'paused by test');
          return { jsonBody: { ok: true } };
        case 'resume':
          await client.resume(instanceId, 'resumed by test');
          return { jsonBody: { ok: true } };
        case 'rewind':
          await client.rewind(instanceId, 'rewound by test');
          return { jsonBody: { ok: true } };
        default:
          return { status: 404 };
      }
    } catch (error) {
      return { jsonBody: { ok: false, error: error instanceof Error ? error.message : String(error) } };
    }
  },
});

/** A Service Bus-triggered starter: the durable client reaches functions of every trigger kind, as in Azure. */
export const SAMPLE_START_QUEUE = 'durable-sample-starts';
app.serviceBusQueue('durableSampleQueueStart', {
  queueName: SAMPLE_START_QUEUE,
  connection: 'ServiceBusConnection',
  extraInputs: [df.input.durableClient()],
  handler: async (message: unknown, context: InvocationContext) => {
    const { instanceId, n } = message as { instanceId: string; n: number };
    await df.getClient(context).startNew(SampleOrchestrations.fanOut, { instanceId, input: n });
  },
});
