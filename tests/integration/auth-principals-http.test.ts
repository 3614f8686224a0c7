import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * Who a token is, over HTTP on the local host (issue 31): a person's delegated token (it has `scp`) is never a
 * tenant-less service, whatever its `roles` hold, so it reads no tenant it names; an application's own token
 * (`idtyp: app`) with the same permissions does. Two tenants, each named in turn.
 */
const TENANTS = ['demo-team', 'demo-free'];
const READS = ['/runtime-cloud/runs', '/runtime-cloud/leases', '/runtime-cloud/environments'];
/** Scope names as app roles: what an attacker would have a person assigned. */
const SERVICE_PERMISSIONS = ['factory.runtime.read', 'factory.capacity.lease'];
const PERSON = { oid: '02223b6b-aa1d-42d4-9ec0-1b2bb9194438', tid: 'fa15d692-e9c7-4460-a743-29f2956fd429' };

describe('delegated and application tokens naming a tenant, over HTTP', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it("when a person's delegated token whose roles hold service scope names names a tenant, then runs, leases and environments answer 403 for each tenant", async () => {
    for (const tenant of TENANTS) {
      for (const path of READS) {
        // Act
        const answer = await host.fetch(path, { headers: { 'x-tenant-id': tenant }, claims: { subject: 'pairwise-sub-1', user: PERSON, roles: SERVICE_PERMISSIONS } });

        // Assert
        expect(answer.status, `${tenant} ${path}`).toBe(403);
        expect(answer.headers.get('content-type')).toBe('application/problem+json');
        expect((await answer.json()) as { code: string }).toMatchObject({ code: expect.stringMatching(/^AUTH\.(SCOPE_MISSING|TENANT_NOT_ALLOWED)$/) });
      }
    }
  });

  it("when the delegated token's scp holds the scope, then it still may not name a tenant (403 AUTH.TENANT_NOT_ALLOWED)", async () => {
    for (const tenant of TENANTS) {
      const answer = await host.fetch('/runtime-cloud/runs', { headers: { 'x-tenant-id': tenant }, claims: { user: PERSON, scopes: ['factory.runtime.read'] } });
      expect(answer.status).toBe(403);
      expect(await answer.json()).toMatchObject({ code: 'AUTH.TENANT_NOT_ALLOWED' });
    }
  });

  it("when an application's own token holds the same permissions, then it reads each tenant it names", async () => {
    for (const tenant of TENANTS) {
      for (const path of READS) {
        const answer = await host.fetch(path, { headers: { 'x-tenant-id': tenant }, claims: { subject: 'delivery-host', roles: SERVICE_PERMISSIONS } });
        expect(answer.status, `${tenant} ${path}: ${await answer.clone().text()}`).toBe(200);
      }
    }
  });
});
