import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

/** Writes `raw` to the host's port and reads everything until the server closes the connection. */
function exchange(url: URL, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => socket.write(raw));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', reject);
  });
}

function parsed(response: string): { status: number; contentType: string | undefined; body: unknown } {
  const [head = '', body = ''] = response.split('\r\n\r\n');
  const lines = head.split('\r\n');
  const contentType = lines.find((l) => l.toLowerCase().startsWith('content-type:'))?.split(':')[1]?.trim();
  return { status: Number(lines[0]?.split(' ')[1]), contentType, body: body ? JSON.parse(body) : undefined };
}

// Regression cases of the HTTP fuzzer (tests/fuzz/http-fuzz.test.ts): requests Node's parser refuses before any
// handler runs were answered with a bare status line and no problem.
describe('requests the HTTP parser refuses', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when the headers are larger than the server reads (fuzz: a 6 kB Idempotency-Key beside a 12 kB header), then 431 is a problem', async () => {
    const raw = `GET /runtime-cloud/capacity?cursor=NaN HTTP/1.1\r\nhost: x\r\nidempotency-key: ${'k'.repeat(6000)}\r\nx-long: ${'v'.repeat(12_000)}\r\n\r\n`;
    const answer = parsed(await exchange(host.url, raw));
    expect(answer).toMatchObject({ status: 431, contentType: 'application/problem+json', body: { status: 431, code: 'REQUEST.HEADERS_TOO_LARGE' } });
    expect(answer.body).toHaveProperty('type');
    expect(answer.body).toHaveProperty('title');
  });

  it('when the request line is not HTTP, then 400 is a problem', async () => {
    const answer = parsed(await exchange(host.url, 'NOT HTTP AT ALL\r\n\r\n'));
    expect(answer).toMatchObject({ status: 400, contentType: 'application/problem+json', body: { status: 400, code: 'REQUEST.MALFORMED' } });
  });
});
