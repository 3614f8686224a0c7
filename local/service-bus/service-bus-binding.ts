import { faultLevel } from '../../shared/platform/sql/transaction';
import type { InvocationContexts } from '../functions-core/invocation-contexts';
import type { InvocationContext } from '@azure/functions';
import type { Kysely } from 'kysely';
import { randomUUID } from 'node:crypto';
import { onArrival } from '../bus/arrivals';
import { busDb } from '../../shared/platform/bus/bus-db';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { bodyForHandler, QUEUE_DEFAULTS, type ReceivedMessage } from '../../shared/platform/bus/queue';
import { abandon, complete, receive, release, renewLock } from '../bus/queue.repository';
import { ensureSubscription, subscriptionEntity } from '../bus/topic.repository';
import { ensureError } from '../../shared/platform/errors/app-error';
import type { SqlDialect } from '../../shared/platform/sql/dialect';
import type { Clock } from '../../shared/platform/time/clock';
import { triggerOf, type Registration } from '../functions-core/registry';
import type { HostComponent, HostContext } from '../host';
import { hostJsonCount, hostJsonSetting } from '../host-json';
import type { LogHandler } from '../http/http-binding';
import { ConcurrencyLevel, EventLoopHealth, type DynamicConcurrencyOptions } from './dynamic-concurrency';

export interface ServiceBusBindingOptions {
  /** Deliveries before a message is dead-lettered (`MaxDeliveryCountExceeded`). Example: `10` (the default). */
  readonly maxDeliveryCount?: number;
  /** Peek-lock duration; the binding renews the lock while a handler runs. Example: `60000`. */
  readonly lockDurationMs?: number;
  /** How long an idle receiver waits before looking again. Example: `250`. */
  readonly pollIntervalMs?: number;
  /** Handlers running at once per function; default host.json `extensions.serviceBus.maxConcurrentCalls` or 16. */
  readonly maxConcurrentCalls?: number;
  /**
   * Dynamic concurrency (see dynamic-concurrency.ts), up to `maxConcurrentCalls`: on by default when host.json sets
   * `concurrency.dynamicConcurrencyEnabled`; `false` turns it off, an object sets its thresholds.
   */
  readonly dynamicConcurrency?: boolean | DynamicConcurrencyOptions;
}

/**
 * Binds `serviceBusTrigger` functions (`app.serviceBusQueue`, `app.serviceBusTopic`) to the embedded queues and
 * topic subscriptions in the SQL store, as the Service Bus extension binds them: peek-lock receive, the handler gets
 * the body (JSON parsed) and a real InvocationContext with the extension's trigger metadata; success completes the
 * message, a throw abandons it (redelivered with a higher delivery count) until the max delivery count dead-letters it.
 * `connection` and `isSessionsEnabled` are ignored: there is one embedded namespace and no sessions.
 */
export class ServiceBusBinding implements HostComponent {
  readonly name = 'service-bus';
  readonly #options: ServiceBusBindingOptions;
  #receivers: QueueReceiver[] = [];

  constructor(options: ServiceBusBindingOptions = {}) {
    this.#options = options;
  }

  async start(context: HostContext): Promise<void> {
    const settings: ReceiverSettings = {
      maxDeliveryCount: this.#options.maxDeliveryCount ?? QUEUE_DEFAULTS.maxDeliveryCount,
      lockDurationMs: this.#options.lockDurationMs ?? context.config.local.queueLockMs,
      pollIntervalMs: this.#options.pollIntervalMs ?? 250,
      maxConcurrentCalls: this.#options.maxConcurrentCalls ?? hostJsonCount('extensions', 'serviceBus', 'maxConcurrentCalls') ?? 16,
    };
    const dynamic = this.#options.dynamicConcurrency ?? hostJsonSetting('concurrency', 'dynamicConcurrencyEnabled') === true;
    const health = dynamic ? new EventLoopHealth(typeof dynamic === 'object' ? dynamic : {}) : undefined;
    const db = busDb(context.deps.sql.db);
    for (const registration of context.functionsWithTrigger('serviceBusTrigger')) {
      const entity = entityOf(registration);
      // A topic trigger reads its subscription, which exists from now on: messages published before are not in it.
      if (entity.subscription) await ensureSubscription(db, context.deps.sql.dialect, entity.subscription.topic, entity.subscription.name, context.deps.clock.now().getTime());
      const level = health ? new ConcurrencyLevel(health, settings.maxConcurrentCalls) : undefined;
      const receiver = new QueueReceiver(registration, entity.path, db, context.deps.sql.dialect, context.deps.clock, { ...settings, level }, context.log, context.invocations);
      this.#receivers.push(receiver);
    }
  }

