import type { RetryOptions, ServiceBusMessage, ServiceBusMessageBatch, ServiceBusSender } from '@azure/service-bus';
import { AppError } from '../errors/app-error';
import type { EventPublisher } from './event-publisher';
import type { OutgoingMessage } from './queue';
import { createServiceBusClient, type ServiceBusConnectionOptions } from './service-bus-client';

export interface ServiceBusPublisherOptions extends ServiceBusConnectionOptions {
  /** Send retries; default as host.json's `clientRetryOptions` (3 retries, exponential from 0.8 s, 1 min per try). */
  readonly retryOptions?: RetryOptions;
}

const DEFAULT_RETRY: Omit<RetryOptions, 'mode'> = {
  maxRetries: 3,
  retryDelayInMs: 800,
  maxRetryDelayInMs: 60_000,
  timeoutInMs: 60_000,
};

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
  const client = createServiceBusClient({ ...options, retryOptions: options.retryOptions ?? { mode: RetryMode.Exponential, ...DEFAULT_RETRY } });
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
    async publish(topic, messages) {
      if (messages.length === 0) return;
      const sender = senderFor(topic);
      // Batches keep the order and cut the round trips; a batch that is full is sent and a new one started.
      let batch: ServiceBusMessageBatch = await sender.createMessageBatch();
      for (const message of messages) {
        const sbMessage = toServiceBusMessage(message);
        if (batch.tryAddMessage(sbMessage)) continue;
        if (batch.count === 0) {
          throw new AppError('BUS.MESSAGE_TOO_LARGE', 'too-large', `message ${message.messageId} exceeds the topic's maximum size`, {
            messageId: message.messageId,
          });
        }
        await sender.sendMessages(batch);
        batch = await sender.createMessageBatch();
        if (!batch.tryAddMessage(sbMessage)) {
          throw new AppError('BUS.MESSAGE_TOO_LARGE', 'too-large', `message ${message.messageId} exceeds the topic's maximum size`, {
            messageId: message.messageId,
          });
        }
      }
      if (batch.count > 0) await sender.sendMessages(batch);
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
