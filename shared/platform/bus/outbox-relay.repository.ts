import type { Kysely, SelectQueryBuilder, Transaction } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import { Prepared, preparedBy, preparedPer } from '../sql/prepared';
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
  const { dialect, batchSize } = options;
  const head = (await headQuery({ batchSize, lanes: options.lanes?.length ?? 'all' }).execute(db, dialect, numbered('lane', options.lanes ?? []))).rows;
  const lanes = [...new Set(head.map((row) => Number(row.lane)))];
  if (lanes.length === 0) return [];
  // Lanes another relay holds are left to it; the condition is checked by the UPDATE itself.
  await claimLanesQuery(lanes.length).execute(db, dialect, { ...numbered('lane', lanes), token: options.claimToken, until: options.now + options.leaseMs, now: options.now });
  const pending = (await pendingQuery(batchSize).execute(db, dialect, { token: options.claimToken })).rows;
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

// A relay runs these for every event it publishes: built and compiled once per shape (prepared.ts), as the dialect's
// own TOP or LIMIT spelled here: this module loads with the relay's timer function at registration, and dialect.ts
// would load Kysely with it (cold start).
function firstOf<O>(query: SelectQueryBuilder<OutboxTables, 'outbox', O>, dialect: SqlDialect, n: number): SelectQueryBuilder<OutboxTables, 'outbox', O> {
  return dialect === 'mssql' ? query.top(n) : query.limit(n);
}

/** `lane0`, `lane1`, …: the values of a statement's list, by the names its shape gave them. */
function numbered(prefix: string, values: readonly number[]): Record<string, number> {
  return Object.fromEntries(values.map((value, i) => [`${prefix}${i}`, value]));
}

function numberedSlots(prefix: string, count: number, p: (name: string) => never): never[] {
  return Array.from({ length: count }, (_, i) => p(`${prefix}${i}`));
}

/** The lanes of the oldest pending rows: of all lanes, or of the given ones (an after-commit publish). */
const headQuery = preparedBy(
  (shape: { batchSize: number; lanes: number | 'all' }) => `${shape.batchSize}/${shape.lanes}`,
  (shape) =>
    new Prepared<OutboxTables, string, { lane: number }>((db, dialect, p) => {
      let oldest = db.selectFrom('outbox').select('lane').where('published_at', 'is', null).where('dead_lettered_at', 'is', null).orderBy('seq');
      if (shape.lanes !== 'all') oldest = oldest.where('lane', 'in', numberedSlots('lane', shape.lanes, p));
      return firstOf(oldest, dialect, shape.batchSize);
    }),
);

const claimLanesQuery = preparedPer(
  (count) =>
    new Prepared<OutboxTables, string, never>((db, _dialect, p) =>
      db
        .updateTable('outbox_lanes')
        .set({ claimed_by: p('token'), claimed_until: p('until') })
        .where('lane', 'in', numberedSlots('lane', count, p))
        .where((eb) => eb.or([eb('claimed_until', 'is', null), eb('claimed_until', '<=', p('now'))])),
    ),
);

const pendingQuery = preparedPer(
  (batchSize) =>
    new Prepared<OutboxTables, 'token', { seq: number; event_id: string; topic: string; correlation_id: string | null; payload: string; attempts: number }>((db, dialect, p) =>
      firstOf(
        db
          .selectFrom('outbox')
          .select(['seq', 'event_id', 'topic', 'correlation_id', 'payload', 'attempts'])
          .where('lane', 'in', db.selectFrom('outbox_lanes').select('lane').where('claimed_by', '=', p('token')))
          .where('published_at', 'is', null)
          .where('dead_lettered_at', 'is', null)
          .orderBy('seq'),
        dialect,
        batchSize,
      ),
    ),
);

const markPublishedQuery = preparedPer(
  (count) =>
    new Prepared<OutboxTables, string, never>((db, _dialect, p) =>
      db
        .updateTable('outbox')
        .set((eb) => ({ published_at: p('now'), attempts: eb('attempts', '+', 1) }))
        .where('seq', 'in', numberedSlots('seq', count, p))
        .where('published_at', 'is', null),
    ),
);

const releaseLanesQuery = new Prepared<OutboxTables, 'token', never>((db, _dialect, p) =>
  db.updateTable('outbox_lanes').set({ claimed_by: null, claimed_until: null }).where('claimed_by', '=', p('token')),
);

/** Marks rows published, after the bus confirmed them, and gives the claim's lanes back. */
export async function markPublished(db: Db, claimToken: string, seqs: readonly number[], now: number): Promise<void> {
  if (seqs.length > 0) await markPublishedQuery(seqs.length).run(db, { ...numbered('seq', seqs), now });
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
  await releaseLanesQuery.run(db, { token: claimToken });
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
