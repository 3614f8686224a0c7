import { app } from '@azure/functions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BusEndpoints } from '../../local/local-endpoints/bus-endpoints';
import { ServiceBusBinding } from '../../local/service-bus/service-bus-binding';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * Issue 19: on the local host a message enqueued or published in the host's own process wakes the receivers of its
 * queue or topic subscription at once. The receivers here poll once an hour, so only the wake can deliver in time.
 */

/** Resolves with the first body a handler gets. */
function firstDelivery(): { promise: Promise<unknown>; deliver: (body: unknown) => void } {
  let deliver!: (body: unknown) => void;
  const promise = new Promise<unknown>((resolve) => (deliver = resolve));
  return { promise, deliver };
}

const queued = firstDelivery();
const published = firstDelivery();

app.serviceBusQueue('wakeQueueForTest', { queueName: 'test-wake', connection: 'ServiceBusConnection', handler: (body) => queued.deliver(body) });
app.serviceBusTopic('wakeTopicForTest', {
  topicName: EVENTS_TOPIC,
  subscriptionName: 'test-wake',
  connection: 'ServiceBusConnection',
  handler: (body) => published.deliver(body),
});

describe('the local host wakes its receivers when messages arrive', () => {
  let host: TestHost;

  beforeAll(async () => {
    host = await startTestHost({ components: [new BusEndpoints(), new ServiceBusBinding({ pollIntervalMs: 3_600_000 })] });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when a message is sent to a queue, then its receiver gets it without waiting for its poll', async () => {
    const sent = await host.fetch('/runtime-cloud/local/queues/test-wake/messages', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ body: { hello: 'queue' } }),
      claims: { roles: ['PlatformAdmin'] },
    });
    expect(sent.status).toBe(201);
    expect(await queued.promise).toEqual({ hello: 'queue' });
  });

  it('when an event is published to the topic, then the receiver of its subscription gets it without waiting for its poll', async () => {
    await host.host.deps.events.publish(EVENTS_TOPIC, [{ messageId: 'evt-wake-1', body: JSON.stringify({ hello: 'topic' }), contentType: 'application/json' }]);
    expect(await published.promise).toEqual({ hello: 'topic' });
  });
});
