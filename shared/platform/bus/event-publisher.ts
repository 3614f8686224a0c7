import type { Kysely } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { Clock } from '../time/clock';
import type { BusTables } from './bus.tables';
import type { OutgoingMessage } from './queue';
import { appendToTopic } from './topic.repository';

/**
 * Port: hands messages to a topic. `publish` resolves only once the bus has accepted every message (the relay
 * marks outbox rows published after that), and it may be called again with the same messages after a crash:
 * adapters rely on messageId duplicate detection, so a republish is harmless.
 */
export interface EventPublisher {
  /** `embedded-topic` or `service-bus`. */
  readonly name: string;
  publish(topic: string, messages: readonly OutgoingMessage[]): Promise<void>;
  close(): Promise<void>;
}

/** The local host's adapter: the embedded topic in the SQL store. */
export function embeddedTopicPublisher(db: Kysely<BusTables>, dialect: SqlDialect, clock: Clock): EventPublisher {
  return {
    name: 'embedded-topic',
    async publish(topic, messages) {
      if (messages.length === 0) return;
      await db.transaction().execute((trx) => appendToTopic(trx, dialect, topic, messages, clock.now().getTime()));
    },
    close: () => Promise.resolve(),
  };
}
