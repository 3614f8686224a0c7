import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, ConnectError, createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { ErrorInfoSchema, RetryInfoSchema } from '../../contracts/gen/google/rpc/error_details_pb';
import { LeaseService, LeaseState, TicketState } from '../../contracts/gen/connectsoft/runtimecloud/capacity/v1/capacity_pb';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { localComponents } from '../../local/components';
import { LeaseGrpcServer } from '../../local/grpc/lease-grpc-server';
import { startTestHost, type TestHost } from '../support/local-host';
import { grpc, grpcLeaseClient, refusal, statusDetails, type GrpcLeaseClient } from '../support/lease-grpc-client';

/**
 * The LeaseService as its callers speak it, against a real local host: `@grpc/grpc-js` on the gRPC port (an
 * independent client: the .proto file loaded at run time), ConnectRPC's gRPC and Connect clients on that port, and the
 * Connect client through the HTTP trigger that Azure serves. Two tenants use the same holders and idempotency keys.
 */
const SCOPES = ['factory.capacity.lease', 'factory.runtime.read'];
const A = 'grpc-a';
const B = 'grpc-b';

interface WireLease {
  leaseId: string;
  tenant: string;
  pool: string;
  fencingToken: string;
  expiresAt: { seconds: string };
  state: string;
  certificate: string;
}
interface WireTicket {
  requestId: string;
  state: string;
  position?: number;
  lease?: WireLease;
}

