import type { Kysely, Transaction } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { OutboxTables } from './outbox';

/**
 * The relay's hold on outbox rows. A relay claims the oldest pending rows with a claim token and a lease; a second
 * relay sees them claimed and waits, so in the normal path each event is published by one relay, in `seq` order.
 * A relay that dies leaves a claim that lapses, and the rows are taken over (and published again: at least once).
 */
type Db = Kysely<OutboxTables> | Transaction<OutboxTables>;

export interface PendingEvent {
  readonly seq: number;
  readonly eventId: string;
  readonly topic: string;
  readonly correlationId: string | null;
  /** The CloudEvent JSON. */
  readonly payload: string;
  readonly attempts: number;
}

export interface ClaimOptions {
  /** Identifies this claim; the rows are settled with it. */
  readonly claimToken: string;
  readonly now: number;
  /** How long the claim holds. Example: `30000`. */
  readonly leaseMs: number;
  /** Example: `100`. */
  readonly batchSize: number;
  /** Azure SQL has TOP where the others have LIMIT. */
  readonly dialect: SqlDialect;
}

/**
 * Claims the oldest pending rows, but only from the head of the outbox: while an older pending row is claimed by
 * another relay nothing is claimed, so two relays never publish out of order against each other.
 */
export async function claimPending(db: Db, options: ClaimOptions): Promise<PendingEvent[]> {
  const oldest = db.selectFrom('outbox').select(['seq', 'claimed_until']).where('published_at', 'is', null).orderBy('seq');
  // firstRows' TOP or LIMIT, spelled here: this module loads with the relay's timer function at registration, and
  // dialect.ts would load Kysely with it (cold start).
  const head = await (options.dialect === 'mssql' ? oldest.top(options.batchSize) : oldest.limit(options.batchSize)).execute();
  const claimable: number[] = [];
  for (const row of head) {
    if (row.claimed_until !== null && row.claimed_until !== undefined && Number(row.claimed_until) > options.now) break;
    claimable.push(Number(row.seq));
  }
  if (claimable.length === 0) return [];
  // The conditions are re-checked by the UPDATE itself: a row another relay claimed since our read is skipped.
  await db
    .updateTable('outbox')
    .set({ claimed_by: options.claimToken, claimed_until: options.now + options.leaseMs })
    .where('seq', 'in', claimable)
    .where('published_at', 'is', null)
    .where((eb) => eb.or([eb('claimed_until', 'is', null), eb('claimed_until', '<=', options.now)]))
    .execute();
  const rows = await db
    .selectFrom('outbox')
    .select(['seq', 'event_id', 'topic', 'correlation_id', 'payload', 'attempts'])
    .where('claimed_by', '=', options.claimToken)
    .where('published_at', 'is', null)
    .orderBy('seq')
    .execute();
  return rows.map((r) => ({
    seq: Number(r.seq),
    eventId: r.event_id,
    topic: r.topic,
    correlationId: r.correlation_id,
    payload: r.payload,
    attempts: Number(r.attempts),
  }));
}

/** Marks the claimed rows published, after the bus confirmed them. */
export async function markPublished(db: Db, claimToken: string, seqs: readonly number[], now: number): Promise<void> {
  if (seqs.length === 0) return;
  await db
    .updateTable('outbox')
    .set((eb) => ({ published_at: now, claimed_by: null, claimed_until: null, attempts: eb('attempts', '+', 1) }))
    .where('claimed_by', '=', claimToken)
    .where('seq', 'in', [...seqs])
    .execute();
}

/** Gives the claimed rows back after a failed publish, recording the error; the next run tries again. */
export async function releaseClaim(db: Db, claimToken: string, error: string, now: number, retryAfterMs: number): Promise<void> {
  await db
    .updateTable('outbox')
    // The claim is kept until the back-off ends, so a failing bus is not hammered by every relay at once.
    .set((eb) => ({ claimed_until: now + retryAfterMs, attempts: eb('attempts', '+', 1), last_error: error.slice(0, 2000) }))
    .where('claimed_by', '=', claimToken)
    .where('published_at', 'is', null)
    .execute();
}

/** How many events wait, and since when (epoch ms), for health and tests. */
export async function pendingSummary(db: Db): Promise<{ count: number; oldestCreatedAt: number | null }> {
  const row = await db
    .selectFrom('outbox')
    .select((eb) => [eb.fn.countAll<number>().as('count'), eb.fn.min<number>('created_at').as('oldest')])
    .where('published_at', 'is', null)
    .executeTakeFirstOrThrow();
  return { count: Number(row.count), oldestCreatedAt: row.oldest === null ? null : Number(row.oldest) };
}
