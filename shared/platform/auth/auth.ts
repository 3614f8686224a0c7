// Pure: scopes, roles, principals and the checks on them. Token validation (jose) is in token-validator.ts, loaded
// with the composition root, so registering the functions does not load jose.
import type { JWTPayload } from 'jose';
import { AppError } from '../errors/app-error';

export const SCOPES = [
  'factory.health.read',
  'factory.meta.read',
  'factory.runtime.read',
  'factory.capacity.lease',
  'factory.provisioning.operate',
  'factory.runtime.admin',
  'factory.runner.agent',
] as const;
export type Scope = (typeof SCOPES)[number];

export const ROLES = ['Observer', 'Operator', 'PlatformAdmin'] as const;
export type Role = (typeof ROLES)[number];

/**
 * What each role grants. Observer reads; Operator also decides on provisioning (approve, reject, accept,
 * dismiss, scan); PlatformAdmin also administers pools and editions and may act for any tenant.
 * `factory.capacity.lease` is a service scope (workers, tool executor), granted through `scp` only; so is
 * `factory.runner.agent` (a runner agent claiming its pool's jobs), which needs the pool too (`runnerPool`).
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
  /**
   * The person (or application) behind the token, as the identity platform names it: `<tid>/<oid>` when the token
   * has an `oid` (Entra's object id of the user or service principal, the same for every application it signs in
   * to; `oid` alone without a `tid`), else its `sub` (which Entra makes pairwise per application, so it names no one
   * across applications). What four eyes compares, and what decisions are recorded by.
   */
  readonly person: string;
  /**
   * An application acting for itself (client credentials): `idtyp: app`, or no `scp` and no `idtyp` (every
   * delegated token carries `scp`). Only such a token may hold tenant-less service scopes.
   */
  readonly application: boolean;
  /**
   * The tenant the token is bound to: its `tenant` claim (local issuer), or the tenant its client is listed for in
   * `RuntimeCloud__Auth__Clients` (Entra). Absent for services and platform administrators.
   */
  readonly tenant?: string;
  /** The client application the token was issued to (`azp`, v2 tokens; `appid`, v1 tokens), when it names one. */
  readonly client?: string;
  readonly roles: ReadonlySet<Role>;
  /** Scopes from `scp` plus those granted by roles. */
  readonly scopes: ReadonlySet<Scope>;
  /**
   * Service scopes an application token carries itself (in `roles`, as Entra issues application permissions), which
   * let a tenant-less service act for a tenant it names. Always empty for a delegated token, whatever its `roles`
   * say: a person acts through the roles granted to them.
   */
  readonly directScopes: ReadonlySet<Scope>;
  /**
   * The runner pool a runner agent serves: its token's `runner_pool` claim (local issuer), or the pool its client is
   * listed for in `RuntimeCloud__Runners__Agents` (Entra). Absent for every other caller.
   */
  readonly runnerPool?: string;
}

/** Which tenants' rows a request may see or change. */
export type TenantFilter = { readonly kind: 'one'; readonly tenant: string } | { readonly kind: 'all' };

export function unauthorized(code: string, message: string): AppError {
  return new AppError(code, 'unauthorized', message);
}

/**
 * Client application ids of callers that act for one tenant, in lower case, → that tenant
 * (`RuntimeCloud__Auth__Clients`). Entra issues client-credential tokens without a `tenant` claim, so this is how such
 * a caller is bound. Example: `new Map([['7f3e1c2a-0000-4000-8000-000000000001', 'contoso']])`.
 */
export type ClientTenants = ReadonlyMap<string, string>;

const NO_CLIENTS: ClientTenants = new Map();

/**
 * The principal of a validated token. A token whose client is listed in `clients` acts for that tenant only, as a
 * `tenant` claim makes it; one that also carries a `tenant` claim naming another tenant is refused (401).
 */
