import { base64url, exportJWK, generateKeyPair, SignJWT, type JSONWebKeySet, type JWK } from 'jose';
import { createHmac } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { requirePlatformPrincipal, requireScope, resolveTenant, samePerson, type Principal } from '../../shared/platform/auth/auth';
import { createTokenValidator, type TokenValidator } from '../../shared/platform/auth/token-validator';
import { AppError } from '../../shared/platform/errors/app-error';
import { ManualClock } from '../../shared/platform/time/clock';

const ISSUER = 'https://issuer.test';
const AUDIENCE = 'api://runtime-cloud';

let privateKey: Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
let publicJwk: JWK;
let validator: TokenValidator;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey;
  publicJwk = { ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256' };
  const jwks: JSONWebKeySet = { keys: [publicJwk] };
  validator = createTokenValidator({ issuer: ISSUER, audience: AUDIENCE, keys: jwks, clockToleranceSeconds: 5 });
});

function aToken(overrides: { iss?: string; aud?: string; exp?: number; nbf?: number; claims?: Record<string, unknown> } = {}) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ scp: 'factory.health.read', ...overrides.claims })
    .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
    .setIssuer(overrides.iss ?? ISSUER)
    .setAudience(overrides.aud ?? AUDIENCE)
    .setSubject('svc-1')
    .setIssuedAt(now)
    .setNotBefore(overrides.nbf ?? now)
    .setExpirationTime(overrides.exp ?? now + 300)
    .sign(privateKey);
}

async function refusal(authorization: string | undefined, by: TokenValidator = validator): Promise<AppError> {
  try {
    await by.authenticate(authorization);
  } catch (error) {
    if (error instanceof AppError) return error;
    throw error;
  }
  throw new Error('the token was accepted');
}

function unsigned(header: Record<string, unknown>, payload: Record<string, unknown>): string {
  return `${base64url.encode(JSON.stringify(header))}.${base64url.encode(JSON.stringify(payload))}`;
}

describe('bearer token validation', () => {
  it('when the token is valid, then the principal carries subject and scopes', async () => {
    const principal = await validator.authenticate(`Bearer ${await aToken()}`);
    expect(principal.subject).toBe('svc-1');
    expect([...principal.scopes]).toEqual(['factory.health.read']);
  });

  it('when no token is sent, then unauthorized AUTH.TOKEN_MISSING', async () => {
    expect(await refusal(undefined)).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_MISSING' });
    expect(await refusal('Basic abc')).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_MISSING' });
  });

  it.each([
    ['expired', () => aToken({ exp: Math.floor(Date.now() / 1000) - 60 }), /expired/],
    ['not yet valid', () => aToken({ nbf: Math.floor(Date.now() / 1000) + 600 }), /nbf/],
    ['from another issuer', () => aToken({ iss: 'https://evil.test' }), /iss/],
    ['for another audience', () => aToken({ aud: 'api://other' }), /aud/],
  ])('when the token is %s, then it is refused as unauthorized', async (_name, make, reason) => {
    const error = await refusal(`Bearer ${await make()}`);
    expect(error).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_INVALID' });
    expect(error.message).toMatch(reason);
  });

  it('when the token uses alg none, then it is refused', async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = `${unsigned({ alg: 'none', typ: 'JWT' }, { iss: ISSUER, aud: AUDIENCE, sub: 'x', exp: now + 300, scp: 'factory.health.read' })}.`;
    expect(await refusal(`Bearer ${token}`)).toMatchObject({ kind: 'unauthorized' });
  });

  it('when the token is HS256-signed with the public key as secret, then it is refused', async () => {
    const now = Math.floor(Date.now() / 1000);
    const signingInput = unsigned(
      { alg: 'HS256', kid: 'k1', typ: 'JWT' },
      { iss: ISSUER, aud: AUDIENCE, sub: 'x', exp: now + 300, scp: 'factory.health.read' },
    );
    const secret = JSON.stringify(publicJwk);
    const signature = base64url.encode(createHmac('sha256', secret).update(signingInput).digest());
    const error = await refusal(`Bearer ${signingInput}.${signature}`);
    expect(error).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_INVALID' });
  });

  it('when the signature does not match, then it is refused', async () => {
    const token = await aToken();
    const [header, payload] = token.split('.');
    const tampered = `${header}.${base64url.encode(JSON.stringify({ sub: 'admin', iss: ISSUER, aud: AUDIENCE, exp: 9e9 }))}.${token.split('.')[2]}`;
    expect(payload).toBeDefined();
    expect(await refusal(`Bearer ${tampered}`)).toMatchObject({ kind: 'unauthorized' });
  });
});

