import type { Kysely, Transaction } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { OutboxTables } from './outbox';

/**
 * The relay's hold on outbox lanes (outbox.ts, PUBLISH ORDER). A relay claims the lanes of the oldest pending rows
 * with a claim token and a lease, publishes their rows in `seq` order and gives the lanes back; a second relay skips
 * claimed lanes, so a lane is published by one relay at a time. A relay that dies leaves a claim that lapses, and the
 * lanes are taken over (their rows published again: at least once). The lease must outlast one publish, else a second
 * relay could publish a lane's later rows while the first still sends its earlier ones (outbox-relay.service.ts).
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
  /** Identifies this claim; the lanes are given back with it. */
  readonly claimToken: string;
  readonly now: number;
  /** How long the claim holds. Example: `260560`. */
  readonly leaseMs: number;
  /** Rows at most. Example: `100`. */
  readonly batchSize: number;
  /** Only these lanes (an after-commit publish: the lanes its transaction appended to); default all. */
  readonly lanes?: readonly number[];
  /** Azure SQL has TOP where the others have LIMIT. */
  readonly dialect: SqlDialect;
}

/**
 * Claims the free lanes of the oldest pending rows and returns their pending rows in `seq` order. A lane's writers
 * hold it until they commit and the claim waits for them, so the rows read after it are a prefix of the lane's
 * `seq` order: no later row of the lane can commit before an earlier one (outbox.ts).
 */
export async function claimPending(db: Db, options: ClaimOptions): Promise<PendingEvent[]> {
  if (options.lanes?.length === 0) return [];
  let oldest = db.selectFrom('outbox').select('lane').where('published_at', 'is', null).where('dead_lettered_at', 'is', null).orderBy('seq');
  if (options.lanes) oldest = oldest.where('lane', 'in', [...options.lanes]);
  // firstRows' TOP or LIMIT, spelled here: this module loads with the relay's timer function at registration, and
  // dialect.ts would load Kysely with it (cold start).
  const head = await (options.dialect === 'mssql' ? oldest.top(options.batchSize) : oldest.limit(options.batchSize)).execute();
  const lanes = [...new Set(head.map((row) => Number(row.lane)))];
  if (lanes.length === 0) return [];
  // Lanes another relay holds are left to it; the condition is checked by the UPDATE itself.
  await db
    .updateTable('outbox_lanes')
    .set({ claimed_by: options.claimToken, claimed_until: options.now + options.leaseMs })
    .where('lane', 'in', lanes)
    .where((eb) => eb.or([eb('claimed_until', 'is', null), eb('claimed_until', '<=', options.now)]))
    .execute();
  const claimed = db.selectFrom('outbox_lanes').select('lane').where('claimed_by', '=', options.claimToken);
  const rows = db
    .selectFrom('outbox')
    .select(['seq', 'event_id', 'topic', 'correlation_id', 'payload', 'attempts'])
    .where('lane', 'in', claimed)
    .where('published_at', 'is', null)
    .where('dead_lettered_at', 'is', null)
    .orderBy('seq');
  const pending = await (options.dialect === 'mssql' ? rows.top(options.batchSize) : rows.limit(options.batchSize)).execute();
  if (pending.length === 0) await releaseLanes(db, options.claimToken);
  return pending.map((r) => ({
    seq: Number(r.seq),
    eventId: r.event_id,
    topic: r.topic,
    correlationId: r.correlation_id,
    payload: r.payload,
    attempts: Number(r.attempts),
  }));
}

/** Marks rows published, after the bus confirmed them, and gives the claim's lanes back. */
export async function markPublished(db: Db, claimToken: string, seqs: readonly number[], now: number): Promise<void> {
  if (seqs.length > 0) {
    await db
      .updateTable('outbox')
      .set((eb) => ({ published_at: now, attempts: eb('attempts', '+', 1) }))
      .where('seq', 'in', [...seqs])
      .where('published_at', 'is', null)
      .execute();
  }
  await releaseLanes(db, claimToken);
}

/**
 * After a failed publish: records the error on the rows and keeps the claim's lanes until the back-off ends, so a
 * failing bus is not hammered by every relay at once; then any relay tries again.
 */
export async function releaseClaim(db: Db, claimToken: string, seqs: readonly number[], error: string, now: number, retryAfterMs: number): Promise<void> {
  if (seqs.length > 0) {
    await db
      .updateTable('outbox')
      .set((eb) => ({ attempts: eb('attempts', '+', 1), last_error: error.slice(0, 2000) }))
      .where('seq', 'in', [...seqs])
      .where('published_at', 'is', null)
      .execute();
  }
  await db.updateTable('outbox_lanes').set({ claimed_until: now + retryAfterMs }).where('claimed_by', '=', claimToken).execute();
}

/**
 * After the bus refused an event for good: dead-letters its row here, with the reason, so it is never published and
 * the lane's later rows flow on. The claim stays: the caller marks the rows before it published, which gives it back.
 */
export async function deadLetter(db: Db, claimToken: string, seq: number, reason: string, now: number): Promise<void> {
  const claimed = db.selectFrom('outbox_lanes').select('lane').where('claimed_by', '=', claimToken);
  await db
    .updateTable('outbox')
    .set((eb) => ({ dead_lettered_at: now, dead_letter_reason: reason.slice(0, 2000), attempts: eb('attempts', '+', 1) }))
    .where('seq', '=', seq)
    .where('lane', 'in', claimed)
    .where('published_at', 'is', null)
    .execute();
}

/** Events dead-lettered since `since` (epoch ms): how many, and the latest, for the health check. */
export async function deadLettersSince(db: Db, since: number): Promise<{ count: number; latest?: { eventId: string; at: number; reason: string } }> {
  const row = await db
    .selectFrom('outbox')
    .select((eb) => [eb.fn.countAll<number>().as('count'), eb.fn.max<number>('dead_lettered_at').as('latest')])
    .where('dead_lettered_at', '>=', since)
    .executeTakeFirstOrThrow();
  const count = Number(row.count);
  if (count === 0 || row.latest === null) return { count };
  const latest = await db
    .selectFrom('outbox')
    .select(['event_id', 'dead_lettered_at', 'dead_letter_reason'])
    .where('dead_lettered_at', '=', row.latest)
    .orderBy('seq', 'desc')
    .executeTakeFirstOrThrow();
  return { count, latest: { eventId: latest.event_id, at: Number(latest.dead_lettered_at), reason: latest.dead_letter_reason ?? '' } };
}

async function releaseLanes(db: Db, claimToken: string): Promise<void> {
  await db.updateTable('outbox_lanes').set({ claimed_by: null, claimed_until: null }).where('claimed_by', '=', claimToken).execute();
}

/** How many events wait, and since when (epoch ms), for health and tests. */
export async function pendingSummary(db: Db): Promise<{ count: number; oldestCreatedAt: number | null }> {
  const row = await db
    .selectFrom('outbox')
    .select((eb) => [eb.fn.countAll<number>().as('count'), eb.fn.min<number>('created_at').as('oldest')])
    .where('published_at', 'is', null)
    .where('dead_lettered_at', 'is', null)
    .executeTakeFirstOrThrow();
  return { count: Number(row.count), oldestCreatedAt: row.oldest === null ? null : Number(row.oldest) };
}
