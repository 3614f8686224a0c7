import type { Kysely } from 'kysely';
import { z } from 'zod';
import { busDb } from '../../shared/platform/bus/bus-db';
import type { BusTables } from '../../shared/platform/bus/bus.tables';
import { bodyForHandler, QUEUE_DEFAULTS, type QueuedMessage } from '../../shared/platform/bus/queue';
import { enqueue, listDeadLettered } from '../bus/queue.repository';
import { readTopic } from '../bus/topic.repository';
import { AppError } from '../../shared/platform/errors/app-error';
import { parseJsonBody, parseQueryParams } from '../../shared/platform/validation/validation';
import type { Deps } from '../../shared/deps';
import type { HostComponent, HostContext } from '../host';
import { adminOnly } from '../http/raw-problems';
import type { RawRequest, RawResponse } from '../http/http-binding';

/** Service Bus standard tier's message size limit; larger envelopes are refused with 413. */
const MAX_MESSAGE_BYTES = 256 * 1024;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

/**
 * The sender's envelope for a queue message. Changing it is a breaking change for scripts and tests that post
 * messages to the local host.
 */
const envelopeSchema = z.object({
  body: z.unknown().refine((b) => b !== undefined, 'body is required'),
  messageId: z.string().min(1).max(128).optional(),
  correlationId: z.string().min(1).max(128).optional(),
  applicationProperties: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()])).optional(),
});

const pageSchema = z.object({
  after: z.coerce.number().int().min(0).optional(),
  cursor: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

/**
 * Local-only endpoints of the embedded bus (never registered in Azure): post a message to a queue as a sender
 * would, read a queue's dead-letter sub-queue, read the embedded topic in order. PlatformAdmin or
 * `factory.runtime.admin` only; errors are problem+json.
 */
export class BusEndpoints implements HostComponent {
  readonly name = 'bus-endpoints';

  start(context: HostContext): Promise<void> {
    const { deps, http } = context;
    const db = busDb(deps.sql.db);
    http.addRawRoute(['POST'], 'runtime-cloud/local/queues/{queue}/messages', (request) =>
      adminOnly(deps.auth, request, async () => postMessage(deps, db, request)),
    );
    http.addRawRoute(['GET'], 'runtime-cloud/local/queues/{queue}/deadletter', (request) =>
      adminOnly(deps.auth, request, async () => {
        const queue = entityName(request.params.queue);
        const page = parsePage(request);
        const items = await listDeadLettered(db, deps.sql.dialect, queue, { after: page.after, limit: page.limit });
        return { status: 200, body: { queue, items: items.map(deadLetterView), ...nextCursor(items, page.limit) } };
      }),
    );
    http.addRawRoute(['GET'], 'runtime-cloud/local/topics/{topic}/messages', (request) =>
      adminOnly(deps.auth, request, async () => {
        const topic = entityName(request.params.topic);
        const page = parsePage(request);
        const items = await readTopic(db, deps.sql.dialect, topic, { after: page.after, limit: page.limit });
        return {
          status: 200,
          body: {
            topic,
            items: items.map((m) => ({
              sequenceNumber: m.sequenceNumber,
              messageId: m.messageId,
              correlationId: m.correlationId,
              subject: m.subject,
              contentType: m.contentType,
              applicationProperties: m.applicationProperties,
              enqueuedTimeUtc: m.enqueuedAt.toISOString(),
              body: bodyForHandler(m),
            })),
            ...nextCursor(items, page.limit),
          },
        };
      }),
    );
    return Promise.resolve();
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}

async function postMessage(deps: Deps, db: Kysely<BusTables>, request: RawRequest): Promise<RawResponse> {
  const queue = entityName(request.params.queue);
  if (request.body.length > MAX_MESSAGE_BYTES) {
    throw new AppError('BUS.MESSAGE_TOO_LARGE', 'too-large', `messages are limited to ${MAX_MESSAGE_BYTES} bytes`, {
      limitBytes: MAX_MESSAGE_BYTES,
    });
  }
  const envelope = parseJsonBody(request.body.toString('utf8'), envelopeSchema);
  const messageId = envelope.messageId ?? deps.ids.next();
  const isText = typeof envelope.body === 'string';
  const result = await enqueue(
    db,
    deps.sql.dialect,
    queue,
    {
      messageId,
      body: isText ? (envelope.body as string) : JSON.stringify(envelope.body),
      contentType: isText ? 'text/plain' : 'application/json',
      ...(envelope.correlationId !== undefined ? { correlationId: envelope.correlationId } : {}),
      ...(envelope.applicationProperties !== undefined ? { applicationProperties: envelope.applicationProperties } : {}),
    },
    { now: deps.clock.now().getTime(), duplicateDetectionWindowMs: QUEUE_DEFAULTS.duplicateDetectionWindowMs },
  );
  if (result.kind === 'duplicate') return { status: 200, body: { queue, messageId, duplicate: true } };
  return { status: 201, body: { queue, messageId, sequenceNumber: result.sequenceNumber, duplicate: false } };
}

function entityName(value: string | undefined): string {
  if (!value || !NAME.test(value)) {
    throw new AppError('BUS.INVALID_ENTITY_NAME', 'validation', 'queue and topic names are 1-200 letters, digits, ".", "_" or "-"');
  }
  return value;
}

function parsePage(request: RawRequest): { after: number; limit: number } {
  const page = parseQueryParams(request.url.searchParams, pageSchema);
  return { after: page.after ?? page.cursor ?? 0, limit: page.limit };
}

/** A full page may have more behind it: its last sequence number is the cursor for the next one. */
function nextCursor(items: readonly { sequenceNumber: number }[], limit: number): { nextCursor: string | null } {
  const last = items[items.length - 1];
  return { nextCursor: items.length === limit && last ? String(last.sequenceNumber) : null };
}

function deadLetterView(m: QueuedMessage) {
  return {
    sequenceNumber: m.sequenceNumber,
    messageId: m.messageId,
    correlationId: m.correlationId,
    applicationProperties: m.applicationProperties,
    enqueuedTimeUtc: m.enqueuedAt.toISOString(),
    deliveryCount: m.deliveryCount,
    deadLetterReason: m.deadLetter?.reason ?? null,
    deadLetterErrorDescription: m.deadLetter?.description ?? null,
    deadLetteredTimeUtc: m.deadLetter?.at.toISOString() ?? null,
    body: bodyForHandler(m),
  };
}
