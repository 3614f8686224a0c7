import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

/** What the server answered a client that trickles its body one byte at a time and never finishes it. */
interface Answer {
  status: number;
  contentType: string | undefined;
  body: string;
  bytesSent: number;
}

/**
 * Sends the headers of a `declaredBytes` body, then one byte per `everyMs` until the server answers (or the
 * whole declared body is out, which means no timeout cut the client off).
 */
function trickle(url: URL, path: string, token: string, declaredBytes: number, everyMs: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let bytesSent = 0;
    const req = request(new URL(path, url), {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(declaredBytes) },
    });
    const timer = setInterval(() => {
      if (bytesSent >= declaredBytes) {
        clearInterval(timer);
        return;
      }
      req.write(' ');
      bytesSent++;
    }, everyMs);
    req.on('response', (res) => {
      clearInterval(timer);
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], body: Buffer.concat(chunks).toString('utf8'), bytesSent }));
    });
    req.on('error', (error) => {
      clearInterval(timer);
      reject(error);
    });
  });
}

describe('slow request bodies', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost({ settings: { RuntimeCloud__Local__BodyTimeoutMs: '150' } });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when a client trickles its body past the body timeout, then it gets a 408 problem and the connection closes', async () => {
    const token = await host.token({ scopes: ['factory.capacity.lease'], tenant: 'contoso' });
    // 10,000 bytes at one per 5 ms would take 50 s: only a timeout ends it early.
    const answer = await trickle(host.url, '/runtime-cloud/leases', token, 10_000, 5);

    expect(answer.status).toBe(408);
    expect(answer.contentType).toBe('application/problem+json');
    expect(JSON.parse(answer.body)).toMatchObject({ status: 408, code: 'REQUEST.BODY_TIMEOUT', timeoutMs: 150 });
    expect(answer.bytesSent).toBeLessThan(10_000);
  });

  it('when a whole body arrives within the timeout, then the request is served', async () => {
    const response = await host.fetch('/runtime-cloud/leases', {
      method: 'POST',
      claims: { scopes: ['factory.capacity.lease'], tenant: 'contoso' },
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(response.status).toBe(400);
  });
});
