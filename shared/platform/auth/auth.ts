import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose';
import { AppError } from '../errors/app-error';

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
}

export interface TokenValidator {
  /** Validates an `Authorization` header value; throws AppError `unauthorized` when it is missing or invalid. */
  authenticate(authorization: string | null | undefined): Promise<Principal>;
}

/** Asymmetric algorithms only: `none` and HMAC (which a public key could forge) are never accepted. */
const ALLOWED_ALGORITHMS = ['RS256', 'ES256'];

/** Validated tokens kept by their exact string; a worker presents the same token for every call until it expires. */
const TOKEN_CACHE_LIMIT = 10_000;

export function createTokenValidator(options: TokenValidatorOptions): TokenValidator {
  const keySet = options.keys instanceof URL ? createRemoteJWKSet(options.keys) : createLocalJWKSet(options.keys);
  // Signature verification dominates a cheap request; a token that verified once stays valid until its `exp`
  // (kept out of the cache past that instant, so expiry is judged by jose again, with its tolerance).
  const validated = new Map<string, { principal: Principal; expiresAtMs: number }>();
  return {
    async authenticate(authorization) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
      if (!match?.[1]) throw unauthorized('AUTH.TOKEN_MISSING', 'a bearer token is required');
      const cached = validated.get(match[1]);
      if (cached && Date.now() < cached.expiresAtMs) return cached.principal;
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(match[1], keySet, {
          issuer: options.issuer,
          audience: options.audience,
          algorithms: ALLOWED_ALGORITHMS,
          clockTolerance: options.clockToleranceSeconds ?? 30,
          requiredClaims: ['exp', 'sub'],
        }));
      } catch (error) {
        throw unauthorized('AUTH.TOKEN_INVALID', describeJoseError(error));
      }
      const principal = principalFrom(payload);
      if (typeof payload.exp === 'number') {
        if (validated.size >= TOKEN_CACHE_LIMIT) validated.clear();
        validated.set(match[1], { principal, expiresAtMs: payload.exp * 1000 });
      }
      return principal;
    },
  };
}

function describeJoseError(error: unknown): string {
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
  const tenant = typeof payload.tenant === 'string' && payload.tenant.length > 0 ? payload.tenant : undefined;
  return { subject: payload.sub ?? 'unknown', ...(tenant ? { tenant } : {}), roles, scopes, directScopes: direct };
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
