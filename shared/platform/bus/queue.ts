/**
 * The embedded queue's model (pure): what a message is, and the rules of peek-lock delivery that the Service Bus
 * queue follows and our local stand-in must follow too.
 */

/** Service Bus's dead-letter reason when a message was delivered `maxDeliveryCount` times without completing. */
export const MAX_DELIVERY_COUNT_EXCEEDED = 'MaxDeliveryCountExceeded';

/** Defaults of a Service Bus queue as created by our infra (and of the embedded one). */
export const QUEUE_DEFAULTS = {
  /** Deliveries before a message is dead-lettered. */
  maxDeliveryCount: 10,
  /** How long a received message stays locked to its receiver. */
  lockDurationMs: 60_000,
  /** How long a messageId is remembered for duplicate detection (Service Bus default: 10 minutes). */
  duplicateDetectionWindowMs: 10 * 60_000,
} as const;

/** The queue owned by the provisioning module: `PromotionApproved` from DeliveryHost. */
export const PROMOTIONS_QUEUE = 'runtime-cloud-promotions';

export type ApplicationProperties = Readonly<Record<string, string | number | boolean | null>>;

/** A message as a sender hands it over. */
export interface OutgoingMessage {
  readonly messageId: string;
  /** The body as text; JSON bodies are JSON text with contentType `application/json`. */
  readonly body: string;
  readonly contentType?: string;
  readonly correlationId?: string;
  readonly subject?: string;
  readonly applicationProperties?: ApplicationProperties;
}

/** A message held in a queue (or its dead-letter sub-queue). */
export interface QueuedMessage {
  readonly sequenceNumber: number;
  readonly queue: string;
  readonly messageId: string;
  readonly body: string;
  readonly contentType: string | null;
  readonly correlationId: string | null;
  readonly subject: string | null;
  readonly applicationProperties: ApplicationProperties;
  readonly enqueuedAt: Date;
  readonly deliveryCount: number;
  readonly deadLetter: { readonly reason: string; readonly description: string | null; readonly at: Date } | null;
}

/** A message locked to one receiver: settle it with its lock token. */
export interface ReceivedMessage extends QueuedMessage {
  readonly lockToken: string;
  readonly lockedUntil: Date;
}

export type EnqueueResult =
  | { readonly kind: 'enqueued'; readonly sequenceNumber: number }
  | { readonly kind: 'duplicate' };

/**
 * The body handed to a function, as @azure/functions does with the string the Functions host passes
 * (`tryJsonParse`): whatever parses as JSON arrives parsed, anything else as the text itself.
 */
export function bodyForHandler(message: Pick<QueuedMessage, 'body'>): unknown {
  try {
    return JSON.parse(message.body) as unknown;
  } catch {
    return message.body;
  }
}

/** After a failed delivery: true when the message must go to the dead-letter sub-queue instead of back to the queue. */
export function exhaustedDeliveries(deliveryCount: number, maxDeliveryCount: number): boolean {
  return deliveryCount >= maxDeliveryCount;
}
