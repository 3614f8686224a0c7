import type { Kysely, Transaction } from 'kysely';
import type { BusTables } from './bus.tables';
import type { ApplicationProperties, OutgoingMessage } from './queue';
import { storedMessageColumns } from './queue.repository';

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

/** Appends messages in the given order; a messageId the topic already holds is dropped. Returns how many were new. */
export async function appendToTopic(db: Db, topic: string, messages: readonly OutgoingMessage[], now: number): Promise<number> {
  let added = 0;
  // One row at a time keeps the sequence order equal to the given order on every dialect.
  for (const message of messages) {
    const result = await db
      .insertInto('topic_messages')
      .values({ topic, ...storedMessageColumns(message, now) })
      .onConflict((oc) => oc.columns(['topic', 'message_id']).doNothing())
      .executeTakeFirst();
    added += Number(result.numInsertedOrUpdatedRows ?? 0);
  }
  return added;
}

/** Messages of a topic after a sequence number, oldest first. */
export async function readTopic(db: Db, topic: string, page: { readonly after?: number; readonly limit: number }): Promise<TopicMessage[]> {
  const rows = await db
    .selectFrom('topic_messages')
    .selectAll()
    .where('topic', '=', topic)
    .where('seq', '>', page.after ?? 0)
    .orderBy('seq')
    .limit(page.limit)
    .execute();
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
