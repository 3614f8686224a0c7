import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { functionsWithTrigger, triggerOf } from '../../local/functions-core/registry';
import { startTestHost, type TestHost } from '../support/local-host';
import { fieldsOf, type Problem } from '../support/problems';

const LEASE = { tenant: 'http-a', scopes: ['factory.capacity.lease', 'factory.runtime.read'] };
const OTHER = { tenant: 'http-b', scopes: ['factory.capacity.lease', 'factory.runtime.read'] };
const ADMIN = { roles: ['PlatformAdmin'] };

interface LeaseBody {
  leaseId: string;
  pool: string;
  fencingToken: number;
  expiresAt: string;
}

describe('capacity over HTTP on the local host', () => {
  let host: TestHost;
  let leaseToken: string;
  let otherToken: string;

  const json = (method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) =>
    host.fetch(path, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });

  beforeAll(async () => {
    host = await startTestHost();
    const admin = await host.token(ADMIN);
    leaseToken = await host.token(LEASE);
    otherToken = await host.token(OTHER);
    const limit = { maxUnits: 1000, maxTtlSeconds: 600 };
    expect((await json('PUT', '/runtime-cloud/editions/bulk', admin, { limits: { attempt: limit, sandbox: limit } })).status).toBe(201);
    for (const tenant of ['http-a', 'http-b']) {
      expect((await json('PUT', `/runtime-cloud/tenants/${tenant}`, admin, { edition: 'bulk' })).status).toBe(201);
    }
    expect((await json('PUT', '/runtime-cloud/pools/http-50', admin, { kind: 'sandbox', target: 'local', capacity: 50 })).status).toBe(201);
    expect((await json('PUT', '/runtime-cloud/pools/http-small', admin, { kind: 'attempt', target: 'local', capacity: 100 })).status).toBe(201);
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when 200 acquires race for a pool of 50 over real HTTP, then exactly 50 are granted and the rest get 429', async () => {
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'sandbox', ttlSeconds: 300, holder: `w${i}`, pool: 'http-50' }),
      ),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(50);
    expect(statuses.filter((s) => s === 429)).toHaveLength(150);
    const refused = responses.find((r) => r.status === 429);
    // Until the first lease of 300 s ends, counted on the host's real clock while the load ran: a range.
    const retryAfter = Number(refused?.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(290);
    expect(retryAfter).toBeLessThanOrEqual(300);
    expect(await refused?.json()).toMatchObject({ code: 'CAPACITY.EXHAUSTED', used: 50, limit: 50 });
    const granted = await Promise.all(responses.filter((r) => r.status === 201).map((r) => r.json() as Promise<LeaseBody>));
    expect(new Set(granted.map((g) => g.fencingToken)).size).toBe(50);
  });

  it('when the request is bad, then 400 problem+json naming the problem', async () => {
    const cases: [unknown, string][] = [
      [{ kind: 'gpu', ttlSeconds: 60, holder: 'w' }, 'kind'],
      [{ kind: 'attempt', units: 0, ttlSeconds: 60, holder: 'w' }, 'units'],
      [{ kind: 'attempt', units: -2, ttlSeconds: 60, holder: 'w' }, 'units'],
      [{ kind: 'attempt', ttlSeconds: 60 }, 'holder'],
      ['{"kind": "attempt", ', '(body)'],
    ];
    for (const [body, field] of cases) {
      const response = await json('POST', '/runtime-cloud/leases', leaseToken, body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      const problem = (await response.json()) as { code: string; errors?: { field: string }[] };
      if (field === '(body)') expect(problem.code).toBe('REQUEST.MALFORMED_JSON');
      else expect(problem.errors?.map((e) => e.field)).toContain(field);
    }
    const tooLong = await json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'attempt', ttlSeconds: 601, holder: 'w' });
    expect(tooLong.status).toBe(400);
    expect(await tooLong.json()).toMatchObject({ code: 'CAPACITY.TTL_TOO_LONG', maxTtlSeconds: 600 });
  });

  it("when another tenant's lease is read, renewed or released, then 404", async () => {
    const granted = await json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'attempt', ttlSeconds: 60, holder: 'mine' });
    const lease = (await granted.json()) as LeaseBody;
    expect((await json('GET', `/runtime-cloud/leases/${lease.leaseId}`, otherToken)).status).toBe(404);
    expect((await json('POST', `/runtime-cloud/leases/${lease.leaseId}/renew`, otherToken, { fencingToken: lease.fencingToken })).status).toBe(404);
    expect((await json('DELETE', `/runtime-cloud/leases/${lease.leaseId}`, otherToken, undefined, { 'fencing-token': String(lease.fencingToken) })).status).toBe(404);
    expect((await json('GET', `/runtime-cloud/leases/${lease.leaseId}`, leaseToken)).status).toBe(200);
  });

  it('when the Idempotency-Key header repeats, then 201 then 200 with the same lease', async () => {
    const body = { kind: 'attempt', ttlSeconds: 60, holder: 'idem' };
    const first = await json('POST', '/runtime-cloud/leases', leaseToken, body, { 'idempotency-key': 'job-17' });
    const second = await json('POST', '/runtime-cloud/leases', leaseToken, { ...body, idempotencyKey: 'job-17' });
    expect([first.status, second.status]).toEqual([201, 200]);
    expect(((await second.json()) as LeaseBody).leaseId).toBe(((await first.json()) as LeaseBody).leaseId);
  });

  it('when a lease is renewed with a wrong token, then 409; released, then 204 twice and 410 on renew', async () => {
    const lease = (await (await json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'attempt', ttlSeconds: 60, holder: 'r' })).json()) as LeaseBody;
    const path = `/runtime-cloud/leases/${lease.leaseId}`;
    expect((await json('POST', `${path}/renew`, leaseToken, { fencingToken: lease.fencingToken + 1 })).status).toBe(409);
    const renewed = await json('POST', `${path}/renew`, leaseToken, { fencingToken: lease.fencingToken, ttlSeconds: 120 });
    expect(renewed.status).toBe(200);
    expect(Date.parse(((await renewed.json()) as LeaseBody).expiresAt)).toBeGreaterThan(Date.parse(lease.expiresAt));
    const token = { 'fencing-token': String(lease.fencingToken) };
    expect((await json('DELETE', path, leaseToken, undefined, token)).status).toBe(204);
    expect((await json('DELETE', `${path}?fencingToken=${lease.fencingToken}`, leaseToken)).status).toBe(204);
    expect((await json('POST', `${path}/renew`, leaseToken, { fencingToken: lease.fencingToken })).status).toBe(410);
  });

  it('when a lease is released without its fencing token or with another, then 400 or 409 and it stays held', async () => {
    const lease = (await (await json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'attempt', ttlSeconds: 60, holder: 'f' })).json()) as LeaseBody;
    const path = `/runtime-cloud/leases/${lease.leaseId}`;
    const missing = await json('DELETE', path, leaseToken);
    expect(missing.status).toBe(400);
    expect(await missing.json()).toMatchObject({ code: 'REQUEST.FENCING_TOKEN_REQUIRED' });
    expect((await json('DELETE', path, leaseToken, undefined, { 'fencing-token': 'seven' })).status).toBe(400);
    expect((await json('DELETE', `${path}?fencingToken=${lease.fencingToken + 1}`, leaseToken, undefined, { 'fencing-token': String(lease.fencingToken) })).status).toBe(400);
    const wrong = await json('DELETE', path, leaseToken, undefined, { 'fencing-token': String(lease.fencingToken + 1) });
    expect(wrong.status).toBe(409);
    expect(await wrong.json()).toMatchObject({ code: 'CAPACITY.FENCING_MISMATCH' });
    expect(((await (await json('GET', path, leaseToken)).json()) as { state: string }).state).toBe('active');
  });

  it('when an Idempotency-Key is reused for a different request, then 422 REQUEST.IDEMPOTENCY_KEY_REUSED, never the other lease', async () => {
    const first = await json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'attempt', ttlSeconds: 60, holder: 'reuse' }, { 'idempotency-key': 'job-99' });
    expect(first.status).toBe(201);
    const reused = await json('POST', '/runtime-cloud/leases', leaseToken, { kind: 'attempt', ttlSeconds: 60, holder: 'someone-else' }, { 'idempotency-key': 'job-99' });
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toBe('application/problem+json');
    const problem = (await reused.json()) as Record<string, unknown>;
    expect(problem).toMatchObject({ code: 'REQUEST.IDEMPOTENCY_KEY_REUSED', status: 422 });
    expect(problem).not.toHaveProperty('fencingToken');
  });

  it('when leases are listed with ?limit=, then nextCursor pages through them; a bad limit is 400', async () => {
    for (let i = 0; i < 3; i++) await json('POST', '/runtime-cloud/leases', otherToken, { kind: 'attempt', ttlSeconds: 60, holder: 'pager' });
    const first = (await (await json('GET', '/runtime-cloud/leases?holder=pager&limit=2', otherToken)).json()) as { items: unknown[]; nextCursor?: string };
    expect(first.items).toHaveLength(2);
    const second = (await (await json('GET', `/runtime-cloud/leases?holder=pager&limit=2&cursor=${first.nextCursor ?? ''}`, otherToken)).json()) as {
      items: unknown[];
      nextCursor?: string;
    };
    expect(second.items).toHaveLength(1);
    expect(second.nextCursor).toBeUndefined();
    expect((await json('GET', '/runtime-cloud/leases?limit=1001', otherToken)).status).toBe(400);
  });

  it('when a lease token tries to administer pools, then 403; the capacity view shows only its tenant', async () => {
    expect((await json('PUT', '/runtime-cloud/pools/x', leaseToken, { kind: 'attempt', target: 'local', capacity: 1 })).status).toBe(403);
    const view = (await (await json('GET', '/runtime-cloud/capacity', leaseToken)).json()) as { tenants: { tenant: string }[]; pools: { id: string }[] };
    expect(view.tenants.map((t) => t.tenant)).toEqual(['http-a']);
    expect(view.pools.map((p) => p.id)).toContain('http-50');
  });

  it('when a pool names its IaC stack by a bare or partial name, then 400 naming iacStack and no pool; tenant/project/stack is taken', async () => {
    const admin = await host.token(ADMIN);
    for (const iacStack of ['pools-dev', 'worker-pool/pools-dev', 'team-a/worker pool/pools-dev']) {
      const refused = await json('PUT', '/runtime-cloud/pools/http-stacked', admin, { kind: 'build', target: 'local', capacity: 2, iacStack });
      expect(refused.status, iacStack).toBe(400);
      expect(fieldsOf((await refused.json()) as Problem), iacStack).toEqual(['iacStack']);
    }
    expect((await json('GET', '/runtime-cloud/capacity', admin).then((r) => r.json()) as { pools: { id: string }[] }).pools.map((p) => p.id)).not.toContain('http-stacked');
    const taken = await json('PUT', '/runtime-cloud/pools/http-stacked', admin, { kind: 'build', target: 'local', capacity: 2, iacStack: 'team-a/worker-pool/pools-dev' });
    expect(taken.status).toBe(201);
  });

  it('when the host starts, then the bundled seed made editions free, team, enterprise and a pool of each kind on local', async () => {
    const view = (await (await json('GET', '/runtime-cloud/capacity', await host.token(ADMIN))).json()) as {
      pools: { id: string; kind: string; target: string }[];
      tenants: { tenant: string; edition: string }[];
    };
    const seeded = view.pools.filter((p) => p.id.startsWith('local-'));
    expect(seeded.map((p) => p.kind).sort()).toEqual(['attempt', 'browser-session', 'build', 'runner', 'sandbox']);
    expect(seeded.every((p) => p.target === 'local')).toBe(true);
    expect(view.tenants.filter((t) => t.tenant.startsWith('demo-')).map((t) => t.edition).sort()).toEqual(['free', 'team']);
    const editions = await host.host.deps.capacity.listEditions();
    expect(editions.map((e) => e.name)).toEqual(expect.arrayContaining(['free', 'team', 'enterprise']));
  });

  it('when the functions load, then leaseExpirySweep is a timer every 15 seconds', () => {
    const sweep = functionsWithTrigger('timerTrigger').find((r) => r.metadata.name === 'leaseExpirySweep');
    expect(sweep && triggerOf(sweep)).toMatchObject({ schedule: '*/15 * * * * *' });
  });
});
