import { InvocationContexts } from '../../local/functions-core/invocation-contexts';
import { app, type InvocationContext, type Timer } from '@azure/functions';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BusEndpoints } from '../../local/local-endpoints/bus-endpoints';
import { ServiceBusBinding } from '../../local/service-bus/service-bus-binding';
import { TimerBinding } from '../../local/timers/timer-binding';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { appendToOutbox, type OutboxTables } from '../../shared/platform/bus/outbox';
import { listActive } from '../../local/bus/queue.repository';
import { functionsWithTrigger } from '../../local/functions-core/registry';
import type { HostContext } from '../../local/host';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * The embedded Service Bus, timers and local-only bus endpoints on a local host started in this process, driven
 * by functions registered through the real @azure/functions API.
 */

interface Delivery {
  readonly body: unknown;
  readonly metadata: Record<string, unknown>;
}

/** Collects what a handler saw and lets a test wait for the n-th call without sleeping. */
function recorder<T>() {
  const calls: T[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  return {
    calls,
    record(call: T) {
      calls.push(call);
      for (const w of waiters.filter((w) => calls.length >= w.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    },
    until(n: number): Promise<T[]> {
      if (calls.length >= n) return Promise.resolve(calls);
      return new Promise((resolve) => waiters.push({ n, resolve: () => resolve(calls) }));
    },
  };
}

const happy = recorder<Delivery>();
const flaky = recorder<Delivery>();
const poison = recorder<Delivery>();
const everySecond = recorder<Timer>();
const onStartup = recorder<Timer>();
const slow = recorder<{ timer: Timer; started: number; ended: number }>();
let slowRunning = 0;
let slowOverlaps = 0;

const deliveryOf = (body: unknown, context: InvocationContext): Delivery => ({ body, metadata: { ...context.triggerMetadata } });

app.serviceBusQueue('happyQueueForTest', {
  queueName: 'test-happy',
  connection: 'ServiceBusConnection',
  handler: (body, context) => {
    happy.record(deliveryOf(body, context));
  },
});
app.serviceBusQueue('flakyQueueForTest', {
  queueName: 'test-flaky',
  connection: 'ServiceBusConnection',
  handler: (body, context) => {
    flaky.record(deliveryOf(body, context));
    if (flaky.calls.length < 3) throw new Error(`transient failure ${flaky.calls.length}`);
  },
});
app.serviceBusQueue('poisonQueueForTest', {
  queueName: 'test-poison',
  connection: 'ServiceBusConnection',
  handler: (body, context) => {
    poison.record(deliveryOf(body, context));
    throw new Error('this message can never be processed');
  },
});
app.timer('everySecondForTest', { schedule: '* * * * * *', handler: (timer) => everySecond.record(timer) });
app.timer('onStartupForTest', { schedule: '0 0 0 1 1 *', runOnStartup: true, handler: (timer) => onStartup.record(timer) });
app.timer('slowForTest', {
  schedule: '* * * * * *',
  handler: async (timer) => {
    if (slow.calls.length >= 2) return;
    slowRunning++;
    if (slowRunning > 1) slowOverlaps++;
    const started = Date.now();
    // The first run overruns its one-second schedule, so the next occurrence is missed.
    if (slow.calls.length === 0) await new Promise((r) => setTimeout(r, 1500));
    slowRunning--;
    slow.record({ timer, started, ended: Date.now() });
  },
});

const admin = { roles: ['PlatformAdmin'] };

describe('embedded Service Bus, timers and bus endpoints on the local host', () => {
  let host: TestHost;

  beforeAll(async () => {
    host = await startTestHost({
      components: [
        new BusEndpoints(),
        new ServiceBusBinding({ maxDeliveryCount: 3, pollIntervalMs: 25, lockDurationMs: 10_000 }),
        new TimerBinding({ pastDueMarginMs: 300 }),
      ],
    });
  });
  afterAll(async () => {
    await host?.stop();
  });

  const post = (queue: string, envelope: unknown, claims: object | null = admin) =>
    host.fetch(`/runtime-cloud/local/queues/${queue}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(envelope),
      ...(claims ? { claims } : {}),
    });

  it('when a message is posted to a queue, then the queue function gets the parsed body and Service Bus trigger metadata', async () => {
    const response = await post('test-happy', {
      body: { promotionId: 'p-1', environment: 'dev' },
      messageId: 'happy-1',
      correlationId: 'corr-happy',
      applicationProperties: { type: 'PromotionApproved' },
    });
    expect(response.status).toBe(201);
    expect(await response.json()).toMatchObject({ queue: 'test-happy', messageId: 'happy-1', duplicate: false });

    const [delivery] = await happy.until(1);

    expect(delivery?.body).toEqual({ promotionId: 'p-1', environment: 'dev' });
    expect(delivery?.metadata).toMatchObject({
      messageId: 'happy-1',
      deliveryCount: 1,
      correlationId: 'corr-happy',
      contentType: 'application/json',
      applicationProperties: { type: 'PromotionApproved' },
      userProperties: { type: 'PromotionApproved' },
    });
    expect(new Date(String(delivery?.metadata.enqueuedTimeUtc)).toISOString()).toBe(delivery?.metadata.enqueuedTimeUtc);
    expect(delivery?.metadata.lockToken).toMatch(/^[0-9a-f-]{36}$/);
    expect(typeof delivery?.metadata.sequenceNumber).toBe('number');
  });

  it('when the same messageId is posted again, then it is answered as a duplicate and not delivered twice', async () => {
    expect((await post('test-happy', { body: 'first', messageId: 'dup-1' })).status).toBe(201);
    const again = await post('test-happy', { body: 'second', messageId: 'dup-1' });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ queue: 'test-happy', messageId: 'dup-1', duplicate: true });
    // A later message on the same queue: once it is handled, anything enqueued before it was handled too.
    await post('test-happy', { body: 'sentinel', messageId: 'after-dup-1' });
    await until(() => happy.calls.some((c) => c.metadata.messageId === 'after-dup-1'));
    await until(async () => (await listActive(host.host.deps.sql.db as Kysely<BusTables>, host.host.deps.sql.dialect, 'test-happy', { limit: 10 })).length === 0);

    expect(happy.calls.filter((c) => c.metadata.messageId === 'dup-1').map((c) => c.body)).toEqual(['first']);
  });

  it('when the handler throws, then the message is redelivered with a growing delivery count until it succeeds', async () => {
    await post('test-flaky', { body: { n: 1 }, messageId: 'flaky-1' });

    const calls = await flaky.until(3);

    expect(calls.map((c) => c.metadata.deliveryCount)).toEqual([1, 2, 3]);
    expect(calls.map((c) => c.metadata.messageId)).toEqual(['flaky-1', 'flaky-1', 'flaky-1']);
    await until(async () => (await listActive(host.host.deps.sql.db as Kysely<BusTables>, host.host.deps.sql.dialect, 'test-flaky', { limit: 10 })).length === 0);
  });

  it('when the handler always throws, then after the max deliveries the message is dead-lettered with MaxDeliveryCountExceeded', async () => {
    await post('test-poison', { body: { bad: true }, messageId: 'poison-1', correlationId: 'corr-poison' });

    const items = await until(async () => {
      const response = await host.fetch('/runtime-cloud/local/queues/test-poison/deadletter', { claims: admin });
      const page = (await response.json()) as { items: Record<string, unknown>[] };
      return page.items.length > 0 ? page.items : undefined;
    });

    expect(poison.calls.map((c) => c.metadata.deliveryCount)).toEqual([1, 2, 3]);
    expect(items).toEqual([
      expect.objectContaining({
        messageId: 'poison-1',
        correlationId: 'corr-poison',
        deliveryCount: 3,
        deadLetterReason: 'MaxDeliveryCountExceeded',
        deadLetterErrorDescription: 'Message could not be consumed after 3 delivery attempts.',
        body: { bad: true },
      }),
    ]);
  });

  it('when events are in the outbox, then the relay timer publishes them to the embedded topic, readable in order with a cursor', async () => {
    const db = host.host.deps.sql.db as Kysely<OutboxTables>;
    const written = await appendToOutbox(
      db,
      [1, 2, 3].map((n) => ({ type: 'LeaseExpired' as const, correlationId: `lease-${n}`, data: { n } })),
      host.host.deps.clock,
      host.host.deps.ids,
    );

    const all = await until(async () => {
      const response = await host.fetch('/runtime-cloud/local/topics/runtime-cloud-events/messages?after=0&limit=1000', { claims: admin });
      const page = (await response.json()) as { items: { messageId: string; sequenceNumber: number; body: unknown }[] };
      return page.items.length >= 3 ? page.items : undefined;
    });
    expect(all.map((m) => m.messageId)).toEqual(written.map((e) => e.id));
    expect(all[0]).toMatchObject({ correlationId: 'lease-1', body: written[0], applicationProperties: { type: 'LeaseExpired' } });

    const firstPage = (await (await host.fetch('/runtime-cloud/local/topics/runtime-cloud-events/messages?limit=2', { claims: admin })).json()) as {
      items: { messageId: string }[];
      nextCursor: string | null;
    };
    const secondPage = (await (
      await host.fetch(`/runtime-cloud/local/topics/runtime-cloud-events/messages?after=${firstPage.nextCursor}&limit=2`, { claims: admin })
    ).json()) as { items: { messageId: string }[]; nextCursor: string | null };
    expect([...firstPage.items, ...secondPage.items].map((m) => m.messageId)).toEqual(written.map((e) => e.id));
    expect(secondPage.nextCursor).toBeNull();
  });

  it('when the caller is not a platform admin or the envelope is wrong, then problem+json with 401, 403 or 400', async () => {
    const anonymous = await post('test-happy', { body: 1 }, null);
    const observer = await post('test-happy', { body: 1 }, { roles: ['Observer'] });
    const scoped = await post('test-happy', { messageId: 'no-body' }, { scopes: ['factory.runtime.admin'] });
    const badLimit = await host.fetch('/runtime-cloud/local/topics/runtime-cloud-events/messages?limit=1001', { claims: admin });

    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(observer.status).toBe(403);
    expect(await observer.json()).toMatchObject({ code: 'AUTH.SCOPE_MISSING', requiredScope: 'factory.runtime.admin' });
    expect(scoped.status).toBe(400);
    expect(scoped.headers.get('content-type')).toBe('application/problem+json');
    expect(await scoped.json()).toMatchObject({ code: 'REQUEST.INVALID', errors: [{ field: 'body' }] });
    expect(badLimit.status).toBe(400);
  });

  it('when the binding stops while a handler runs, then stop waits for it, the message is completed and nothing more is received', async () => {
    // Registered after the host bound its functions, so only the binding started here serves this queue.
    const blocking = recorder<Delivery>();
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (open = resolve));
    app.serviceBusQueue('blockingQueueForTest', {
      queueName: 'test-blocking',
      connection: 'ServiceBusConnection',
      handler: async (body, context) => {
        blocking.record(deliveryOf(body, context));
        await gate;
      },
    });
    const registration = functionsWithTrigger('serviceBusTrigger').filter((r) => r.metadata.name === 'blockingQueueForTest');
    const binding = new ServiceBusBinding({ pollIntervalMs: 25 });
    const log = () => undefined;
    await binding.start({
      config: host.host.config,
      deps: host.host.deps,
      log,
      invocations: new InvocationContexts(),
      functionsWithTrigger: () => registration,
    } as unknown as HostContext);
    await binding.listening();
    await post('test-blocking', { body: 'slow work', messageId: 'blocking-1' });
    await blocking.until(1);

    let stopped = false;
    const stopping = binding.stop().then(() => (stopped = true));
    await new Promise((r) => setImmediate(r));
    const stoppedBeforeHandlerEnded = stopped;
    open();
    await stopping;
    await post('test-blocking', { body: 'after stop', messageId: 'blocking-2' });

    const db = host.host.deps.sql.db as Kysely<BusTables>;
    expect(stoppedBeforeHandlerEnded).toBe(false);
    expect(blocking.calls.map((c) => c.metadata.messageId)).toEqual(['blocking-1']);
    expect((await listActive(db, host.host.deps.sql.dialect, 'test-blocking', { limit: 10 })).map((m) => [m.messageId, m.deliveryCount])).toEqual([['blocking-2', 0]]);
  });

  it('when a timer has a one-second schedule, then it fires with the Timer shape of the extension', async () => {
    const [first, second] = await everySecond.until(2);

    for (const timer of [first, second]) {
      expect(typeof timer?.isPastDue).toBe('boolean');
      expect(timer?.schedule).toEqual({ adjustForDST: true });
      for (const key of ['last', 'next', 'lastUpdated'] as const) {
        const value = timer?.scheduleStatus[key] ?? '';
        expect(new Date(value).toISOString()).toBe(value);
      }
      expect(Date.parse(timer?.scheduleStatus.next ?? '')).toBeGreaterThan(Date.parse(timer?.scheduleStatus.last ?? ''));
    }
    expect(Date.parse(second?.scheduleStatus.last ?? '')).toBeGreaterThan(Date.parse(first?.scheduleStatus.last ?? ''));
    // Meanwhile the yearly runOnStartup timer ran once only: its far-away occurrence was not fired early.
    expect(onStartup.calls).toHaveLength(1);
  });

  it('when a timer says runOnStartup, then it ran at start although its schedule is a year away', async () => {
    const [run] = await onStartup.until(1);
    expect(run?.isPastDue).toBe(false);
    expect(new Date(run?.scheduleStatus.next ?? '').toISOString()).toMatch(/-01-01T00:00:00.000Z$/);
  });

  it('when a run overruns its schedule, then the next run does not overlap it and is past due', async () => {
    const [first, second] = await slow.until(2);

    expect(slowOverlaps).toBe(0);
    expect(second?.started).toBeGreaterThanOrEqual(first?.ended ?? Infinity);
    expect(second?.timer.isPastDue).toBe(true);
  });
});

/** Polls a condition until it holds (or the test's own timeout ends the wait). */
async function until<T>(probe: () => T | undefined | false | Promise<T | undefined | false>): Promise<T> {
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    await new Promise((r) => setTimeout(r, 25));
  }
}
