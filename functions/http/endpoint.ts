import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { requireScope, resolveTenant, type Principal, type Scope, type TenantFilter } from '../../shared/platform/auth/auth';
import { AppError, ensureError, type ErrorKind } from '../../shared/platform/errors/app-error';
import type { Deps } from '../../shared/deps';
import { getDeps } from '../runtime';

/** Request bodies larger than this are refused with 413. */
export const MAX_BODY_BYTES = 256 * 1024;

const STATUS: Record<ErrorKind, number> = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  'not-found': 404,
  conflict: 409,
  gone: 410,
  'too-large': 413,
  limit: 429,
  unavailable: 503,
  internal: 500,
};

export interface EndpointInput<B> {
  readonly request: HttpRequest;
  readonly context: InvocationContext;
  readonly deps: Deps;
  readonly principal: Principal;
  /** The tenants this request acts on (from the token, or named with `X-Tenant-Id` / `?tenant=`). */
  readonly tenants: () => TenantFilter;
  readonly body: B;
}

export interface EndpointSpec<B> {
  /** The scope the caller must hold. */
  readonly scope: Scope;
  /** Schema of the JSON body; omit for requests without one. */
  readonly body?: z.ZodType<B>;
}

/**
 * Wraps a use case as an HTTP handler: bearer auth and scope, JSON body validation, and the mapping of every
 * failure to problem+json (RFC 9457). Unexpected errors become a 500 carrying a correlation id that is logged.
 */
export function endpoint<B = undefined>(
  spec: EndpointSpec<B>,
  run: (input: EndpointInput<B>) => Promise<HttpResponseInit>,
): (request: HttpRequest, context: InvocationContext) => Promise<HttpResponseInit> {
  return async (request, context) => {
    try {
      const deps = await getDeps();
      const principal = await deps.auth.authenticate(request.headers.get('authorization'));
      requireScope(principal, spec.scope);
      const body = spec.body ? await readJson(request, spec.body) : (undefined as B);
      const requestedTenant = request.headers.get('x-tenant-id') ?? request.query.get('tenant') ?? undefined;
      const tenants = () => resolveTenant(principal, spec.scope, requestedTenant);
      return await run({ request, context, deps, principal, tenants, body });
    } catch (error) {
      return errorResponse(error, context);
    }
  };
}

export function errorResponse(thrown: unknown, context: InvocationContext): HttpResponseInit {
  const error = ensureError(thrown);
  if (error instanceof AppError) return problemResponse(error);
  const correlationId = randomUUID();
  context.error(`unhandled error [${correlationId}]`, error);
  return {
    status: 500,
    headers: { 'content-type': 'application/problem+json' },
    jsonBody: {
      type: 'about:blank',
      title: 'Internal error',
      status: 500,
      detail: 'the request failed unexpectedly; quote the correlation id when reporting it',
      correlationId,
    },
  };
}

export function problemResponse(error: AppError, headers: Record<string, string> = {}): HttpResponseInit {
  const status = STATUS[error.kind];
  const extra: Record<string, string> = { ...headers };
  if (error.kind === 'unauthorized') {
    extra['www-authenticate'] = `Bearer error="invalid_token", error_description="${error.message.replace(/"/g, "'")}"`;
  }
  if (typeof error.details.retryAfterSeconds === 'number') {
    extra['retry-after'] = String(Math.max(1, Math.ceil(error.details.retryAfterSeconds)));
  }
  return {
    status,
    headers: { 'content-type': 'application/problem+json', ...extra },
    body: JSON.stringify({
      type: `https://runtime-cloud.dev/problems/${error.code.toLowerCase().replace(/[._]/g, '-')}`,
      title: error.message,
      status,
      code: error.code,
      ...error.details,
    }),
  };
}

async function readJson<B>(request: HttpRequest, schema: z.ZodType<B>): Promise<B> {
  const declared = Number(request.headers.get('content-length') ?? '0');
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  const text = await request.text();
  if (Buffer.byteLength(text) > MAX_BODY_BYTES) throw tooLarge();
  let value: unknown;
  try {
    value = text.length === 0 ? {} : JSON.parse(text);
  } catch {
    throw new AppError('REQUEST.MALFORMED_JSON', 'validation', 'the request body is not valid JSON');
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new AppError('REQUEST.INVALID', 'validation', 'the request body is not valid', {
      errors: parsed.error.issues.map((issue) => ({ field: issue.path.join('.') || '(body)', message: issue.message })),
    });
  }
  return parsed.data;
}

function tooLarge(): AppError {
  return new AppError('REQUEST.TOO_LARGE', 'too-large', `request bodies are limited to ${MAX_BODY_BYTES} bytes`, {
    limitBytes: MAX_BODY_BYTES,
  });
}

/** Validates query parameters; failures are 400 listing the fields. */
export function parseQuery<Q>(request: HttpRequest, schema: z.ZodType<Q>): Q {
  const parsed = schema.safeParse(Object.fromEntries(request.query.entries()));
  if (!parsed.success) {
    throw new AppError('REQUEST.INVALID_QUERY', 'validation', 'the query is not valid', {
      errors: parsed.error.issues.map((issue) => ({ field: issue.path.join('.'), message: issue.message })),
    });
  }
  return parsed.data;
}
