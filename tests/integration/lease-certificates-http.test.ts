import { randomUUID } from 'node:crypto';
import { decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, SignJWT, type JSONWebKeySet } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rotateLeaseSigningKey } from '../../local/auth/lease-signing-keys';
import { systemClock } from '../../shared/platform/time/clock';
import { keyVaultSigningKeys } from '../../shared/platform/signing/key-vault-signing-keys.adapter';
import { standInVault } from '../support/key-vault-stand-in';
import { createLeaseVerifier, LeaseCertificateRefused, type LeaseCertificateRefusalCode, type LeaseVerifierOptions } from '../../verifier/lease-certificate';
import { startTestHost, type TestHost } from '../support/local-host';

/**
 * Lease certificates on a real local host (issue 35): every grant, renewal and granted lease request carries a
 * certificate signed with the host's key ring, and the standalone verifier checks it offline against the keys the
 * host publishes at its anonymous JWKS route. Two tenants lease from the same pools.
 */
const A = { tenant: 'cert-a', scopes: ['factory.capacity.lease', 'factory.runtime.read'] };
const B = { tenant: 'cert-b', scopes: ['factory.capacity.lease', 'factory.runtime.read'] };
const ADMIN = { roles: ['PlatformAdmin'] };
const JWKS_ROUTE = '/runtime-cloud/.well-known/lease-jwks.json';

interface LeaseBody {
  leaseId: string;
  tenant: string;
  pool: string;
  fencingToken: number;
  expiresAt: string;
  certificate?: string;
}

