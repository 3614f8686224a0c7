import type { Generated } from 'kysely';

/**
 * Rows of the embedded bus (the local host's stand-in for Service Bus) and of the inbox. Times are epoch
 * milliseconds. Row types never leave the repositories.
 */

/** The columns every stored message has, on a queue or on the topic. */
export interface StoredMessageColumns {
  /** The message's sequence number (enqueue order). */
  seq: Generated<number>;
  message_id: string;
  correlation_id: string | null;
  content_type: string | null;
  subject: string | null;
  /** JSON object of the application properties. */
  application_properties: string;
  /** The body as sent (JSON text for JSON bodies). */
  body: string;
  enqueued_at: number;
}

/** Row of `queue_messages`: one message of an embedded queue, active or dead-lettered. Completed ones are deleted. */
export interface QueueMessageTable extends StoredMessageColumns {
  queue: string;
  delivery_count: number;
  /** Peek-lock: the current lock's token, and until when it holds; both null when the message is available. */
  lock_token: string | null;
  locked_until: number | null;
  /** `active` or `deadlettered`. */
  state: string;
  dead_letter_reason: string | null;
  dead_letter_description: string | null;
  dead_lettered_at: number | null;
}

/** Row of `queue_message_ids`: duplicate detection, one row per (queue, messageId) last accepted. */
export interface QueueMessageIdTable {
  queue: string;
  message_id: string;
  accepted_at: number;
}

/** Row of `topic_messages`: the embedded topic, outbound events in publication order. */
export interface TopicMessageTable extends StoredMessageColumns {
  topic: string;
}

/**
 * Row of `topic_heads`: one per topic that has been published to. Each publish locks its topic's row before it
 * takes sequence numbers and holds it until it commits (topic.repository.ts, READING BY SEQUENCE).
 */
export interface TopicHeadTable {
  topic: string;
  /** When the last publish to the topic took the head; what matters is the lock the update takes. */
  published_at: number;
}

/** Row of `topic_subscriptions`: a subscription of an embedded topic; published messages are copied to it. */
export interface TopicSubscriptionTable {
  topic: string;
  subscription: string;
  created_at: number;
}

/** Row of `inbox`: an inbound message recorded before the module acts on it. */
export interface InboxTable {
  module: string;
  message_id: string;
  business_key: string;
  received_at: number;
  processed_at: number | null;
  /** What the module did (`applied`, `rejected`, `duplicate-business-key`, …); null while unprocessed. */
  outcome: string | null;
}

export interface BusTables {
  queue_messages: QueueMessageTable;
  queue_message_ids: QueueMessageIdTable;
  topic_messages: TopicMessageTable;
  topic_subscriptions: TopicSubscriptionTable;
  topic_heads: TopicHeadTable;
  inbox: InboxTable;
}
