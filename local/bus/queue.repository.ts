import type { ExpressionBuilder, Insertable, Kysely, Selectable, Transaction } from 'kysely';
import { firstRows, returningColumns, upsertRow, type SqlDialect } from '../../shared/platform/sql/dialect';
import type { BusTables, QueueMessageIdTable, QueueMessageTable, StoredMessageColumns } from '../../shared/platform/bus/bus.tables';
import { announceArrival } from './arrivals';
import {
  exhaustedDeliveries,
  MAX_DELIVERY_COUNT_EXCEEDED,
  type ApplicationProperties,
  type EnqueueResult,
  type OutgoingMessage,
  type QueuedMessage,
  type ReceivedMessage,
} from '../../shared/platform/bus/queue';

/**
 * The embedded durable queue (the local host's Service Bus queue) in the SQL store. Peek-lock: receiving locks a
 * message to one receiver with a token until `locked_until`; complete deletes it, abandon unlocks it (or
 * dead-letters it once its deliveries are exhausted), and a lapsed lock makes it receivable again. Every state
 * change is one conditional UPDATE on the message row, so several receivers (several local hosts on one
 * PostgreSQL) never hold the same message: the database serialises the updates and re-checks the condition.
 */
type Db = Kysely<BusTables> | Transaction<BusTables>;

const ACTIVE = 'active';
const DEAD_LETTERED = 'deadlettered';

export interface EnqueueOptions {
  /** Epoch ms. */
  readonly now: number;
  /** How long a messageId is remembered. Example: `600000` (ten minutes, as Service Bus). */
  readonly duplicateDetectionWindowMs: number;
}

/** The stored form of an outgoing message's common columns (queue and topic rows alike). */
export function storedMessageColumns(message: OutgoingMessage, now: number): Omit<Insertable<StoredMessageColumns>, 'seq'> {
  return {
    message_id: message.messageId,
    correlation_id: message.correlationId ?? null,
    content_type: message.contentType ?? null,
    subject: message.subject ?? null,
    application_properties: JSON.stringify(message.applicationProperties ?? {}),
    body: message.body,
    enqueued_at: now,
  };
}

/** Adds a message unless a message with the same id was accepted on this queue within the detection window. */
export async function enqueue(db: Kysely<BusTables>, dialect: SqlDialect, queue: string, message: OutgoingMessage, options: EnqueueOptions): Promise<EnqueueResult> {
  const result = await db.transaction().execute(async (trx) => {
    // The id is accepted (again) unless it was accepted within the window: then nothing is set, and it is a duplicate.
    const accepted = await upsertRow<QueueMessageIdTable>(trx, dialect, 'queue_message_ids', {
      values: { queue, message_id: message.messageId, accepted_at: options.now },
      key: ['queue', 'message_id'],
      update: { accepted_at: options.now },
      updateWhen: ['accepted_at', '<=', options.now - options.duplicateDetectionWindowMs],
    });
    if (accepted === 0) return { kind: 'duplicate' } as const;
    return { kind: 'enqueued', sequenceNumber: await insertActive(trx, dialect, queue, message, options.now) } as const;
  });
  if (result.kind === 'enqueued') announceArrival(db, queue);
  return result;
}

/**
 * Adds an active message to a queue (or a topic subscription) in the caller's transaction, without duplicate
 * detection: for copies of a message the topic has already deduplicated. Returns its sequence number.
 */
export async function insertActive(db: Db, dialect: SqlDialect, queue: string, message: OutgoingMessage, now: number): Promise<number> {
  const insert = db.insertInto('queue_messages').values({
    queue,
    ...storedMessageColumns(message, now),
    delivery_count: 0,
    lock_token: null,
    locked_until: null,
    state: ACTIVE,
    dead_letter_reason: null,
    dead_letter_description: null,
    dead_lettered_at: null,
  });
  const [row] = await returningColumns<{ seq: number }>(insert, dialect, ['seq']).execute();
  if (!row) throw new Error(`the insert into queue ${queue} returned no sequence number`);
  return Number(row.seq);
}

/** Every column of `queue_messages`, as a message is read back. */
const QUEUE_MESSAGE_COLUMNS = [
  'seq',
  'queue',
  'message_id',
  'correlation_id',
  'content_type',
  'subject',
  'application_properties',
  'body',
  'enqueued_at',
  'delivery_count',
  'lock_token',
  'locked_until',
  'state',
  'dead_letter_reason',
  'dead_letter_description',
  'dead_lettered_at',
] as const satisfies readonly (keyof QueueMessageTable)[];

