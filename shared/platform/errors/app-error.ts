/** What kind of failure an error is; only `functions/` maps a kind to an HTTP status, a retry or a dead-letter. */
export type ErrorKind =
  | 'validation'
  | 'unauthorized'
  | 'forbidden'
  | 'not-found'
  | 'gone'
  | 'conflict'
  /** Well-formed, but refused as asked (422): for example an idempotency key reused for another request. */
  | 'unprocessable'
  | 'limit'
  | 'too-large'
  | 'unavailable'
  | 'internal';

/** An expected failure with a stable code (`CAPACITY.QUOTA_EXCEEDED`) and details that are safe to show a client. */
export class AppError extends Error {
  constructor(
    readonly code: string,
    readonly kind: ErrorKind,
    message: string,
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
    this.name = 'AppError';
  }
}

/** Turns anything thrown into an Error, so `catch` blocks never handle `unknown` or `any`. */
export function ensureError(value: unknown): Error {
  if (value instanceof Error) return value;
  let text: string;
  try {
    text = typeof value === 'string' ? value : JSON.stringify(value);
  } catch {
    text = String(value);
  }
  return new Error(`Non-Error thrown: ${text}`);
}

/**
 * An expected failure as an AppError: an AppError as it is; anything else is rethrown (a fault, such as a store
 * outage, that the caller's retry handles), unless `fallbackCode` says what it means (for example a resolver that
 * failed without a code).
 */
export function expectedAppError(thrown: unknown, fallbackCode?: string): AppError {
  const error = ensureError(thrown);
  if (error instanceof AppError) return error;
  if (fallbackCode) return new AppError(fallbackCode, 'unavailable', error.message);
  throw error;
}
