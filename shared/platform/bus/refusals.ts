import { AppError } from '../errors/app-error';

/*
 * A message the bus refuses for good, as an EventPublisher reports it and the outbox relay dead-letters it. Apart from
 * the publishers, so that the relay, which the functions load at registration, loads no store code with them.
 */

/** Codes of a message the bus refuses for good, which the relay dead-letters (outbox-relay.service.ts). */
export const RefusalCodes = {
  /** Larger than the entity takes (Service Bus Standard: 256 KiB), even alone in a batch. */
  tooLarge: 'BUS.MESSAGE_TOO_LARGE',
} as const;

/** A message the bus refused for good, as `publish` reports it (`messageRefused`). */
export interface Refusal {
  readonly code: string;
  readonly messageId: string;
  /** How many messages of the publish call the bus accepted before this one; the ones after it were not sent. */
  readonly accepted: number;
  readonly reason: string;
}

/** What `publish` throws when the bus refused one message for good: the ones before it were accepted. */
export function messageRefused(refusal: Refusal): AppError {
  return new AppError(refusal.code, 'too-large', `message ${refusal.messageId} was refused by the bus: ${refusal.reason}`, { ...refusal });
}

/** The refusal a failed publish reports, or undefined for any other failure (a transient one: retried). */
export function refusalOf(error: Error): Refusal | undefined {
  if (!(error instanceof AppError) || !Object.values<string>(RefusalCodes).includes(error.code)) return undefined;
  const { messageId, accepted, reason } = error.details;
  return typeof messageId === 'string' && typeof accepted === 'number' ? { code: error.code, messageId, accepted, reason: String(reason) } : undefined;
}