export function principalFrom(payload: JWTPayload, clients: ClientTenants = NO_CLIENTS, agents: ClientTenants = NO_CLIENTS): Principal {
  const scp: unknown[] = typeof payload.scp === 'string' ? payload.scp.split(' ') : Array.isArray(payload.scp) ? (payload.scp as unknown[]) : [];
  const rawRoles: unknown[] = Array.isArray(payload.roles) ? (payload.roles as unknown[]) : [];
  const roles = new Set(rawRoles.filter((r): r is Role => ROLES.includes(r as Role)));
  const application = isApplicationToken(payload);
  const scopeNames = (names: readonly unknown[]) => names.filter((s): s is Scope => typeof s === 'string' && SCOPES.includes(s as Scope));
  // Entra app-only tokens carry application permissions in `roles`; a delegated token's `roles` are the person's
  // app roles, and a scope name there grants nothing (a person's rights come from its roles and its `scp`).
  const direct = new Set(application ? scopeNames(rawRoles) : []);
  const scopes = new Set<Scope>(application ? direct : scopeNames(scp));
  for (const role of roles) for (const scope of ROLE_SCOPES[role]) scopes.add(scope);
  const claimed = tenantClaim(payload);
  const client = clientClaim(payload);
  const listed = client === undefined ? undefined : clients.get(client.toLowerCase());
  if (listed !== undefined && claimed !== undefined && claimed !== listed) {
    throw new AppError('AUTH.TENANT_CLAIM_MISMATCH', 'unauthorized', 'the tenant claim names another tenant than the one this client acts for', {
      client,
      clientTenant: listed,
      tokenTenant: claimed,
    });
  }
  const tenant = listed ?? claimed;
  const pool = (client === undefined ? undefined : agents.get(client.toLowerCase())) ?? (typeof payload.runner_pool === 'string' && payload.runner_pool.length > 0 ? payload.runner_pool : undefined);
  return {
    ...(pool !== undefined ? { runnerPool: pool } : {}),
    subject: payload.sub ?? 'unknown',
    person: personOf(payload),
    application,
    ...(tenant !== undefined ? { tenant } : {}),
    ...(client !== undefined ? { client } : {}),
    roles,
    scopes,
    directScopes: direct,
  };
}

/**
 * Whether the token is an application's own (client credentials) rather than one acting for a signed-in person:
 * `idtyp: app` (Entra's optional claim), or a token with neither `scp` nor `idtyp` (Entra puts `scp` in every
 * delegated token, v1 and v2). A token saying `idtyp: app` while carrying `scp` contradicts itself and is taken as
 * delegated: it gets the lesser rights.
 */
function isApplicationToken(payload: JWTPayload): boolean {
  const delegated = 'scp' in payload;
  if (payload.idtyp === 'app') return !delegated;
  return payload.idtyp === undefined && !delegated;
}

/** The token's person (`Principal.person`). */
function personOf(payload: JWTPayload): string {
  const oid = typeof payload.oid === 'string' && payload.oid.length > 0 ? payload.oid.toLowerCase() : undefined;
  const tid = typeof payload.tid === 'string' && payload.tid.length > 0 ? payload.tid.toLowerCase() : undefined;
  if (oid !== undefined) return tid !== undefined ? `${tid}/${oid}` : oid;
  return payload.sub ?? 'unknown';
}

/**
 * Whether two identities name the same person: equal as given, or, for Entra's `<tid>/<oid>`, the same object id
 * where one side names no directory (an `oid` given alone is taken as that object in whichever directory the
 * other names). Object ids compare without case. Four eyes refuses on any match, so an identity given in the
 * shorter form can never let its person approve their own run.
 */
export function samePerson(a: string, b: string): boolean {
  if (a === b) return true;
  const [tidA, oidA] = entraIdentity(a);
  const [tidB, oidB] = entraIdentity(b);
  if (oidA === undefined || oidB === undefined || oidA !== oidB) return false;
  return tidA === undefined || tidB === undefined || tidA === tidB;
}

const GUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const ENTRA_IDENTITY = new RegExp(`^(?:(${GUID})/)?(${GUID})$`, 'i');

function entraIdentity(identity: string): [tid: string | undefined, oid: string | undefined] {
  const match = ENTRA_IDENTITY.exec(identity);
  return match ? [match[1]?.toLowerCase(), match[2]?.toLowerCase()] : [undefined, undefined];
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

/**
 * The client application of the token: `azp` in Entra v2 tokens, `appid` in v1 tokens. A present claim must be a
 * non-empty string and the two may not disagree: read as absent, a malformed one would leave a listed client's token
 * unbound, free to name any tenant with a service scope.
 */
function clientClaim(payload: JWTPayload): string | undefined {
  const azp = stringClaim(payload, 'azp');
  const appid = stringClaim(payload, 'appid');
  if (azp !== undefined && appid !== undefined && azp !== appid) {
    throw unauthorized('AUTH.CLIENT_CLAIM_INVALID', 'the azp and appid claims name different clients');
  }
  return azp ?? appid;
}

function stringClaim(payload: JWTPayload, claim: 'azp' | 'appid'): string | undefined {
  if (!(claim in payload)) return undefined;
  const value = payload[claim];
  if (typeof value === 'string' && value.length > 0) return value;
  throw unauthorized('AUTH.CLIENT_CLAIM_INVALID', `the ${claim} claim must be a non-empty string`);
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
