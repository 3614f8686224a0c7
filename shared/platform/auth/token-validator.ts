import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTVerifyGetKey, type JWTVerifyResult } from 'jose';
import { LRUCache } from 'lru-cache';
import { ensureError } from '../errors/app-error';
import { systemClock, type Clock } from '../time/clock';
import { principalFrom, unauthorized, type ClientTenants, type Principal } from './auth';

export interface TokenValidatorOptions {
  readonly issuer: string;
  readonly audience: string;
  /** The identity platform's JWKS URL (production) or the key set itself (local host). */
  readonly keys: URL | JSONWebKeySet;
  /** Allowed clock skew for exp/nbf. Example: `30` seconds. */
  readonly clockToleranceSeconds?: number;
  /** Judges `exp`/`nbf` and when cached tokens expire. Example: `new ManualClock()` in tests; default the system clock. */
  readonly clock?: Clock;
  /**
   * How long a fetched remote JWKS is used before it is fetched again (jose's `cacheMaxAge`). Example: `600_000`
   * (the default, 10 minutes).
   */
  readonly jwksMaxAgeMs?: number;
  /**
   * Client application ids (`azp`/`appid`) of callers that act for one tenant → that tenant
   * (`RuntimeCloud__Auth__Clients`); matched without regard to case. Example: `{ '7f3e1c2a-0000-4000-8000-000000000001': 'contoso' }`.
   */
  readonly clients?: Readonly<Record<string, string>>;
  /** Client application ids of runner agents → the runner pool each serves (`RuntimeCloud__Runners__Agents`). */
  readonly agents?: Readonly<Record<string, string>>;
}

export interface TokenValidator {
  /** Validates an `Authorization` header value; throws AppError `unauthorized` when it is missing or invalid. */
  authenticate(authorization: string | null | undefined): Promise<Principal>;
}

/** Asymmetric algorithms only: `none` and HMAC (which a public key could forge) are never accepted. */
const ALLOWED_ALGORITHMS = ['RS256', 'ES256'];

/** Validated tokens kept by their exact string; a worker presents the same token for every call until it expires. */
const TOKEN_CACHE_LIMIT = 10_000;

interface ValidatedToken {
  readonly principal: Principal;
  /** The key that signed it: when that key leaves the JWKS, the token is verified again (and refused). */
  readonly kid: string | undefined;
}

export function createTokenValidator(options: TokenValidatorOptions): TokenValidator {
  const clock = options.clock ?? systemClock;
  const { keySet, remote } = keyResolver(options);
  // Fixed for the validator's life, so a cached principal carries the same binding a fresh validation would give.
  const clients: ClientTenants = new Map(Object.entries(options.clients ?? {}).map(([client, tenant]) => [client.toLowerCase(), tenant]));
  const agents: ClientTenants = new Map(Object.entries(options.agents ?? {}).map(([client, pool]) => [client.toLowerCase(), pool]));
  // Signature verification dominates a cheap request; a token that verified once stays valid until its `exp`
  // (evicted at that instant on the injected clock, so expiry is judged by jose again, with its tolerance).
  // Least recently used tokens leave first when the bound is reached.
  const validated = new LRUCache<string, ValidatedToken>({
    max: TOKEN_CACHE_LIMIT,
    perf: { now: () => clock.now().getTime() },
    // Read the clock on every lookup: the default debounces it by a real-time timer, which a manual clock outruns.
    ttlResolution: 0,
  });
  let trustedKids: ReadonlySet<string> | undefined;

  /** jose fetches the remote JWKS again while verifying; tokens signed by a key that has left it are dropped. */
  function syncTrustedKids(): void {
    if (!remote) return;
    const kids = new Set((remote.jwks()?.keys ?? []).flatMap((key) => (key.kid ? [key.kid] : [])));
    if (trustedKids && sameMembers(kids, trustedKids)) return;
    trustedKids = kids;
    const retired = [...validated.entries()].filter(([, entry]) => entry.kid === undefined || !kids.has(entry.kid));
    for (const [token] of retired) validated.delete(token);
  }

  return {
    async authenticate(authorization) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
      const token = match?.[1];
      if (!token) throw unauthorized('AUTH.TOKEN_MISSING', 'a bearer token is required');
      const cached = validated.get(token);
      if (cached) return cached.principal;
      let verified: JWTVerifyResult;
      try {
        verified = await jwtVerify(token, keySet, {
          issuer: options.issuer,
          audience: options.audience,
          algorithms: ALLOWED_ALGORITHMS,
          clockTolerance: options.clockToleranceSeconds ?? 30,
          currentDate: clock.now(),
          requiredClaims: ['exp', 'sub'],
        });
      } catch (error) {
        throw unauthorized('AUTH.TOKEN_INVALID', describeJoseError(ensureError(error)));
      } finally {
        syncTrustedKids();
      }
      const { payload, protectedHeader } = verified;
      // Throws for a token that no tenant binding allows, before anything is cached: it is refused every time.
      const principal = principalFrom(payload, clients, agents);
      const kid = protectedHeader.kid;
      const ttlMs = typeof payload.exp === 'number' ? payload.exp * 1000 - clock.now().getTime() : 0;
      const stillTrusted = !trustedKids || (kid !== undefined && trustedKids.has(kid));
      if (ttlMs >= 1 && stillTrusted) validated.set(token, { principal, kid }, { ttl: Math.floor(ttlMs) });
      return principal;
    },
  };
}

function keyResolver(options: TokenValidatorOptions): { keySet: JWTVerifyGetKey; remote?: ReturnType<typeof createRemoteJWKSet> } {
  if (!(options.keys instanceof URL)) return { keySet: createLocalJWKSet(options.keys) };
  const remote = createRemoteJWKSet(options.keys, options.jwksMaxAgeMs === undefined ? {} : { cacheMaxAge: options.jwksMaxAgeMs });
  return { keySet: remote, remote };
}

function sameMembers(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  return a.size === b.size && [...a].every((item) => b.has(item));
}

function describeJoseError(error: Error): string {
  if (error instanceof joseErrors.JWTExpired) return 'the token has expired';
  if (error instanceof joseErrors.JWTClaimValidationFailed) return `claim "${error.claim}" is not valid (${error.reason})`;
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return 'the token algorithm is not allowed';
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'the token signature is not valid';
  if (error instanceof joseErrors.JWKSNoMatchingKey) return 'no trusted key matches the token';
  if (error instanceof joseErrors.JWSInvalid || error instanceof joseErrors.JWTInvalid) return 'the token is malformed';
  return 'the token could not be validated';
}