describe('the LeaseService over gRPC and Connect on the local host', () => {
  let host: TestHost;
  let grpcUrl: URL;
  let client: GrpcLeaseClient;
  let tokenA: string;
  let tokenB: string;

  const acquire = (token: string, request: object) => client.call<{ lease?: WireLease; ticket?: WireTicket; repeated: boolean; result: string }>('Acquire', request, { token });

  beforeAll(async () => {
    const components = localComponents();
    host = await startTestHost({ components });
    grpcUrl = components.find((c): c is LeaseGrpcServer => c instanceof LeaseGrpcServer)!.url;
    client = grpcLeaseClient(grpcUrl);
    const admin = await host.token({ roles: ['PlatformAdmin'] });
    tokenA = await host.token({ tenant: A, scopes: SCOPES });
    tokenB = await host.token({ tenant: B, scopes: SCOPES });
    const put = async (path: string, body: unknown) => {
      const response = await host.fetch(path, { method: 'PUT', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      expect(response.status, path).toBeLessThan(300);
    };
    const limit = { maxUnits: 100, maxTtlSeconds: 600, maxWaitSeconds: 300 };
    await put('/runtime-cloud/editions/grpc', { limits: { attempt: limit, sandbox: limit, build: { ...limit, maxUnits: 1 } } });
    for (const tenant of [A, B]) await put(`/runtime-cloud/tenants/${tenant}`, { edition: 'grpc' });
    await put('/runtime-cloud/pools/grpc-attempts', { kind: 'attempt', target: 'local', capacity: 100 });
    await put('/runtime-cloud/pools/grpc-one', { kind: 'sandbox', target: 'local', capacity: 1 });
    await put('/runtime-cloud/pools/grpc-builds', { kind: 'build', target: 'local', capacity: 10 });
  });
  afterAll(async () => {
    client?.close();
    await host?.stop();
  });

  it('when a lease is acquired, renewed, read and released with grpc-js, then each answers as the HTTP API does', async () => {
    const { lease, result } = await acquire(tokenA, { kind: 'attempt', ttlSeconds: 60, holder: 'worker-1' });
    expect(result).toBe('lease');
    expect(lease).toMatchObject({ tenant: A, pool: 'grpc-attempts', state: 'LEASE_STATE_ACTIVE' });
    // The holder's answers carry the lease certificate (a JWS of this lease and token); a read does not.
    const claimsOf = (certificate: string) => JSON.parse(Buffer.from(certificate.split('.')[1] ?? '', 'base64url').toString()) as { sub: string; fencingToken: number };
    expect(claimsOf(lease!.certificate)).toMatchObject({ sub: lease!.leaseId, fencingToken: Number(lease!.fencingToken) });
    const renewed = await client.call<{ lease: WireLease }>('Renew', { leaseId: lease!.leaseId, fencingToken: lease!.fencingToken, ttlSeconds: 120 }, { token: tokenA });
    expect(Number(renewed.lease.expiresAt.seconds)).toBeGreaterThan(Number(lease!.expiresAt.seconds));
    expect(claimsOf(renewed.lease.certificate).sub).toBe(lease!.leaseId);
    const read = await client.call<{ lease: WireLease }>('GetLease', { leaseId: lease!.leaseId }, { token: tokenA });
    expect(read.lease).toMatchObject({ leaseId: lease!.leaseId, fencingToken: lease!.fencingToken, certificate: '' });
    expect(await client.call('Release', { leaseId: lease!.leaseId, fencingToken: lease!.fencingToken }, { token: tokenA })).toEqual({ released: true });
    expect(await client.call('Release', { leaseId: lease!.leaseId, fencingToken: lease!.fencingToken }, { token: tokenA })).toEqual({ released: false });
    const http = await host.fetch(`/runtime-cloud/leases/${lease!.leaseId}`, { claims: { tenant: A, scopes: SCOPES } });
    expect(await http.json()).toMatchObject({ state: 'released', fencingToken: Number(lease!.fencingToken) });
    const gone = await refusal(client.call('Renew', { leaseId: lease!.leaseId, fencingToken: lease!.fencingToken }, { token: tokenA }));
    expect(gone.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(statusDetails(gone).reason).toBe('CAPACITY.LEASE_GONE');
  });

  it('when the fencing token is not the lease\'s, then FAILED_PRECONDITION CAPACITY.FENCING_MISMATCH and the lease stays held', async () => {
    const { lease } = await acquire(tokenA, { kind: 'attempt', ttlSeconds: 60, holder: 'fenced' });
    const wrong = String(Number(lease!.fencingToken) + 1);
    for (const method of ['Renew', 'Release']) {
      const error = await refusal(client.call(method, { leaseId: lease!.leaseId, fencingToken: wrong }, { token: tokenA }));
      expect(error.code, method).toBe(grpc.status.FAILED_PRECONDITION);
      expect(statusDetails(error).reason).toBe('CAPACITY.FENCING_MISMATCH');
    }
    expect((await client.call<{ lease: WireLease }>('GetLease', { leaseId: lease!.leaseId }, { token: tokenA })).lease.state).toBe('LEASE_STATE_ACTIVE');
  });

  it('when the pool is full, then RESOURCE_EXHAUSTED with RetryInfo until the holder\'s lease ends', async () => {
    const { lease } = await acquire(tokenA, { kind: 'sandbox', ttlSeconds: 300, holder: 'full', pool: 'grpc-one' });
    const error = await refusal(acquire(tokenB, { kind: 'sandbox', ttlSeconds: 60, holder: 'full', pool: 'grpc-one' }));
    expect(error.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    const details = statusDetails(error);
    expect(details.reason).toBe('CAPACITY.EXHAUSTED');
    // Until the lease of 300 s ends, counted on the host's clock: a range.
    expect(details.retrySeconds).toBeGreaterThanOrEqual(290);
    expect(details.retrySeconds).toBeLessThanOrEqual(300);
    const quota = await refusal(acquire(tokenB, { kind: 'build', units: 2, ttlSeconds: 60, holder: 'big' }));
    expect(quota.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(statusDetails(quota).reason).toBe('CAPACITY.QUOTA_EXCEEDED');
    await client.call('Release', { leaseId: lease!.leaseId, fencingToken: lease!.fencingToken }, { token: tokenA });
  });

  it('when two tenants use the same holder and idempotency key, then each gets its own lease, and the other tenant\'s is NOT_FOUND', async () => {
    const request = { kind: 'attempt', ttlSeconds: 60, holder: 'same-holder', idempotencyKey: 'job-1' };
    const a = await acquire(tokenA, request);
    const b = await acquire(tokenB, request);
    expect(a.lease!.leaseId).not.toBe(b.lease!.leaseId);
    expect([a.lease!.tenant, b.lease!.tenant]).toEqual([A, B]);
    const again = await acquire(tokenA, request);
    expect([again.lease!.leaseId, again.repeated]).toEqual([a.lease!.leaseId, true]);
    for (const [method, request2] of [
      ['GetLease', { leaseId: a.lease!.leaseId }],
      ['Renew', { leaseId: a.lease!.leaseId, fencingToken: a.lease!.fencingToken }],
      ['Release', { leaseId: a.lease!.leaseId, fencingToken: a.lease!.fencingToken }],
    ] as const) {
      const error = await refusal(client.call(method, request2, { token: tokenB }));
      expect(error.code, method).toBe(grpc.status.NOT_FOUND);
      expect(statusDetails(error).reason).toBe('CAPACITY.LEASE_NOT_FOUND');
    }
    expect((await client.call<{ lease: WireLease }>('GetLease', { leaseId: a.lease!.leaseId }, { token: tokenA })).lease.state).toBe('LEASE_STATE_ACTIVE');
  });

  it('when a ticket waits and the holder releases, then WatchTicket streams it waiting, then granted with its lease, and ends', async () => {
    const held = await acquire(tokenA, { kind: 'sandbox', ttlSeconds: 300, holder: 'first', pool: 'grpc-one' });
    const queued = await acquire(tokenB, { kind: 'sandbox', ttlSeconds: 60, holder: 'second', pool: 'grpc-one', wait: { seconds: 120, holdSeconds: 0 } });
    expect(queued.result).toBe('ticket');
    expect(queued.ticket).toMatchObject({ state: 'TICKET_STATE_WAITING', position: 1 });
    const requestId = queued.ticket!.requestId;
    // Another tenant's ticket is not there for it, to read, cancel or watch.
    for (const method of ['GetTicket', 'CancelTicket']) {
      expect((await refusal(client.call(method, { requestId }, { token: tokenA }))).code, method).toBe(grpc.status.NOT_FOUND);
    }
    expect((await refusal(client.stream('WatchTicket', { requestId }, { token: tokenA }))).code).toBe(grpc.status.NOT_FOUND);
    let release: Promise<unknown> | undefined;
    const watched = await client.stream<{ ticket: WireTicket }>('WatchTicket', { requestId }, { token: tokenB }, (message) => {
      if (message.ticket.state === 'TICKET_STATE_WAITING') release ??= client.call('Release', { leaseId: held.lease!.leaseId, fencingToken: held.lease!.fencingToken }, { token: tokenA });
    });
    await release;
    expect(watched.map((m) => m.ticket.state)).toEqual(['TICKET_STATE_WAITING', 'TICKET_STATE_GRANTED']);
    const granted = watched.at(-1)!.ticket.lease!;
    expect(granted).toMatchObject({ tenant: B, pool: 'grpc-one', state: 'LEASE_STATE_ACTIVE' });
    expect(Number(granted.fencingToken)).toBeGreaterThan(Number(held.lease!.fencingToken));
    await client.call('Release', { leaseId: granted.leaseId, fencingToken: granted.fencingToken }, { token: tokenB });
  });

  it('when the token is missing, malformed or for another audience, then UNAUTHENTICATED; without the scope, PERMISSION_DENIED', async () => {
    const request = { kind: 'attempt', ttlSeconds: 60, holder: 'auth' };
    const keys = await ensureLocalKeys(host.stateDir);
    const otherAudience = await issueLocalToken(keys, { issuer: host.host.config.auth.issuer, audience: 'api://another-service', tenant: A, scopes: SCOPES });
    const forged = `${tokenA.slice(0, -4)}AAAA`;
    for (const token of [undefined, 'not-a-jwt', otherAudience, forged]) {
      const error = await refusal(client.call('Acquire', request, token === undefined ? {} : { token }));
      expect(error.code, String(token)).toBe(grpc.status.UNAUTHENTICATED);
    }
    const readOnly = await host.token({ tenant: A, scopes: ['factory.runtime.read'] });
    const denied = await refusal(client.call('Acquire', request, { token: readOnly }));
    expect(denied.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(statusDetails(denied)).toMatchObject({ reason: 'AUTH.SCOPE_MISSING', metadata: { requiredScope: 'factory.capacity.lease' } });
    const otherTenant = await refusal(client.call('Acquire', request, { token: tokenA, tenant: B }));
    expect([otherTenant.code, statusDetails(otherTenant).reason]).toEqual([grpc.status.PERMISSION_DENIED, 'AUTH.TENANT_MISMATCH']);
  });

  it('when a service token bound to no tenant names one with x-tenant-id, then it acts for that tenant; naming none is INVALID_ARGUMENT', async () => {
    const service = await host.token({ scopes: SCOPES });
    const request = { kind: 'attempt', ttlSeconds: 60, holder: 'service' };
    const { lease } = await client.call<{ lease: WireLease }>('Acquire', request, { token: service, tenant: B });
    expect(lease.tenant).toBe(B);
    const unnamed = await refusal(client.call('Acquire', request, { token: service }));
    expect([unnamed.code, statusDetails(unnamed).reason]).toEqual([grpc.status.INVALID_ARGUMENT, 'AUTH.TENANT_REQUIRED']);
  });

  it('when the request is bad, then INVALID_ARGUMENT naming the fields, never INTERNAL', async () => {
    const cases: [string, object, string][] = [
      ['Acquire', { kind: 'gpu', ttlSeconds: 60, holder: 'w' }, 'kind'],
      ['Acquire', { kind: 'attempt', units: -2, ttlSeconds: 60, holder: 'w' }, 'units'],
      ['Acquire', { kind: 'attempt', ttlSeconds: 0, holder: 'w' }, 'ttlSeconds'],
      ['Acquire', { kind: 'attempt', ttlSeconds: 60, holder: '' }, 'holder'],
      ['Acquire', { kind: 'attempt', ttlSeconds: 60, holder: 'w', wait: { seconds: 0 } }, 'wait.seconds'],
      ['Renew', { leaseId: '', fencingToken: '1' }, 'leaseId'],
      ['Release', { leaseId: 'x', fencingToken: '-1' }, 'fencingToken'],
      ['GetTicket', { requestId: 'x', waitSeconds: 21 }, 'waitSeconds'],
      ['CancelTicket', { requestId: '' }, 'requestId'],
    ];
    for (const [method, request, field] of cases) {
      const error = await refusal(client.call(method, request, { token: tokenA }));
      expect(error.code, `${method} ${JSON.stringify(request)}`).toBe(grpc.status.INVALID_ARGUMENT);
      expect(statusDetails(error).fields, method).toContain(field);
    }
    const tooLong = await refusal(acquire(tokenA, { kind: 'attempt', ttlSeconds: 601, holder: 'w' }));
    expect([tooLong.code, statusDetails(tooLong).reason]).toEqual([grpc.status.INVALID_ARGUMENT, 'CAPACITY.TTL_TOO_LONG']);
  });

  describe('with the ConnectRPC clients', () => {
    const clientOf = (transport: Parameters<typeof createClient>[1]): Client<typeof LeaseService> => createClient(LeaseService, transport);
    const auth = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

    it('when the gRPC port is called by gRPC, gRPC-Web and Connect (HTTP/2 and HTTP/1.1), and the trigger by Connect and gRPC-Web, then each acquires, reads and releases', async () => {
      const trigger = new URL('runtime-cloud/connect', host.url).href;
      const clients = {
        grpc: clientOf(createGrpcTransport({ baseUrl: grpcUrl.origin })),
        grpcWebOnPort: clientOf(createGrpcWebTransport({ baseUrl: grpcUrl.origin, httpVersion: '2' })),
        connectOnPort: clientOf(createConnectTransport({ baseUrl: grpcUrl.origin, httpVersion: '2' })),
        connectOnPortHttp1: clientOf(createConnectTransport({ baseUrl: grpcUrl.origin, httpVersion: '1.1' })),
        trigger: clientOf(createConnectTransport({ baseUrl: trigger, httpVersion: '1.1' })),
        triggerBinary: clientOf(createConnectTransport({ baseUrl: trigger, httpVersion: '1.1', useBinaryFormat: true })),
        triggerGrpcWeb: clientOf(createGrpcWebTransport({ baseUrl: trigger, httpVersion: '1.1' })),
      };
      for (const [name, leases] of Object.entries(clients)) {
        const acquired = await leases.acquire({ kind: 'attempt', ttlSeconds: 60, holder: name }, auth(tokenA));
        expect(acquired.result.case, name).toBe('lease');
        const lease = acquired.result.value as { leaseId: string; fencingToken: bigint };
        expect((await leases.getLease({ leaseId: lease.leaseId }, auth(tokenA))).lease?.state).toBe(LeaseState.ACTIVE);
        const foreign = await leases.getLease({ leaseId: lease.leaseId }, auth(tokenB)).catch((e: unknown) => ConnectError.from(e));
        expect((foreign as ConnectError).code, name).toBe(Code.NotFound);
        expect((await leases.release({ leaseId: lease.leaseId, fencingToken: lease.fencingToken }, auth(tokenA))).released).toBe(true);
      }
    });

    it('when the trigger refuses, then the Connect error carries the code, ErrorInfo and RetryInfo; WatchTicket is unimplemented there', async () => {
      const leases = clientOf(createConnectTransport({ baseUrl: new URL('runtime-cloud/connect', host.url).href, httpVersion: '1.1' }));
      const held = await leases.acquire({ kind: 'sandbox', ttlSeconds: 300, holder: 'h', pool: 'grpc-one' }, auth(tokenA));
      const full = ConnectError.from(await leases.acquire({ kind: 'sandbox', ttlSeconds: 60, holder: 'h', pool: 'grpc-one' }, auth(tokenB)).catch((e: unknown) => e));
      expect(full.code).toBe(Code.ResourceExhausted);
      expect(full.findDetails(ErrorInfoSchema)[0]?.reason).toBe('CAPACITY.EXHAUSTED');
      expect(Number(full.findDetails(RetryInfoSchema)[0]?.retryDelay?.seconds)).toBeGreaterThanOrEqual(290);
      const noToken = ConnectError.from(await leases.getLease({ leaseId: 'x' }).catch((e: unknown) => e));
      expect(noToken.code).toBe(Code.Unauthenticated);
      const queued = await leases.acquire({ kind: 'sandbox', ttlSeconds: 60, holder: 'q', pool: 'grpc-one', wait: { seconds: 60, holdSeconds: 0 } }, auth(tokenB));
      expect(queued.result.case).toBe('ticket');
      const requestId = (queued.result.value as { requestId: string }).requestId;
      const watch = async () => {
        for await (const message of leases.watchTicket({ requestId }, auth(tokenB))) return message;
        return undefined;
      };
      expect(ConnectError.from(await watch().catch((e: unknown) => e)).code).toBe(Code.Unimplemented);
      const canceled = await leases.cancelTicket({ requestId }, auth(tokenB));
      expect(canceled.ticket?.state).toBe(TicketState.CANCELED);
      const lease = held.result.value as { leaseId: string; fencingToken: bigint };
      await leases.release({ leaseId: lease.leaseId, fencingToken: lease.fencingToken }, auth(tokenA));
    });

    it('when the trigger is sent what it does not serve or cannot read, then a Connect error with a 4xx, never a 500', async () => {
      const post = (method: string, contentType: string, body: string) =>
        host.fetch(`/runtime-cloud/connect/connectsoft.runtimecloud.capacity.v1.LeaseService/${method}`, {
          method: 'POST',
          headers: { 'content-type': contentType, authorization: `Bearer ${tokenA}` },
          body,
        });
      const unknown = await post('Steal', 'application/json', '{}');
      expect([unknown.status, ((await unknown.json()) as { code: string }).code]).toEqual([404, 'unimplemented']);
      expect((await post('GetLease', 'application/grpc', '')).status).toBe(415);
      const malformed = await post('Acquire', 'application/json', '{"kind": ');
      expect([malformed.status, ((await malformed.json()) as { code: string }).code]).toEqual([400, 'invalid_argument']);
      const invalid = await post('Acquire', 'application/json', JSON.stringify({ kind: 'gpu', ttlSeconds: 60, holder: 'w' }));
      expect([invalid.status, ((await invalid.json()) as { code: string }).code]).toEqual([400, 'invalid_argument']);
    });
  });
});
