import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { Code, createConnectRouter, createContextValues, type ConnectRouter } from '@connectrpc/connect';
import { createAsyncIterable, type UniversalHandler } from '@connectrpc/connect/protocol';
import { MAX_BODY_BYTES } from '../http/endpoint';
import { logOf } from '../log';
import { RPC_LOG } from './rpc-errors';

/**
 * A Connect service served by an HTTP trigger, where the Functions host allows only HTTP requests: the Connect
 * protocol (JSON or binary) and gRPC-Web. gRPC needs HTTP/2 trailers, which a trigger's answer cannot carry. A server
 * stream's messages would reach the caller only when it ends, as the app does not enable HTTP streams (the Functions
 * host buffers a trigger's answer): a service served here answers its streaming calls `unimplemented` itself.
 */
export function connectTrigger(
  routes: (router: ConnectRouter) => void,
  options: {
    /** The path before the method's (`/<package>.<Service>/<Method>`). Example: `/runtime-cloud/connect`. */
    readonly prefix: string;
  },
): (request: HttpRequest, context: InvocationContext) => Promise<HttpResponseInit> {
  const router = createConnectRouter({ grpc: false, readMaxBytes: MAX_BODY_BYTES });
  routes(router);
  const handlers = new Map<string, UniversalHandler>(router.handlers.map((h) => [h.requestPath, h]));
  return async (request, context) => {
    const path = new URL(request.url).pathname;
    const handler = path.startsWith(options.prefix) ? handlers.get(path.slice(options.prefix.length)) : undefined;
    if (!handler) return connectError(404, Code.Unimplemented, `no method ${path}`);
    if (Number(request.headers.get('content-length') ?? '0') > MAX_BODY_BYTES) {
      return connectError(413, Code.ResourceExhausted, `requests are limited to ${MAX_BODY_BYTES} bytes`);
    }
    const body = new Uint8Array(await request.arrayBuffer());
    const answer = await handler({
      httpVersion: '1.1',
      method: request.method,
      url: request.url,
      header: new Headers([...request.headers]),
      body: createAsyncIterable([body]),
      signal: new AbortController().signal,
      contextValues: createContextValues().set(RPC_LOG, (message, error) => logOf(context).error(message, {}, error)),
    });
    const chunks: Uint8Array[] = [];
    for await (const chunk of answer.body ?? []) chunks.push(chunk);
    // The Functions host sets the length of what it sends itself.
    const headers = Object.fromEntries([...(answer.header ?? [])].filter(([name]) => name !== 'content-length'));
    return { status: answer.status, headers, body: Buffer.concat(chunks) };
  };
}

/** A Connect error answered before any handler ran, as the Connect protocol's unary error body. */
function connectError(status: number, code: Code, message: string): HttpResponseInit {
  return { status, headers: { 'content-type': 'application/json' }, jsonBody: { code: CODE_NAMES[code], message } };
}

const CODE_NAMES: Partial<Record<Code, string>> = { [Code.Unimplemented]: 'unimplemented', [Code.ResourceExhausted]: 'resource_exhausted' };
