import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/child-process';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * RuntimeCloud__Auth__Clients over HTTP on a local host, on SQLite and PostgreSQL: a caller whose client id is
 * mapped to tenant A (the way an Entra client-credential token, which has no tenant claim, is bound) sees and acts
 * on tenant A's leases only, while tenant B holds leases with the same holder, pool and idempotency key.
 */

const CLIENT_A = '7f3e1c2a-0000-4000-8000-00000000000a';
const CLIENT_UNLISTED = '7f3e1c2a-0000-4000-8000-0000000000ff';
const SCOPES = ['factory.capacity.lease', 'factory.runtime.read'];
/** The same names in both tenants. */
const POOL = 'shared-pool';
const HOLDER = 'worker-1';
const IDEMPOTENCY_KEY = 'job-1';

interface LeaseBody {
  leaseId: string;
  tenant: string;
  fencingToken: number;
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`clients bound to tenants over HTTP on a local host on ${dialect}`, () => {
    let database: TestDatabase;
    let host: TestHost;
    /** A token of the client mapped to tenant-a, issued by `runtime-cloud token --client`, with no tenant claim. */
    let clientA: string;
    /** A tenant-less service that names its tenant on each request. */
    let service: string;
    let leaseOfB: LeaseBody;

    const call = (method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) =>
      host.fetch(path, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const acquire = (token: string, headers: Record<string, string> = {}) =>
      call('POST', '/runtime-cloud/leases', token, { kind: 'attempt', ttlSeconds: 300, holder: HOLDER, pool: POOL, idempotencyKey: IDEMPOTENCY_KEY }, headers);
    const leasesOf = async (token: string, headers: Record<string, string> = {}): Promise<LeaseBody[]> => {
      const response = await call('GET', `/runtime-cloud/leases?holder=${HOLDER}`, token, undefined, headers);
      expect(response.status).toBe(200);
      return ((await response.json()) as { items: LeaseBody[] }).items;
    };

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      host = await startTestHost({
        settings: { ...database.settings, RuntimeCloud__Auth__Clients: JSON.stringify({ [CLIENT_A]: 'tenant-a' }) },
        depsOverrides: database.overrides,
      });
      const admin = await host.token({ roles: ['PlatformAdmin'] });
      expect((await call('PUT', '/runtime-cloud/editions/bound', admin, { limits: { attempt: { maxUnits: 10, maxTtlSeconds: 600 } } })).status).toBe(201);
      for (const tenant of ['tenant-a', 'tenant-b']) {
        expect((await call('PUT', `/runtime-cloud/tenants/${tenant}`, admin, { edition: 'bound' })).status).toBe(201);
      }
      expect((await call('PUT', `/runtime-cloud/pools/${POOL}`, admin, { kind: 'attempt', target: 'local', capacity: 10 })).status).toBe(201);

      service = await host.token({ scopes: SCOPES });
      const granted = await acquire(service, { 'x-tenant-id': 'tenant-b' });
      expect(granted.status).toBe(201);
      leaseOfB = (await granted.json()) as LeaseBody;
      expect(leaseOfB.tenant).toBe('tenant-b');

      const issued = await runCli(['token', '--state-dir', host.stateDir, '--client', CLIENT_A, ...SCOPES.flatMap((s) => ['--scope', s])]);
      expect(issued.code, issued.stderr).toBe(0);
      clientA = issued.stdout.trim();
    }, 60_000);
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
    });

    it('when the mapped client acquires and lists leases without naming a tenant, then they are tenant A’s only', async () => {
      const granted = await acquire(clientA);
      expect(granted.status).toBe(201);
      const leaseOfA = (await granted.json()) as LeaseBody;
      expect(leaseOfA.tenant).toBe('tenant-a');
      expect(leaseOfA.leaseId).not.toBe(leaseOfB.leaseId);

      expect((await leasesOf(clientA)).map((l) => [l.leaseId, l.tenant])).toEqual([[leaseOfA.leaseId, 'tenant-a']]);
      expect((await call('GET', `/runtime-cloud/leases/${leaseOfB.leaseId}`, clientA)).status).toBe(404);
      const release = await call('DELETE', `/runtime-cloud/leases/${leaseOfB.leaseId}`, clientA, undefined, { 'fencing-token': String(leaseOfB.fencingToken) });
      expect(release.status).toBe(404);
      // Tenant B's lease is untouched, as its own service sees it.
      expect((await leasesOf(service, { 'x-tenant-id': 'tenant-b' })).map((l) => l.leaseId)).toEqual([leaseOfB.leaseId]);
    });

    it('when the mapped client names tenant B, then 403 AUTH.TENANT_MISMATCH and nothing of B’s is shown or granted', async () => {
      for (const [path, headers] of [
        ['/runtime-cloud/leases', { 'x-tenant-id': 'tenant-b' }],
        ['/runtime-cloud/leases?tenant=tenant-b', {}],
        [`/runtime-cloud/leases/${leaseOfB.leaseId}`, { 'x-tenant-id': 'tenant-b' }],
      ] as const) {
        const refused = await call('GET', path, clientA, undefined, headers);
        expect(refused.status, path).toBe(403);
        expect(await refused.json()).toMatchObject({ code: 'AUTH.TENANT_MISMATCH', tokenTenant: 'tenant-a', requestedTenant: 'tenant-b' });
      }
      const refused = await acquire(clientA, { 'x-tenant-id': 'tenant-b' });
      expect(refused.status).toBe(403);
      expect(await refused.json()).toMatchObject({ code: 'AUTH.TENANT_MISMATCH' });
      expect((await leasesOf(service, { 'x-tenant-id': 'tenant-b' })).map((l) => l.leaseId)).toEqual([leaseOfB.leaseId]);
    });

    it('when the mapped client’s token also claims tenant B, then 401 AUTH.TENANT_CLAIM_MISMATCH; claiming A, then it acts for A', async () => {
      const mismatched = await host.fetch('/runtime-cloud/leases', { claims: { client: CLIENT_A, tenant: 'tenant-b', scopes: SCOPES } });
      expect(mismatched.status).toBe(401);
      expect(mismatched.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(await mismatched.json()).toMatchObject({ code: 'AUTH.TENANT_CLAIM_MISMATCH', clientTenant: 'tenant-a', tokenTenant: 'tenant-b' });

      const agreeing = await host.token({ client: CLIENT_A, tenant: 'tenant-a', scopes: SCOPES });
      expect((await call('GET', '/runtime-cloud/leases', agreeing)).status).toBe(200);
      const other = await call('GET', '/runtime-cloud/leases', agreeing, undefined, { 'x-tenant-id': 'tenant-b' });
      expect(other.status).toBe(403);
      expect(await other.json()).toMatchObject({ code: 'AUTH.TENANT_MISMATCH', tokenTenant: 'tenant-a' });
    });

    it('when the mapped client holds PlatformAdmin, then platform administration is 403 AUTH.PLATFORM_ONLY', async () => {
      const tenantAdmin = await host.token({ client: CLIENT_A, roles: ['PlatformAdmin'] });
      const refused = await call('PUT', `/runtime-cloud/pools/${POOL}`, tenantAdmin, { kind: 'attempt', target: 'local', capacity: 1 });
      expect(refused.status).toBe(403);
      expect(await refused.json()).toMatchObject({ code: 'AUTH.PLATFORM_ONLY', tokenTenant: 'tenant-a' });
    });

    it('when a client that is not listed acquires without naming a tenant, then it must name one', async () => {
      const unlisted = await host.token({ client: CLIENT_UNLISTED, scopes: SCOPES });
      const refused = await acquire(unlisted);
      expect(refused.status).toBe(400);
      expect(await refused.json()).toMatchObject({ code: 'AUTH.TENANT_REQUIRED' });
    });
  });
}

describe('runtime-cloud token --client', () => {
  it('when asked for help, then --client is described; given an empty id, then it refuses with usage', async () => {
    const help = await runCli(['token', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--client APP_ID +the client application id \(azp claim\)/);
    expect((await runCli(['--help'])).stdout).toContain('runtime-cloud token [--tenant T] [--client APP_ID]');
    const empty = await runCli(['token', '--client', '']);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain('--client needs an application id');
  });
});
