import type { Kysely, Transaction } from 'kysely';
import { firstRows, upsertRow, type SqlDialect } from '../../shared/platform/sql/dialect';
import type { BusTables, TopicHeadTable, TopicMessageTable, TopicSubscriptionTable } from '../../shared/platform/bus/bus.tables';
import type { ApplicationProperties, OutgoingMessage } from '../../shared/platform/bus/queue';
import { subscriptionTakes } from './subscriptions';
import { insertActive, storedMessageColumns } from './queue.repository';

/** The embedded topic (the local host's `runtime-cloud-events`): published messages in order, deduplicated by messageId. */
type Db = Kysely<BusTables> | Transaction<BusTables>;

export interface TopicMessage {
  readonly sequenceNumber: number;
  readonly topic: string;
  readonly messageId: string;
  readonly correlationId: string | null;
  readonly contentType: string | null;
  readonly subject: string | null;
  readonly applicationProperties: ApplicationProperties;
  readonly body: string;
  readonly enqueuedAt: Date;
}

/**
 * READING BY SEQUENCE. Readers page through a topic by sequence number (`readTopic` after the last one read), so no
 * message may become visible after one with a higher number. The number is taken when the row is inserted and the
 * row is seen when its transaction commits: two publishers on PostgreSQL (or Azure SQL, read committed snapshot) can
 * commit out of order, and a reader between the two commits would pass the lower number for good. So each publish
 * locks its topic's row of `topic_heads` (an upsert) before it inserts, and holds it until it commits: the next
 * publish to the topic takes its numbers only once this one is visible, so a reader that sees a number sees every
 * lower one. SQLite, one writer at a time, gets this anyway. Preferred to reading only rows of transactions below
 * `pg_snapshot_xmin` (the outbox-ordering trick), which is PostgreSQL's alone, orders by commit rather than by the
 * number the cursor names, and holds readers back behind any long transaction in the database; the price here is
 * that publishes to one topic do not overlap, and each is one short transaction (embedded-bus.ts): measured on
 * PostgreSQL with 8 publishing connections, about 220 one-message publishes/s against 870 overlapping, where a run
 * publishes a few, so well above the local host's runs/s.
 */

/**
 * Appends messages in the given order; a messageId the topic already holds is dropped. Each new message is also
 * copied to every subscription of the topic, as a Service Bus topic does: a subscription is a queue of its own
 * (entity `<topic>/Subscriptions/<name>`) that receivers take messages from with peek-lock. Returns how many were new.
 * Runs in the caller's transaction, or in one of its own: the topic's head stays locked until it commits.
 */
export async function appendToTopic(db: Db, dialect: SqlDialect, topic: string, messages: readonly OutgoingMessage[], now: number): Promise<number> {
  if (messages.length === 0) return 0;
  if (!db.isTransaction) return db.transaction().execute((trx) => appendToTopic(trx, dialect, topic, messages, now));
  const subscriptions = await db.selectFrom('topic_subscriptions').select('subscription').where('topic', '=', topic).orderBy('subscription').execute();
  await upsertRow<TopicHeadTable>(db, dialect, 'topic_heads', { values: { topic, published_at: now }, key: ['topic'], update: { published_at: now } });
  let added = 0;
  // One row at a time keeps the sequence order equal to the given order on every dialect.
  for (const message of messages) {
    const inserted = await upsertRow<TopicMessageTable>(db, dialect, 'topic_messages', { values: { topic, ...storedMessageColumns(message, now) }, key: ['topic', 'message_id'] });
    if (inserted !== 1) continue;
    added++;
    for (const { subscription } of subscriptions) {
      if (subscriptionTakes(topic, subscription, message)) await insertActive(db, dialect, subscriptionEntity(topic, subscription), message, now);
    }
  }
  return added;
}

/** The entity path of a topic subscription, as Service Bus names it; receivers read it like a queue. */
export function subscriptionEntity(topic: string, subscription: string): string {
  return `${topic}/Subscriptions/${subscription}`;
}

/**
 * Creates a subscription of a topic (nothing when it exists): from then on every message published to the topic that
 * its filter passes (subscriptions.ts) is copied to it. Messages published before are not, as with Service Bus.
 */
export async function ensureSubscription(db: Db, dialect: SqlDialect, topic: string, subscription: string, now: number): Promise<void> {
  await upsertRow<TopicSubscriptionTable>(db, dialect, 'topic_subscriptions', { values: { topic, subscription, created_at: now }, key: ['topic', 'subscription'] });
}

/** Messages of a topic after a sequence number, oldest first; none can appear later below the last (READING BY SEQUENCE). */
export async function readTopic(db: Db, dialect: SqlDialect, topic: string, page: { readonly after?: number; readonly limit: number }): Promise<TopicMessage[]> {
  const rows = await firstRows(
    db.selectFrom('topic_messages').selectAll().where('topic', '=', topic).where('seq', '>', page.after ?? 0).orderBy('seq'),
    dialect,
    page.limit,
  ).execute();
  return rows.map((row) => ({
    sequenceNumber: Number(row.seq),
    topic: row.topic,
    messageId: row.message_id,
    correlationId: row.correlation_id,
    contentType: row.content_type,
    subject: row.subject,
    applicationProperties: JSON.parse(row.application_properties) as ApplicationProperties,
    body: row.body,
    enqueuedAt: new Date(Number(row.enqueued_at)),
  }));
}
