import type { Kysely } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { Clock } from '../time/clock';
import type { BusTables } from './bus.tables';
import type { OutgoingMessage } from './queue';
import { announceArrival } from '../../../local/bus/arrivals';
import { appendToTopic } from '../../../local/bus/topic.repository';

/**
 * Port: hands messages to a topic. `publish` resolves only once the bus has accepted every message (the relay
 * marks outbox rows published after that), and it may be called again with the same messages after a crash:
 * adapters rely on messageId duplicate detection, so a republish is harmless.
 */
export interface EventPublisher {
  /** `embedded-topic` or `service-bus`. */
  readonly name: string;
  /**
   * The longest one `publish` call takes before it resolves or throws, every retry included: the relay's claim
   * outlasts it (outbox-relay.service.ts), so no second relay publishes a lane while this one may still send.
   */
  readonly publishBudgetMs: number;
  /**
   * Hands the messages over in order. When the bus refuses one for good (too large), throws `messageRefused` naming
   * it and how many before it were accepted; any other failure throws as it is, and the whole call may be retried.
   */
  publish(topic: string, messages: readonly OutgoingMessage[]): Promise<void>;
  close(): Promise<void>;
}

/**
 * The embedded topic's budget: one short transaction on the host's own store, with no retries. On SQLite it waits
 * for the write lock at most the busy timeout (10 s, database.ts); on PostgreSQL it inserts new keys only, which wait
 * only for another insert of the same messageId (a republish) to end.
 */
export const EMBEDDED_PUBLISH_BUDGET_MS = 20_000;

/** The local host's adapter: the embedded topic in the SQL store. */
export function embeddedTopicPublisher(db: Kysely<BusTables>, dialect: SqlDialect, clock: Clock): EventPublisher {
  return {
    name: 'embedded-topic',
    publishBudgetMs: EMBEDDED_PUBLISH_BUDGET_MS,
    async publish(topic, messages) {
      if (messages.length === 0) return;
      const added = await db.transaction().execute((trx) => appendToTopic(trx, dialect, topic, messages, clock.now().getTime()));
      if (added > 0) announceArrival(db, topic);
    },
    close: () => Promise.resolve(),
  };
}