describe('scopes, roles and tenants', () => {
  async function principal(claims: Record<string, unknown>): Promise<Principal> {
    return validator.authenticate(`Bearer ${await aToken({ claims: { scp: undefined, ...claims } })}`);
  }

  it('when a scope is missing, then forbidden naming it', async () => {
    const p = await principal({ scp: 'factory.health.read' });
    expect(() => requireScope(p, 'factory.runtime.admin')).toThrow(
      expect.objectContaining({ kind: 'forbidden', details: { requiredScope: 'factory.runtime.admin' } }),
    );
  });

  it('when roles are given, then they grant their scopes', async () => {
    const observer = await principal({ roles: ['Observer'] });
    expect(() => requireScope(observer, 'factory.runtime.read')).not.toThrow();
    expect(() => requireScope(observer, 'factory.provisioning.operate')).toThrow();
    const operator = await principal({ roles: ['Operator'] });
    expect(() => requireScope(operator, 'factory.provisioning.operate')).not.toThrow();
    const admin = await principal({ roles: ['PlatformAdmin'] });
    expect(() => requireScope(admin, 'factory.runtime.admin')).not.toThrow();
  });

  it('when a tenant-bound token names another tenant, then forbidden', async () => {
    const p = await principal({ scp: 'factory.runtime.read', tenant: 'acme' });
    expect(resolveTenant(p, 'factory.runtime.read', undefined)).toEqual({ kind: 'one', tenant: 'acme' });
    expect(resolveTenant(p, 'factory.runtime.read', 'acme')).toEqual({ kind: 'one', tenant: 'acme' });
    expect(() => resolveTenant(p, 'factory.runtime.read', 'globex')).toThrow(
      expect.objectContaining({ kind: 'forbidden', code: 'AUTH.TENANT_MISMATCH' }),
    );
  });

  it('when a tenant-less service names a tenant, then it acts for it; without a name it must name one', async () => {
    // An application's own token, as Entra issues one: application permissions in roles, no scp.
    const service = await principal({ roles: ['factory.capacity.lease'] });
    expect(resolveTenant(service, 'factory.capacity.lease', 'acme')).toEqual({ kind: 'one', tenant: 'acme' });
    expect(() => resolveTenant(service, 'factory.capacity.lease', undefined)).toThrow(
      expect.objectContaining({ code: 'AUTH.TENANT_REQUIRED' }),
    );
  });

  it.each([
    ['empty', ''],
    ['a number', 42],
    ['an array', ['acme']],
    ['an object', { id: 'acme' }],
    ['null', null],
  ])('when the tenant claim is present but %s, then the token is refused as unauthorized', async (_name, tenant) => {
    const token = await aToken({ claims: { scp: 'factory.capacity.lease', tenant } });
    expect(await refusal(`Bearer ${token}`)).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TENANT_CLAIM_INVALID' });
  });

  it('when a tenant-bound token asks for platform administration, then forbidden; without a tenant, allowed', async () => {
    const tenantAdmin = await principal({ roles: ['PlatformAdmin'], tenant: 'acme' });
    expect(() => requirePlatformPrincipal(tenantAdmin)).toThrow(
      expect.objectContaining({ kind: 'forbidden', code: 'AUTH.PLATFORM_ONLY', details: { tokenTenant: 'acme' } }),
    );
    const platformAdmin = await principal({ roles: ['PlatformAdmin'] });
    expect(() => requirePlatformPrincipal(platformAdmin)).not.toThrow();
  });

  it('when a role-only token without tenant names a tenant, then it is refused unless PlatformAdmin', async () => {
    const observer = await principal({ roles: ['Observer'] });
    expect(() => resolveTenant(observer, 'factory.runtime.read', 'acme')).toThrow(
      expect.objectContaining({ code: 'AUTH.TENANT_NOT_ALLOWED' }),
    );
    const admin = await principal({ roles: ['PlatformAdmin'] });
    expect(resolveTenant(admin, 'factory.runtime.read', undefined)).toEqual({ kind: 'all' });
    expect(resolveTenant(admin, 'factory.runtime.read', 'acme')).toEqual({ kind: 'one', tenant: 'acme' });
  });
});