export interface ReceiveOptions {
  readonly now: number;
  /** At most this many messages. Example: `16`. */
  readonly max: number;
  /** Example: `60000`. */
  readonly lockDurationMs: number;
  /** A message whose lock lapsed after this many deliveries is dead-lettered instead of delivered again. */
  readonly maxDeliveryCount: number;
  /** A fresh lock token (a UUID, as Service Bus uses). */
  readonly newLockToken: () => string;
}

/** Locks up to `max` available messages to the caller, oldest first; each delivery increments its count. */
export async function receive(db: Db, dialect: SqlDialect, queue: string, options: ReceiveOptions): Promise<ReceivedMessage[]> {
  const candidates = await firstRows(
    db.selectFrom('queue_messages').select(['seq', 'delivery_count', 'lock_token']).where('queue', '=', queue).where('state', '=', ACTIVE).where(lockFree(options.now)).orderBy('seq'),
    dialect,
    options.max,
  ).execute();
  const received: ReceivedMessage[] = [];
  for (const candidate of candidates) {
    const available = lockFree(options.now);
    if (exhaustedDeliveries(Number(candidate.delivery_count), options.maxDeliveryCount)) {
      // Its last lock lapsed (the receiver died or overran): Service Bus counts that as a failed delivery.
      await updateRow(db, Number(candidate.seq))
        .set(deadLetterColumns(MAX_DELIVERY_COUNT_EXCEEDED, deliveriesExhausted(options.maxDeliveryCount), options.now))
        .where('state', '=', ACTIVE)
        .where(available)
        .execute();
      continue;
    }
    const lockToken = options.newLockToken();
    const lockedUntil = options.now + options.lockDurationMs;
    const lock = updateRow(db, Number(candidate.seq))
      .set((eb) => ({ lock_token: lockToken, locked_until: lockedUntil, delivery_count: eb('delivery_count', '+', 1) }))
      .where('state', '=', ACTIVE)
      .where(available);
    const [row] = await returningColumns<Selectable<QueueMessageTable>>(lock, dialect, QUEUE_MESSAGE_COLUMNS).execute();
    // No row: another receiver locked it between our read and our update.
    if (row) received.push({ ...toQueuedMessage(row), lockToken, lockedUntil: new Date(lockedUntil) });
  }
  return received;
}

/** Not locked, or its lock has lapsed. */
function lockFree(now: number) {
  return (eb: ExpressionBuilder<BusTables, 'queue_messages'>) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<=', now)]);
}

function updateRow(db: Db, seq: number) {
  return db.updateTable('queue_messages').where('seq', '=', seq);
}

function deadLetterColumns(reason: string, description: string, now: number) {
  return {
    state: DEAD_LETTERED,
    lock_token: null,
    locked_until: null,
    dead_letter_reason: reason,
    dead_letter_description: description,
    dead_lettered_at: now,
  };
}

function deliveriesExhausted(maxDeliveryCount: number): string {
  return `Message could not be consumed after ${maxDeliveryCount} delivery attempts.`;
}

/** Settles a message as processed (deletes it). False when the caller's lock was lost. */
export async function complete(db: Db, message: Pick<ReceivedMessage, 'sequenceNumber' | 'lockToken'>): Promise<boolean> {
  const result = await db
    .deleteFrom('queue_messages')
    .where('seq', '=', message.sequenceNumber)
    .where('lock_token', '=', message.lockToken)
    .where('state', '=', ACTIVE)
    .executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}

export type AbandonOutcome = 'released' | 'deadlettered' | 'lock-lost';

/**
 * Gives a message back after a failed delivery: it becomes receivable again, or goes to the dead-letter sub-queue
 * with reason `MaxDeliveryCountExceeded` once it has been delivered `maxDeliveryCount` times.
 */
export async function abandon(
  db: Db,
  message: Pick<ReceivedMessage, 'sequenceNumber' | 'lockToken'>,
  options: { readonly now: number; readonly maxDeliveryCount: number },
): Promise<AbandonOutcome> {
  const deadLettered = await updateRow(db, message.sequenceNumber)
    .set(deadLetterColumns(MAX_DELIVERY_COUNT_EXCEEDED, deliveriesExhausted(options.maxDeliveryCount), options.now))
    .where('lock_token', '=', message.lockToken)
    .where('state', '=', ACTIVE)
    .where('delivery_count', '>=', options.maxDeliveryCount)
    .executeTakeFirst();
  if (Number(deadLettered.numUpdatedRows) === 1) return 'deadlettered';
  const released = await updateRow(db, message.sequenceNumber)
    .set({ lock_token: null, locked_until: null })
    .where('lock_token', '=', message.lockToken)
    .where('state', '=', ACTIVE)
    .executeTakeFirst();
  return Number(released.numUpdatedRows) === 1 ? 'released' : 'lock-lost';
}

