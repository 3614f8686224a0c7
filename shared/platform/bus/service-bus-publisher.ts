import type { RetryOptions, ServiceBusMessage, ServiceBusMessageBatch, ServiceBusSender } from '@azure/service-bus';
import { AppError } from '../errors/app-error';
import type { EventPublisher } from './event-publisher';
import type { OutgoingMessage } from './queue';
import { createServiceBusClient, type ServiceBusConnectionOptions } from './service-bus-client';

export interface ServiceBusPublisherOptions extends ServiceBusConnectionOptions {
  /** Send retries; default as host.json's `clientRetryOptions` (3 retries, exponential from 0.8 s, 1 min per try). */
  readonly retryOptions?: RetryOptions;
}

export const DEFAULT_RETRY: Omit<RetryOptions, 'mode'> = {
  maxRetries: 3,
  retryDelayInMs: 800,
  maxRetryDelayInMs: 60_000,
  timeoutInMs: 60_000,
};

/** The SDK's own values for options left out (@azure/core-amqp 4.4 `Constants`). */
const SDK_DEFAULTS = { maxRetries: 3, retryDelayInMs: 30_000, maxRetryDelayInMs: 90_000, timeoutInMs: 60_000 } as const;

/**
 * The longest one SDK operation (a send, a link opened) can take with these retry options: every try up to its
 * timeout, and between tries the longest delay @azure/core-amqp 4.4's `retry` may wait (`calculateDelay`: exponential
 * `min(retryDelay × 1.2 (its jitter's top) × (2^attempt − 1), maxRetryDelay)`, fixed `retryDelay`). Exponential is the
 * mode this publisher sets; without one the SDK retries fixed. The host's default options give
 * 4 × 60 s + (0.96 + 2.88 + 6.72) s = 250.56 s.
 */
export function sendBudgetMs(retry: Omit<RetryOptions, 'mode'> & { readonly mode?: 'exponential' | 'fixed' }): number {
  const maxRetries = retry.maxRetries ?? SDK_DEFAULTS.maxRetries;
  const retryDelay = retry.retryDelayInMs ?? SDK_DEFAULTS.retryDelayInMs;
  const maxRetryDelay = retry.maxRetryDelayInMs ?? SDK_DEFAULTS.maxRetryDelayInMs;
  let delays = 0;
  for (let attempt = 1; attempt <= maxRetries; attempt++) {
    delays += retry.mode === 'exponential' ? Math.min(retryDelay * 1.2 * (2 ** attempt - 1), maxRetryDelay) : retryDelay;
  }
  return (maxRetries + 1) * (retry.timeoutInMs ?? SDK_DEFAULTS.timeoutInMs) + delays;
}

/**
 * The production adapter: `ServiceBusSender` per topic. messageId = event id (the namespace's duplicate detection
 * drops a republish), correlationId and subject carried over, body sent as JSON with contentType application/json,
 * application properties (the event `type`) for subscription filters.
 */
export function serviceBusPublisher(options: ServiceBusPublisherOptions): EventPublisher {
  // The SDK is loaded when a publisher is created, i.e. only on a host configured for Service Bus, never when this
  // module is imported (publishers.ts imports it on every host).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { RetryMode } = require('@azure/service-bus') as typeof import('@azure/service-bus');
  // The SDK's own default waits 30 s between retries, which would stall a relay tick for minutes.
  const retryOptions = options.retryOptions ?? { mode: RetryMode.Exponential, ...DEFAULT_RETRY };
  const client = createServiceBusClient({ ...options, retryOptions });
  // One publish may take several operations (a link opened, batches sent): it is cut off at one operation's budget,
  // so it never outlasts the relay's claim; what it did not send is sent again by the next relay run.
  const publishBudgetMs = sendBudgetMs({ ...retryOptions, mode: retryOptions.mode === RetryMode.Exponential ? 'exponential' : 'fixed' });
  const senders = new Map<string, ServiceBusSender>();
  const senderFor = (topic: string) => {
    let sender = senders.get(topic);
    if (!sender) {
      sender = client.createSender(topic);
      senders.set(topic, sender);
    }
    return sender;
  };
  return {
    name: 'service-bus',
    publishBudgetMs,
    async publish(topic, messages) {
      if (messages.length === 0) return;
      const sender = senderFor(topic);
      const deadline = { abortSignal: AbortSignal.timeout(publishBudgetMs) };
      // Batches keep the order and cut the round trips; a batch that is full is sent and a new one started.
      let batch: ServiceBusMessageBatch = await sender.createMessageBatch(deadline);
      for (const message of messages) {
        const sbMessage = toServiceBusMessage(message);
        if (batch.tryAddMessage(sbMessage)) continue;
        if (batch.count === 0) {
          throw new AppError('BUS.MESSAGE_TOO_LARGE', 'too-large', `message ${message.messageId} exceeds the topic's maximum size`, {
            messageId: message.messageId,
          });
        }
        await sender.sendMessages(batch, deadline);
        batch = await sender.createMessageBatch(deadline);
        if (!batch.tryAddMessage(sbMessage)) {
          throw new AppError('BUS.MESSAGE_TOO_LARGE', 'too-large', `message ${message.messageId} exceeds the topic's maximum size`, {
            messageId: message.messageId,
          });
        }
      }
      if (batch.count > 0) await sender.sendMessages(batch, deadline);
    },
    async close() {
      for (const sender of senders.values()) await sender.close();
      senders.clear();
      await client.close();
    },
  };
}

export function toServiceBusMessage(message: OutgoingMessage): ServiceBusMessage {
  const json = message.contentType === 'application/json';
  return {
    messageId: message.messageId,
    // The SDK JSON-encodes a non-binary body; a JSON body is handed over parsed so it is not encoded twice.
    body: json ? (JSON.parse(message.body) as unknown) : message.body,
    ...(message.contentType !== undefined ? { contentType: message.contentType } : {}),
    ...(message.correlationId !== undefined ? { correlationId: message.correlationId } : {}),
    ...(message.subject !== undefined ? { subject: message.subject } : {}),
    ...(message.applicationProperties !== undefined ? { applicationProperties: { ...message.applicationProperties } } : {}),
  };
}
