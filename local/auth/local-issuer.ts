import { exportJWK, generateKeyPair, importJWK, SignJWT, type JSONWebKeySet, type JWK } from 'jose';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The local host's token issuer: an ES256 key pair created in the state dir on first use. The host trusts its
 * public key; `runtime-cloud token` signs with the private key. Never used in Azure.
 */
const KEY_FILE = 'keys/local-issuer.jwk.json';

export interface LocalKeys {
  readonly privateJwk: JWK;
  readonly jwks: JSONWebKeySet;
}

export async function ensureLocalKeys(stateDir: string): Promise<LocalKeys> {
  const file = join(stateDir, KEY_FILE);
  if (!existsSync(file)) {
    const { privateKey } = await generateKeyPair('ES256', { extractable: true });
    const jwk = { ...(await exportJWK(privateKey)), kid: randomUUID(), alg: 'ES256', use: 'sig' };
    mkdirSync(join(stateDir, 'keys'), { recursive: true });
    // Write then rename, so two processes starting at once never read a half-written key.
    const temporary = `${file}.${process.pid}.tmp`;
    writeFileSync(temporary, JSON.stringify(jwk), { mode: 0o600 });
    if (!existsSync(file)) renameSync(temporary, file);
  }
  const privateJwk = JSON.parse(readFileSync(file, 'utf8')) as JWK;
  const { d: _private, ...publicJwk } = privateJwk;
  return { privateJwk, jwks: { keys: [publicJwk] } };
}

export interface TokenRequest {
  readonly issuer: string;
  readonly audience: string;
  readonly subject?: string;
  readonly tenant?: string;
  /**
   * The client application id, issued as `azp` (as Entra v2 tokens carry it), so `RuntimeCloud__Auth__Clients` can
   * be tried locally. Example: `7f3e1c2a-0000-4000-8000-000000000001`.
   */
  readonly client?: string;
  readonly roles?: readonly string[];
  readonly scopes?: readonly string[];
  /** The runner pool of a runner agent's token, issued as `runner_pool`. Example: `local-runner`. */
  readonly runnerPool?: string;
  /**
   * A person's delegated token, as Entra issues one to an application acting for a signed-in user: the scopes in
   * `scp`, the person's object id in `oid` and their directory in `tid`. Without it the token is an application's
   * own (`idtyp: app`, scopes in `roles` as Entra issues application permissions).
   * Example: `{ oid: '02223b6b-aa1d-42d4-9ec0-1b2bb9194438', tid: 'fa15d692-e9c7-4460-a743-29f2956fd429' }`.
   */
  readonly user?: { readonly oid: string; readonly tid?: string };
  /** Lifetime. Example: `3600`. */
  readonly ttlSeconds?: number;
}

export async function issueLocalToken(keys: LocalKeys, request: TokenRequest): Promise<string> {
  const key = await importJWK(keys.privateJwk, 'ES256');
  const claims: Record<string, unknown> = {};
  if (request.tenant) claims.tenant = request.tenant;
  if (request.client) claims.azp = request.client;
  if (request.user) {
    claims.oid = request.user.oid;
    if (request.user.tid) claims.tid = request.user.tid;
    if (request.roles?.length) claims.roles = [...request.roles];
    // Entra puts `scp` in every delegated token; an empty one still says the token is a person's.
    claims.scp = (request.scopes ?? []).join(' ');
  } else {
    claims.idtyp = 'app';
    const roles = [...(request.roles ?? []), ...(request.scopes ?? [])];
    if (roles.length) claims.roles = roles;
  }
  if (request.runnerPool) claims.runner_pool = request.runnerPool;
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', kid: keys.privateJwk.kid ?? 'local', typ: 'JWT' })
    .setIssuer(request.issuer)
    .setAudience(request.audience)
    .setSubject(request.subject ?? 'local-developer')
    .setIssuedAt()
    .setNotBefore('0s')
    .setExpirationTime(`${request.ttlSeconds ?? 3600}s`)
    .setJti(randomUUID())
    .sign(key);
}
