import { HttpRequest, HttpResponse, type HttpRequestInit, type HttpResponseInit, type InvocationContext } from '@azure/functions';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { ensureError } from '../../shared/platform/errors/app-error';
import { errorProblem, internalProblem, problemResponse, type Problem, type ProblemResponse } from '../../shared/platform/http/problem';
import { isStoreUnavailable, storeUnavailable } from '../../shared/platform/sql/transaction';
import type { InvocationContexts } from '../functions-core/invocation-contexts';
import { triggerOf, type Registration } from '../functions-core/registry';
import { BufferedRequest } from './buffered-request';
import { compileRoute, type CompiledRoute } from './route-template';

/** The local host reads at most this much of a request body; the functions layer applies the product's own limit. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

/** How long a request's body may take to arrive when the host is not told otherwise (config `RuntimeCloud__Local__BodyTimeoutMs`). */
const DEFAULT_BODY_TIMEOUT_MS = 30_000;
/** How long a connection whose body timed out stays open after the 408, for the client to read it. */
const BODY_TIMEOUT_LINGER_MS = 1000;

/** A request to a raw (non-function) route of the local host, such as the Durable Functions HTTP API. */
export interface RawRequest {
  readonly method: string;
  readonly url: URL;
  readonly params: Readonly<Record<string, string>>;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: Buffer;
}

export interface RawResponse {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Objects are sent as JSON. */
  readonly body?: unknown;
}

export type RawHandler = (request: RawRequest) => Promise<RawResponse>;

interface Route {
  readonly methods: readonly string[];
  readonly route: CompiledRoute;
  readonly invoke: (request: IncomingMessage, body: Buffer, url: URL, params: Record<string, string>) => Promise<Sent>;
}

interface Sent {
  status: number;
  headers: [string, string][];
  body: Buffer;
}

export type LogHandler = (level: string, functionName: string, ...args: unknown[]) => void;

/**
 * Binds `httpTrigger` functions to a Node HTTP server: route templates with params, methods, query, headers and
 * body become a real `HttpRequest`; the handler gets a real `InvocationContext`.
 */
export class HttpBinding {
  readonly #routes: Route[] = [];
  readonly #server: Server;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #prefix: string;
  readonly #log: LogHandler;
  readonly #invocations: InvocationContexts;
  readonly #bodyTimeoutMs: number;

