import { Code, ConnectError, type ConnectRouter, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import { LeaseService } from '../../contracts/gen/connectsoft/runtimecloud/capacity/v1/capacity_pb';
import { MAX_HOLD_SECONDS } from '../../shared/capacity/lease-queue';
import type { TicketView } from '../../shared/capacity/capacity.service';
import type { Lease } from '../../shared/capacity/lease';
import { ensureError } from '../../shared/platform/errors/app-error';
import type { Scope, TenantFilter } from '../../shared/platform/auth/auth';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { parseInput } from '../../shared/platform/validation/validation';
import type { Deps } from '../../shared/deps';
import { authorize } from '../http/endpoint';
import { RPC_LOG, rpcError } from '../rpc/rpc-errors';
import { acquireBodyOf, leaseMessage, renewBodyOf, ticketMessage } from './lease-messages';
import { acquireBody, renewBody } from './lease-schemas';
import { singleTenant } from './lease-view';

/**
 * The LeaseService (contracts/connectsoft/runtimecloud/capacity/v1/capacity.proto): the capacity use cases the HTTP
 * API's leases.ts and lease-requests.ts call, behind the same check of the caller (`authorize`), the same request
 * rules (lease-schemas.ts) and the same problems, which reach the caller as status codes (functions/rpc/rpc-errors.ts).
 * Served by the local host's gRPC port and by the Connect trigger (lease-connect.ts).
 */
export interface LeaseRpcOptions {
  /** The host's dependencies. Example: `getDeps` (functions/runtime.ts). */
  readonly deps: () => Promise<Deps>;
  /**
   * Whether the server sends a stream's messages as they come (the gRPC port); where it cannot (the HTTP trigger
   * buffers its answer), WatchTicket answers UNIMPLEMENTED. Example: `false`.
   */
  readonly streams: boolean;
}

/** How long a watch waits for its ticket to leave the queue before it looks at its place again. */
const WATCH_LOOK_SECONDS = 1;

const LEASE: Scope = 'factory.capacity.lease';
const READ: Scope = 'factory.runtime.read';

const id = lazySchema((z) => z.string().min(1, 'required').max(200));
const fencingToken = lazySchema((z) => z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER));
const leaseCall = lazySchema((z) => z.object({ leaseId: id(), fencingToken: fencingToken() }));
const leaseIdCall = lazySchema((z) => z.object({ leaseId: id() }));
const ticketCall = lazySchema((z) => z.object({ requestId: id(), waitSeconds: z.number().int().min(0).max(MAX_HOLD_SECONDS).default(0) }));

/** The service's routes, for a Connect router (`connectNodeAdapter({ routes })`, `createConnectRouter()`). */
export function leaseServiceRoutes(options: LeaseRpcOptions): (router: ConnectRouter) => void {
  return (router) => router.service(LeaseService, leaseService(options));
}

