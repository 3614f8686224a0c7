import type { OperationOptionsBase, RetryOptions, ServiceBusMessage, ServiceBusMessageBatch, ServiceBusSender } from '@azure/service-bus';
import { ensureError } from '../errors/app-error';
import type { EventPublisher } from './event-publisher';
import { messageRefused, RefusalCodes } from './refusals';
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
      let accepted = 0;
      // Batches keep the order and cut the round trips; a batch that is full is sent and a new one started.
      let batch: { readonly sb: ServiceBusMessageBatch; readonly messages: OutgoingMessage[] } = { sb: await sender.createMessageBatch(deadline), messages: [] };
      const send = async () => {
        accepted = await sendBatch(sender, batch.sb, batch.messages, accepted, deadline);
        batch = { sb: await sender.createMessageBatch(deadline), messages: [] };
      };
      for (const message of messages) {
        const sbMessage = toServiceBusMessage(message);
        if (!batch.sb.tryAddMessage(sbMessage) && batch.sb.count > 0) {
          await send();
          batch.sb.tryAddMessage(sbMessage);
        }
        if (batch.sb.count === batch.messages.length) {
          // Not even alone in a batch: the SDK measured it against the size the entity's link advertises.
          const reason = `it exceeds the topic's maximum message size of ${batch.sb.maxSizeInBytes} bytes`;
          throw messageRefused({ code: RefusalCodes.tooLarge, messageId: message.messageId, accepted, reason });
        }
        batch.messages.push(message);
      }
      if (batch.sb.count > 0) await send();
    },
    async close() {
      for (const sender of senders.values()) await sender.close();
      senders.clear();
      await client.close();
    },
  };
}

/**
 * Sends a batch; returns how many messages of the publish the bus has accepted after it. When the namespace refuses
 * the batch as too large (the size it checks counts more than the SDK's estimate), its messages are sent one by one,
 * so only a message refused alone is reported refused, with the ones before it accepted.
 */
async function sendBatch(sender: ServiceBusSender, batch: ServiceBusMessageBatch, messages: readonly OutgoingMessage[], accepted: number, deadline: OperationOptionsBase): Promise<number> {
  try {
    await sender.sendMessages(batch, deadline);
    return accepted + messages.length;
  } catch (thrown) {
    const error = ensureError(thrown);
    if (!tooLargeForTheBus(error)) throw error;
  }
  let sent = accepted;
  for (const message of messages) {
    try {
      await sender.sendMessages(toServiceBusMessage(message), deadline);
    } catch (thrown) {
      const error = ensureError(thrown);
      if (!tooLargeForTheBus(error)) throw error;
      throw messageRefused({ code: RefusalCodes.tooLarge, messageId: message.messageId, accepted: sent, reason: error.message });
    }
    sent++;
  }
  return sent;
}

/** The namespace refused a transfer as too large (`amqp:link:message-size-exceeded`): sending it again cannot help. */
function tooLargeForTheBus(error: Error): boolean {
  return (error as Error & { code?: unknown }).code === 'MessageSizeExceeded';
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
