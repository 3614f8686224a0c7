import type { InvocationContext } from '@azure/functions';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import type { Deps } from '../../shared/deps';
import { logOf } from '../log';
import type { TenantFilter } from '../../shared/platform/auth/auth';
import { effectiveState, type Lease } from '../../shared/capacity/lease';
import type { TicketView } from '../../shared/capacity/capacity.service';
import { lazySchema, type Z } from '../../shared/platform/validation/lazy-schema';

/**
 * A lease as the HTTP API shows it. Changing this shape is a breaking change for workers and the tool executor.
 * `state` is the effective state: an active lease past its expiry shows as expired before the sweep marks it.
 * `certificate`, the lease certificate, only in answers to its holder: a grant, a renewal, a granted request.
 */
export function leaseView(lease: Lease, now: Date, certificate?: string) {
  return {
    leaseId: lease.id,
    tenant: lease.tenant,
    kind: lease.kind,
    pool: lease.pool,
    units: lease.units,
    holder: lease.holder,
    fencingToken: lease.fencingToken,
    grantedAt: lease.grantedAt.toISOString(),
    expiresAt: lease.expiresAt.toISOString(),
    ...(lease.renewedAt ? { renewedAt: lease.renewedAt.toISOString() } : {}),
    state: effectiveState(lease, now),
    ...(lease.idempotencyKey !== undefined ? { idempotencyKey: lease.idempotencyKey } : {}),
    ...(certificate !== undefined ? { certificate } : {}),
  };
}

/**
 * The lease certificate of a lease just granted or renewed. The grant or renewal is done by then, so a signing key
 * that cannot be reached (Key Vault down) leaves the answer without a certificate rather than failing it: a retry
 * without an idempotency key would take a second lease. The holder renews to get one.
 */
export async function certificateOf(deps: Deps, context: InvocationContext, lease: Lease): Promise<string | undefined> {
  try {
    return await deps.capacity.certify(lease);
  } catch (thrown) {
    logOf(context).warn(`lease ${lease.id} answered without a certificate: ${ensureError(thrown).message}`, { tenant: lease.tenant });
    return undefined;
  }
}

/** Acquiring acts for exactly one tenant: the token's, or the one a service names. */
export function singleTenant(filter: TenantFilter): string {
  if (filter.kind === 'one') return filter.tenant;
  throw new AppError('AUTH.TENANT_REQUIRED', 'validation', 'name the tenant (header X-Tenant-Id) to acquire capacity');
}

/**
 * A lease request in a pool's queue as the HTTP API shows it: while it waits, its place in the fair order (1 = next),
 * why it waits, and when it may be granted if the leases ahead are held to their present expiry; once granted, its
 * lease. Changing this shape is a breaking change for workers and the tool executor.
 */
export function ticketView(view: TicketView, now: Date, certificate?: string) {
  const { ticket } = view;
  return {
    requestId: ticket.id,
    state: view.state,
    tenant: ticket.tenant,
    kind: ticket.kind,
    pool: ticket.pool,
    units: ticket.units,
    holder: ticket.holder,
    ttlSeconds: ticket.ttlSeconds,
    requestedAt: ticket.requestedAt.toISOString(),
    waitUntil: ticket.deadline.toISOString(),
    ...(view.position !== undefined ? { position: view.position } : {}),
    ...(view.reason !== undefined ? { reason: view.reason } : {}),
    ...(view.estimatedGrantAt !== undefined ? { estimatedGrantAt: view.estimatedGrantAt.toISOString() } : {}),
    ...(ticket.endedAt !== undefined ? { endedAt: ticket.endedAt.toISOString() } : {}),
    ...(view.lease !== undefined ? { lease: leaseView(view.lease, now, certificate) } : {}),
  };
}

/**
 * The schemas of these views for the OpenAPI document (`endpoint({ response })`); tests/integration/openapi-responses.test.ts
 * checks real answers against them. Built on first use: registering the functions loads no zod.
 */
const leaseShape = (z: Z) =>
  z.object({
    leaseId: z.string(),
    tenant: z.string(),
    kind: z.string(),
    pool: z.string(),
    units: z.number().int(),
    holder: z.string(),
    fencingToken: z.number().int(),
    grantedAt: z.string(),
    expiresAt: z.string(),
    renewedAt: z.string().optional(),
    state: z.enum(['active', 'released', 'expired']),
    idempotencyKey: z.string().optional(),
    certificate: z.string().optional().describe('the lease certificate (a JWS), in answers to its holder: a grant, a renewal, a granted request'),
  });

export const leaseViewSchema = lazySchema((z) => leaseShape(z));
export const leasePageSchema = lazySchema((z) => z.object({ items: z.array(leaseViewSchema()), nextCursor: z.string().optional() }));

/** A lease request in a pool's queue (`ticketView`). */
export const ticketViewSchema = lazySchema((z) =>
  z.object({
    requestId: z.string(),
    state: z.string(),
    tenant: z.string(),
    kind: z.string(),
    pool: z.string(),
    units: z.number().int(),
    holder: z.string(),
    ttlSeconds: z.number().int(),
    requestedAt: z.string(),
    waitUntil: z.string(),
    position: z.number().int().optional(),
    reason: z.looseObject({ code: z.string() }).optional().describe('why it waits: TENANT_QUOTA, POOL_FULL, BEHIND_FAIR_SHARE, …, with its figures'),
    estimatedGrantAt: z.string().optional(),
    endedAt: z.string().optional(),
    lease: leaseViewSchema().optional(),
  }),
);

/** The pools' queues (`GET /capacity/queue`): each waiting request with its tenant's share and weight. */
export const queueViewSchema = lazySchema((z) =>
  z.object({
    pools: z.array(
      z.object({
        pool: z.string(),
        waiting: z.array(ticketViewSchema().extend({ share: z.number(), weight: z.number().int(), waitedSeconds: z.number() })),
      }),
    ),
  }),
);

/** What acquiring answers: the lease (200, 201), or the request's ticket while it waits in the queue (202). */
export const acquiredSchema = lazySchema((z) => z.union([leaseViewSchema(), ticketViewSchema()]));
