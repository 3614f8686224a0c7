import { app, type HttpRequest, type InvocationContext } from '@azure/functions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

  it('when no route matches, then 404 problem+json; a wrong method, 405', async () => {
    const missing = await host.fetch('/nothing/here');
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toBe('application/problem+json');
    const wrongMethod = await host.fetch('/test/echo/1', { method: 'DELETE' });
    expect(wrongMethod.status).toBe(405);
  });

  it('when a body exceeds the host limit, then 413 and the host keeps serving', async () => {
    const response = await host.fetch('/test/echo/1', { method: 'POST', body: 'x'.repeat(5 * 1024 * 1024) });
    expect(response.status).toBe(413);
    expect((await host.fetch('/test/echo/2')).status).toBe(200);
  });
});
