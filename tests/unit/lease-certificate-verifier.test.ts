import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JSONWebKeySet, type JWK } from 'jose';
import { describe, expect, it } from 'vitest';
import { createLeaseVerifier, LeaseCertificateRefused, type LeaseCertificateRefusalCode } from '../../verifier/lease-certificate';

/**
 * The lease certificate verifier (verifier/lease-certificate/) with real ES256 keys: a resource refuses a stale holder,
 * a forged, expired, foreign or misdirected certificate, and keeps verifying across a key rotation without the host.
 * Certificates are signed here with jose, as the host's wire format says, not by the host's code.
 */
const ISSUER = 'api://runtime-cloud';
const T0 = new Date('2026-12-07T12:00:00Z');

interface Key {
  readonly kid: string;
  readonly privateKey: CryptoKey;
  readonly publicJwk: JWK;
}

async function aKey(kid: string = randomUUID()): Promise<Key> {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  return { kid, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' } };
}

const jwks = (...keys: Key[]): JSONWebKeySet => ({ keys: keys.map((k) => k.publicJwk) });

interface Claims {
  tenant: string;
  pool: string;
  kind: string;
  fencingToken: number;
  issuedAt: Date;
  lifetimeSeconds: number;
  issuer: string;
  typ: string;
}

async function aCertificate(key: Key, claims: Partial<Claims> = {}): Promise<string> {
  const issuedAt = Math.floor((claims.issuedAt ?? T0).getTime() / 1000);
  return new SignJWT({ tenant: claims.tenant ?? 'contoso', pool: claims.pool ?? 'pool-a', kind: claims.kind ?? 'sandbox', holder: 'worker-1', units: 1, fencingToken: claims.fencingToken ?? 7 })
    .setProtectedHeader({ alg: 'ES256', kid: key.kid, typ: claims.typ ?? 'lease-cert+jwt' })
    .setIssuer(claims.issuer ?? ISSUER)
    .setSubject(`lease-${randomUUID()}`)
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + (claims.lifetimeSeconds ?? 300))
    .sign(key.privateKey);
}

async function refusalOf(verifying: Promise<unknown>): Promise<LeaseCertificateRefusalCode> {
  const thrown = await verifying.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(thrown instanceof LeaseCertificateRefused)) throw new Error(`expected a refusal, got ${String(thrown)}`);
  return thrown.code;
}

