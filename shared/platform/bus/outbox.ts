import { createHash } from 'node:crypto';
import { sql, type Generated, type Kysely, type Migration, type Transaction } from 'kysely';
import type { Clock, Ids } from '../time/clock';
import { firstRows, type SqlDialect } from '../sql/dialect';
import { sqlTypes, withSeq, type MigrationSource } from '../sql/migrations';
import { afterCommit } from '../sql/transaction';
import { EVENT_SOURCE, EVENTS_TOPIC, type CloudEvent, type NewEvent } from './events';

/*
 * PUBLISH ORDER. The order the outbox keeps is per stream: the events of one run, promotion, scan, proposal or
 * lease (their correlation id, within their tenant), which is the order a consumer of one of them relies on. Events
 * of different streams may be published in any order. Each stream hashes to one of `OUTBOX_LANES` lanes; a writer
 * updates its lanes' rows before it inserts (holding them until it commits), so two writers of one lane commit in
 * the order of their `seq`; a relay claims lanes, not rows, and publishes a lane's committed rows in `seq` order,
 * one relay per lane at a time (outbox-relay.repository.ts). Hence within a lane, and so within a stream, publish
 * order = `seq` order = commit order. Streams that share a lane only share its order.
 */

/** Lanes the outbox's streams hash to: enough that unrelated writers rarely wait for each other. */
export const OUTBOX_LANES = 1024;

/** Row of `outbox`: one event awaiting publication, written in the transaction of the change that caused it. */
export interface OutboxTable {
  /** Insertion order; within a lane also commit order, and the order the lane is published in. */
  seq: Generated<number>;
  event_id: string;
  /** The lane of the event's stream (`laneOf`). */
  lane: number;
  topic: string;
  correlation_id: string | null;
  /** The CloudEvent JSON. */
  payload: string;
  created_at: number;
  /** Epoch ms when the relay handed it to the bus; null while pending. */
  published_at: number | null;
  attempts: number;
  last_error: string | null;
  /**
   * Epoch ms when the bus refused the event for good (too large even as a claim check) and the relay dead-lettered it
   * here instead, so the rest of its lane flows on; null otherwise. A dead-lettered row is never published.
   */
  dead_lettered_at: number | null;
  /** Why: the refusal's code and the bus's reason. */
  dead_letter_reason: string | null;
}

/** Row of `outbox_lanes`, one per lane, all made by the migration (so writers only ever update them). */
export interface OutboxLaneTable {
  lane: number;
  /** Epoch ms of the last append: the writers' update of this column is their hold on the lane until they commit. */
  appended_at: number;
  /** The relay run that publishes the lane now (outbox-relay.repository.ts); null when free. */
  claimed_by: string | null;
  /** Epoch ms when that claim lapses, so a crashed relay's lane is taken over. */
  claimed_until: number | null;
}

export interface OutboxTables {
  outbox: OutboxTable;
  outbox_lanes: OutboxLaneTable;
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
  const lanes: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('outbox').addColumn('lane', 'integer', (c) => c.notNull().defaultTo(0)).execute();
      // Events written before lanes existed never had an order across writers; any lane will do.
      await sql`update outbox set lane = seq % ${sql.lit(OUTBOX_LANES)}`.execute(db);
      await db.schema.createIndex('outbox_lane_pending').on('outbox').columns(['lane', 'published_at', 'seq']).execute();
      // The relay's claim moves from rows to lanes (bus.migrations.ts added these columns).
      await db.schema.alterTable('outbox').dropColumn('claimed_by').execute();
      await db.schema.alterTable('outbox').dropColumn('claimed_until').execute();
      await db.schema
        .createTable('outbox_lanes')
        .addColumn('lane', 'integer', (c) => c.primaryKey())
        .addColumn('appended_at', 'bigint', (c) => c.notNull())
        .addColumn('claimed_by', t.key)
        .addColumn('claimed_until', 'bigint')
        .execute();
      // Azure SQL takes at most 1000 rows per VALUES.
      for (let first = 0; first < OUTBOX_LANES; first += 512) {
        const values = Array.from({ length: Math.min(512, OUTBOX_LANES - first) }, (_, i) => ({ lane: first + i, appended_at: 0 }));
        await (db as Kysely<OutboxTables>).insertInto('outbox_lanes').values(values).execute();
      }
    },
  };
  const deadLetters: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('outbox').addColumn('dead_lettered_at', 'bigint').execute();
      await db.schema.alterTable('outbox').addColumn('dead_letter_reason', t.text).execute();
    },
  };
  const byCorrelation: Migration = {
    async up(db: Kysely<unknown>) {
      // A run's page lists the events published for it (eventsCorrelatedWith).
      await db.schema.createIndex('outbox_correlation').on('outbox').columns(['correlation_id', 'seq']).execute();
    },
  };
  return {
    '20261130-01-platform-outbox': migration,
    '20261203-01-platform-outbox-lanes': lanes,
    '20261206-20-platform-outbox-dead-letters': deadLetters,
    '20261207-01-platform-outbox-correlation': byCorrelation,
  };
};

