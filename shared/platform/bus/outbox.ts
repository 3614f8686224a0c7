import type { Generated, Kysely, Migration, Transaction } from 'kysely';
import type { Clock, Ids } from '../time/clock';
import { sqlTypes, withSeq, type MigrationSource } from '../sql/migrations';
import { EVENT_SOURCE, EVENTS_TOPIC, type CloudEvent, type NewEvent } from './events';

/** Row of `outbox`: one event awaiting publication, written in the transaction of the change that caused it. */
export interface OutboxTable {
  /** Insertion order; the relay publishes in this order. */
  seq: Generated<number>;
  event_id: string;
  topic: string;
  correlation_id: string | null;
  /** The CloudEvent JSON. */
  payload: string;
  created_at: number;
  /** Epoch ms when the relay handed it to the bus; null while pending. */
  published_at: number | null;
  attempts: number;
  last_error: string | null;
  /** The relay batch that holds this row while publishing it (see outbox-relay.repository.ts); null when free. */
  claimed_by?: string | null;
  /** Epoch ms when that claim lapses, so a crashed relay's rows are taken over. */
  claimed_until?: number | null;
}

export interface OutboxTables {
  outbox: OutboxTable;
}

export const outboxMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const migration: Migration = {
    async up(db: Kysely<unknown>) {
      await withSeq(db.schema.createTable('outbox'), dialect)
        .addColumn('event_id', t.key, (c) => c.notNull().unique())
        .addColumn('topic', t.key, (c) => c.notNull())
        .addColumn('correlation_id', t.key)
        .addColumn('payload', t.text, (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('published_at', 'bigint')
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('last_error', t.text)
        .execute();
      await db.schema.createIndex('outbox_pending').on('outbox').columns(['published_at', 'seq']).execute();
    },
  };
  return { '20261130-01-platform-outbox': migration };
};

export function toCloudEvent(event: NewEvent, clock: Clock, ids: Ids): CloudEvent {
  return {
    specversion: '1.0',
    id: ids.next('evt'),
    source: EVENT_SOURCE,
    type: event.type,
    ...(event.subject !== undefined ? { subject: event.subject } : {}),
    time: clock.now().toISOString(),
    datacontenttype: 'application/json',
    ...(event.correlationId !== undefined ? { correlationid: event.correlationId } : {}),
    ...(event.tenant !== undefined ? { tenant: event.tenant } : {}),
    data: { ...event.data },
  };
}

/**
 * Records events in the outbox inside the caller's transaction, so an event exists exactly when the state change
 * that caused it committed. The relay publishes them afterwards (at least once; consumers dedupe by id).
 */
export async function appendToOutbox(
  trx: Transaction<OutboxTables> | Kysely<OutboxTables>,
  events: readonly NewEvent[],
  clock: Clock,
  ids: Ids,
): Promise<CloudEvent[]> {
  if (events.length === 0) return [];
  const cloudEvents = events.map((e) => toCloudEvent(e, clock, ids));
  const now = clock.now().getTime();
  await trx
    .insertInto('outbox')
    .values(
      cloudEvents.map((e) => ({
        event_id: e.id,
        topic: EVENTS_TOPIC,
        correlation_id: e.correlationid ?? null,
        payload: JSON.stringify(e),
        created_at: now,
        published_at: null,
        attempts: 0,
        last_error: null,
      })),
    )
    .execute();
  return cloudEvents;
}
