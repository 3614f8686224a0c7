import { LEASE_STATES } from '../../shared/capacity/lease';
import { AppError } from '../../shared/platform/errors/app-error';
import { MAX_HOLD_SECONDS } from '../../shared/capacity/lease-queue';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { endpoint, idempotencyKeyOf } from '../http/endpoint';
import { acquireBody, renewBody } from './lease-schemas';
import { acquiredSchema, certificateOf, leasePageSchema, leaseView, leaseViewSchema, singleTenant, ticketView } from './lease-view';
import { moduleApp } from '../app';

export const acquireLease = endpoint({
  tag: 'Leases',
  summary: 'Acquire a capacity lease',
  description:
    'Grants `units` of a `kind` for `ttlSeconds` to `holder`, from the named `pool`, or else from the first pool of the kind (by id) ' +
    "that carries the `labels` and has room, within the tenant's edition quota: 201 with the lease (`leaseId`, `pool`, `fencingToken`, " +
    '`expiresAt`, and `certificate`: a short-lived signed lease certificate, see `GET /.well-known/lease-jwks.json`) and its `Location`. ' +
    'Fencing tokens strictly increase per pool: present yours, or the certificate, to whatever the lease protects. With an ' +
    '`Idempotency-Key` (header or body field, per tenant) a repeated request answers 200 with the same lease, and 422 ' +
    '`REQUEST.IDEMPOTENCY_KEY_REUSED` when the key was used for another request. A service scope (runtime workers, the tool executor); ' +
    'a service bound to no tenant names it with `X-Tenant-Id`. 429 `CAPACITY.QUOTA_EXCEEDED` or `CAPACITY.EXHAUSTED` ' +
    "with `Retry-After`; 400 `CAPACITY.TTL_TOO_LONG` above the edition's maximum; 403 `CAPACITY.KIND_NOT_IN_EDITION`; 404 " +
    '`CAPACITY.TENANT_UNKNOWN` or `CAPACITY.POOL_NOT_FOUND`; 503 `CAPACITY.RECOVERING` while holders re-register leases after a restore. ' +
    "Refusals carry `reason` (`TENANT_QUOTA`, `POOL_FULL`, `QUEUED_BEHIND`, `RECOVERING`) with its figures. With `wait: {seconds}` (at most " +
    "the edition's `maxWaitSeconds`, else 400 `CAPACITY.WAIT_TOO_LONG`) a request the pool cannot grant now joins the pool's queue, " +
    'granted in weighted fair share across tenants and in arrival order within one: the call holds for up to `wait.holdSeconds` ' +
    `(default and at most ${MAX_HOLD_SECONDS}) and answers 201 with the lease if granted meanwhile, else 202 with the request ` +
    '(`requestId`, `position`, `reason`, `estimatedGrantAt`) and its `Location` under `/lease-requests`. A quota the edition can never ' +
    'meet is refused at once, not queued.',
  scope: 'factory.capacity.lease',
  body: acquireBody,
  response: acquiredSchema,
}, async ({ request, context, deps, tenants, body }) => {
  const key = idempotencyKeyOf(request, body.idempotencyKey);
  const leaseRequest = {
    tenant: singleTenant(tenants()),
    kind: body.kind,
    units: body.units,
    ttlSeconds: body.ttlSeconds,
    holder: body.holder,
    ...(key !== undefined ? { idempotencyKey: key } : {}),
    ...(body.pool !== undefined ? { pool: body.pool } : {}),
    ...(body.labels !== undefined ? { labels: body.labels } : {}),
  };
  const result = body.wait
    ? await deps.capacity.acquireOrWait({
        ...leaseRequest,
        waitSeconds: body.wait.seconds,
        ...(body.wait.holdSeconds !== undefined ? { holdSeconds: body.wait.holdSeconds } : {}),
      })
    : await deps.capacity.acquire(leaseRequest);
  if (result.outcome === 'waiting') {
    const headers: Record<string, string> = { location: `/runtime-cloud/lease-requests/${result.ticket.ticket.id}`, 'cache-control': 'no-store' };
    return { status: 202, headers, jsonBody: ticketView(result.ticket, deps.clock.now()) };
  }
  const certificate = await certificateOf(deps, context, result.lease);
  return {
    status: result.outcome === 'granted' ? 201 : 200,
    headers: { location: `/runtime-cloud/leases/${result.lease.id}` },
    jsonBody: leaseView(result.lease, deps.clock.now(), certificate),
  };
});

export const renewLease = endpoint({
  tag: 'Leases',
  summary: 'Renew a capacity lease',
  description:
    'Extends a lease by `ttlSeconds` (else its own TTL) from now; the holder proves it holds the lease with its `fencingToken`. 200 ' +
    'with the new `expiresAt` and a fresh `certificate`. 410 `CAPACITY.LEASE_GONE` once it has expired or was released (a lease is expired from its `expiresAt` ' +
    "on, swept or not); 409 `CAPACITY.FENCING_MISMATCH` for a token that is not the lease's. In the recovery window after a restore of " +
    "the store, a lease the store does not know is re-registered from `lease` and `ttlSeconds` for the caller's tenant (429 when the quota or pool " +
    'no longer has the units), so holders send `lease` with every renew.',
  scope: 'factory.capacity.lease',
  body: renewBody,
  response: leaseViewSchema,
}, async ({ request, context, deps, tenants, body }) => {
  const lease = await deps.capacity.renew(tenants(), request.params.id ?? '', body.fencingToken, body.ttlSeconds, body.lease);
  return { status: 200, jsonBody: leaseView(lease, deps.clock.now(), await certificateOf(deps, context, lease)) };
});

const fencingTokenText = lazySchema((z) => z.string().regex(/^\d{1,15}$/, 'a fencing token is a non-negative integer'));

export const releaseLease = endpoint({
  tag: 'Leases',
  summary: 'Release a capacity lease',
  description:
    'Gives the units back. The caller proves it holds the lease with its fencing token, in the `Fencing-Token` header or as ' +
    '`?fencingToken=`: 204, also for a lease already released with the right token. 400 `REQUEST.FENCING_TOKEN_REQUIRED` without a ' +
    'token, `REQUEST.FENCING_TOKEN_MISMATCH` when header and query differ; 409 `CAPACITY.FENCING_MISMATCH` for a token that is not ' +
    "the lease's; 410 `CAPACITY.LEASE_GONE` for an expired lease.",
  scope: 'factory.capacity.lease',
}, async ({ request, deps, tenants }) => {
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

export const getLease = endpoint({
  tag: 'Leases',
  summary: 'Get a capacity lease',
  description:
    "One lease of the caller's tenant: kind, units, pool, holder, fencing token, state (`active`, `released`, `expired`; expired from " +
    "its `expiresAt` on, swept or not) and times. 404 `CAPACITY.LEASE_NOT_FOUND`, also for another tenant's lease.",
  scope: 'factory.runtime.read',
  response: leaseViewSchema,
}, async ({ request, deps, tenants }) => {
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

export const listLeases = endpoint({
  tag: 'Leases',
  summary: 'List capacity leases',
  description:
    "The caller's tenant's leases by id, a page at a time (`?limit=&cursor=`, `nextCursor` while more remain), optionally only one " +
    "`holder`'s or those in one `state`. A service or a PlatformAdmin names the tenant with `X-Tenant-Id` or `?tenant=`.",
  scope: 'factory.runtime.read',
  query: listQuery,
  response: leasePageSchema,
}, async ({ deps, tenants, query: q }) => {
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
