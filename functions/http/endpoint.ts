import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { requirePlatformPrincipal, requireScope, resolveTenant, type Principal, type Scope, type TenantFilter } from '../../shared/platform/auth/auth';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import { errorProblem, internalProblem } from '../../shared/platform/http/problem';
import { isStoreUnavailable, storeUnavailable } from '../../shared/platform/sql/transaction';
import { lazySchema, type LazySchema } from '../../shared/platform/validation/lazy-schema';
import { parseJsonBody, parseQueryParams } from '../../shared/platform/validation/validation';
import type { Deps } from '../../shared/deps';
import { getDeps } from '../runtime';
import type { ApiTag } from './api-tags';
import { logOf } from '../log';

/** Request bodies larger than this are refused with 413. */
export const MAX_BODY_BYTES = 256 * 1024;

export interface EndpointInput<B, Q = undefined> {
  readonly request: HttpRequest;
  readonly context: InvocationContext;
  readonly deps: Deps;
  readonly principal: Principal;
  /** The tenants this request acts on (from the token, or named with `X-Tenant-Id` / `?tenant=`). */
  readonly tenants: () => TenantFilter;
  readonly body: B;
  /** The query string parsed by `spec.query`. */
  readonly query: Q;
}

/**
 * How the OpenAPI document describes an operation (functions/http/openapi.ts), written beside its handler so that the
 * text changes with the code.
 */
export interface OperationText {
  /** The group it is listed under (functions/http/api-tags.ts). Example: `'Leases'`. */
  readonly tag: ApiTag;
  /** One line: what it does. Example: `'Acquire a capacity lease'`. */
  readonly summary: string;
  /**
   * What it does and answers, who may call it (beyond its scope, which the document states), and its notable
   * failures with their codes; CommonMark. Example: `'Grants units of a kind … 429 \`CAPACITY.QUOTA_EXCEEDED\` …'`.
   */
  readonly description: string;
}

/**
 * Every route of the deployed API carries its text; a route served by the local host only (`localOnly`: the twin's
 * routes, local/) is not in the document and needs none.
 */
export type Documented = (OperationText & { readonly localOnly?: false }) | (Partial<OperationText> & { readonly localOnly: true });

export interface EndpointOptions<B, Q = undefined> {
  /** The scope the caller must hold. */
  readonly scope: Scope;
  /** Schema of the JSON body (`lazySchema`, built on the first request); omit for requests without one. */
  readonly body?: LazySchema<z.ZodType<B>>;
  /** Schema of the query string (values arrive as strings: coerce; `lazySchema`); omit for requests without one. */
  readonly query?: LazySchema<z.ZodType<Q>>;
  /**
   * Platform administration, across tenants: a token bound to a tenant is refused (403) even when it holds the
   * scope, so a tenant's administrator cannot change pools, editions or which edition a tenant is on. The document
   * says so after the operation's description. Example: `true`.
   */
  readonly platformOnly?: boolean;
  /**
   * Schema of the JSON body a success answers with (`lazySchema`), for the OpenAPI document only: the handler's view
   * as clients may rely on it (tests/integration/openapi-responses.test.ts checks real answers against the document).
   * Example: `response: runViewSchema`.
   */
  readonly response?: LazySchema;
  /** Request headers the operation requires besides the bearer token, for the OpenAPI document. */
  readonly headers?: readonly { readonly name: string; readonly description: string }[];
}

export type EndpointSpec<B, Q = undefined> = EndpointOptions<B, Q> & Documented;

/**
 * Wraps a use case as an HTTP handler: bearer auth and scope, JSON body validation, and the mapping of every
 * failure to problem+json (RFC 9457). Unexpected errors become a 500 carrying a correlation id that is logged.
 */
