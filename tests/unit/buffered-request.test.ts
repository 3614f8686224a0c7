import { HttpRequest, type HttpRequestInit } from '@azure/functions';
import { describe, expect, it } from 'vitest';
import { BufferedRequest } from '../../local/http/buffered-request';

function aRequest(method: string, body: string): HttpRequest {
  const nativeRequest = new BufferedRequest('http://127.0.0.1/x?a=1', method, { 'content-type': 'application/json', 'x-probe': 'p' }, Buffer.from(body));
  return new HttpRequest({ method, url: 'http://127.0.0.1/x?a=1', query: { a: '1' }, params: { id: '7' }, nativeRequest } as HttpRequestInit);
}

describe('HttpRequest over the local host buffered request', () => {
  it('when the library is given the buffered request, then url, method, headers, query and params come through', () => {
    const request = aRequest('POST', '{}');
    expect(request.url).toBe('http://127.0.0.1/x?a=1');
    expect(request.method).toBe('POST');
    expect(request.headers.get('x-probe')).toBe('p');
    expect(request.query.get('a')).toBe('1');
    expect(request.params).toEqual({ id: '7' });
  });

  it('when the body is read as JSON, then it parses once and a second read is refused as with fetch', async () => {
    const request = aRequest('POST', '{"units":2}');
    expect(await request.json()).toEqual({ units: 2 });
    expect(request.bodyUsed).toBe(true);
    await expect(request.text()).rejects.toThrow(TypeError);
  });

  it('when a handler asks for a stream or a blob, then a Fetch request serves it with the same bytes', async () => {
    const request = aRequest('PUT', 'hello');
    const chunks: Uint8Array[] = [];
    for await (const chunk of request.body!) chunks.push(chunk);
    expect(Buffer.concat(chunks).toString()).toBe('hello');
    expect(await aRequest('PUT', 'bytes').blob().then((b) => b.text())).toBe('bytes');
    expect(Buffer.from(await aRequest('POST', 'ab').arrayBuffer()).toString()).toBe('ab');
  });

  it('when the method is GET, then there is no body, as with fetch', async () => {
    expect(await aRequest('GET', 'ignored').text()).toBe('');
  });
});
