import { AppError, type ErrorKind } from './app-error';

/**
 * One problem a module answers with: its stable code, its kind (which gives the HTTP status, platform/http/problem.ts)
 * and a short title. Each module lists its problems in its `errors.ts`; throw sites name an entry, never a code
 * string, and the OpenAPI document lists every entry (functions/http/openapi.ts).
 */
export interface ProblemEntry {
  /** Example: `CAPACITY.QUOTA_EXCEEDED`. */
  readonly code: string;
  readonly kind: ErrorKind;
  /** Example: `Quota exceeded`. */
  readonly title: string;
}

export type ProblemCatalogue = Readonly<Record<string, ProblemEntry>>;

/** An AppError of a catalogued problem, with this occurrence's message and client-safe details. */
export function problemError(entry: ProblemEntry, message: string, details: Readonly<Record<string, unknown>> = {}): AppError {
  return new AppError(entry.code, entry.kind, message, details);
}
