import type { ServiceBusReceivedMessage, ServiceBusReceiver } from '@azure/service-bus';
import type { Kysely } from 'kysely';
import type { Clock } from '../time/clock';
import { MODULE_QUEUES, type InboxLagReader } from './bus.health';
import type { BusTables } from './bus.tables';
import { inboxLag } from './inbox.repository';
import { createServiceBusClient, type ServiceBusConnectionOptions } from './service-bus-client';

export interface ServiceBusInboxLagOptions extends ServiceBusConnectionOptions {
  /** The store holding the inbox (its unsettled entries count as lag too). */
  readonly db: Kysely<BusTables>;
  readonly clock: Clock;
  /** Queues each module consumes. Default: {@link MODULE_QUEUES}. */
  readonly queuesOf?: Readonly<Record<string, readonly string[]>>;
}

/** Messages peeked per look: deferred and scheduled ones ahead of the oldest active message are passed over. */
const PEEK_WINDOW = 10;

/** A look answers within the health check's 5 s or fails: one retry, 2 s per try. */
const RETRY = { maxRetries: 1, retryDelayInMs: 200, maxRetryDelayInMs: 200, timeoutInMs: 2_000 };

/**
 * Inbox lag on a host whose queues are Service Bus queues (the Functions trigger consumes them; the store's queue
 * tables stay empty): the oldest active message of each of the module's queues, peeked with
 * `com.microsoft:peek-message`, which needs Listen only (the host's identity is Data Receiver on its queue), and the
 * unsettled entries of the inbox in the SQL store. A bus that does not answer fails the read.
 *
 * Peek cannot count a queue, and counting (`ServiceBusAdministrationClient.getQueueRuntimeProperties`) needs Manage
 * rights the host's identity does not have: `waitingInQueues` stays undefined.
 */
export function serviceBusInboxLag(options: ServiceBusInboxLagOptions): InboxLagReader {
  const queuesOf = options.queuesOf ?? MODULE_QUEUES;
  const client = createServiceBusClient({ ...options, retryOptions: options.retryOptions ?? RETRY });
  const looks = new Map<string, () => Promise<Date | undefined>>();
  const oldestActiveIn = (queue: string) => {
    let look = looks.get(queue);
    if (!look) {
      look = oldestActive(client.createReceiver(queue));
      looks.set(queue, look);
    }
    return look();
  };
  return {
    source: 'service-bus',
    async read(modules) {
      const now = options.clock.now().getTime();
      const inbox = await inboxLag(options.db, modules, {}, now);
      return Promise.all(
        inbox.map(async ({ module, lagSeconds, unprocessed }) => {
          const enqueued = await Promise.all((queuesOf[module] ?? []).map(oldestActiveIn));
          const oldest = Math.min(now, ...enqueued.map((at) => at?.getTime() ?? now));
          return { module, lagSeconds: Math.max(lagSeconds, (now - oldest) / 1000), unprocessed };
        }),
      );
    },
    close: () => client.close(),
  };
}

/**
 * The enqueued time of a queue's oldest active message, or undefined when it has none. The SDK's peek goes on after
 * the last message it peeked, so each look starts from the first message the previous look saw: still the oldest,
 * unless it was settled since (a later message never gets a lower sequence number). After a look that saw nothing,
 * the SDK's own position is right.
 */
function oldestActive(receiver: ServiceBusReceiver): () => Promise<Date | undefined> {
  let from: ServiceBusReceivedMessage['sequenceNumber'];
  return async () => {
    const peeked = await receiver.peekMessages(PEEK_WINDOW, from ? { fromSequenceNumber: from } : {});
    from = peeked[0]?.sequenceNumber;
    return peeked.find((message) => message.state === 'active')?.enqueuedTimeUtc;
  };
}