export function endpoint<B = undefined, Q = undefined>(
  spec: EndpointSpec<B, Q>,
  run: (input: EndpointInput<B, Q>) => Promise<HttpResponseInit>,
): (request: HttpRequest, context: InvocationContext) => Promise<HttpResponseInit> {
  const handler = async (request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> => {
    try {
      const deps = await getDeps();
      const requestedTenant = request.headers.get('x-tenant-id') ?? request.query.get('tenant') ?? undefined;
      const { principal, tenants } = await authorize(deps, request.headers.get('authorization'), requestedTenant, spec);
      const body = spec.body ? await readJson(request, spec.body()) : (undefined as B);
      const query = spec.query ? parseQuery(request, spec.query()) : (undefined as Q);
      return await run({ request, context, deps, principal, tenants, body, query });
    } catch (error) {
      return errorResponse(error, context);
    }
  };
  specs.set(handler, spec);
  return handler;
}

const specs = new WeakMap<object, EndpointSpec<unknown, unknown>>();

/**
 * A route anyone may read without a token (what a caller needs before it can trust the host, such as its published
 * public keys): no authentication, failures mapped to problem+json as `endpoint` maps them; the OpenAPI document
 * lists it with `security: []`.
 */
export function publicEndpoint(
  text: OperationText,
  run: (input: { readonly request: HttpRequest; readonly context: InvocationContext; readonly deps: Deps }) => Promise<HttpResponseInit>,
): (request: HttpRequest, context: InvocationContext) => Promise<HttpResponseInit> {
  const handler = async (request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> => {
    try {
      return await run({ request, context, deps: await getDeps() });
    } catch (error) {
      return errorResponse(error, context);
    }
  };
  publicSpecs.set(handler, text);
  return handler;
}

const publicSpecs = new WeakMap<object, OperationText>();

/** The text of a `publicEndpoint` handler (the OpenAPI document lists it without security); undefined for others. */
export function publicSpec(handler: object): OperationText | undefined {
  return publicSpecs.get(handler);
}

/**
 * The one check of a caller, whichever protocol it calls by (this HTTP API, the LeaseService over gRPC or Connect):
 * its bearer token, the operation's scope (and platform administration where asked), and the tenants it acts on,
 * from the token or the tenant it names (`X-Tenant-Id`), resolved when the operation asks.
 */
export async function authorize(
  deps: Deps,
  authorization: string | null | undefined,
  requestedTenant: string | undefined,
  spec: Pick<EndpointOptions<unknown, unknown>, 'scope' | 'platformOnly'>,
): Promise<{ principal: Principal; tenants: () => TenantFilter }> {
  const principal = await deps.auth.authenticate(authorization);
  requireScope(principal, spec.scope);
  if (spec.platformOnly) requirePlatformPrincipal(principal);
  return { principal, tenants: () => resolveTenant(principal, spec.scope, requestedTenant) };
}

/**
 * Describes a handler that is not an `endpoint` (it answers some requests without a token) for the OpenAPI
 * document, with the spec of the requests that need one.
 */
export function describeHandler<B, Q>(handler: object, spec: EndpointSpec<B, Q>): void {
  specs.set(handler, spec);
}

const fileServers = new WeakSet<object>();

/** Marks a handler that serves files, not the API (the operator console's): the API document leaves it out. */
export function servesFiles(handler: object): void {
  fileServers.add(handler);
}

export function isFileServer(handler: object): boolean {
  return fileServers.has(handler);
}

/** The spec an `endpoint` handler was made from (the OpenAPI document is built from these); undefined for others. */
export function endpointSpec(handler: object): EndpointSpec<unknown, unknown> | undefined {
  return specs.get(handler);
}

export function errorResponse(thrown: unknown, context: InvocationContext): HttpResponseInit {
  const error = ensureError(thrown);
  if (error instanceof AppError) return errorProblem(error);
  if (isStoreUnavailable(error)) {
    logOf(context).warn(`the store is unavailable: ${error.message}`);
    return errorProblem(storeUnavailable());
  }
  const correlationId = randomUUID();
  logOf(context).error(`unhandled error [${correlationId}]: ${error.stack ?? error.message}`, {}, error);
  return internalProblem(correlationId);
}

async function readJson<B>(request: HttpRequest, schema: z.ZodType<B>): Promise<B> {
  const declared = Number(request.headers.get('content-length') ?? '0');
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  const text = await request.text();
  if (Buffer.byteLength(text) > MAX_BODY_BYTES) throw tooLarge();
  return parseJsonBody(text, schema);
}

function tooLarge(): AppError {
  return new AppError('REQUEST.TOO_LARGE', 'too-large', `request bodies are limited to ${MAX_BODY_BYTES} bytes`, {
    limitBytes: MAX_BODY_BYTES,
  });
}

/** `?limit=&cursor=` of every list (default 100, at most 1000), and `?tenant=` that names the tenant acted on. */
export const pageQuery = lazySchema((z) =>
  z.object({
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: z.string().min(1).optional(),
    tenant: z.string().optional(),
  }),
);

/** An `Idempotency-Key` (header, or the body field `idempotencyKey`): 1 to 200 characters. */
export const idempotencyKey = lazySchema((z) => z.string().min(1).max(200));

/**
 * The request's idempotency key, from the `Idempotency-Key` header or the body's field; both given must agree.
 * Undefined when the request has none.
 */
export function idempotencyKeyOf(request: HttpRequest, bodyKey: string | undefined): string | undefined {
  const headerKey = request.headers.get('idempotency-key') ?? undefined;
  if (headerKey !== undefined && bodyKey !== undefined && headerKey !== bodyKey) {
    throw new AppError('REQUEST.IDEMPOTENCY_KEY_MISMATCH', 'validation', 'the Idempotency-Key header and body field differ');
  }
  const key = bodyKey ?? headerKey;
  if (key !== undefined && !idempotencyKey().safeParse(key).success) {
    throw new AppError('REQUEST.INVALID', 'validation', 'the Idempotency-Key must be 1 to 200 characters');
  }
  return key;
}

/** The page request of a parsed `pageQuery`. */
export function pageOf(query: { limit: number; cursor?: string | undefined }): { limit: number; cursor?: string } {
  return { limit: query.limit, ...(query.cursor !== undefined ? { cursor: query.cursor } : {}) };
}

/** Validates query parameters; failures are 400 listing the fields. */
export function parseQuery<Q>(request: HttpRequest, schema: z.ZodType<Q>): Q {
  return parseQueryParams(request.query.entries(), schema);
}