describe('the validated-token cache', () => {
  async function signed(key: Parameters<SignJWT['sign']>[0], kid: string, clock: ManualClock, lifetimeSeconds: number): Promise<string> {
    const now = Math.floor(clock.now().getTime() / 1000);
    return new SignJWT({ scp: 'factory.health.read' })
      .setProtectedHeader({ alg: 'RS256', kid })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setSubject('svc-1')
      .setIssuedAt(now)
      .setExpirationTime(now + lifetimeSeconds)
      .sign(key);
  }

  it('when the injected clock passes the exp of a cached token, then it is refused as expired', async () => {
    const clock = new ManualClock('2026-01-01T00:00:00.000Z');
    const onClock = createTokenValidator({ issuer: ISSUER, audience: AUDIENCE, keys: { keys: [publicJwk] }, clockToleranceSeconds: 5, clock });
    const token = await signed(privateKey, 'k1', clock, 60);
    expect((await onClock.authenticate(`Bearer ${token}`)).subject).toBe('svc-1');
    clock.advance(59_000);
    expect((await onClock.authenticate(`Bearer ${token}`)).subject).toBe('svc-1');
    // Past exp and the tolerance: the cached entry must be gone, and jose judges on the same clock.
    clock.advance(7_000);
    const error = await refusal(`Bearer ${token}`, onClock);
    expect(error).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_INVALID' });
    expect(error.message).toMatch(/expired/);
  });

  it('when the JWKS is fetched again without the key of a cached token, then that token is refused', async () => {
    const next = await generateKeyPair('RS256', { extractable: true });
    const nextJwk: JWK = { ...(await exportJWK(next.publicKey)), kid: 'k2', alg: 'RS256' };
    let served: JSONWebKeySet = { keys: [publicJwk] };
    const server = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(served));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const clock = new ManualClock(new Date());
      // Fetched again on every verification, so the rotation below is seen by the next token verified.
      const remote = createTokenValidator({
        issuer: ISSUER,
        audience: AUDIENCE,
        keys: new URL(`http://127.0.0.1:${port}/jwks`),
        jwksMaxAgeMs: 0,
        clock,
      });
      const old = await signed(privateKey, 'k1', clock, 300);
      expect((await remote.authenticate(`Bearer ${old}`)).subject).toBe('svc-1');
      expect((await remote.authenticate(`Bearer ${old}`)).subject).toBe('svc-1');

      served = { keys: [nextJwk] };
      expect((await remote.authenticate(`Bearer ${await signed(next.privateKey, 'k2', clock, 300)}`)).subject).toBe('svc-1');

      const error = await refusal(`Bearer ${old}`, remote);
      expect(error).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_INVALID' });
      expect(error.message).toBe('no trusted key matches the token');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('when the JWKS endpoint does not answer, then a token it has not verified is refused (fail closed); one verified before stays admitted from the cache until it expires', async () => {
    // Arrange: a JWKS server that answers once, then stops; the keys are fetched again on every verification.
    const server = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ keys: [publicJwk] }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const clock = new ManualClock(new Date());
    const remote = createTokenValidator({ issuer: ISSUER, audience: AUDIENCE, keys: new URL(`http://127.0.0.1:${port}/jwks`), jwksMaxAgeMs: 0, clock });
    const seen = await signed(privateKey, 'k1', clock, 300);
    expect((await remote.authenticate(`Bearer ${seen}`)).subject).toBe('svc-1');
    await new Promise((resolve) => server.close(resolve));

    // Act
    const unseen = await refusal(`Bearer ${await signed(privateKey, 'k1', clock, 299)}`, remote);

    // Assert: refused, never admitted for want of keys.
    expect(unseen).toMatchObject({ kind: 'unauthorized', code: 'AUTH.TOKEN_INVALID', message: 'the token could not be validated' });
    expect((await remote.authenticate(`Bearer ${seen}`)).subject).toBe('svc-1');
  });
});

