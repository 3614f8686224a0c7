import type { Kysely } from 'kysely';
import { ensureError } from '../errors/app-error';
import type { SqlDialect } from '../sql/database';
import { recordOutboxDeadLetter, recordOutboxPublishLag } from '../telemetry/metrics';
import type { Clock, Ids } from '../time/clock';
import type { CloudEvent } from './events';
import type { EventPublisher } from './event-publisher';
import { refusalOf, type Refusal } from './refusals';
import type { OutboxTables } from './outbox';
import { claimPending, deadLetter, markPublished, releaseClaim, type PendingEvent } from './outbox-relay.repository';
import type { OutgoingMessage } from './queue';

export interface RelayOptions {
  readonly dialect: SqlDialect;
  readonly clock: Clock;
  readonly ids: Ids;
  /** Rows per claim. Example: `100`. */
  readonly batchSize?: number;
  /**
   * How long a claim holds before another relay may take its lanes over. Default: the publisher's
   * `publishBudgetMs` plus `CLAIM_MARGIN_MS`, so the claim outlasts a publish with every retry it may make.
   * Example: `260560`.
   */
  readonly leaseMs?: number;
  /** Only these lanes (the after-commit publish of one transaction); default every lane. Example: `[17]`. */
  readonly lanes?: readonly number[];
  /** Stop after this many batches, so one run (one timer tick) stays short. Example: `20`. */
  readonly maxBatches?: number;
  /** After a failed publish the rows wait this long. Example: `5000`. */
  readonly retryAfterMs?: number;
}

export interface RelayResult {
  readonly published: number;
  readonly failed?: { readonly error: string; readonly events: number };
  /** Events the bus refused for good, dead-lettered in the outbox. */
  readonly deadLettered?: readonly DeadLettered[];
}

export interface DeadLettered {
  readonly eventId: string;
  readonly code: string;
  readonly reason: string;
}

/** What a claim holds beyond the publisher's budget: the relay's own statements around the publish. */
export const CLAIM_MARGIN_MS = 10_000;

/**
 * One relay run: claims the lanes of the oldest pending rows (outbox.ts, PUBLISH ORDER), moves their rows to the bus
 * in `seq` order, batch by batch, until none are left (or `maxBatches`). A row is marked published only after the
 * publisher confirmed it. A failed batch stays pending with its lanes held for the back-off, and the run stops there,
 * so later events of those lanes never overtake it; but an event the bus refuses for good (too large) is dead-lettered
 * here with the reason (a metric, and the `outbox-dead-letters` health check), and its lane flows on.
 */
export async function relayOutbox(db: Kysely<OutboxTables>, publisher: EventPublisher, options: RelayOptions): Promise<RelayResult> {
  const batchSize = options.batchSize ?? 100;
  const leaseMs = options.leaseMs ?? publisher.publishBudgetMs + CLAIM_MARGIN_MS;
  let published = 0;
  const deadLettered: DeadLettered[] = [];
  for (let batch = 0; batch < (options.maxBatches ?? 20); batch++) {
    const claimToken = options.ids.next('relay');
    const now = options.clock.now().getTime();
    const events = await claimPending(db, { claimToken, now, leaseMs, batchSize, dialect: options.dialect, ...(options.lanes ? { lanes: options.lanes } : {}) });
    if (events.length === 0) break;
    let outcome: PublishOutcome;
    try {
      outcome = await publishInOrder(publisher, events);
    } catch (thrown) {
      const error = ensureError(thrown);
      await releaseClaim(db, claimToken, events.map((e) => e.seq), error.message, options.clock.now().getTime(), options.retryAfterMs ?? 5_000);
      return { published, failed: { error: error.message, events: events.length }, ...(deadLettered.length > 0 ? { deadLettered } : {}) };
    }
    const publishedAt = options.clock.now().getTime();
    const refused = outcome.refusal ? events[outcome.sent] : undefined;
    if (refused && outcome.refusal) {
      const { code, reason } = outcome.refusal;
      await deadLetter(db, claimToken, refused.seq, `${code}: ${reason}`, publishedAt);
      recordOutboxDeadLetter(refused.topic, code);
      deadLettered.push({ eventId: refused.eventId, code, reason });
    }
    const sent = events.slice(0, outcome.sent);
    await markPublished(db, claimToken, sent.map((e) => e.seq), publishedAt);
    // The CloudEvent's time is when it was written to the outbox (outbox.ts: one clock for both).
    for (const e of sent) recordOutboxPublishLag(e.topic, (publishedAt - Date.parse((JSON.parse(e.payload) as CloudEvent).time)) / 1000);
    published += sent.length;
    // After a refusal the rest of the batch is claimed again at once.
    if (!refused && events.length < batchSize) break;
  }
  return { published, ...(deadLettered.length > 0 ? { deadLettered } : {}) };
}

interface PublishOutcome {
  /** How many of the claimed events, in order, the bus accepted. */
  readonly sent: number;
  /** The bus refused the next one for good. */
  readonly refusal?: Refusal;
}

/** Publishes the claimed events in order, topic run by topic run; stops at an event the bus refuses for good. */
async function publishInOrder(publisher: EventPublisher, events: readonly PendingEvent[]): Promise<PublishOutcome> {
  let sent = 0;
  for (const [topic, run] of byTopicInOrder(events)) {
    try {
      await publisher.publish(topic, run.map(toOutgoingMessage));
    } catch (thrown) {
      const refusal = refusalOf(ensureError(thrown));
      if (refusal && events[sent + refusal.accepted]?.eventId === refusal.messageId) return { sent: sent + refusal.accepted, refusal };
      throw thrown;
    }
    sent += run.length;
  }
  return { sent };
}

/** Consecutive runs of one topic, so per-topic order is the outbox order. */
function byTopicInOrder(events: readonly PendingEvent[]): [string, PendingEvent[]][] {
  const runs: [string, PendingEvent[]][] = [];
  for (const event of events) {
    const last = runs[runs.length - 1];
    if (last && last[0] === event.topic) last[1].push(event);
    else runs.push([event.topic, [event]]);
  }
  return runs;
}

/** The bus message of an outbox event: messageId = event id, correlationId = run or promotion id, type as a property. */
export function toOutgoingMessage(event: PendingEvent): OutgoingMessage {
  const cloudEvent = JSON.parse(event.payload) as CloudEvent;
  return {
    messageId: event.eventId,
    body: event.payload,
    contentType: 'application/json',
    ...(event.correlationId !== null ? { correlationId: event.correlationId } : {}),
    ...(cloudEvent.subject !== undefined ? { subject: cloudEvent.subject } : {}),
    applicationProperties: {
      type: cloudEvent.type,
      ...(cloudEvent.tenant !== undefined ? { tenant: cloudEvent.tenant } : {}),
      // Event-driven runner pools subscribe to their own pool's jobs (the event's subject).
      ...(cloudEvent.type === 'RunnerJobDispatched' && cloudEvent.subject !== undefined ? { pool: cloudEvent.subject } : {}),
    },
  };
}
