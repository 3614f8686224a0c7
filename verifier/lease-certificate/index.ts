import { createLocalJWKSet, decodeProtectedHeader, errors, jwtVerify, type JSONWebKeySet, type JWTPayload, type JWTVerifyGetKey } from 'jose';

/**
 * The lease certificate verifier: what a resource a lease protects (a sandbox, a build slot, a browser session) runs
 * to check a holder's certificate offline, with the host's public keys fetched once and kept. It refuses a
 * certificate signed by a key the host never published, one expired, one for another tenant, pool or kind, and one
 * whose fencing token is below the highest it has seen for the certificate's tenant and pool: a holder that lost its
 * lease is refused here even while the host cannot be reached.
 *
 * Standalone: it imports `jose` and nothing of the host (dependency-cruiser's `verifier-standalone` rule), so a
 * resource can take this one file.
 */

/** The `typ` of a lease certificate's protected header. */
export const LEASE_CERTIFICATE_TYPE = 'lease-cert+jwt';

/** Why a certificate was refused. */
export type LeaseCertificateRefusalCode =
  | 'MALFORMED'
  | 'UNKNOWN_KEY'
  | 'BAD_SIGNATURE'
  | 'EXPIRED'
  | 'NOT_YET_VALID'
  | 'WRONG_ISSUER'
  | 'WRONG_TENANT'
  | 'WRONG_POOL'
  | 'WRONG_KIND'
  | 'STALE_FENCING_TOKEN'
  | 'KEYS_UNAVAILABLE';

export class LeaseCertificateRefused extends Error {
  constructor(
    readonly code: LeaseCertificateRefusalCode,
    message: string,
  ) {
    super(message);
    this.name = 'LeaseCertificateRefused';
  }
}

/** What a verified certificate says. */
export interface LeaseCertificate {
  readonly issuer: string;
  readonly leaseId: string;
  readonly tenant: string;
  readonly pool: string;
  readonly kind: string;
  readonly holder: string;
  readonly units: number;
  readonly fencingToken: number;
  readonly issuedAt: Date;
  readonly expiresAt: Date;
}

/** The highest fencing token seen per tenant and pool. */
export interface FencingTokenStore {
  /**
   * Records `token` for the tenant's pool unless a higher one was seen, and answers the highest seen, this one
   * included. Must be atomic per tenant and pool where several verifiers share the store.
   */
  advance(tenant: string, pool: string, token: number): number | Promise<number>;
}

/** The default store: this process's memory. */
export function memoryFencingTokenStore(): FencingTokenStore {
  const highest = new Map<string, number>();
  return {
    advance(tenant, pool, token) {
      const key = JSON.stringify([tenant, pool]);
      const seen = Math.max(highest.get(key) ?? token, token);
      highest.set(key, seen);
      return seen;
    },
  };
}

/** What a certificate must be for; each left out is not checked. */
export interface LeaseExpectation {
  /** Example: `'contoso'`. */
  readonly tenant?: string;
  /** Example: `'local-sandbox'`. */
  readonly pool?: string;
  /** Example: `'sandbox'`. */
  readonly kind?: string;
}

export interface LeaseVerifierOptions extends LeaseExpectation {
  /** The host's `iss`: its API audience. Example: `'api://runtime-cloud'`. */
  readonly issuer: string;
  /**
   * The host's public keys: a key set (fully offline), the URL of its JWKS route, or a function that fetches it.
   * A URL or function is fetched on first use and kept; it is fetched again only for a certificate whose key is not
   * in the kept set (a rotation), at most once per `refetchCooldownMs`.
   * Example: `new URL('https://rch.example.com/runtime-cloud/.well-known/lease-jwks.json')`.
   */
  readonly keys: JSONWebKeySet | URL | string | (() => Promise<JSONWebKeySet>);
  /** Seconds of clock skew allowed on `exp`, `iat` and `nbf`. Example: `5`. Default 0. */
  readonly clockToleranceSeconds?: number;
  /** The least time between two fetches of the keys. Example: `30_000` (the default). */
  readonly refetchCooldownMs?: number;
  /** The highest token seen per tenant and pool. Default: this process's memory. */
  readonly store?: FencingTokenStore;
  /** The time (tests). Default: the system clock. */
  readonly now?: () => Date;
}

export interface LeaseVerifier {
  /** The certificate's claims, or a `LeaseCertificateRefused`; per-call expectations narrow the verifier's own. */
  verify(certificate: string, expect?: LeaseExpectation): Promise<LeaseCertificate>;
}

export function createLeaseVerifier(options: LeaseVerifierOptions): LeaseVerifier {
  const now = options.now ?? (() => new Date());
  const store = options.store ?? memoryFencingTokenStore();
  const keys = keyRing(options.keys, options.refetchCooldownMs ?? 30_000, now);
  return {
    async verify(certificate, expect = {}) {
      const kid = keyIdOf(certificate);
      const keySet = await keys.withKey(kid);
      const payload = await verifiedPayload(certificate, keySet, options, now());
      const claims = claimsOf(payload);
      const expected = { tenant: expect.tenant ?? options.tenant, pool: expect.pool ?? options.pool, kind: expect.kind ?? options.kind };
      if (expected.tenant !== undefined && claims.tenant !== expected.tenant) throw new LeaseCertificateRefused('WRONG_TENANT', `the certificate is for tenant ${claims.tenant}, not ${expected.tenant}`);
      if (expected.pool !== undefined && claims.pool !== expected.pool) throw new LeaseCertificateRefused('WRONG_POOL', `the certificate is for pool ${claims.pool}, not ${expected.pool}`);
      if (expected.kind !== undefined && claims.kind !== expected.kind) throw new LeaseCertificateRefused('WRONG_KIND', `the certificate is for kind ${claims.kind}, not ${expected.kind}`);
      // Only a certificate that passed every other check may raise the mark, so a forged one cannot lock holders out.
      const highest = await store.advance(claims.tenant, claims.pool, claims.fencingToken);
      if (claims.fencingToken < highest) {
        throw new LeaseCertificateRefused('STALE_FENCING_TOKEN', `fencing token ${claims.fencingToken} is below ${highest}, already seen for pool ${claims.pool}: a later lease holds it`);
      }
      return claims;
    },
  };
}

