import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

const PLATFORM_ADMIN = { roles: ['PlatformAdmin'] };
const TENANT_ADMIN = { tenant: 'acme', roles: ['PlatformAdmin'] };
const TENANT_ADMIN_SCOPE = { tenant: 'acme', scopes: ['factory.runtime.admin'] };

const LIMIT = { maxUnits: 5, maxTtlSeconds: 600 };
const ADMINISTRATION: readonly (readonly [string, unknown])[] = [
  ['/runtime-cloud/editions/platform-only-edition', { limits: { attempt: LIMIT } }],
  ['/runtime-cloud/tenants/platform-only-tenant', { edition: 'platform-only-edition' }],
  ['/runtime-cloud/pools/platform-only-pool', { kind: 'attempt', target: 'local', capacity: 3 }],
];

describe('platform administration over HTTP on the local host', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  const put = (path: string, body: unknown, claims: Parameters<TestHost['token']>[0]) =>
    host.fetch(path, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), claims });

  it('when a tenant-bound token with the admin role or scope changes pools, editions or tenants, then 403 and nothing changes', async () => {
    for (const claims of [TENANT_ADMIN, TENANT_ADMIN_SCOPE]) {
      for (const [path, body] of ADMINISTRATION) {
        const refused = await put(path, body, claims);
        expect(refused.status, `${path} ${JSON.stringify(claims)}`).toBe(403);
        expect(refused.headers.get('content-type')).toBe('application/problem+json');
        expect(await refused.json()).toMatchObject({ status: 403, code: 'AUTH.PLATFORM_ONLY', tokenTenant: 'acme' });
      }
    }
    // Created now, by a platform administrator: the refused requests made nothing.
    for (const [path, body] of ADMINISTRATION) {
      expect((await put(path, body, PLATFORM_ADMIN)).status, path).toBe(201);
    }
  });

  it('when a tenant-bound admin reads a local-only endpoint, then 403; a platform administrator reads it', async () => {
    const path = '/runtime-cloud/local/topics/runtime-cloud-events/messages';
    const refused = await host.fetch(path, { claims: TENANT_ADMIN });
    expect(refused.status).toBe(403);
    expect(await refused.json()).toMatchObject({ status: 403, code: 'AUTH.PLATFORM_ONLY' });
    expect((await host.fetch(path, { claims: PLATFORM_ADMIN })).status).toBe(200);
  });
});
