import type { AppError, ErrorKind } from '../errors/app-error';

/**
 * problem+json (RFC 9457), built here only: the product's HTTP functions and the local host's own routes answer
 * every failure with it. Every problem has `type`, `title`, `status` and a stable `code`.
 */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** The HTTP status of each kind of failure. */
export const STATUS_BY_KIND: Readonly<Record<ErrorKind, number>> = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  'not-found': 404,
  conflict: 409,
  gone: 410,
  unprocessable: 422,
  'too-large': 413,
  limit: 429,
  unavailable: 503,
  internal: 500,
};

/**
 * One problem. Example: `{ status: 405, code: 'HTTP.METHOD_NOT_ALLOWED', title: 'Method not allowed', detail: 'DELETE /x' }`.
 */
export interface Problem {
  readonly status: number;
  /** Stable, dotted upper case; `type` is derived from it. Example: `CAPACITY.QUOTA_EXCEEDED`. */
  readonly code: string;
  readonly title: string;
  readonly detail?: string;
  /** Extension members, safe to show a client. Example: `{ used: 50, limit: 50 }`. */
  readonly extensions?: Readonly<Record<string, unknown>>;
}

/** A problem as plain status, headers and body text, which any HTTP layer can send as it is. */
export interface ProblemResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** The `type` URI of a problem code. Example: `CAPACITY.QUOTA_EXCEEDED` → `https://runtime-cloud.dev/problems/capacity-quota-exceeded`. */
export function problemTypeUri(code: string): string {
  return `https://runtime-cloud.dev/problems/${code.toLowerCase().replace(/[._]/g, '-')}`;
}

export function problemResponse(problem: Problem, headers: Readonly<Record<string, string>> = {}): ProblemResponse {
  const { status, code, title, detail, extensions } = problem;
  const members = { type: problemTypeUri(code), title, status, code };
  return {
    status,
    headers: { 'content-type': PROBLEM_CONTENT_TYPE, ...headers },
    // The members lead for readers, and are set again last so that no extension member can replace them.
    body: JSON.stringify({ ...members, ...(detail === undefined ? {} : { detail }), ...extensions, ...members }),
  };
}

/**
 * An expected failure as a problem: its kind gives the status, its details the extension members. An
 * unauthorized answer carries `WWW-Authenticate`; `details.retryAfterSeconds` (quota, exhaustion, store
 * contention) becomes `Retry-After` in whole seconds, at least 1.
 */
export function errorProblem(error: AppError): ProblemResponse {
  const headers: Record<string, string> = {};
  if (error.kind === 'unauthorized') {
    headers['www-authenticate'] = `Bearer error="invalid_token", error_description="${error.message.replace(/"/g, "'")}"`;
  }
  if (typeof error.details.retryAfterSeconds === 'number') {
    headers['retry-after'] = String(Math.max(1, Math.ceil(error.details.retryAfterSeconds)));
  }
  return problemResponse(
    { status: STATUS_BY_KIND[error.kind], code: error.code, title: error.message, extensions: error.details },
    headers,
  );
}

/** An unexpected failure: nothing about it reaches the client except the id under which it was logged. */
export function internalProblem(correlationId: string): ProblemResponse {
  return problemResponse({
    status: 500,
    code: 'INTERNAL.UNEXPECTED',
    title: 'Internal error',
    detail: 'the request failed unexpectedly; quote the correlation id when reporting it',
    extensions: { correlationId },
  });
}
