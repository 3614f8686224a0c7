import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * The lease queue over HTTP on a whole local host: 202 with a ticket and its Location, the long poll, cancel, the
 * queue view, and what a client may get wrong. Two tenants use the same pool, holder and key names.
 */
const A = { tenant: 'queue-a', scopes: ['factory.capacity.lease', 'factory.runtime.read'] };
const B = { tenant: 'queue-b', scopes: ['factory.capacity.lease', 'factory.runtime.read'] };
const ADMIN = { roles: ['PlatformAdmin'] };

interface LeaseBody {
  leaseId: string;
  fencingToken: number;
  expiresAt: string;
}
interface TicketBody {
  requestId: string;
  state: string;
  tenant: string;
  position?: number;
  reason?: Record<string, unknown> & { code: string };
  estimatedGrantAt?: string;
  lease?: LeaseBody;
}
interface Problem {
  status: number;
  code: string;
  errors?: { field: string }[];
}

describe('the lease queue over HTTP on the local host', () => {
  let host: TestHost;
  const tokens: Record<'a' | 'b' | 'admin', string> = { a: '', b: '', admin: '' };

  const call = async <T>(method: string, path: string, who: keyof typeof tokens, body?: unknown): Promise<{ status: number; headers: Headers; body: T }> => {
    const response = await host.fetch(path, {
      method,
      headers: { authorization: `Bearer ${tokens[who]}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, headers: response.headers, body: (text ? JSON.parse(text) : undefined) as T };
  };
  const lease = (who: 'a' | 'b', pool: string, extra: Record<string, unknown> = {}) =>
    call<LeaseBody & TicketBody & Problem>('POST', '/runtime-cloud/leases', who, { kind: 'attempt', ttlSeconds: 120, holder: 'worker-1', pool, ...extra });
  const release = (l: LeaseBody) => call('DELETE', `/runtime-cloud/leases/${l.leaseId}?fencingToken=${l.fencingToken}`, 'a');
  const pool = async (id: string, capacity: number) => {
    expect((await call('PUT', `/runtime-cloud/pools/${id}`, 'admin', { kind: 'attempt', target: 'local', capacity })).status).toBe(201);
  };

  beforeAll(async () => {
    host = await startTestHost();
    tokens.admin = await host.token(ADMIN);
    tokens.a = await host.token(A);
    tokens.b = await host.token(B);
    const limits = { attempt: { maxUnits: 10, maxTtlSeconds: 600, maxWaitSeconds: 120 } };
    expect((await call('PUT', '/runtime-cloud/editions/queued', 'admin', { limits, weight: 2 })).status).toBe(201);
    for (const tenant of ['queue-a', 'queue-b']) expect((await call('PUT', `/runtime-cloud/tenants/${tenant}`, 'admin', { edition: 'queued' })).status).toBe(201);
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when the pool is full and the request may wait, then 202 with the ticket and its Location; the long poll answers with the lease once the holder releases', async () => {
    await pool('q-one', 1);
    const held = await lease('a', 'q-one');
    expect(held.status).toBe(201);

    const queued = await lease('a', 'q-one', { wait: { seconds: 60, holdSeconds: 0 } });
    expect(queued.status).toBe(202);
    expect(queued.headers.get('location')).toBe(`/runtime-cloud/lease-requests/${queued.body.requestId}`);
    expect(queued.body).toMatchObject({ state: 'waiting', tenant: 'queue-a', position: 1, reason: { code: 'POOL_FULL', used: 1, capacity: 1 } });
    // Granted when the lease ahead ends, if it is held to its expiry.
    expect(queued.body.estimatedGrantAt).toBe(held.body.expiresAt);

    // A request without `wait` does not overtake the queue: 429, saying why.
    const refused = await lease('b', 'q-one');
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ code: 'CAPACITY.EXHAUSTED', reason: { code: 'QUEUED_BEHIND' } });

    const polled = call<TicketBody>('GET', `/runtime-cloud/lease-requests/${queued.body.requestId}?waitSeconds=15`, 'a');
    expect((await release(held.body)).status).toBe(204);
    const granted = await polled;
    expect(granted.status).toBe(200);
    expect(granted.body.state).toBe('granted');
    const got = granted.body.lease as LeaseBody;
    expect(got.fencingToken).toBeGreaterThan(held.body.fencingToken);
    // A lease like any other: renewed and released with its fencing token.
    expect((await call('POST', `/runtime-cloud/leases/${got.leaseId}/renew`, 'a', { fencingToken: got.fencingToken })).status).toBe(200);
    expect((await release(got)).status).toBe(204);
  });

  it('when the holder releases while the call still holds, then the waiting POST itself answers 201 with the lease', async () => {
    await pool('q-hold', 1);
    const held = await lease('a', 'q-hold');
    const waiting = lease('b', 'q-hold', { wait: { seconds: 60, holdSeconds: 15 } });
    // The request has joined the queue once the queue view shows it.
    await expect.poll(async () => (await call<{ pools: { pool: string }[] }>('GET', '/runtime-cloud/capacity/queue', 'b')).body.pools.map((p) => p.pool), { timeout: 15_000 }).toContain('q-hold');
    expect((await release(held.body)).status).toBe(204);
    const answer = await waiting;
    expect(answer.status).toBe(201);
    expect(answer.body.fencingToken).toBeGreaterThan(held.body.fencingToken);
  });

  it("when a ticket is canceled, then it leaves the queue; a granted one cannot be canceled; another tenant's ticket is 404 for every verb", async () => {
    await pool('q-cancel', 1);
    const held = await lease('a', 'q-cancel');
    const ticket = (await lease('a', 'q-cancel', { wait: { seconds: 60, holdSeconds: 0 } })).body;
    const path = `/runtime-cloud/lease-requests/${ticket.requestId}`;

    for (const method of ['GET', 'DELETE']) {
      const other = await call<Problem>(method, path, 'b');
      expect(other.status).toBe(404);
      expect(other.body.code).toBe('CAPACITY.LEASE_REQUEST_NOT_FOUND');
    }
    const bView = await call<{ pools: { pool: string }[] }>('GET', '/runtime-cloud/capacity/queue', 'b');
    expect(bView.body.pools.find((p) => p.pool === 'q-cancel')).toBeUndefined();
    const adminView = await call<{ pools: { pool: string; waiting: TicketBody[] }[] }>('GET', '/runtime-cloud/capacity/queue', 'admin');
    expect(adminView.body.pools.find((p) => p.pool === 'q-cancel')?.waiting.map((w) => w.requestId)).toEqual([ticket.requestId]);

    const canceled = await call<TicketBody>('DELETE', path, 'a');
    expect(canceled.status).toBe(200);
    expect(canceled.body.state).toBe('canceled');
    expect((await call<TicketBody>('GET', path, 'a')).body.state).toBe('canceled');
    // Its place is gone: the units the holder gives back stay free.
    expect((await release(held.body)).status).toBe(204);
    const next = await lease('b', 'q-cancel', { wait: { seconds: 60 } });
    expect(next.status).toBe(201);

    const queued = (await lease('a', 'q-cancel', { wait: { seconds: 60, holdSeconds: 0 } })).body;
    expect((await call('DELETE', `/runtime-cloud/leases/${next.body.leaseId}?fencingToken=${next.body.fencingToken}`, 'b')).status).toBe(204);
    const granted = await call<TicketBody>('GET', `/runtime-cloud/lease-requests/${queued.requestId}?waitSeconds=15`, 'a');
    expect(granted.body.state).toBe('granted');
    const refused = await call<Problem>('DELETE', `/runtime-cloud/lease-requests/${queued.requestId}`, 'a');
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('CAPACITY.LEASE_REQUEST_GRANTED');
  });

  it('when a client sends a bad wait or asks about a ticket badly, then 400 or 404 problem+json, never a grant or a 500', async () => {
    await pool('q-bad', 1);
    const bad: [unknown, string][] = [
      [{ seconds: 0 }, 'wait.seconds'],
      [{ seconds: -5 }, 'wait.seconds'],
      [{ seconds: '30' }, 'wait.seconds'],
      [{ seconds: 1.5 }, 'wait.seconds'],
      [{ seconds: 86_401 }, 'wait.seconds'],
      [{ seconds: 30, holdSeconds: 21 }, 'wait.holdSeconds'],
      [{ seconds: 30, holdSeconds: -1 }, 'wait.holdSeconds'],
      [{ seconds: 30, priority: 'high' }, 'wait'],
      [{}, 'wait.seconds'],
      [30, 'wait'],
    ];
    for (const [wait, field] of bad) {
      const response = await lease('a', 'q-bad', { wait });
      expect(response.status, JSON.stringify(wait)).toBe(400);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.body.errors?.map((e) => e.field), JSON.stringify(wait)).toContain(field);
    }
    // Longer than the edition allows (120 s).
    const tooLong = await lease('a', 'q-bad', { wait: { seconds: 121 } });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body).toMatchObject({ code: 'CAPACITY.WAIT_TOO_LONG', maxWaitSeconds: 120 });

    for (const query of ['waitSeconds=21', 'waitSeconds=-1', 'waitSeconds=soon']) {
      const response = await call<Problem>('GET', `/runtime-cloud/lease-requests/lreq_none?${query}`, 'a');
      expect(response.status, query).toBe(400);
    }
    for (const id of ['lreq_unknown', 'x'.repeat(300), '%27%20or%201%3D1']) {
      const response = await call<Problem>('GET', `/runtime-cloud/lease-requests/${id}`, 'a');
      expect(response.status, id).toBe(404);
      expect(response.body.code).toBe('CAPACITY.LEASE_REQUEST_NOT_FOUND');
    }
    // Nothing above took a unit.
    const summary = await call<{ pools: { id: string; used: number }[] }>('GET', '/runtime-cloud/capacity', 'admin');
    expect(summary.body.pools.find((p) => p.id === 'q-bad')?.used).toBe(0);
  });
});