  /**
   * `bodyTimeoutMs`: how long a request's body may take to arrive once its headers are in; a client still sending
   * then (trickling bytes, or stalled) is answered 408 and disconnected, so it holds no handler slot or socket.
   * Example: `30000`.
   */
  constructor(options: { routePrefix: string; log: LogHandler; invocations: InvocationContexts; bodyTimeoutMs?: number }) {
    this.#invocations = options.invocations;
    this.#bodyTimeoutMs = options.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS;
    this.#prefix = options.routePrefix.replace(/^\/+|\/+$/g, '');
    this.#log = options.log;
    this.#server = createServer((req, res) => {
      const work = this.#handle(req, res);
      this.#inFlight.add(work);
      void work.finally(() => this.#inFlight.delete(work));
    });
    this.#server.keepAliveTimeout = 5000;
    this.#server.on('clientError', answerClientError);
  }

  /** Binds one registered `httpTrigger` function. */
  addFunction(registration: Registration): void {
    const trigger = triggerOf(registration);
    const name = registration.metadata.name;
    const route = typeof trigger.route === 'string' ? trigger.route : name;
    const methods = Array.isArray(trigger.methods) ? (trigger.methods as string[]) : ['GET', 'POST'];
    const handler = registration.callback as unknown as (req: HttpRequest, ctx: InvocationContext) => Promise<unknown>;
    this.#routes.push({
      methods: methods.map((m) => m.toUpperCase()),
      route: compileRoute(this.#prefix ? `${this.#prefix}/${route}` : route),
      invoke: async (req, body, url, params) => {
        const method = req.method ?? 'GET';
        const nativeRequest = new BufferedRequest(url.toString(), method, flattenHeaders(req), body);
        const request = new HttpRequest({
          method,
          url: url.toString(),
          query: Object.fromEntries(url.searchParams),
          params: streamModeParams(url.searchParams, params),
          nativeRequest,
        } as HttpRequestInit);
        const invocationId = randomUUID();
        const context = this.#invocations.create(registration, {
          invocationId,
          logHandler: (level, ...args) => this.#log(level, name, ...args),
        });
        const result = await handler(request, context);
        return toSent(result);
      },
    });
  }

  /** Adds a route that the local host itself serves (local-only APIs); `template` is matched without the prefix. */
  addRawRoute(methods: readonly string[], template: string, handler: RawHandler): void {
    this.#routes.push({
      methods: methods.map((m) => m.toUpperCase()),
      route: compileRoute(template),
      invoke: async (req, body, url, params) => {
        const response = await handler({ method: req.method ?? 'GET', url, params, headers: req.headers, body });
        const headers = Object.entries(response.headers ?? {});
        if (response.body === undefined) return { status: response.status, headers, body: Buffer.alloc(0) };
        if (Buffer.isBuffer(response.body) || typeof response.body === 'string') {
          return { status: response.status, headers, body: Buffer.from(response.body) };
        }
        if (!headers.some(([k]) => k.toLowerCase() === 'content-type')) headers.push(['content-type', 'application/json']);
        return { status: response.status, headers, body: Buffer.from(JSON.stringify(response.body)) };
      },
    });
  }

  async listen(port: number, host = '127.0.0.1'): Promise<URL> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, host, () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    const address = this.#server.address() as AddressInfo;
    return new URL(`http://${host}:${address.port}/`);
  }

  /** Stops accepting connections and waits for requests in flight. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.#server.closeIdleConnections();
    await Promise.allSettled([...this.#inFlight]);
    this.#server.closeAllConnections();
    await closed;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL | undefined;
    try {
      url = requestUrl(req);
      await this.#route(req, res, url);
    } catch (error) {
      if (error instanceof BadRequestLine) {
        req.resume();
        if (!res.headersSent) send(res, problem({ status: 400, code: 'REQUEST.BAD_TARGET', title: 'Bad request', detail: error.message }));
        return;
      }
      // The store went away under a local endpoint (its connections killed, a restart): 503, as the API answers it.
      if (isStoreUnavailable(ensureError(error))) {
        this.#log('warning', 'local-host', `the store is unavailable for ${req.method ?? ''} ${url?.pathname ?? ''}: ${ensureError(error).message}`);
        if (!res.headersSent) send(res, sentOf(errorProblem(storeUnavailable())));
        else res.destroy();
        return;
      }
      // Handlers map their own errors; reaching here is a host defect, never the client's input.
      const correlationId = randomUUID();
      this.#log('error', 'local-host', `unhandled error for ${req.method ?? ''} ${url?.pathname ?? req.url ?? ''} [${correlationId}]`, error);
      if (!res.headersSent) send(res, sentOf(internalProblem(correlationId)));
      else res.destroy();
    }
  }

  async #route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    // Matched on the encoded path; parameters are decoded once, by the route.
    const path = url.pathname.replace(/\/+$/, '') || '/';
    let pathMatched = false;
    let found: { route: Route; params: Record<string, string> } | undefined;
    for (const route of this.#routes) {
      let params: Record<string, string> | undefined;
      try {
        params = route.route.match(path);
      } catch {
        throw new BadRequestLine(`the path ${url.pathname} is not validly percent-encoded`);
      }
      if (!params) continue;
      pathMatched = true;
      if (route.methods.includes(req.method ?? 'GET')) {
        found = { route, params };
        break;
      }
    }
    if (!found) {
      req.resume();
      const detail = `${req.method ?? ''} ${url.pathname}`;
      send(
        res,
        pathMatched
          ? problem({ status: 405, code: 'HTTP.METHOD_NOT_ALLOWED', title: 'Method not allowed', detail })
          : problem({ status: 404, code: 'HTTP.ROUTE_NOT_FOUND', title: 'Not found', detail }),
      );
      return;
    }
    const body = await readBody(req, this.#bodyTimeoutMs);
    if (body === 'timed-out') {
      const timedOut = problem({
        status: 408,
        code: 'REQUEST.BODY_TIMEOUT',
        title: `the request body did not arrive within ${this.#bodyTimeoutMs} ms`,
        extensions: { timeoutMs: this.#bodyTimeoutMs },
      });
      // The connection closes a moment after the answer, the rest of the body read and dropped meanwhile: closing it
      // with bytes unread would reset it, and the client could lose this answer.
      req.resume();
      res.once('finish', () => setTimeout(() => req.destroy(), BODY_TIMEOUT_LINGER_MS).unref());
      send(res, timedOut);
      return;
    }
    if (body === 'too-large') {
      send(
        res,
        problem({
          status: 413,
          code: 'REQUEST.TOO_LARGE',
          title: `request bodies are limited to ${MAX_BODY_BYTES} bytes`,
          extensions: { limitBytes: MAX_BODY_BYTES },
        }),
      );
      return;
    }
    send(res, await found.route.invoke(req, body, url, found.params));
  }
}

/**
 * A request Node's parser refuses before any handler sees it (headers past its size limit, a malformed request line
 * or header, headers too slow to arrive): answered with a problem, as every other refusal, instead of Node's bare
 * status line, and the connection closed.
 */
