import type { CreateTableBuilder, Kysely, Migration } from 'kysely';
import { sqlTypes, withSeq, type MigrationSource } from '../sql/migrations';

/** The columns every stored message has (StoredMessageColumns), after the sequence and the entity name. */
function withMessageColumns<C extends string>(table: CreateTableBuilder<string, C>, t: ReturnType<typeof sqlTypes>) {
  return table
    .addColumn('message_id', t.key, (c) => c.notNull())
    .addColumn('correlation_id', t.key)
    .addColumn('content_type', t.key)
    .addColumn('subject', t.key)
    .addColumn('application_properties', t.text, (c) => c.notNull())
    .addColumn('body', t.text, (c) => c.notNull())
    .addColumn('enqueued_at', 'bigint', (c) => c.notNull());
}

/** The embedded queue, topic and topic subscriptions (local host), the inbox, and the relay's claim on outbox rows (since 20261203-01 on lanes instead: outbox.ts). */
export const busMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const queue: Migration = {
    async up(db: Kysely<unknown>) {
      await withMessageColumns(withSeq(db.schema.createTable('queue_messages'), dialect).addColumn('queue', t.key, (c) => c.notNull()), t)
        .addColumn('delivery_count', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('lock_token', t.key)
        .addColumn('locked_until', 'bigint')
        .addColumn('state', t.key, (c) => c.notNull())
        .addColumn('dead_letter_reason', t.key)
        .addColumn('dead_letter_description', t.text)
        .addColumn('dead_lettered_at', 'bigint')
        .execute();
      // Receivers scan a queue's active messages in sequence order.
      await db.schema.createIndex('queue_messages_receive').on('queue_messages').columns(['queue', 'state', 'seq']).execute();
      await db.schema
        .createTable('queue_message_ids')
        .addColumn('queue', t.key, (c) => c.notNull())
        .addColumn('message_id', t.key, (c) => c.notNull())
        .addColumn('accepted_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('queue_message_ids_pk', ['queue', 'message_id'])
        .execute();
    },
  };
  const topic: Migration = {
    async up(db: Kysely<unknown>) {
      await withMessageColumns(withSeq(db.schema.createTable('topic_messages'), dialect).addColumn('topic', t.key, (c) => c.notNull()), t)
        // Duplicate detection by messageId, as on a Service Bus topic: a relay that republishes after a crash is harmless.
        .addUniqueConstraint('topic_messages_message_id', ['topic', 'message_id'])
        .execute();
    },
  };
  const inbox: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('inbox')
        .addColumn('module', t.key, (c) => c.notNull())
        .addColumn('message_id', t.key, (c) => c.notNull())
        .addColumn('business_key', t.key, (c) => c.notNull())
        .addColumn('received_at', 'bigint', (c) => c.notNull())
        .addColumn('processed_at', 'bigint')
        .addColumn('outcome', t.key)
        .addPrimaryKeyConstraint('inbox_pk', ['module', 'message_id'])
        .execute();
      await db.schema.createIndex('inbox_business_key').on('inbox').columns(['module', 'business_key']).execute();
      await db.schema.createIndex('inbox_unprocessed').on('inbox').columns(['module', 'processed_at', 'received_at']).execute();
    },
  };
  const outboxClaims: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('outbox').addColumn('claimed_by', t.key).execute();
      await db.schema.alterTable('outbox').addColumn('claimed_until', 'bigint').execute();
    },
  };
  const subscriptions: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('topic_subscriptions')
        .addColumn('topic', t.key, (c) => c.notNull())
        .addColumn('subscription', t.key, (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('topic_subscriptions_pk', ['topic', 'subscription'])
        .execute();
    },
  };
  const topicHeads: Migration = {
    async up(db: Kysely<unknown>) {
      // One row per topic, locked by each publish until it commits (topic.repository.ts, READING BY SEQUENCE).
      await db.schema
        .createTable('topic_heads')
        .addColumn('topic', t.key, (c) => c.notNull().primaryKey())
        .addColumn('published_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  };
  return {
    '20261130-02-platform-bus-queue': queue,
    '20261130-03-platform-bus-topic': topic,
    '20261130-04-platform-inbox': inbox,
    '20261130-05-platform-outbox-claims': outboxClaims,
    '20261201-06-platform-bus-topic-subscriptions': subscriptions,
    '20261206-40-platform-bus-topic-heads': topicHeads,
  };
};
