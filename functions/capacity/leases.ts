import { LEASE_STATES } from '../../shared/capacity/lease';
import { CAPACITY_KINDS } from '../../shared/capacity/pool';
import { AppError } from '../../shared/platform/errors/app-error';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { endpoint, idempotencyKey, idempotencyKeyOf } from '../http/endpoint';
import { leaseView, singleTenant } from './lease-view';
import { moduleApp } from '../app';

/** Body of `POST /leases`. Changing this shape is a breaking change for workers and the tool executor. */
const acquireBody = lazySchema((z) =>
  z
    .object({
      kind: z.enum(CAPACITY_KINDS),
      units: z.number().int().positive().default(1),
      ttlSeconds: z.number().int().positive(),
      holder: z.string().min(1).max(200),
      idempotencyKey: idempotencyKey().optional(),
      pool: z.string().min(1).max(200).optional(),
      labels: z.record(z.string().min(1).max(100), z.string().max(200)).optional(),
    })
    .refine((b) => b.pool === undefined || b.labels === undefined, { message: 'name a pool or labels, not both', path: ['pool'] }),
);

/** Grants a capacity lease: 201 when new, 200 when the idempotency key names one already granted. */
export const acquireLease = endpoint({ scope: 'factory.capacity.lease', body: acquireBody }, async ({ request, deps, tenants, body }) => {
  const key = idempotencyKeyOf(request, body.idempotencyKey);
  const result = await deps.capacity.acquire({
    tenant: singleTenant(tenants()),
    kind: body.kind,
    units: body.units,
    ttlSeconds: body.ttlSeconds,
    holder: body.holder,
    ...(key !== undefined ? { idempotencyKey: key } : {}),
    ...(body.pool !== undefined ? { pool: body.pool } : {}),
    ...(body.labels !== undefined ? { labels: body.labels } : {}),
  });
  return {
    status: result.outcome === 'granted' ? 201 : 200,
    headers: { location: `/runtime-cloud/leases/${result.lease.id}` },
    jsonBody: leaseView(result.lease, deps.clock.now()),
  };
});

/**
 * Body of `POST /leases/{id}/renew`. Changing this shape is a breaking change for workers and the tool executor.
 * `lease` (what the holder holds) is read only in the recovery window after a restore of the store, to re-register
 * a lease the restored store does not know; holders send it with every renew so a restore needs nothing new of them.
 */
const renewBody = lazySchema((z) =>
  z.object({
    fencingToken: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    ttlSeconds: z.number().int().positive().optional(),
    lease: z
      .object({
        kind: z.enum(CAPACITY_KINDS),
        pool: z.string().min(1).max(200),
        units: z.number().int().positive().default(1),
        holder: z.string().min(1).max(200),
      })
      .optional(),
  }),
);

/**
 * Extends a lease: 410 when it has expired or was released, 409 when the fencing token is not the lease's. After a
 * restore, a lease the store does not know is re-registered from `lease` within the recovery window.
 */
export const renewLease = endpoint({ scope: 'factory.capacity.lease', body: renewBody }, async ({ request, deps, tenants, body }) => {
  const lease = await deps.capacity.renew(tenants(), request.params.id ?? '', body.fencingToken, body.ttlSeconds, body.lease);
  return { status: 200, jsonBody: leaseView(lease, deps.clock.now()) };
});

const fencingTokenText = lazySchema((z) => z.string().regex(/^\d{1,15}$/, 'a fencing token is a non-negative integer'));

/**
 * Releases a lease. The caller proves it holds the lease with its fencing token (header `Fencing-Token: N` or
 * `?fencingToken=N`), as for renew: 204, also for one already released; 409 for a token that is not the lease's;
 * 410 for an expired lease.
 */
export const releaseLease = endpoint({ scope: 'factory.capacity.lease' }, async ({ request, deps, tenants }) => {
  const header = request.headers.get('fencing-token') ?? undefined;
  const query = request.query.get('fencingToken') ?? undefined;
  if (header !== undefined && query !== undefined && header !== query) {
    throw new AppError('REQUEST.FENCING_TOKEN_MISMATCH', 'validation', 'the Fencing-Token header and ?fencingToken= differ');
  }
  const presented = header ?? query;
  if (presented === undefined) {
    throw new AppError('REQUEST.FENCING_TOKEN_REQUIRED', 'validation', 'releasing a lease needs its fencing token: header Fencing-Token or ?fencingToken=');
  }
  if (!fencingTokenText().safeParse(presented).success) {
    throw new AppError('REQUEST.INVALID', 'validation', 'the fencing token must be a non-negative integer');
  }
  await deps.capacity.release(tenants(), request.params.id ?? '', Number(presented));
  return { status: 204 };
});

export const getLease = endpoint({ scope: 'factory.runtime.read' }, async ({ request, deps, tenants }) => {
  const lease = await deps.capacity.getLease(tenants(), request.params.id ?? '');
  return { status: 200, jsonBody: leaseView(lease, deps.clock.now()) };
});

const listQuery = lazySchema((z) =>
  z.object({
    holder: z.string().min(1).optional(),
    state: z.enum(LEASE_STATES).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: z.string().min(1).optional(),
    tenant: z.string().optional(),
  }),
);

/** The caller's tenant's leases, by id, paginated with `?limit=&cursor=`. */
export const listLeases = endpoint({ scope: 'factory.runtime.read', query: listQuery }, async ({ deps, tenants, query: q }) => {
  const page = await deps.capacity.listLeases(tenants(), {
    limit: q.limit,
    ...(q.holder !== undefined ? { holder: q.holder } : {}),
    ...(q.state !== undefined ? { state: q.state } : {}),
    ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
  });
  const now = deps.clock.now();
  return {
    status: 200,
    jsonBody: { items: page.items.map((l) => leaseView(l, now)), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) },
  };
});

moduleApp('capacity').http('acquireLease', { route: 'runtime-cloud/leases', methods: ['POST'], authLevel: 'anonymous', handler: acquireLease });
moduleApp('capacity').http('listLeases', { route: 'runtime-cloud/leases', methods: ['GET'], authLevel: 'anonymous', handler: listLeases });
moduleApp('capacity').http('renewLease', { route: 'runtime-cloud/leases/{id}/renew', methods: ['POST'], authLevel: 'anonymous', handler: renewLease });
moduleApp('capacity').http('releaseLease', { route: 'runtime-cloud/leases/{id}', methods: ['DELETE'], authLevel: 'anonymous', handler: releaseLease });
moduleApp('capacity').http('getLease', { route: 'runtime-cloud/leases/{id}', methods: ['GET'], authLevel: 'anonymous', handler: getLease });
