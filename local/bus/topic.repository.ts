import type { Kysely, Transaction } from 'kysely';
import { firstRows, upsertRow, type SqlDialect } from '../../shared/platform/sql/dialect';
import type { BusTables, TopicMessageTable, TopicSubscriptionTable } from '../../shared/platform/bus/bus.tables';
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
 * Appends messages in the given order; a messageId the topic already holds is dropped. Each new message is also
 * copied to every subscription of the topic, as a Service Bus topic does: a subscription is a queue of its own
 * (entity `<topic>/Subscriptions/<name>`) that receivers take messages from with peek-lock. Returns how many were new.
 */
export async function appendToTopic(db: Db, dialect: SqlDialect, topic: string, messages: readonly OutgoingMessage[], now: number): Promise<number> {
  const subscriptions = await db.selectFrom('topic_subscriptions').select('subscription').where('topic', '=', topic).orderBy('subscription').execute();
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

/** Messages of a topic after a sequence number, oldest first. */
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