/** An event as a reader of one correlation's events sees it (a run's page: what was published for the run). */
export interface CorrelatedEvent {
  readonly eventId: string;
  readonly type: string;
  readonly time: string;
  /** When the relay handed it to the bus; absent while it waits to be published. */
  readonly publishedAt?: string;
  /** When the bus refused it for good (it is never published). */
  readonly deadLetteredAt?: string;
}

/** The events written with this correlation id, in the order they were written (at most `limit`). */
export async function eventsCorrelatedWith(db: Kysely<OutboxTables>, dialect: SqlDialect, correlationId: string, limit: number): Promise<CorrelatedEvent[]> {
  const rows = await firstRows(
    db.selectFrom('outbox').select(['event_id', 'payload', 'published_at', 'dead_lettered_at']).where('correlation_id', '=', correlationId).orderBy('seq'),
    dialect,
    limit,
  ).execute();
  return rows.map((row) => {
    const event = JSON.parse(row.payload) as CloudEvent;
    return {
      eventId: row.event_id,
      type: event.type,
      time: event.time,
      ...(row.published_at !== null ? { publishedAt: new Date(Number(row.published_at)).toISOString() } : {}),
      ...(row.dead_lettered_at !== null ? { deadLetteredAt: new Date(Number(row.dead_lettered_at)).toISOString() } : {}),
    };
  });
}

/** The stream of an event (see PUBLISH ORDER): its tenant and correlation id, else the event alone. */
export function streamOf(event: CloudEvent): string {
  return event.correlationid !== undefined ? `${event.tenant ?? ''}/${event.correlationid}` : event.id;
}

/** The lane of a stream: the same on every host. */
export function laneOf(stream: string): number {
  return createHash('sha256').update(stream).digest().readUInt32BE(0) % OUTBOX_LANES;
}

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
 * that caused it committed. Its lanes are updated first, in lane order (the lock order's last step, transaction.ts),
 * which holds them until the commit: a second writer of a lane waits there and takes its `seq` after this one
 * committed. Once committed, the events are published at once where the host set that up (`publishAfterCommit`), else
 * by the relay's timer; at least once either way (messageId = event id, so a republish is dropped by the bus).
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
  const lanes = [...new Set(cloudEvents.map((e) => laneOf(streamOf(e))))].sort((a, b) => a - b);
  // One statement per lane, in lane order: a single UPDATE of an IN list locks its rows in whatever order the plan
  // visits them (a sequential scan: the physical order), which could deadlock with another writer.
  for (const lane of lanes) await trx.updateTable('outbox_lanes').set({ appended_at: now }).where('lane', '=', lane).execute();
  await trx
    .insertInto('outbox')
    .values(
      cloudEvents.map((e) => ({
        event_id: e.id,
        lane: laneOf(streamOf(e)),
        topic: EVENTS_TOPIC,
        correlation_id: e.correlationid ?? null,
        payload: JSON.stringify(e),
        created_at: now,
        published_at: null,
        attempts: 0,
        last_error: null,
        dead_lettered_at: null,
        dead_letter_reason: null,
      })),
    )
    .execute();
  afterCommit(trx, (db) => afterCommitPublishers.get(db)?.(lanes));
  return cloudEvents;
}

/** Per store (its Kysely instance): what publishes the lanes a transaction appended to, right after it commits. */
const afterCommitPublishers = new WeakMap<object, (lanes: readonly number[]) => Promise<void>>();

/**
 * Makes every transaction on `db` (run by `inTransaction`) that appends events publish them right after it commits:
 * `publish` gets the lanes appended to. The relay's timer stays the fallback for whatever that misses. Returns the undo.
 * Example: `publishAfterCommit(store.db, (lanes) => relayOutbox(db, publisher, { ...options, lanes }).then(() => undefined))`.
 */
export function publishAfterCommit(db: object, publish: (lanes: readonly number[]) => Promise<void>): () => void {
  afterCommitPublishers.set(db, publish);
  return () => afterCommitPublishers.delete(db);
}
