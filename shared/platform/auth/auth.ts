import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyResult } from 'jose';
import { LRUCache } from 'lru-cache';
import { AppError, ensureError } from '../errors/app-error';
import { systemClock, type Clock } from '../time/clock';

export const SCOPES = [
  'factory.health.read',
  'factory.meta.read',
  'factory.runtime.read',
  'factory.capacity.lease',
  'factory.provisioning.operate',
  'factory.runtime.admin',
] as const;
export type Scope = (typeof SCOPES)[number];

export const ROLES = ['Observer', 'Operator', 'PlatformAdmin'] as const;
export type Role = (typeof ROLES)[number];

/**
 * What each role grants. Observer reads; Operator also decides on provisioning (approve, reject, accept,
 * dismiss, scan); PlatformAdmin also administers pools and editions and may act for any tenant.
 * `factory.capacity.lease` is a service scope (workers, tool executor), granted through `scp` only.
 */
export const ROLE_SCOPES: Readonly<Record<Role, readonly Scope[]>> = {
  Observer: ['factory.health.read', 'factory.meta.read', 'factory.runtime.read'],
  Operator: ['factory.health.read', 'factory.meta.read', 'factory.runtime.read', 'factory.provisioning.operate'],
  PlatformAdmin: [
    'factory.health.read',
    'factory.meta.read',
    'factory.runtime.read',
    'factory.provisioning.operate',
    'factory.runtime.admin',
  ],
};

export interface Principal {
  readonly subject: string;
  /** The tenant the token is bound to (`tenant` claim); absent for services and platform administrators. */
  readonly tenant?: string;
  readonly roles: ReadonlySet<Role>;
  /** Scopes from `scp` plus those granted by roles. */
  readonly scopes: ReadonlySet<Scope>;
  /** Scopes the token carries itself in `scp` (a service acting for tenants). */
  readonly directScopes: ReadonlySet<Scope>;
}

/** Which tenants' rows a request may see or change. */
export type TenantFilter = { readonly kind: 'one'; readonly tenant: string } | { readonly kind: 'all' };

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
      const principal = principalFrom(payload);
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

function unauthorized(code: string, message: string): AppError {
  return new AppError(code, 'unauthorized', message);
}

function principalFrom(payload: JWTPayload): Principal {
  const scp: unknown[] = typeof payload.scp === 'string' ? payload.scp.split(' ') : Array.isArray(payload.scp) ? (payload.scp as unknown[]) : [];
  const rawRoles: unknown[] = Array.isArray(payload.roles) ? (payload.roles as unknown[]) : [];
  const roles = new Set(rawRoles.filter((r): r is Role => ROLES.includes(r as Role)));
  // Entra app-only tokens carry application permissions in `roles`; accept scope names there too.
  const direct = new Set(
    [...scp, ...rawRoles].filter((s): s is Scope => typeof s === 'string' && SCOPES.includes(s as Scope)),
  );
  const scopes = new Set<Scope>(direct);
  for (const role of roles) for (const scope of ROLE_SCOPES[role]) scopes.add(scope);
  const tenant = tenantClaim(payload);
  return { subject: payload.sub ?? 'unknown', ...(tenant ? { tenant } : {}), roles, scopes, directScopes: direct };
}

/**
 * A present `tenant` claim must name a tenant. Read as absent, a malformed one (`""`, a number, an array) would
 * leave a tenant's token tenant-less, free to name any tenant with a service scope.
 */
function tenantClaim(payload: JWTPayload): string | undefined {
  if (!('tenant' in payload)) return undefined;
  if (typeof payload.tenant === 'string' && payload.tenant.length > 0) return payload.tenant;
  throw unauthorized('AUTH.TENANT_CLAIM_INVALID', 'the tenant claim must be a non-empty string');
}

/** Throws AppError `forbidden` naming the missing scope. */
export function requireScope(principal: Principal, scope: Scope): void {
  if (!principal.scopes.has(scope)) {
    throw new AppError('AUTH.SCOPE_MISSING', 'forbidden', `this operation requires the scope ${scope}`, {
      requiredScope: scope,
    });
  }
}

/**
 * Throws AppError `forbidden` for a token bound to a tenant. Platform administration (pools, editions, which
 * edition a tenant is on, the local host's own endpoints) spans tenants, so a tenant's administrator may not do it.
 */
export function requirePlatformPrincipal(principal: Principal): void {
  if (principal.tenant) {
    throw new AppError('AUTH.PLATFORM_ONLY', 'forbidden', 'this operation is for platform administrators, not tenant-bound tokens', {
      tokenTenant: principal.tenant,
    });
  }
}

/**
 * The tenants a request acts on. A tenant-bound token acts on its tenant only (naming another is refused).
 * A token without a tenant may name one when it is a service holding the operation's scope itself, or a
 * PlatformAdmin; a PlatformAdmin that names none sees every tenant.
 */
export function resolveTenant(principal: Principal, scope: Scope, requested: string | undefined): TenantFilter {
  if (principal.tenant) {
    if (requested && requested !== principal.tenant) {
      throw new AppError('AUTH.TENANT_MISMATCH', 'forbidden', 'the token is bound to another tenant', {
        tokenTenant: principal.tenant,
        requestedTenant: requested,
      });
    }
    return { kind: 'one', tenant: principal.tenant };
  }
  const isAdmin = principal.roles.has('PlatformAdmin');
  if (requested) {
    if (isAdmin || principal.directScopes.has(scope)) return { kind: 'one', tenant: requested };
    throw new AppError('AUTH.TENANT_NOT_ALLOWED', 'forbidden', 'this token may not act for a named tenant');
  }
  if (isAdmin) return { kind: 'all' };
  throw new AppError('AUTH.TENANT_REQUIRED', 'validation', 'name the tenant (header X-Tenant-Id) for this token');
}