/**
 * Gives back a message that was received but never handed to a handler (the host is stopping): unlocked, and the
 * delivery that did not happen is not counted.
 */
export async function release(db: Db, message: Pick<ReceivedMessage, 'sequenceNumber' | 'lockToken'>): Promise<boolean> {
  const result = await updateRow(db, message.sequenceNumber)
    .set((eb) => ({ lock_token: null, locked_until: null, delivery_count: eb('delivery_count', '-', 1) }))
    .where('lock_token', '=', message.lockToken)
    .where('state', '=', ACTIVE)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Moves a locked message to the dead-letter sub-queue with the caller's reason. */
export async function deadLetter(
  db: Db,
  message: Pick<ReceivedMessage, 'sequenceNumber' | 'lockToken'>,
  options: { readonly now: number; readonly reason: string; readonly description?: string },
): Promise<boolean> {
  const result = await updateRow(db, message.sequenceNumber)
    .set(deadLetterColumns(options.reason, options.description ?? '', options.now))
    .where('lock_token', '=', message.lockToken)
    .where('state', '=', ACTIVE)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Extends the caller's lock while its handler runs. False when the lock was lost. */
export async function renewLock(
  db: Db,
  message: Pick<ReceivedMessage, 'sequenceNumber' | 'lockToken'>,
  options: { readonly now: number; readonly lockDurationMs: number },
): Promise<boolean> {
  const result = await updateRow(db, message.sequenceNumber)
    .set({ locked_until: options.now + options.lockDurationMs })
    .where('lock_token', '=', message.lockToken)
    .where('state', '=', ACTIVE)
    .where('locked_until', '>', options.now)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export interface PageOptions {
  /** Sequence number cursor: only messages after it. */
  readonly after?: number;
  /** Example: `100`. */
  readonly limit: number;
}

/** The dead-letter sub-queue of a queue, in sequence order. */
export async function listDeadLettered(db: Db, dialect: SqlDialect, queue: string, page: PageOptions): Promise<QueuedMessage[]> {
  return listByState(db, dialect, queue, DEAD_LETTERED, page);
}

/** The active messages of a queue (locked or not), in sequence order. */
export async function listActive(db: Db, dialect: SqlDialect, queue: string, page: PageOptions): Promise<QueuedMessage[]> {
  return listByState(db, dialect, queue, ACTIVE, page);
}

async function listByState(db: Db, dialect: SqlDialect, queue: string, state: string, page: PageOptions): Promise<QueuedMessage[]> {
  const rows = await firstRows(
    db.selectFrom('queue_messages').selectAll().where('queue', '=', queue).where('state', '=', state).where('seq', '>', page.after ?? 0).orderBy('seq'),
    dialect,
    page.limit,
  ).execute();
  return rows.map(toQueuedMessage);
}

/** Enqueue time (epoch ms) of the oldest active message per queue, for the inbox-lag check; queues without any are absent. */
export async function oldestActive(db: Db, queues: readonly string[]): Promise<Map<string, { enqueuedAt: number; count: number }>> {
  if (queues.length === 0) return new Map();
  const rows = await db
    .selectFrom('queue_messages')
    .select((eb) => ['queue', eb.fn.min<number>('enqueued_at').as('oldest'), eb.fn.countAll<number>().as('count')])
    .where('queue', 'in', [...queues])
    .where('state', '=', ACTIVE)
    .groupBy('queue')
    .execute();
  return new Map(rows.map((r) => [r.queue, { enqueuedAt: Number(r.oldest), count: Number(r.count) }]));
}

function toQueuedMessage(row: Selectable<QueueMessageTable>): QueuedMessage {
  return {
    sequenceNumber: Number(row.seq),
    queue: row.queue,
    messageId: row.message_id,
    body: row.body,
    contentType: row.content_type,
    correlationId: row.correlation_id,
    subject: row.subject,
    applicationProperties: JSON.parse(row.application_properties) as ApplicationProperties,
    enqueuedAt: new Date(Number(row.enqueued_at)),
    deliveryCount: Number(row.delivery_count),
    deadLetter:
      row.state === DEAD_LETTERED
        ? {
            reason: row.dead_letter_reason ?? '',
            description: row.dead_letter_description,
            at: new Date(Number(row.dead_lettered_at ?? 0)),
          }
        : null,
  };
}