  /** Receiving begins once the host listens: a handler's durable client carries the host's URL. */
  listening(): Promise<void> {
    for (const receiver of this.#receivers) receiver.start();
    return Promise.resolve();
  }

  /** Stops receiving, lets running handlers finish (and settle), gives back what was received but not started. */
  async stop(): Promise<void> {
    await Promise.all(this.#receivers.map((r) => r.stop()));
    this.#receivers = [];
  }
}

interface ReceiverSettings {
  readonly maxDeliveryCount: number;
  readonly lockDurationMs: number;
  readonly pollIntervalMs: number;
  readonly maxConcurrentCalls: number;
  /** The function's dynamic concurrency level; absent: always up to `maxConcurrentCalls`. */
  readonly level?: ConcurrencyLevel;
}

type QueueHandler = (message: unknown, context: InvocationContext) => unknown;

class QueueReceiver {
  readonly #registration: Registration;
  readonly #invocations: InvocationContexts;
  readonly #queue: string;
  readonly #db: Kysely<BusTables>;
  readonly #dialect: SqlDialect;
  readonly #clock: Clock;
  readonly #settings: ReceiverSettings;
  readonly #log: LogHandler;
  readonly #inFlight = new Set<Promise<void>>();
  #stopped = false;
  #loop: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  /** Messages arrived on the entity since the last look (arrivals.ts): the next sleep is skipped. */
  #arrived = false;
  #stopListening: (() => void) | undefined;

  constructor(
    registration: Registration,
    entityPath: string,
    db: Kysely<BusTables>,
    dialect: SqlDialect,
    clock: Clock,
    settings: ReceiverSettings,
    log: LogHandler,
    invocations: InvocationContexts,
  ) {
    this.#registration = registration;
    this.#invocations = invocations;
    this.#queue = entityPath;
    this.#db = db;
    this.#dialect = dialect;
    this.#clock = clock;
    this.#settings = settings;
    this.#log = log;
  }

  get name(): string {
    return this.#registration.metadata.name;
  }

  start(): void {
    // Messages enqueued or published in this process wake the receiver at once; the poll finds the others.
    this.#stopListening = onArrival(this.#db, (entity) => {
      if (entity !== this.#queue && !this.#queue.startsWith(`${entity}/Subscriptions/`)) return;
      this.#arrived = true;
      this.#wake?.();
    });
    this.#loop = this.#run();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#stopListening?.();
    this.#wake?.();
    await this.#loop;
    await Promise.allSettled([...this.#inFlight]);
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const { level } = this.#settings;
      const free = level ? level.fetchCount(this.#inFlight.size) : this.#settings.maxConcurrentCalls - this.#inFlight.size;
      let received: ReceivedMessage[] = [];
      if (free > 0) {
        try {
          received = await receive(this.#db, this.#dialect, this.#queue, {
            now: this.#clock.now().getTime(),
            max: free,
            lockDurationMs: this.#settings.lockDurationMs,
            maxDeliveryCount: this.#settings.maxDeliveryCount,
            newLockToken: randomUUID,
          });
        } catch (thrown) {
          this.#log(faultLevel(ensureError(thrown)), this.name, `receiving from ${this.#queue} failed`, ensureError(thrown));
        }
        level?.fetched(received.length, this.#inFlight.size);
      }
      for (const message of received) {
        if (this.#stopped) {
          await this.#settle('release', () => release(this.#db, message));
          continue;
        }
        const work = this.#deliver(message);
        this.#inFlight.add(work);
        void work.finally(() => {
          this.#inFlight.delete(work);
          this.#wake?.();
        });
      }
      // A full batch means more may be waiting: look again at once (as long as a handler slot is free).
      if (free === 0 && level) await this.#sleep(level.retryMs);
      else if (received.length === 0 || received.length >= free) await this.#sleep();
    }
  }

  #sleep(ms = this.#settings.pollIntervalMs): Promise<void> {
    if (this.#arrived) {
      this.#arrived = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        this.#arrived = false;
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wake = done;
    });
  }

  async #deliver(message: ReceivedMessage): Promise<void> {
    const name = this.name;
    const context = this.#invocations.create(this.#registration, {
      invocationId: randomUUID(),
      logHandler: (level, ...args) => this.#log(level, name, ...args),
      triggerMetadata: triggerMetadataOf(message),
    });
    // Keep the lock while the handler runs (the extension's auto lock renewal), so no other receiver takes the message.
    const renewal = setInterval(() => {
      void this.#settle('renew lock', () =>
        renewLock(this.#db, message, { now: this.#clock.now().getTime(), lockDurationMs: this.#settings.lockDurationMs }),
      );
    }, Math.max(50, Math.floor(this.#settings.lockDurationMs / 2)));
    let failure: Error | undefined;
    try {
      await (this.#registration.callback as unknown as QueueHandler)(bodyForHandler(message), context);
    } catch (thrown) {
      failure = ensureError(thrown);
    } finally {
      clearInterval(renewal);
    }
    if (!failure) {
      await this.#settle('complete', () => complete(this.#db, message));
      return;
    }
    this.#log('warning', name, `message ${message.messageId} failed (delivery ${message.deliveryCount}): ${failure.message}`);
    await this.#settle('abandon', async () => {
      const outcome = await abandon(this.#db, message, {
        now: this.#clock.now().getTime(),
        maxDeliveryCount: this.#settings.maxDeliveryCount,
      });
      if (outcome === 'deadlettered') this.#log('warning', name, `message ${message.messageId} dead-lettered: MaxDeliveryCountExceeded`);
      return outcome !== 'lock-lost';
    });
  }

  /** A settlement that fails (lock lost, store busy) leaves the lock to lapse; the message is then redelivered. */
  async #settle(what: string, action: () => Promise<unknown>): Promise<void> {
    try {
      const ok = await action();
      if (ok === false) this.#log('warning', this.name, `${what} on ${this.#queue}: the message lock was lost`);
    } catch (thrown) {
      this.#log(faultLevel(ensureError(thrown)), this.name, `${what} on ${this.#queue} failed`, ensureError(thrown));
    }
  }
}

