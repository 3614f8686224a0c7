import { decodeProtectedHeader } from 'jose';
import { describe, expect, it } from 'vitest';
import { keyVaultSigningKeys } from '../../shared/platform/signing/key-vault-signing-keys.adapter';
import { signCompactJws } from '../../shared/platform/signing/signing-keys';
import { createLeaseVerifier } from '../../verifier/lease-certificate';
import { standInVault } from '../support/key-vault-stand-in';

/**
 * Lease certificates signed in Azure Key Vault: the real `@azure/keyvault-keys` SDK (challenge authentication,
 * paging, the CryptographyClient's `sign`) against a stand-in of Key Vault's REST API, and the certificates checked by
 * the standalone verifier against the JWKS built from the key versions' public parts. The clock is injected.
 */
const T0 = new Date('2026-12-07T12:00:00Z');
const REFRESH_MS = 300_000;
const at = (ms: number) => new Date(T0.getTime() + ms);

async function aCertificate(keys: ReturnType<typeof keyVaultSigningKeys>, now: Date, fencingToken: number): Promise<string> {
  const iat = Math.floor(now.getTime() / 1000);
  return signCompactJws(keys, 'lease-cert+jwt', { iss: 'api://runtime-cloud', sub: `lease-${fencingToken}`, tenant: 'contoso', pool: 'pool-a', kind: 'sandbox', holder: 'w', units: 1, fencingToken, iat, exp: iat + 300 });
}

describe('lease certificate keys in Azure Key Vault', () => {
  it('when the key has a version, then certificates are signed by Key Vault and verify against the published JWKS', async () => {
    const vault = standInVault();
    const version = vault.addVersion('lease-certificates', at(-3_600_000));
    let now = T0;
    const keys = keyVaultSigningKeys({ keyUrl: `${vault.url}/keys/lease-certificates`, credential: vault.credential, httpClient: vault.httpClient, clock: { now: () => now } });

    const certificate = await aCertificate(keys, now, 7);
    const jwks = await keys.publicKeys();

    expect(decodeProtectedHeader(certificate).kid).toBe(`lease-certificates/${version}`);
    expect(jwks.keys).toEqual([expect.objectContaining({ kty: 'EC', crv: 'P-256', kid: `lease-certificates/${version}`, alg: 'ES256', use: 'sig' })]);
    expect(jwks.keys[0]).not.toHaveProperty('d');
    const verifier = createLeaseVerifier({ issuer: 'api://runtime-cloud', keys: jwks, now: () => now });
    await expect(verifier.verify(certificate)).resolves.toMatchObject({ fencingToken: 7 });
    expect(vault.calls).toContain(`POST /keys/lease-certificates/${version}/sign`);
    now = at(1000);
    await expect(verifier.verify(await aCertificate(keys, now, 8))).resolves.toMatchObject({ fencingToken: 8 });
  });

  it('when a new version is added, then it is published first and signs only once it has been listed for the refresh time, while certificates of the previous version keep verifying', async () => {
    const vault = standInVault();
    const first = vault.addVersion('lease-certificates', at(-3_600_000));
    let now = T0;
    const keys = keyVaultSigningKeys({ keyUrl: `${vault.url}/keys/lease-certificates`, credential: vault.credential, httpClient: vault.httpClient, clock: { now: () => now }, refreshMs: REFRESH_MS });
    const before = await aCertificate(keys, now, 7);

    const second = vault.addVersion('lease-certificates', at(60_000));
    now = at(60_000);
    expect(decodeProtectedHeader(await aCertificate(keys, now, 8)).kid).toBe(`lease-certificates/${first}`);
    now = at(REFRESH_MS);
    expect((await keys.publicKeys()).keys.map((k) => k.kid)).toEqual([`lease-certificates/${second}`, `lease-certificates/${first}`]);
    expect(decodeProtectedHeader(await aCertificate(keys, now, 9)).kid).toBe(`lease-certificates/${first}`);
    now = at(60_000 + REFRESH_MS);
    const after = await aCertificate(keys, now, 10);

    expect(decodeProtectedHeader(after).kid).toBe(`lease-certificates/${second}`);
    const verifier = createLeaseVerifier({ issuer: 'api://runtime-cloud', keys: await keys.publicKeys(), now: () => now, clockToleranceSeconds: 3600 });
    await expect(verifier.verify(after)).resolves.toMatchObject({ fencingToken: 10 });
    await expect(verifier.verify(before, { tenant: 'contoso' })).rejects.toMatchObject({ code: 'STALE_FENCING_TOKEN' });
    await expect(createLeaseVerifier({ issuer: 'api://runtime-cloud', keys: await keys.publicKeys(), now: () => now, clockToleranceSeconds: 3600 }).verify(before)).resolves.toMatchObject({ fencingToken: 7 });
  });

  it('when a version is disabled, then it is not published and never signs', async () => {
    const vault = standInVault();
    const enabled = vault.addVersion('lease-certificates', at(-7_200_000));
    vault.addVersion('lease-certificates', at(-3_600_000), { enabled: false });
    const keys = keyVaultSigningKeys({ keyUrl: `${vault.url}/keys/lease-certificates`, credential: vault.credential, httpClient: vault.httpClient, clock: { now: () => T0 } });

    expect((await keys.publicKeys()).keys.map((k) => k.kid)).toEqual([`lease-certificates/${enabled}`]);
    expect(decodeProtectedHeader(await aCertificate(keys, T0, 1)).kid).toBe(`lease-certificates/${enabled}`);
  });

  it('when the key is not an EC P-256 key, then signing fails saying so', async () => {
    const vault = standInVault();
    vault.addVersion('lease-certificates', at(-3_600_000), { kty: 'RSA' });
    const keys = keyVaultSigningKeys({ keyUrl: `${vault.url}/keys/lease-certificates`, credential: vault.credential, httpClient: vault.httpClient, clock: { now: () => T0 } });

    await expect(aCertificate(keys, T0, 1)).rejects.toThrow(/lease certificates need an EC P-256 key/);
  });
});
