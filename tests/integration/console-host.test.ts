import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * What the host serves the operator console (the browser's part is tests/browser/console.test.ts): its files without
 * a token and nothing beside them, a page's URL answered with the console, and the local host's "sign in as".
 */
describe('the operator console on the local host', () => {
  let host: TestHost;

  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  const get = (path: string) => fetch(new URL(path, host.url));
  const getAsWritten = (path: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      request({ host: host.url.hostname, port: host.url.port, path, method: 'GET' }, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      })
        .on('error', reject)
        .end();
    });
  const signIn = (body: unknown) => fetch(new URL('/runtime-cloud/local/sign-in', host.url), { method: 'POST', body: JSON.stringify(body) });

  it('when the console is asked for without a token, then its page comes with a policy allowing only its own scripts, and its assets are cached for good', async () => {
    // Act
    const page = await get('/runtime-cloud/console/');
    const html = await page.text();
    const asset = /src="(\/runtime-cloud\/console\/assets\/[^"]+\.js)"/.exec(html)?.[1] ?? '';
    const script = await get(asset);

    // Assert
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(page.headers.get('cache-control')).toBe('no-cache');
    expect(asset).not.toBe('');
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(script.headers.get('cache-control')).toContain('immutable');
  });

  it("when a console page's own URL is loaded, then the console's page answers it; a file it does not have is a 404 problem", async () => {
    // Act
    const page = await get('/runtime-cloud/console/runs/run_123');
    const missing = await get('/runtime-cloud/console/assets/missing-0000.js');

    // Assert
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<div id="root">');
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toBe('application/problem+json');
  });

  // Sent as written (node:http): fetch would resolve a `..` or `%2e%2e` segment before the host ever saw it.
  it.each(['/runtime-cloud/console/..%2F..%2Fpackage.json', '/runtime-cloud/console/assets/..%2F..%2F..%2Fpackage.json', '/runtime-cloud/console/%2e%2e/%2e%2e/host.json', '/runtime-cloud/console/../../host.json', '/runtime-cloud/console/a%00.js'])(
    'when %s is asked for, then nothing outside the console is served',
    async (path) => {
      // Act
      const answer = await getAsWritten(path);

      // Assert
      expect(answer.status).toBe(404);
      expect(answer.body).not.toContain('"dependencies"');
      expect(answer.body).not.toContain('extensionBundle');
    },
  );

  it('when a person signs in as an Operator of a tenant, then the token names them, acts in that tenant only and may not administer', async () => {
    // Act
    const options = (await (await get('/runtime-cloud/local/sign-in')).json()) as { roles: string[] };
    const answer = await signIn({ name: 'operator-1', role: 'Operator', tenant: 'team-a' });
    const { token } = (await answer.json()) as { token: string };
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { sub: string; tenant: string; roles: string[] };
    const read = await fetch(new URL('/runtime-cloud/runs', host.url), { headers: { authorization: `Bearer ${token}` } });
    const administer = await fetch(new URL('/runtime-cloud/tenants/team-a', host.url), { method: 'PUT', headers: { authorization: `Bearer ${token}` }, body: JSON.stringify({ edition: 'team' }) });

    // Assert
    expect(options.roles).toEqual(['Observer', 'Operator', 'PlatformAdmin']);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('cache-control')).toBe('no-store');
    expect(payload).toMatchObject({ sub: 'operator-1', tenant: 'team-a', roles: ['Operator'] });
    expect(read.status).toBe(200);
    expect(administer.status).toBe(403);
  });

  it.each([
    [{ name: 'operator-1', role: 'Operator' }, 'tenant'],
    [{ name: 'operator-1', role: 'Owner', tenant: 'team-a' }, 'role'],
    [{ name: '<script>', role: 'Observer', tenant: 'team-a' }, 'name'],
    [{ name: 'operator-1', role: 'Observer', tenant: '../team-b' }, 'tenant'],
  ])('when a sign-in asks for %j, then it is refused as a problem naming %s', async (body, field) => {
    // Act
    const answer = await signIn(body);
    const problem = (await answer.json()) as { code: string; errors?: { field: string }[] };

    // Assert
    expect(answer.status).toBe(400);
    expect(answer.headers.get('content-type')).toContain('application/problem+json');
    expect(problem.code).toBe('REQUEST.INVALID');
    expect(problem.errors?.map((e) => e.field)).toContain(field);
  });
});
