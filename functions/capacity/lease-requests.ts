import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { MAX_HOLD_SECONDS } from '../../shared/capacity/lease-queue';
import { endpoint } from '../http/endpoint';
import { certificateOf, queueViewSchema, ticketView, ticketViewSchema } from './lease-view';
import { moduleApp } from '../app';

const getQuery = lazySchema((z) =>
  z.object({
    waitSeconds: z.coerce.number().int().min(0).max(MAX_HOLD_SECONDS).default(0),
    tenant: z.string().optional(),
  }),
);

export const getLeaseRequest = endpoint({
  tag: 'Leases',
  summary: 'Follow a lease request in a queue',
  description:
    "A lease request of the caller's tenant that waited in a pool's queue (`POST /leases` with `wait`): its `state` (`waiting`, " +
    '`granted`, `canceled`, `expired` once its wait ran out), while waiting its `position` in the fair order (1 = next), the `reason` ' +
    'it waits (`TENANT_QUOTA` used/quota, `POOL_FULL` used/capacity, `BEHIND_FAIR_SHARE` share against weight, `QUEUED_BEHIND` ' +
    'position, `POOL_RESIZING`, `RECOVERING`) and `estimatedGrantAt` if the leases ahead are held to their present expiry; once ' +
    `granted, its \`lease\` with a fresh \`certificate\` while the lease is active. With \`?waitSeconds=\` (at most ${MAX_HOLD_SECONDS}) the answer waits until the request leaves the queue. ` +
    "404 `CAPACITY.LEASE_REQUEST_NOT_FOUND`, also for another tenant's request.",
  scope: 'factory.capacity.lease',
  query: getQuery,
  response: ticketViewSchema,
}, async ({ request, context, deps, tenants, query }) => {
  const view = await deps.capacity.getLeaseRequest(tenants(), request.params.id ?? '', query.waitSeconds);
  const certificate = view.lease ? await certificateOf(deps, context, view.lease) : undefined;
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: ticketView(view, deps.clock.now(), certificate) };
});

export const cancelLeaseRequest = endpoint({
  tag: 'Leases',
  summary: 'Cancel a waiting lease request',
  description:
    "Takes the caller's tenant's waiting lease request out of its pool's queue: 200 with it `canceled` (also when it had already " +
    'left the queue unanswered). 409 `CAPACITY.LEASE_REQUEST_GRANTED` once granted (release its lease instead); 404 ' +
    "`CAPACITY.LEASE_REQUEST_NOT_FOUND`, also for another tenant's request.",
  scope: 'factory.capacity.lease',
}, async ({ request, deps, tenants }) => {
  const view = await deps.capacity.cancelLeaseRequest(tenants(), request.params.id ?? '');
  return { status: 200, jsonBody: ticketView(view, deps.clock.now()) };
});

export const leaseQueue = endpoint({
  tag: 'Capacity',
  summary: "See the pools' lease queues",
  description:
    "Per pool with requests waiting: each waiting request in fair order with its tenant, units, position, reason, the tenant's " +
    "dominant share of what it holds and its edition's weight, and its wait so far. A token bound to a tenant sees its own tenant's " +
    'requests only (positions count every tenant); a PlatformAdmin sees every tenant. Never cached.',
  scope: 'factory.runtime.read',
  response: queueViewSchema,
}, async ({ deps, tenants }) => {
  const now = deps.clock.now();
  const pools = await deps.capacity.queue(tenants());
  return {
    status: 200,
    headers: { 'cache-control': 'no-store' },
    jsonBody: {
      pools: pools.map(({ pool, standing }) => ({
        pool,
        waiting: standing.map((s) => ({
          ...ticketView(s, now),
          share: Math.round(s.share * 1000) / 1000,
          weight: s.weight,
          waitedSeconds: Math.max(0, Math.round((now.getTime() - s.ticket.requestedAt.getTime()) / 100) / 10),
        })),
      })),
    },
  };
});

moduleApp('capacity').http('getLeaseRequest', { route: 'runtime-cloud/lease-requests/{id}', methods: ['GET'], authLevel: 'anonymous', handler: getLeaseRequest });
moduleApp('capacity').http('cancelLeaseRequest', { route: 'runtime-cloud/lease-requests/{id}', methods: ['DELETE'], authLevel: 'anonymous', handler: cancelLeaseRequest });
moduleApp('capacity').http('leaseQueue', { route: 'runtime-cloud/capacity/queue', methods: ['GET'], authLevel: 'anonymous', handler: leaseQueue });
