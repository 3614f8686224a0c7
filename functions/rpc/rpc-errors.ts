import { randomUUID } from 'node:crypto';
import { Code, ConnectError, createContextKey } from '@connectrpc/connect';
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from '../../contracts/gen/google/rpc/error_details_pb';
import { AppError, ensureError, type ErrorKind } from '../../shared/platform/errors/app-error';
import { isStoreUnavailable, storeUnavailable } from '../../shared/platform/sql/transaction';

/**
 * The status code of each kind of failure, for callers over gRPC and Connect: what `STATUS_BY_KIND`
 * (shared/platform/http/problem.ts) is for HTTP. Every problem of the error catalogues (each module's `errors.ts`) has a
 * kind, so this one table maps them all: a fencing mismatch (`conflict`) and a lease gone (`gone`) are
 * FAILED_PRECONDITION, a quota or a full pool (`limit`) RESOURCE_EXHAUSTED with RetryInfo.
 */
export const CODE_BY_KIND: Readonly<Record<ErrorKind, Code>> = {
  validation: Code.InvalidArgument,
  unauthorized: Code.Unauthenticated,
  forbidden: Code.PermissionDenied,
  'not-found': Code.NotFound,
  conflict: Code.FailedPrecondition,
  gone: Code.FailedPrecondition,
  unprocessable: Code.FailedPrecondition,
  'too-large': Code.ResourceExhausted,
  limit: Code.ResourceExhausted,
  unavailable: Code.Unavailable,
  internal: Code.Internal,
};

/** The `domain` of every ErrorInfo this host sends; its `reason` is the problem's code. */
export const ERROR_DOMAIN = 'runtime-cloud.connectsoft';

/** Where a call's unexpected failures are logged (the local host's log, a Function invocation's); set per server. */
export const RPC_LOG = createContextKey<(message: string, error: Error) => void>((message, error) => console.error(message, error), {
  description: 'the log of unexpected failures',
});

/**
 * A failure as the status a caller reads: an AppError by its kind, with ErrorInfo (its code and details), RetryInfo when it
 * says when to retry, and BadRequest listing invalid fields; a store that does not answer UNAVAILABLE; anything else
 * INTERNAL carrying only the correlation id under which it was logged.
 */
export function rpcError(thrown: unknown, log: (message: string, error: Error) => void): ConnectError {
  const error = ensureError(thrown);
  if (error instanceof ConnectError) return error;
  if (error instanceof AppError) return fromAppError(error);
  if (isStoreUnavailable(error)) return fromAppError(storeUnavailable());
  const correlationId = randomUUID();
  log(`unhandled error [${correlationId}]: ${error.stack ?? error.message}`, error);
  return new ConnectError(`the call failed unexpectedly; quote the correlation id ${correlationId} when reporting it`, Code.Internal, undefined, [
    { desc: ErrorInfoSchema, value: { reason: 'INTERNAL.UNEXPECTED', domain: ERROR_DOMAIN, metadata: { correlationId } } },
  ]);
}

function fromAppError(error: AppError): ConnectError {
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(error.details)) {
    if (value !== undefined) metadata[key] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  const details: ConstructorParameters<typeof ConnectError>[3] = [{ desc: ErrorInfoSchema, value: { reason: error.code, domain: ERROR_DOMAIN, metadata } }];
  const retryAfter = error.details.retryAfterSeconds;
  if (typeof retryAfter === 'number') {
    details.push({ desc: RetryInfoSchema, value: { retryDelay: { seconds: BigInt(Math.max(1, Math.ceil(retryAfter))) } } });
  }
  const fields = fieldErrors(error.details.errors);
  if (fields.length > 0) details.push({ desc: BadRequestSchema, value: { fieldViolations: fields } });
  return new ConnectError(error.message, CODE_BY_KIND[error.kind], undefined, details);
}

function fieldErrors(errors: unknown): { field: string; description: string }[] {
  if (!Array.isArray(errors)) return [];
  return errors.flatMap((e: unknown) => {
    const { field, message } = (e ?? {}) as { field?: unknown; message?: unknown };
    return typeof field === 'string' && typeof message === 'string' ? [{ field, description: message }] : [];
  });
}