function leaseService(options: LeaseRpcOptions): ServiceImpl<typeof LeaseService> {
  /** The caller, checked as the HTTP API checks it: bearer token, scope, and the tenant named with `x-tenant-id`. */
  const caller = async (context: HandlerContext, scope: Scope): Promise<{ deps: Deps; tenants: () => TenantFilter }> => {
    const deps = await options.deps();
    const { tenants } = await authorize(deps, context.requestHeader.get('authorization'), context.requestHeader.get('x-tenant-id') ?? undefined, { scope });
    return { deps, tenants };
  };
  const answering = async <T>(context: HandlerContext, work: () => Promise<T>): Promise<T> => {
    try {
      return await work();
    } catch (error) {
      throw rpcError(error, context.values.get(RPC_LOG));
    }
  };
  /** The holder's certificate of a lease just granted or renewed; none, and logged, when the signing key cannot be read. */
  const certify = async (deps: Deps, context: HandlerContext, lease: Lease | undefined): Promise<string | undefined> => {
    if (!lease) return undefined;
    try {
      return await deps.capacity.certify(lease);
    } catch (thrown) {
      context.values.get(RPC_LOG)(`lease ${lease.id} answered without a certificate`, ensureError(thrown));
      return undefined;
    }
  };
  return {
    acquire: (request, context) =>
      answering(context, async () => {
        const { deps, tenants } = await caller(context, LEASE);
        const body = parseInput(acquireBodyOf(request), acquireBody());
        const leaseRequest = {
          tenant: singleTenant(tenants()),
          kind: body.kind,
          units: body.units,
          ttlSeconds: body.ttlSeconds,
          holder: body.holder,
          ...(body.idempotencyKey !== undefined ? { idempotencyKey: body.idempotencyKey } : {}),
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
        const now = deps.clock.now();
        if (result.outcome === 'waiting') return { result: { case: 'ticket', value: ticketMessage(result.ticket, now) } };
        const certificate = await certify(deps, context, result.lease);
        return { result: { case: 'lease', value: leaseMessage(result.lease, now, certificate) }, repeated: result.outcome === 'existing' };
      }),
    renew: (request, context) =>
      answering(context, async () => {
        const { deps, tenants } = await caller(context, LEASE);
        const leaseId = parseInput(request.leaseId, id(), 'leaseId');
        const body = parseInput(renewBodyOf(request), renewBody());
        const lease = await deps.capacity.renew(tenants(), leaseId, body.fencingToken, body.ttlSeconds, body.lease);
        return { lease: leaseMessage(lease, deps.clock.now(), await certify(deps, context, lease)) };
      }),
    release: (request, context) =>
      answering(context, async () => {
        const { deps, tenants } = await caller(context, LEASE);
        const call = parseInput({ leaseId: request.leaseId, fencingToken: Number(request.fencingToken) }, leaseCall());
        const { outcome } = await deps.capacity.release(tenants(), call.leaseId, call.fencingToken);
        return { released: outcome === 'released' };
      }),
    getLease: (request, context) =>
      answering(context, async () => {
        const { deps, tenants } = await caller(context, READ);
        const { leaseId } = parseInput({ leaseId: request.leaseId }, leaseIdCall());
        return { lease: leaseMessage(await deps.capacity.getLease(tenants(), leaseId), deps.clock.now()) };
      }),
    getTicket: (request, context) =>
      answering(context, async () => {
        const { deps, tenants } = await caller(context, LEASE);
        const call = parseInput({ requestId: request.requestId, waitSeconds: request.waitSeconds }, ticketCall());
        const view = await deps.capacity.getLeaseRequest(tenants(), call.requestId, call.waitSeconds);
        return { ticket: ticketMessage(view, deps.clock.now(), await certify(deps, context, view.lease)) };
      }),
    cancelTicket: (request, context) =>
      answering(context, async () => {
        const { deps, tenants } = await caller(context, LEASE);
        const requestId = parseInput(request.requestId, id(), 'requestId');
        return { ticket: ticketMessage(await deps.capacity.cancelLeaseRequest(tenants(), requestId), deps.clock.now()) };
      }),
    async *watchTicket(request, context) {
      if (!options.streams) {
        throw new ConnectError('WatchTicket streams: call it on the gRPC port, or follow the ticket with GetTicket and wait_seconds', Code.Unimplemented);
      }
      // The ticket now, then whenever its state, place or reason changed; the stream ends once it left the queue.
      const { deps, tenants, requestId } = await answering(context, async () => ({
        ...(await caller(context, LEASE)),
        requestId: parseInput(request.requestId, id(), 'requestId'),
      }));
      let told: string | undefined;
      let view = await answering(context, () => deps.capacity.getLeaseRequest(tenants(), requestId, 0));
      for (;;) {
        const standing = standingOf(view);
        if (standing !== told) yield { ticket: ticketMessage(view, deps.clock.now(), await certify(deps, context, view.lease)) };
        told = standing;
        if (view.state !== 'waiting' || context.signal.aborted) return;
        view = await answering(context, () => deps.capacity.getLeaseRequest(tenants(), requestId, WATCH_LOOK_SECONDS));
      }
    },
  };
}

/** What a watcher is told again when it changes: a ticket's state, place and reason (its estimate alone is not news). */
function standingOf(view: TicketView): string {
  return JSON.stringify([view.state, view.position ?? null, view.reason ?? null]);
}