function answerClientError(error: Error & { code?: string }, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const refused =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? { status: 431, code: 'REQUEST.HEADERS_TOO_LARGE', title: 'Request header fields too large', phrase: 'Request Header Fields Too Large' }
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' || error.code === 'HPE_HEADERS_TIMEOUT'
        ? { status: 408, code: 'REQUEST.TIMEOUT', title: 'The request did not arrive in time', phrase: 'Request Timeout' }
        : { status: 400, code: 'REQUEST.MALFORMED', title: 'The request could not be parsed', phrase: 'Bad Request' };
  const response = problemResponse({ status: refused.status, code: refused.code, title: refused.title });
  const head = [`HTTP/1.1 ${refused.status} ${refused.phrase}`, `content-type: ${response.headers['content-type'] ?? ''}`, `content-length: ${Buffer.byteLength(response.body)}`, 'connection: close'];
  socket.end(`${head.join('\r\n')}\r\n\r\n${response.body}`);
}

/**
 * `request.params` as a function sees it on Azure with HTTP streams (the library's default on Node 20): the library
 * builds it from the trigger metadata, which carries every query value as well as the route's values, the route's
 * winning a name both have. A repeated query name carries its values joined by commas, as ASP.NET's query does.
 */
export function streamModeParams(query: URLSearchParams, routeParams: Readonly<Record<string, string>>): Record<string, string> {
  const params: Record<string, string> = {};
  for (const name of new Set(query.keys())) params[name] = query.getAll(name).join(',');
  return { ...params, ...routeParams };
}

/** The request line or Host header cannot be read: the client's fault, answered 400. */
class BadRequestLine extends Error {}

function requestUrl(req: IncomingMessage): URL {
  try {
    return new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
  } catch {
    throw new BadRequestLine('the request target or Host header is not a valid URL');
  }
}

function flattenHeaders(req: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [key, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers[key] = Array.isArray(value) ? value.join(', ') : value;
  }
  return headers;
}

/** The whole body; 'too-large' past MAX_BODY_BYTES; 'timed-out' when it has not all arrived within `timeoutMs`. */
function readBody(req: IncomingMessage, timeoutMs: number): Promise<Buffer | 'too-large' | 'timed-out'> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) tooLarge = true;
      else chunks.push(chunk);
    };
    const timer = setTimeout(() => {
      req.off('data', onData);
      resolve('timed-out');
    }, timeoutMs);
    req.on('data', onData);
    req.on('end', () => {
      clearTimeout(timer);
      resolve(tooLarge ? 'too-large' : Buffer.concat(chunks));
    });
    req.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

async function toSent(result: unknown): Promise<Sent> {
  const plain = plainSent(result);
  if (plain) return plain;
  const response = result instanceof HttpResponse ? result : new HttpResponse(result as HttpResponseInit | undefined);
  const headers: [string, string][] = [];
  response.headers.forEach((value, key) => headers.push([key, value]));
  for (const cookie of response.cookies) headers.push(['set-cookie', `${cookie.name}=${cookie.value}`]);
  const body = Buffer.from(await response.arrayBuffer());
  return { status: response.status, headers, body };
}

/** Statuses that never carry a body (the Fetch Response drops it too). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/**
 * The common handler result (a plain init with a JSON or string body or none, headers as a record, no cookies)
 * converted without building a Fetch Response: the same status, headers and bytes, at a fraction of the cost.
 * Anything else returns undefined and goes through HttpResponse.
 */
function plainSent(result: unknown): Sent | undefined {
  if (result === null || typeof result !== 'object' || result instanceof HttpResponse) return undefined;
  const init = result as HttpResponseInit;
  if (init.cookies?.length || (init.headers !== undefined && (typeof init.headers !== 'object' || init.headers instanceof Headers || Array.isArray(init.headers)))) {
    return undefined;
  }
  const status = init.status ?? 200;
  const headers = new Map<string, string>();
  for (const [key, value] of Object.entries(init.headers ?? {})) headers.set(key.toLowerCase(), String(value));
  let body = Buffer.alloc(0);
  if (!NULL_BODY_STATUSES.has(status)) {
    if (init.jsonBody !== undefined && init.jsonBody !== null) {
      body = Buffer.from(JSON.stringify(init.jsonBody));
      if (!headers.has('content-type')) headers.set('content-type', 'application/json');
    } else if (typeof init.body === 'string') {
      body = Buffer.from(init.body);
      if (!headers.has('content-type')) headers.set('content-type', 'text/plain;charset=UTF-8');
    } else if (init.body !== undefined && init.body !== null) {
      return undefined;
    }
  }
  return { status, headers: [...headers], body };
}

/** A failure of the host itself (no route, wrong method, body too large, unreadable request line). */
function problem(details: Problem): Sent {
  return sentOf(problemResponse(details));
}

function sentOf(response: ProblemResponse): Sent {
  return { status: response.status, headers: Object.entries(response.headers), body: Buffer.from(response.body) };
}

function send(res: ServerResponse, sent: Sent): void {
  // writeHead with a flat [name, value, …] list is Node's cheapest way to send headers (repeated names allowed).
  const raw: string[] = [];
  for (const [key, value] of sent.headers) raw.push(key, value);
  raw.push('content-length', String(sent.body.length));
  res.writeHead(sent.status, raw);
  res.end(sent.body);
}