describe('the lease certificate verifier', () => {
  it("when a certificate of the host's key is verified, then its lease's claims are answered", async () => {
    const key = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), now: () => T0 });

    const claims = await verifier.verify(await aCertificate(key, { fencingToken: 12 }), { pool: 'pool-a' });

    expect(claims).toMatchObject({ issuer: ISSUER, tenant: 'contoso', pool: 'pool-a', kind: 'sandbox', holder: 'worker-1', units: 1, fencingToken: 12 });
    expect(claims.expiresAt).toEqual(new Date(T0.getTime() + 300_000));
  });

  it('when a stale holder presents an older certificate after a newer one of the pool was seen, then it is refused and the newer one still passes', async () => {
    const key = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), now: () => T0 });
    const older = await aCertificate(key, { fencingToken: 7 });
    const newer = await aCertificate(key, { fencingToken: 8 });

    await verifier.verify(older);
    await verifier.verify(newer);

    expect(await refusalOf(verifier.verify(older))).toBe('STALE_FENCING_TOKEN');
    await expect(verifier.verify(newer)).resolves.toMatchObject({ fencingToken: 8 });
  });

  it("when another tenant's lease of a pool with the same name has a higher token, then this tenant's holder is not stale", async () => {
    const key = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), now: () => T0 });

    await verifier.verify(await aCertificate(key, { tenant: 'fabrikam', pool: 'pool-a', fencingToken: 20 }));

    await expect(verifier.verify(await aCertificate(key, { tenant: 'contoso', pool: 'pool-a', fencingToken: 7 }))).resolves.toMatchObject({ tenant: 'contoso' });
    expect(await refusalOf(verifier.verify(await aCertificate(key, { tenant: 'fabrikam', pool: 'pool-a', fencingToken: 19 })))).toBe('STALE_FENCING_TOKEN');
  });

  it('when a verifier is for one tenant, then a certificate of another tenant with the same pool name is refused', async () => {
    const key = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), tenant: 'contoso', pool: 'pool-a', now: () => T0 });

    expect(await refusalOf(verifier.verify(await aCertificate(key, { tenant: 'fabrikam' })))).toBe('WRONG_TENANT');
    await expect(verifier.verify(await aCertificate(key, { tenant: 'contoso' }))).resolves.toMatchObject({ tenant: 'contoso' });
  });

  it('when a certificate is signed by another key, then it is refused: under a kid the host publishes as a bad signature, under another as an unknown key', async () => {
    const host = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(host), now: () => T0 });
    const forger = await aKey();

    expect(await refusalOf(verifier.verify(await aCertificate({ ...forger, kid: host.kid })))).toBe('BAD_SIGNATURE');
    expect(await refusalOf(verifier.verify(await aCertificate(forger)))).toBe('UNKNOWN_KEY');
  });

  it('when a refused certificate carries a higher token, then it does not make the holders of the pool stale', async () => {
    const host = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(host), now: () => T0 });

    expect(await refusalOf(verifier.verify(await aCertificate({ ...(await aKey()), kid: host.kid }, { fencingToken: 1_000 })))).toBe('BAD_SIGNATURE');
    expect(await refusalOf(verifier.verify(await aCertificate(host, { pool: 'pool-a', fencingToken: 1_000, issuer: 'api://elsewhere' })))).toBe('WRONG_ISSUER');

    await expect(verifier.verify(await aCertificate(host, { fencingToken: 7 }))).resolves.toMatchObject({ fencingToken: 7 });
  });

  it('when a certificate has expired on the injected clock, then it is refused, and within the tolerance it is not', async () => {
    const key = await aKey();
    let now = T0;
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), now: () => now });
    const certificate = await aCertificate(key, { lifetimeSeconds: 60 });

    now = new Date(T0.getTime() + 59_000);
    await expect(verifier.verify(certificate)).resolves.toBeDefined();
    now = new Date(T0.getTime() + 60_000);
    expect(await refusalOf(verifier.verify(certificate))).toBe('EXPIRED');

    const tolerant = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), now: () => now, clockToleranceSeconds: 5 });
    await expect(tolerant.verify(certificate)).resolves.toBeDefined();
  });

  it('when a certificate is for another pool or kind, or is not a lease certificate, then it is refused', async () => {
    const key = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: jwks(key), pool: 'pool-a', kind: 'sandbox', now: () => T0 });

    expect(await refusalOf(verifier.verify(await aCertificate(key, { pool: 'pool-b' })))).toBe('WRONG_POOL');
    expect(await refusalOf(verifier.verify(await aCertificate(key), { pool: 'pool-b' }))).toBe('WRONG_POOL');
    expect(await refusalOf(verifier.verify(await aCertificate(key, { kind: 'build' })))).toBe('WRONG_KIND');
    expect(await refusalOf(verifier.verify(await aCertificate(key, { typ: 'JWT' })))).toBe('MALFORMED');
    expect(await refusalOf(verifier.verify('not.a.certificate'))).toBe('MALFORMED');
  });

  it('when the host rotates its key, then certificates of the previous key still verify and those of the new key are verified after one fetch of the keys', async () => {
    const previous = await aKey('key-1');
    const next = await aKey('key-2');
    let published = jwks(previous);
    let fetches = 0;
    let now = T0;
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: () => Promise.resolve((fetches++, published)), now: () => now });
    await verifier.verify(await aCertificate(previous, { fencingToken: 7 }));

    now = new Date(T0.getTime() + 60_000);
    published = jwks(next, previous);
    await expect(verifier.verify(await aCertificate(next, { fencingToken: 8, issuedAt: now }))).resolves.toMatchObject({ fencingToken: 8 });
    await expect(verifier.verify(await aCertificate(previous, { fencingToken: 9 }))).resolves.toMatchObject({ fencingToken: 9 });

    expect(fetches).toBe(2);
  });

  it('when the host cannot be reached after the keys were fetched, then certificates of a known key verify, and an unknown key is refused without fetching again within the cooldown', async () => {
    const key = await aKey();
    let reachable = true;
    let fetches = 0;
    let now = T0;
    const verifier = createLeaseVerifier({
      issuer: ISSUER,
      keys: () => {
        fetches++;
        return reachable ? Promise.resolve(jwks(key)) : Promise.reject(new Error('connect ECONNREFUSED'));
      },
      refetchCooldownMs: 30_000,
      now: () => now,
    });
    await verifier.verify(await aCertificate(key, { fencingToken: 7 }));
    reachable = false;

    await expect(verifier.verify(await aCertificate(key, { fencingToken: 8 }))).resolves.toMatchObject({ fencingToken: 8 });
    expect(await refusalOf(verifier.verify(await aCertificate(await aKey())))).toBe('UNKNOWN_KEY');
    expect(await refusalOf(verifier.verify(await aCertificate(await aKey())))).toBe('UNKNOWN_KEY');
    expect(fetches).toBe(1);
    now = new Date(T0.getTime() + 30_000);
    expect(await refusalOf(verifier.verify(await aCertificate(await aKey(), { issuedAt: now })))).toBe('UNKNOWN_KEY');
    expect(fetches).toBe(2);
    expect(await refusalOf(verifier.verify(await aCertificate(key, { fencingToken: 7, issuedAt: now })))).toBe('STALE_FENCING_TOKEN');
  });

  it('when the keys were never fetched and the host cannot be reached, then the certificate is refused as keys unavailable', async () => {
    const key = await aKey();
    const verifier = createLeaseVerifier({ issuer: ISSUER, keys: () => Promise.reject(new Error('connect ECONNREFUSED')), now: () => T0 });

    expect(await refusalOf(verifier.verify(await aCertificate(key)))).toBe('KEYS_UNAVAILABLE');
  });
});
