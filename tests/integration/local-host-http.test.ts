import { app, type HttpRequest, type InvocationContext } from '@azure/functions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { endpoint } from '../../functions/http/endpoint';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { startTestHost, type TestHost } from '../support/local-host';

// A function registered through the real @azure/functions API, before the host binds registrations.
app.http('echoForTest', {
  route: 'test/echo/{id}/{rest?}',
  methods: ['GET', 'POST'],
  handler: async (request: HttpRequest, context: InvocationContext) => ({
    status: 200,
    headers: { 'x-function': context.functionName },
    jsonBody: {
      method: request.method,
      params: request.params,
      query: Object.fromEntries(request.query),
      header: request.headers.get('x-probe'),
      body: request.method === 'POST' ? await request.text() : null,
      invocationId: context.invocationId,
    },
  }),
});

// Product endpoints built with `endpoint`: one validates a body, one fails unexpectedly. Neither is in the API's document.
app.http('validatesForTest', {
  route: 'test/validates',
  methods: ['POST'],
  handler: endpoint({ localOnly: true, scope: 'factory.health.read', body: lazySchema((z) => z.object({ name: z.string().min(1), count: z.number().int().positive() })) }, async ({ body }) => ({
    status: 200,
    jsonBody: body,
  })),
});
app.http('failsForTest', {
  route: 'test/fails',
  methods: ['GET'],
  handler: endpoint({ localOnly: true, scope: 'factory.health.read' }, async () => {
    throw new Error('secret internal detail');
  }),
});

describe('local host HTTP binding', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when a registered route is called, then the handler gets params, query, headers and body', async () => {
    const response = await host.fetch('/test/echo/42/more?x=1&y=two', {
      method: 'POST',
      headers: { 'x-probe': 'yes', 'content-type': 'text/plain' },
      body: 'hello',
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('x-function')).toBe('echoForTest');
    const body = (await response.json()) as { invocationId: string };
    expect(body).toMatchObject({
      method: 'POST',
      params: { id: '42', rest: 'more' },
      query: { x: '1', y: 'two' },
      header: 'yes',
      body: 'hello',
    });
    expect(body.invocationId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('when the optional segment is absent, then the route still matches', async () => {
    const response = await host.fetch('/test/echo/7');
    expect(response.status).toBe(200);
    expect(((await response.json()) as { params: unknown }).params).toEqual({ id: '7' });
  });

  it('when no route matches, then 404 problem+json; a wrong method, 405; each with type, title, status and code', async () => {
    const missing = await host.fetch('/nothing/here');
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toBe('application/problem+json');
    expect(await missing.json()).toEqual({
      type: 'https://runtime-cloud.dev/problems/http-route-not-found',
      title: 'Not found',
      status: 404,
      code: 'HTTP.ROUTE_NOT_FOUND',
      detail: 'GET /nothing/here',
    });
    const wrongMethod = await host.fetch('/test/echo/1', { method: 'DELETE' });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('content-type')).toBe('application/problem+json');
    expect(await wrongMethod.json()).toMatchObject({ status: 405, code: 'HTTP.METHOD_NOT_ALLOWED', title: 'Method not allowed' });
  });

  it('when a body exceeds the host limit, then 413 REQUEST.TOO_LARGE and the host keeps serving', async () => {
    const response = await host.fetch('/test/echo/1', { method: 'POST', body: 'x'.repeat(5 * 1024 * 1024) });
    expect(response.status).toBe(413);
    expect(await response.json()).toMatchObject({ status: 413, code: 'REQUEST.TOO_LARGE', limitBytes: 4 * 1024 * 1024 });
    expect((await host.fetch('/test/echo/2')).status).toBe(200);
  });

  describe('product endpoints', () => {
    const claims = { scopes: ['factory.health.read'] };

    it('when the body is malformed JSON, then 400 problem+json', async () => {
      const response = await host.fetch('/test/validates', { method: 'POST', body: '{"name":', claims });
      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(await response.json()).toMatchObject({ code: 'REQUEST.MALFORMED_JSON', status: 400 });
    });

    it('when fields are invalid, then 400 listing each field', async () => {
      const response = await host.fetch('/test/validates', { method: 'POST', body: JSON.stringify({ name: '', count: -1 }), claims });
      expect(response.status).toBe(400);
      const body = (await response.json()) as { errors: { field: string }[] };
      expect(body.errors.map((e) => e.field).sort()).toEqual(['count', 'name']);
    });

    it('when the body is over the product limit, then 413', async () => {
      const response = await host.fetch('/test/validates', {
        method: 'POST',
        body: JSON.stringify({ name: 'x'.repeat(300 * 1024), count: 1 }),
        claims,
      });
      expect(response.status).toBe(413);
      expect(await response.json()).toMatchObject({ code: 'REQUEST.TOO_LARGE' });
    });

    it('when the handler fails unexpectedly, then 500 with a correlation id and no internals', async () => {
      const response = await host.fetch('/test/fails', { claims });
      expect(response.status).toBe(500);
      const text = await response.text();
      expect(text).not.toContain('secret internal detail');
      expect(JSON.parse(text)).toMatchObject({
        status: 500,
        code: 'INTERNAL.UNEXPECTED',
        correlationId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      });
    });
  });
});

describe('local host HTTP binding with malformed request lines', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when the path is not validly percent-encoded, then 400 and the host keeps serving', async () => {
    const response = await host.fetch('/test/echo/%ZZ');
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(await response.json()).toMatchObject({ status: 400, code: 'REQUEST.BAD_TARGET', title: 'Bad request' });
    expect((await host.fetch('/test/echo/ok')).status).toBe(200);
  });

  it('when a parameter is percent-encoded, then the handler sees it decoded once', async () => {
    const response = await host.fetch('/test/echo/a%2Fb%2541');
    expect(((await response.json()) as { params: unknown }).params).toEqual({ id: 'a/b%41' });
  });

  it('when the Host header is not a valid host, then 400', async () => {
    const { request } = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: host.url.port, path: '/test/echo/1', headers: { host: 'bad host:x' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(400);
    expect((await host.fetch('/test/echo/ok')).status).toBe(200);
  });
});
