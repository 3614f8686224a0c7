import type { ServiceBusReceivedMessage } from '@azure/service-bus';
import { AppError, ensureError } from '../shared/platform/errors/app-error';
import { createServiceBusClient, type ServiceBusConnectionOptions } from '../shared/platform/bus/service-bus-client';
import { DEFAULT_RETRY } from '../shared/platform/bus/service-bus-publisher';
import type { EventType } from '../shared/platform/bus/events';

/**
 * A wake-up the agent holds, peek-locked, while it claims: completed once the claim answered (a job or none, the
 * wake-up is spent either way), abandoned when the agent gives up claiming, so that the next execution takes it.
 */
export interface Wakeup {
  readonly messageId: string;
  complete(): Promise<void>;
  abandon(): Promise<void>;
}

/** The agent pool's wake-ups: the `RunnerJobDispatched` messages of its own subscription of the events topic. */
export interface Wakeups {
  /**
   * The next wake-up, waiting up to `waitMs` for a message; undefined when none came, or when the one that came was
   * not a wake-up of this pool (dead-lettered).
   */
  take(waitMs: number, signal?: AbortSignal): Promise<Wakeup | undefined>;
  close(): Promise<void>;
}

/** The event that wakes a pool, and the application properties the outbox relay gives it (outbox-relay.service.ts). */
const WAKEUP: EventType = 'RunnerJobDispatched';

export interface PoolWakeupsOptions extends ServiceBusConnectionOptions {
  /** The agent's pool: a message on its subscription that is not this pool's wake-up is dead-lettered. */
  readonly pool: string;
  /** Example: `runtime-cloud-events`. */
  readonly topic: string;
  /** The pool's own subscription (infra/runners.ts: `runner-<pool name>`, filtered to its wake-ups). */
  readonly subscription: string;
  /** How long the SDK renews a taken wake-up's lock: as long as the agent may claim before it settles it. */
  readonly holdMs: number;
  readonly log: (line: string) => void;
}

/**
 * The pool's wake-ups from its subscription, with peek-lock, through the Service Bus SDK and the credential the
 * options give (in Azure the job's wake-up identity, which can receive from this subscription and nothing else).
 */
export function poolWakeups(options: PoolWakeupsOptions): Wakeups {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { RetryMode } = require('@azure/service-bus') as typeof import('@azure/service-bus');
  // The host's retries (a refused link, e.g. an identity without the role, is retried by the SDK too): the SDK's own
  // default waits 30 s between tries.
  const client = createServiceBusClient({ retryOptions: { mode: RetryMode.Exponential, ...DEFAULT_RETRY }, ...options });
  const receiver = client.createReceiver(options.topic, options.subscription, { receiveMode: 'peekLock', maxAutoLockRenewalDurationInMs: options.holdMs });
  const entity = `${options.topic}/Subscriptions/${options.subscription}`;
  return {
    async take(waitMs, signal) {
      let message: ServiceBusReceivedMessage | undefined;
      try {
        [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: waitMs, ...(signal ? { abortSignal: signal } : {}) });
      } catch (thrown) {
        // Stopping: no wake-up taken.
        if (signal?.aborted) return undefined;
        // After its retries the SDK throws them all at once, with no message of its own.
        const error = ensureError(thrown instanceof AggregateError ? thrown.errors.at(-1) : thrown);
        throw new AppError('RUNNER.WAKEUPS_UNAVAILABLE', 'unavailable', `could not take a wake-up from ${entity}: ${error.message}`);
      }
      if (!message) return undefined;
      const refused = refusal(message, options.pool);
      if (!refused) return { messageId: String(message.messageId), complete: () => receiver.completeMessage(message), abandon: () => receiver.abandonMessage(message) };
      // Not a wake-up of this pool (a filter or a sender gone wrong): kept aside with the reason, never retried.
      options.log(`dead-lettered message ${String(message.messageId)} of ${entity}: ${refused.description}`);
      await receiver.deadLetterMessage(message, { deadLetterReason: refused.reason, deadLetterErrorDescription: refused.description }).catch((error: unknown) => {
        options.log(`could not dead-letter message ${String(message.messageId)}: ${ensureError(error).message}`);
      });
      return undefined;
    },
    async close() {
      await receiver.close();
      await client.close();
    },
  };
}

/** Why a message on the pool's subscription is not one of its wake-ups; undefined when it is. */
function refusal(message: ServiceBusReceivedMessage, pool: string): { reason: string; description: string } | undefined {
  const { type, pool: of } = message.applicationProperties ?? {};
  if (type !== WAKEUP) return { reason: 'RUNNER.NOT_A_WAKEUP', description: `its type is ${JSON.stringify(type ?? null)}, not ${WAKEUP}` };
  if (of !== pool) return { reason: 'RUNNER.WAKEUP_OF_ANOTHER_POOL', description: `it wakes pool ${JSON.stringify(of ?? null)}, not ${pool}` };
  return undefined;
}