describe('lease certificates on the local host', () => {
  let host: TestHost;
  let tokenA: string;
  let tokenB: string;
  let issuer: string;

  const call = (method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) =>
    host.fetch(path, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const acquire = async (token: string, pool: string, holder = `w-${randomUUID()}`): Promise<LeaseBody> => {
    const response = await call('POST', '/runtime-cloud/leases', token, { kind: 'sandbox', ttlSeconds: 600, holder, pool });
    expect(response.status).toBe(201);
    return (await response.json()) as LeaseBody;
  };
  const release = async (token: string, lease: LeaseBody) => {
    expect((await call('DELETE', `/runtime-cloud/leases/${lease.leaseId}`, token, undefined, { 'fencing-token': String(lease.fencingToken) })).status).toBe(204);
  };
  /** A verifier of the host's keys as a resource runs it: the JWKS fetched from the host's route. */
  const verifierOf = (options: Partial<LeaseVerifierOptions> = {}) => createLeaseVerifier({ issuer, keys: new URL(JWKS_ROUTE, host.url), refetchCooldownMs: 0, ...options });
  const refusalOf = async (verifying: Promise<unknown>): Promise<LeaseCertificateRefusalCode> => {
    const thrown = await verifying.then(
      () => undefined,
      (e: unknown) => e,
    );
    if (!(thrown instanceof LeaseCertificateRefused)) throw new Error(`expected a refusal, got ${String(thrown)}`);
    return thrown.code;
  };

  beforeAll(async () => {
    host = await startTestHost();
    issuer = host.host.config.auth.audience;
    const admin = await host.token(ADMIN);
    tokenA = await host.token(A);
    tokenB = await host.token(B);
    const limit = { maxUnits: 100, maxTtlSeconds: 3600, maxWaitSeconds: 600 };
    expect((await call('PUT', '/runtime-cloud/editions/certs', admin, { limits: { sandbox: limit } })).status).toBe(201);
    for (const tenant of [A.tenant, B.tenant]) expect((await call('PUT', `/runtime-cloud/tenants/${tenant}`, admin, { edition: 'certs' })).status).toBe(201);
    for (const [pool, capacity] of [['cert-main', 20], ['cert-other', 20], ['cert-one', 1]] as const) {
      expect((await call('PUT', `/runtime-cloud/pools/${pool}`, admin, { kind: 'sandbox', target: 'local', capacity })).status).toBe(201);
    }
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when a lease is granted, then its certificate names the lease and verifies against the JWKS the host publishes without a token', async () => {
    const lease = await acquire(tokenA, 'cert-main', 'worker-1');

    const jwks = await fetch(new URL(JWKS_ROUTE, host.url));
    expect(jwks.status).toBe(200);
    expect(jwks.headers.get('cache-control')).toBe('public, max-age=300');
    expect(((await jwks.json()) as JSONWebKeySet).keys).toEqual([expect.objectContaining({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig', kid: expect.any(String) })]);
    const claims = await verifierOf().verify(lease.certificate ?? '', { tenant: A.tenant, pool: 'cert-main' });
    expect(claims).toMatchObject({ issuer, leaseId: lease.leaseId, tenant: A.tenant, pool: 'cert-main', kind: 'sandbox', holder: 'worker-1', units: 1, fencingToken: lease.fencingToken });
    // Short-lived: five minutes, never past the lease.
    expect(claims.expiresAt.getTime() - claims.issuedAt.getTime()).toBe(300_000);
    expect(claims.expiresAt.getTime()).toBeLessThanOrEqual(new Date(lease.expiresAt).getTime());
    const read = (await (await call('GET', `/runtime-cloud/leases/${lease.leaseId}`, tokenA)).json()) as LeaseBody;
    expect(read.certificate).toBeUndefined();
  });

  it('when a lease is released and the pool granted again, then the new certificate has a higher token and the old one is refused once the new one was seen', async () => {
    const verifier = verifierOf();
    const first = await acquire(tokenA, 'cert-main');
    await verifier.verify(first.certificate ?? '');
    await release(tokenA, first);

    const second = await acquire(tokenA, 'cert-main');
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await expect(verifier.verify(second.certificate ?? '')).resolves.toMatchObject({ fencingToken: second.fencingToken });

    expect(await refusalOf(verifier.verify(first.certificate ?? ''))).toBe('STALE_FENCING_TOKEN');
  });

  it('when a lease is renewed, then the answer carries a fresh certificate of the same lease and token', async () => {
    const lease = await acquire(tokenA, 'cert-main');
    const renewed = await call('POST', `/runtime-cloud/leases/${lease.leaseId}/renew`, tokenA, { fencingToken: lease.fencingToken, ttlSeconds: 900 });
    expect(renewed.status).toBe(200);
    const body = (await renewed.json()) as LeaseBody;

    const claims = await verifierOf().verify(body.certificate ?? '');
    expect(claims).toMatchObject({ leaseId: lease.leaseId, fencingToken: lease.fencingToken });
  });

  it('when a certificate is forged with another key, expired on the verifier clock, or presented for another pool, then it is refused', async () => {
    const lease = await acquire(tokenA, 'cert-main');
    const { kid } = decodeProtectedHeader(lease.certificate ?? '');
    const { privateKey } = await generateKeyPair('ES256');
    const forged = await new SignJWT({ ...decodeJwt(lease.certificate ?? ''), fencingToken: lease.fencingToken + 1_000 })
      .setProtectedHeader({ alg: 'ES256', typ: 'lease-cert+jwt', kid: kid ?? '' })
      .sign(privateKey);
    const expiry = (decodeJwt(lease.certificate ?? '').exp ?? 0) * 1000;

    expect(await refusalOf(verifierOf().verify(forged))).toBe('BAD_SIGNATURE');
    expect(await refusalOf(verifierOf({ now: () => new Date(expiry) }).verify(lease.certificate ?? ''))).toBe('EXPIRED');
    expect(await refusalOf(verifierOf().verify(lease.certificate ?? '', { pool: 'cert-other' }))).toBe('WRONG_POOL');
    const stranger = await generateKeyPair('ES256');
    const strangersKeys: JSONWebKeySet = { keys: [{ ...(await exportJWK(stranger.publicKey)), kid: kid ?? '', alg: 'ES256' }] };
    expect(await refusalOf(createLeaseVerifier({ issuer, keys: strangersKeys }).verify(lease.certificate ?? ''))).toBe('BAD_SIGNATURE');
  });

  it("when two tenants lease from the same pools, then each one's certificate names its tenant, a verifier of one tenant refuses the other's, and the other's higher token leaves it valid", async () => {
    const verifier = verifierOf();
    const ofA = await acquire(tokenA, 'cert-other');
    const ofB = await acquire(tokenB, 'cert-other');
    expect(ofB.fencingToken).toBeGreaterThan(ofA.fencingToken);

    await expect(verifier.verify(ofB.certificate ?? '')).resolves.toMatchObject({ tenant: B.tenant, pool: 'cert-other' });
    await expect(verifier.verify(ofA.certificate ?? '')).resolves.toMatchObject({ tenant: A.tenant, pool: 'cert-other' });
    expect(await refusalOf(verifierOf({ tenant: A.tenant }).verify(ofB.certificate ?? ''))).toBe('WRONG_TENANT');
  });

  it('when a request waited in the queue and was granted, then following it answers its lease with a certificate', async () => {
    const held = await acquire(tokenA, 'cert-one');
    const waiting = await call('POST', '/runtime-cloud/leases', tokenB, { kind: 'sandbox', ttlSeconds: 600, holder: 'waiter', pool: 'cert-one', wait: { seconds: 300, holdSeconds: 0 } });
    expect(waiting.status).toBe(202);
    const { requestId } = (await waiting.json()) as { requestId: string };
    await release(tokenA, held);

    const followed = await call('GET', `/runtime-cloud/lease-requests/${requestId}?waitSeconds=10`, tokenB);
    const ticket = (await followed.json()) as { state: string; lease?: LeaseBody };
    expect(ticket.state).toBe('granted');

    const claims = await verifierOf().verify(ticket.lease?.certificate ?? '', { tenant: B.tenant, pool: 'cert-one' });
    expect(claims).toMatchObject({ leaseId: ticket.lease?.leaseId, holder: 'waiter', fencingToken: ticket.lease?.fencingToken });
    expect(claims.fencingToken).toBeGreaterThan(held.fencingToken);
  });

  it("when the host's key is rotated, then new certificates name the new key, the JWKS lists both, and a holder's certificate of the previous key still verifies", async () => {
    const verifier = verifierOf();
    const before = await acquire(tokenA, 'cert-main');
    await verifier.verify(before.certificate ?? '');
    const previousKid = decodeProtectedHeader(before.certificate ?? '').kid;

    const newKid = rotateLeaseSigningKey(host.stateDir);
    const after = await acquire(tokenB, 'cert-main');

    expect(decodeProtectedHeader(after.certificate ?? '').kid).toBe(newKid);
    const published = (await (await fetch(new URL(JWKS_ROUTE, host.url))).json()) as JSONWebKeySet;
    expect(published.keys.map((k) => k.kid)).toEqual([newKid, previousKid]);
    await expect(verifier.verify(after.certificate ?? '')).resolves.toMatchObject({ tenant: B.tenant });
    await expect(verifier.verify(before.certificate ?? '')).resolves.toMatchObject({ leaseId: before.leaseId });
    const renewed = (await (await call('POST', `/runtime-cloud/leases/${before.leaseId}/renew`, tokenA, { fencingToken: before.fencingToken })).json()) as LeaseBody;
    expect(decodeProtectedHeader(renewed.certificate ?? '').kid).toBe(newKid);
  });
});

describe('lease certificates while the signing key cannot be read', () => {
  let host: TestHost;
  afterAll(async () => {
    await host?.stop();
  });

  it('when the Key Vault key cannot be read, then a grant still answers its lease, without a certificate, and the JWKS route answers 503', async () => {
    // A vault that has no such key: every read of it fails.
    const vault = standInVault();
    const keys = keyVaultSigningKeys({ keyUrl: `${vault.url}/keys/lease-certificates`, credential: vault.credential, httpClient: vault.httpClient, clock: systemClock });
    host = await startTestHost({ depsOverrides: { leaseSigningKeys: keys } });
    const admin = { authorization: `Bearer ${await host.token(ADMIN)}`, 'content-type': 'application/json' };
    await host.fetch('/runtime-cloud/editions/certs', { method: 'PUT', headers: admin, body: JSON.stringify({ limits: { sandbox: { maxUnits: 10, maxTtlSeconds: 600 } } }) });
    await host.fetch(`/runtime-cloud/tenants/${A.tenant}`, { method: 'PUT', headers: admin, body: JSON.stringify({ edition: 'certs' }) });
    await host.fetch('/runtime-cloud/pools/cert-main', { method: 'PUT', headers: admin, body: JSON.stringify({ kind: 'sandbox', target: 'local', capacity: 5 }) });

    const granted = await host.fetch('/runtime-cloud/leases', { method: 'POST', claims: A, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'sandbox', ttlSeconds: 60, holder: 'w', pool: 'cert-main' }) });
    const jwks = await fetch(new URL(JWKS_ROUTE, host.url));

    expect(granted.status).toBe(201);
    const lease = (await granted.json()) as LeaseBody;
    expect(lease).toMatchObject({ tenant: A.tenant, pool: 'cert-main' });
    expect(lease.certificate).toBeUndefined();
    expect(jwks.status).toBe(503);
    expect(await jwks.json()).toMatchObject({ code: 'CAPACITY.CERTIFICATE_KEYS_UNAVAILABLE' });
  });
});