/**
 * What a `serviceBusTrigger` reads: a queue (`app.serviceBusQueue`: `queueName`) or a topic subscription
 * (`app.serviceBusTopic`: `topicName` and `subscriptionName`, read from the entity `<topic>/Subscriptions/<name>`).
 */
function entityOf(registration: Registration): { readonly path: string; readonly subscription?: { readonly topic: string; readonly name: string } } {
  const trigger = triggerOf(registration);
  if (typeof trigger.queueName === 'string') return { path: trigger.queueName };
  if (typeof trigger.topicName === 'string' && typeof trigger.subscriptionName === 'string') {
    return { path: subscriptionEntity(trigger.topicName, trigger.subscriptionName), subscription: { topic: trigger.topicName, name: trigger.subscriptionName } };
  }
  throw new Error(`function ${registration.metadata.name} names neither a queueName nor a topicName and subscriptionName`);
}

/**
 * The trigger metadata the Service Bus extension gives a Node function (its binding contract, camel-cased by
 * @azure/functions): message properties, delivery state and the application properties (also as `userProperties`,
 * the older name).
 */
export function triggerMetadataOf(message: ReceivedMessage): Record<string, unknown> {
  return {
    messageId: message.messageId,
    deliveryCount: message.deliveryCount,
    enqueuedTimeUtc: message.enqueuedAt.toISOString(),
    enqueuedTime: message.enqueuedAt.toISOString(),
    expiresAtUtc: '9999-12-31T23:59:59.999Z',
    lockedUntilUtc: message.lockedUntil.toISOString(),
    lockToken: message.lockToken,
    sequenceNumber: message.sequenceNumber,
    contentType: message.contentType,
    correlationId: message.correlationId,
    subject: message.subject,
    label: message.subject,
    replyTo: null,
    to: null,
    sessionId: null,
    applicationProperties: { ...message.applicationProperties },
    userProperties: { ...message.applicationProperties },
  };
}
