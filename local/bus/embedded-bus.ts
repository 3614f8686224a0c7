import type { Kysely } from 'kysely';
import { MODULE_QUEUES, type InboxLagReader } from '../../shared/platform/bus/bus.health';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { inboxLag } from '../../shared/platform/bus/inbox.repository';
import type { SqlDialect } from '../../shared/platform/sql/dialect';
import type { Clock } from '../../shared/platform/time/clock';
import { announceArrival } from './arrivals';
import { oldestActive } from './queue.repository';
import { appendToTopic } from './topic.repository';

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

/** The local host's reader: inbox and embedded queues, both in the SQL store. */
export function sqlInboxLag(db: Kysely<BusTables>, clock: Clock): InboxLagReader {
  return {
    source: 'sql-store',
    read: (modules) => inboxLag(db, modules, MODULE_QUEUES, clock.now().getTime(), (queues) => oldestActive(db, queues)),
    close: async () => undefined,
  };
}