describe('clients bound to tenants (RuntimeCloud__Auth__Clients)', () => {
  const CLIENT_A = '7f3e1c2a-0000-4000-8000-00000000000a';
  const CLIENT_UNLISTED = '7f3e1c2a-0000-4000-8000-0000000000ff';
  const SERVICE = { idtyp: 'app', roles: ['factory.capacity.lease', 'factory.runtime.read'] };
  let bound: TokenValidator;

  beforeAll(() => {
    // Listed in upper case: Entra writes app ids in lower case, and the match ignores case.
    bound = createTokenValidator({ issuer: ISSUER, audience: AUDIENCE, keys: { keys: [publicJwk] }, clients: { [CLIENT_A.toUpperCase()]: 'acme' } });
  });

  const principal = async (claims: Record<string, unknown>): Promise<Principal> =>
    bound.authenticate(`Bearer ${await aToken({ claims: { scp: undefined, ...SERVICE, ...claims } })}`);

  it('when a v2 token names a listed client in azp, then it acts for that tenant only, as a tenant claim does', async () => {
    const p = await principal({ azp: CLIENT_A });
    expect(p).toMatchObject({ tenant: 'acme', client: CLIENT_A });
    expect(resolveTenant(p, 'factory.capacity.lease', undefined)).toEqual({ kind: 'one', tenant: 'acme' });
    expect(resolveTenant(p, 'factory.capacity.lease', 'acme')).toEqual({ kind: 'one', tenant: 'acme' });
    expect(() => resolveTenant(p, 'factory.capacity.lease', 'globex')).toThrow(expect.objectContaining({ kind: 'forbidden', code: 'AUTH.TENANT_MISMATCH' }));
    const admin = await principal({ azp: CLIENT_A, roles: ['PlatformAdmin'] });
    expect(() => requirePlatformPrincipal(admin)).toThrow(expect.objectContaining({ code: 'AUTH.PLATFORM_ONLY', details: { tokenTenant: 'acme' } }));
  });

  it('when a v1 token names a listed client in appid, then it is bound the same way', async () => {
    const p = await principal({ appid: CLIENT_A, ver: '1.0' });
    expect(p).toMatchObject({ tenant: 'acme', client: CLIENT_A });
    expect(() => resolveTenant(p, 'factory.capacity.lease', 'globex')).toThrow(expect.objectContaining({ code: 'AUTH.TENANT_MISMATCH' }));
  });

  it('when the client is not listed, then the token is unbound as before: a service names its tenant', async () => {
    for (const claims of [{ azp: CLIENT_UNLISTED }, { appid: CLIENT_UNLISTED }, {}]) {
      const p = await principal(claims);
      expect(p.application, JSON.stringify(claims)).toBe(true);
      expect(p.tenant, JSON.stringify(claims)).toBeUndefined();
      expect(resolveTenant(p, 'factory.capacity.lease', 'globex')).toEqual({ kind: 'one', tenant: 'globex' });
      expect(() => resolveTenant(p, 'factory.capacity.lease', undefined)).toThrow(expect.objectContaining({ code: 'AUTH.TENANT_REQUIRED' }));
    }
    // And a validator configured with no clients binds nobody.
    const unbound = await validator.authenticate(`Bearer ${await aToken({ claims: { scp: undefined, ...SERVICE, azp: CLIENT_A } })}`);
    expect(unbound.tenant).toBeUndefined();
  });

  it('when a listed client also claims the same tenant, then it acts for it', async () => {
    const p = await principal({ azp: CLIENT_A, tenant: 'acme' });
    expect(p.tenant).toBe('acme');
  });

  it('when a listed client claims another tenant, then the token is refused as unauthorized, every time it is sent', async () => {
    const token = await aToken({ claims: { scp: undefined, ...SERVICE, azp: CLIENT_A, tenant: 'globex' } });
    for (let attempt = 0; attempt < 2; attempt++) {
      expect(await refusal(`Bearer ${token}`, bound)).toMatchObject({
        kind: 'unauthorized',
        code: 'AUTH.TENANT_CLAIM_MISMATCH',
        details: { client: CLIENT_A, clientTenant: 'acme', tokenTenant: 'globex' },
      });
    }
  });

  it('when a listed client token is sent again, then the cached principal keeps the binding', async () => {
    const token = await aToken({ claims: { scp: undefined, ...SERVICE, azp: CLIENT_A } });
    const first = await bound.authenticate(`Bearer ${token}`);
    const second = await bound.authenticate(`Bearer ${token}`);
    expect([first.tenant, second.tenant]).toEqual(['acme', 'acme']);
  });

  it('when azp and appid name different clients, then the token is refused; the same client, then it is bound', async () => {
    for (const claims of [{ azp: CLIENT_UNLISTED, appid: CLIENT_A }, { azp: CLIENT_A, appid: CLIENT_UNLISTED }]) {
      expect(await refusal(`Bearer ${await aToken({ claims: { ...SERVICE, ...claims } })}`, bound)).toMatchObject({
        kind: 'unauthorized',
        code: 'AUTH.CLIENT_CLAIM_INVALID',
      });
    }
    expect((await principal({ azp: CLIENT_A, appid: CLIENT_A })).tenant).toBe('acme');
  });

  it.each([
    ['azp', ''],
    ['azp', 42],
    ['appid', ['x']],
    ['appid', null],
  ])('when the %s claim is present but %j, then the token is refused as unauthorized', async (claim, value) => {
    const token = await aToken({ claims: { ...SERVICE, [claim]: value } });
    expect(await refusal(`Bearer ${token}`, bound)).toMatchObject({ kind: 'unauthorized', code: 'AUTH.CLIENT_CLAIM_INVALID' });
  });
});