function keyIdOf(certificate: string): string {
  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(certificate);
  } catch {
    throw new LeaseCertificateRefused('MALFORMED', 'the certificate is not a compact JWS');
  }
  if (header.typ !== LEASE_CERTIFICATE_TYPE) throw new LeaseCertificateRefused('MALFORMED', `the certificate's typ is ${String(header.typ)}, not ${LEASE_CERTIFICATE_TYPE}`);
  if (typeof header.kid !== 'string' || header.kid.length === 0) throw new LeaseCertificateRefused('MALFORMED', 'the certificate names no key (kid)');
  return header.kid;
}

/**
 * The kept key set, fetched again only for a key it lacks, and then not more often than the cooldown. Its keys are
 * imported once per set (jose's local key set keeps them), not once per certificate.
 */
function keyRing(source: LeaseVerifierOptions['keys'], cooldownMs: number, now: () => Date) {
  const fetchKeys = typeof source === 'function' ? source : typeof source === 'string' || source instanceof URL ? () => fetchJwks(source) : undefined;
  const keep = (set: JSONWebKeySet) => ({ set, getKey: createLocalJWKSet(set) });
  let kept: { set: JSONWebKeySet; getKey: JWTVerifyGetKey } | undefined = fetchKeys ? undefined : keep(source as JSONWebKeySet);
  let fetchedAt = Number.NEGATIVE_INFINITY;
  const has = (kid: string) => kept?.set.keys.some((k) => k.kid === kid) ?? false;
  const refresh = async () => {
    if (!fetchKeys) return;
    fetchedAt = now().getTime();
    try {
      kept = keep(await fetchKeys());
    } catch (thrown) {
      if (!kept) throw new LeaseCertificateRefused('KEYS_UNAVAILABLE', `the host's keys could not be fetched: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
    }
  };
  return {
    async withKey(kid: string): Promise<JWTVerifyGetKey> {
      if (!has(kid) && now().getTime() - fetchedAt >= cooldownMs) await refresh();
      if (!kept || !has(kid)) throw new LeaseCertificateRefused('UNKNOWN_KEY', `no key ${kid} in the host's published keys`);
      return kept.getKey;
    },
  };
}

async function fetchJwks(url: string | URL): Promise<JSONWebKeySet> {
  const response = await fetch(url, { headers: { accept: 'application/json' } });
  if (!response.ok) throw new Error(`${String(url)} answered ${response.status}`);
  const body = (await response.json()) as Partial<JSONWebKeySet>;
  if (!Array.isArray(body.keys)) throw new Error(`${String(url)} answered no key set`);
  return { keys: body.keys };
}

async function verifiedPayload(certificate: string, getKey: JWTVerifyGetKey, options: LeaseVerifierOptions, currentDate: Date): Promise<JWTPayload> {
  try {
    const { payload } = await jwtVerify(certificate, getKey, {
      issuer: options.issuer,
      algorithms: ['ES256'],
      typ: LEASE_CERTIFICATE_TYPE,
      currentDate,
      clockTolerance: options.clockToleranceSeconds ?? 0,
      requiredClaims: ['iss', 'sub', 'iat', 'exp'],
    });
    return payload;
  } catch (thrown) {
    if (thrown instanceof errors.JWTExpired) throw new LeaseCertificateRefused('EXPIRED', 'the certificate has expired');
    if (thrown instanceof errors.JWSSignatureVerificationFailed) throw new LeaseCertificateRefused('BAD_SIGNATURE', "the certificate's signature is not the host key's");
    if (thrown instanceof errors.JWTClaimValidationFailed && thrown.claim === 'iss') throw new LeaseCertificateRefused('WRONG_ISSUER', `the certificate was not issued by ${options.issuer}`);
    if (thrown instanceof errors.JWTClaimValidationFailed && (thrown.claim === 'nbf' || thrown.claim === 'iat')) throw new LeaseCertificateRefused('NOT_YET_VALID', 'the certificate is not valid yet');
    throw new LeaseCertificateRefused('MALFORMED', `the certificate is not valid: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
  }
}

function claimsOf(payload: JWTPayload): LeaseCertificate {
  const text = (name: string) => {
    const value = payload[name];
    if (typeof value !== 'string' || value.length === 0) throw new LeaseCertificateRefused('MALFORMED', `the certificate's ${name} is not a string`);
    return value;
  };
  const count = (name: string) => {
    const value = payload[name];
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new LeaseCertificateRefused('MALFORMED', `the certificate's ${name} is not a whole number`);
    return value;
  };
  return {
    issuer: text('iss'),
    leaseId: text('sub'),
    tenant: text('tenant'),
    pool: text('pool'),
    kind: text('kind'),
    holder: text('holder'),
    units: count('units'),
    fencingToken: count('fencingToken'),
    issuedAt: new Date(count('iat') * 1000),
    expiresAt: new Date(count('exp') * 1000),
  };
}