/**
 * Identities as Microsoft Entra issues them, from Microsoft's published tokens: the two example access tokens of
 * "Access tokens in the Microsoft identity platform"
 * (https://github.com/MicrosoftDocs/entra-docs/blob/0bbfa8a3b9832cfcf180599b762231b4296c6d3d/docs/identity-platform/access-tokens.md:
 * a v1.0 and a v2.0 token, both delegated, with `sub` ≠ `oid`; their payload segments below are copied from the page,
 * byte for byte) and the v1.0 app-only token of "Token claims reference for agent IDs" (the published fixtures,
 * docs/testing.md, "Published fixtures"). Each keeps its claims and is signed again for this test's issuer and audience
 * (the published signatures are cut short on the page).
 */
describe('identities as the identity platform issues them', () => {
  const PUBLISHED_V1_DELEGATED =
    'eyJhdWQiOiJlZjFkYTlkNC1mZjc3LTRjM2UtYTAwNS04NDBjM2Y4MzA3NDUiLCJpc3MiOiJodHRwczovL3N0cy53aW5kb3dzLm5ldC9mYTE1ZDY5Mi1lOWM3LTQ0NjAtYTc0My0yOWYyOTUyMjIyOS8iLCJpYXQiOjE1MzcyMzMxMDYsIm5iZiI6MTUzNzIzMzEwNiwiZXhwIjoxNTM3MjM3MDA2LCJhY3IiOiIxIiwiYWlvIjoiQVhRQWkvOElBQUFBRm0rRS9RVEcrZ0ZuVnhMaldkdzhLKzYxQUdyU091TU1GNmViYU1qN1hPM0libUQzZkdtck95RCtOdlp5R24yVmFUL2tES1h3NE1JaHJnR1ZxNkJuOHdMWG9UMUxrSVorRnpRVmtKUFBMUU9WNEtjWHFTbENWUERTL0RpQ0RnRTIyMlRJbU12V05hRU1hVU9Uc0lHdlRRPT0iLCJhbXIiOlsid2lhIl0sImFwcGlkIjoiNzVkYmU3N2YtMTBhMy00ZTU5LTg1ZmQtOGMxMjc1NDRmMTdjIiwiYXBwaWRhY3IiOiIwIiwiZW1haWwiOiJBYmVMaUBtaWNyb3NvZnQuY29tIiwiZmFtaWx5X25hbWUiOiJMaW5jb2xuIiwiZ2l2ZW5fbmFtZSI6IkFiZSAoTVNGVCkiLCJpZHAiOiJodHRwczovL3N0cy53aW5kb3dzLm5ldC83MmY5ODhiZi04NmYxLTQxYWYtOTFhYi0yZDdjZDAxMjIyNDcvIiwiaXBhZGRyIjoiMjIyLjIyMi4yMjIuMjIiLCJuYW1lIjoiYWJlbGkiLCJvaWQiOiIwMjIyM2I2Yi1hYTFkLTQyZDQtOWVjMC0xYjJiYjkxOTQ0MzgiLCJyaCI6IkkiLCJzY3AiOiJ1c2VyX2ltcGVyc29uYXRpb24iLCJzdWIiOiJsM19yb0lTUVUyMjJiVUxTOXlpMmswWHBxcE9pTXo1SDNaQUNvMUdlWEEiLCJ0aWQiOiJmYTE1ZDY5Mi1lOWM3LTQ0NjAtYTc0My0yOWYyOTU2ZmQ0MjkiLCJ1bmlxdWVfbmFtZSI6ImFiZWxpQG1pY3Jvc29mdC5jb20iLCJ1dGkiOiJGVnNHeFlYSTMwLVR1aWt1dVVvRkFBIiwidmVyIjoiMS4wIn0';
  const PUBLISHED_V2_DELEGATED =
    'eyJhdWQiOiI2ZTc0MTcyYi1iZTU2LTQ4NDMtOWZmNC1lNjZhMzliYjEyZTMiLCJpc3MiOiJodHRwczovL2xvZ2luLm1pY3Jvc29mdG9ubGluZS5jb20vNzJmOTg4YmYtODZmMS00MWFmLTkxYWItMmQ3Y2QwMTFkYjQ3L3YyLjAiLCJpYXQiOjE1MzcyMzEwNDgsIm5iZiI6MTUzNzIzMTA0OCwiZXhwIjoxNTM3MjM0OTQ4LCJhaW8iOiJBWFFBaS84SUFBQUF0QWFaTG8zQ2hNaWY2S09udHRSQjdlQnE0L0RjY1F6amNKR3hQWXkvQzNqRGFOR3hYZDZ3TklJVkdSZ2hOUm53SjFsT2NBbk5aY2p2a295ckZ4Q3R0djMzMTQwUmlvT0ZKNGJDQ0dWdW9DYWcxdU9UVDIyMjIyZ0h3TFBZUS91Zjc5UVgrMEtJaWpkcm1wNjlSY3R6bVE9PSIsImF6cCI6IjZlNzQxNzJiLWJlNTYtNDg0My05ZmY0LWU2NmEzOWJiMTJlMyIsImF6cGFjciI6IjAiLCJuYW1lIjoiQWJlIExpbmNvbG4iLCJvaWQiOiI2OTAyMjJiZS1mZjFhLTRkNTYtYWJkMS03ZTRmN2QzOGU0NzQiLCJwcmVmZXJyZWRfdXNlcm5hbWUiOiJhYmVsaUBtaWNyb3NvZnQuY29tIiwicmgiOiJJIiwic2NwIjoiYWNjZXNzX2FzX3VzZXIiLCJzdWIiOiJIS1pwZmFIeVdhZGVPb3VZbGl0anJJLUtmZlRtMjIyWDVyclYzeERxZktRIiwidGlkIjoiNzJmOTg4YmYtODZmMS00MWFmLTkxYWItMmQ3Y2QwMTFkYjQ3IiwidXRpIjoiZnFpQnFYTFBqMGVRYTgyUy1JWUZBQSIsInZlciI6IjIuMCJ9';
  const APP_ONLY_FIXTURE = join(__dirname, '..', '..', '..', 'shared', 'fixtures', 'entra', 'entra-docs.agent-token-claims.v1-app-only-agent-identity.json');
  const published = (segment: string) => JSON.parse(Buffer.from(segment, 'base64url').toString('utf8')) as Record<string, unknown>;

  /** The published claims, signed again for this test's issuer and audience, with `extra` claims added. */
  async function as(claims: Record<string, unknown>, extra: Record<string, unknown> = {}): Promise<Principal> {
    const { iss: _iss, aud: _aud, iat: _iat, nbf: _nbf, exp: _exp, ...rest } = claims;
    const now = Math.floor(Date.now() / 1000);
    const jwt = await new SignJWT({ ...rest, ...extra })
      .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(now)
      .setNotBefore(now)
      .setExpirationTime(now + 300)
      .sign(privateKey);
    return validator.authenticate(`Bearer ${jwt}`);
  }

  it.each([
    ['v1.0', PUBLISHED_V1_DELEGATED, 'fa15d692-e9c7-4460-a743-29f2956fd429/02223b6b-aa1d-42d4-9ec0-1b2bb9194438'],
    ['v2.0', PUBLISHED_V2_DELEGATED, '72f988bf-86f1-41af-91ab-2d7cd011db47/690222be-ff1a-4d56-abd1-7e4f7d38e474'],
  ])('when a published %s delegated token carries a service scope in its roles, then it is a person with that tenant-less right refused; its person is tid/oid, not its sub', async (_version, segment, person) => {
    // Arrange: the person holds an app role named like the service scope (what the attack in issue 31 used).
    const claims = published(segment);

    // Act
    const principal = await as(claims, { roles: ['factory.capacity.lease', 'factory.runtime.read'] });

    // Assert
    expect(principal).toMatchObject({ application: false, person, subject: claims.sub });
    expect(principal.person).not.toBe(claims.sub);
    expect(principal.directScopes.size).toBe(0);
    expect(principal.scopes.has('factory.capacity.lease')).toBe(false);
    for (const scope of ['factory.capacity.lease', 'factory.runtime.read'] as const) {
      expect(() => resolveTenant(principal, scope, 'acme')).toThrow(expect.objectContaining({ code: 'AUTH.TENANT_NOT_ALLOWED' }));
    }
  });

  it.skipIf(!existsSync(APP_ONLY_FIXTURE))('when the published v1.0 app-only token (idtyp app) holds a service permission, then it may name a tenant, and its person is tid/oid', async () => {
    // Arrange: Microsoft's token carries no roles; the application permission is what an installation would grant.
    const claims = JSON.parse(readFileSync(APP_ONLY_FIXTURE, 'utf8')) as Record<string, unknown>;

    // Act
    const principal = await as(claims, { roles: ['factory.runtime.read'] });

    // Assert
    expect(principal).toMatchObject({ application: true, person: '00000001-0000-0ff1-ce00-000000000000/bbbbbbbb-1111-2222-3333-444444444444', client: 'aaaaaaaa-1111-2222-3333-444444444444' });
    expect(resolveTenant(principal, 'factory.runtime.read', 'acme')).toEqual({ kind: 'one', tenant: 'acme' });
    // Without the permission it is an application with no right to name one.
    const withoutPermission = await as(claims);
    expect(() => resolveTenant(withoutPermission, 'factory.runtime.read', 'acme')).toThrow(expect.objectContaining({ code: 'AUTH.TENANT_NOT_ALLOWED' }));
  });

  it.each([
    ['idtyp app with scp (self-contradicting)', { idtyp: 'app', scp: 'factory.capacity.lease' }, false],
    ['idtyp user without scp', { idtyp: 'user', roles: ['factory.capacity.lease'] }, false],
    ['an empty scp', { scp: '', roles: ['factory.capacity.lease'] }, false],
    ['v1 without scp or idtyp', { ver: '1.0', roles: ['factory.capacity.lease'] }, true],
  ])('when a token has %s, then it is an application: %s', async (_case, claims, application) => {
    const principal = await as({ sub: 'caller', ...claims });
    expect(principal.application).toBe(application);
    expect(principal.directScopes.has('factory.capacity.lease')).toBe(application);
  });

  it.each([
    ['the same tid/oid', 'fa15d692-e9c7-4460-a743-29f2956fd429/02223b6b-aa1d-42d4-9ec0-1b2bb9194438', 'FA15D692-E9C7-4460-A743-29F2956FD429/02223B6B-AA1D-42D4-9EC0-1B2BB9194438', true],
    ['an oid alone and its tid/oid', '02223b6b-aa1d-42d4-9ec0-1b2bb9194438', 'fa15d692-e9c7-4460-a743-29f2956fd429/02223b6b-aa1d-42d4-9ec0-1b2bb9194438', true],
    ['one oid in two directories', '72f988bf-86f1-41af-91ab-2d7cd011db47/02223b6b-aa1d-42d4-9ec0-1b2bb9194438', 'fa15d692-e9c7-4460-a743-29f2956fd429/02223b6b-aa1d-42d4-9ec0-1b2bb9194438', false],
    ['two oids', 'fa15d692-e9c7-4460-a743-29f2956fd429/690222be-ff1a-4d56-abd1-7e4f7d38e474', 'fa15d692-e9c7-4460-a743-29f2956fd429/02223b6b-aa1d-42d4-9ec0-1b2bb9194438', false],
    ['equal subjects', 'operator-1', 'operator-1', true],
    ['subjects differing in case', 'operator-1', 'Operator-1', false],
  ])('when two identities are %s, then samePerson says %s', (_case, a, b, same) => {
    expect(samePerson(a, b)).toBe(same);
    expect(samePerson(b, a)).toBe(same);
  });
});
