import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import {
  LeaseSchema,
  LeaseState,
  TicketSchema,
  TicketState,
  WaitReasonCode,
  type AcquireRequest,
  type Lease as WireLease,
  type RenewRequest,
  type Ticket as WireTicket,
} from '../../contracts/gen/connectsoft/runtimecloud/capacity/v1/capacity_pb';
import { effectiveState, type Lease, type LeaseState as ModelLeaseState } from '../../shared/capacity/lease';
import type { TicketState as ModelTicketState, WaitReason, WaitReasonCode as ModelReasonCode } from '../../shared/capacity/lease-queue';
import type { TicketView } from '../../shared/capacity/capacity.service';

/**
 * The LeaseService's messages (contracts/connectsoft/runtimecloud/capacity/v1/capacity.proto) to and from the shapes the
 * HTTP API validates and answers (lease-schemas.ts, lease-view.ts): one set of rules whichever protocol carries a call.
 * proto3 sends no "unset" for scalars, so an empty string, a zero count or an empty map means the field was not given.
 */

/** An AcquireRequest as the body of `POST /leases`, to be checked by `acquireBody`. */
export function acquireBodyOf(request: AcquireRequest): Record<string, unknown> {
  return {
    kind: request.kind,
    ...(request.units !== 0 ? { units: request.units } : {}),
    ttlSeconds: request.ttlSeconds,
    holder: request.holder,
    ...(request.idempotencyKey !== '' ? { idempotencyKey: request.idempotencyKey } : {}),
    ...(request.pool !== '' ? { pool: request.pool } : {}),
    ...(Object.keys(request.labels).length > 0 ? { labels: request.labels } : {}),
    ...(request.wait ? { wait: { seconds: request.wait.seconds, ...(request.wait.holdSeconds !== undefined ? { holdSeconds: request.wait.holdSeconds } : {}) } } : {}),
  };
}

/** A RenewRequest as the body of `POST /leases/{id}/renew`, to be checked by `renewBody`. */
export function renewBodyOf(request: RenewRequest): Record<string, unknown> {
  const holding = request.holding;
  return {
    fencingToken: Number(request.fencingToken),
    ...(request.ttlSeconds !== undefined ? { ttlSeconds: request.ttlSeconds } : {}),
    ...(holding ? { lease: { kind: holding.kind, pool: holding.pool, ...(holding.units !== 0 ? { units: holding.units } : {}), holder: holding.holder } } : {}),
  };
}

const LEASE_STATES: Readonly<Record<ModelLeaseState, LeaseState>> = {
  active: LeaseState.ACTIVE,
  released: LeaseState.RELEASED,
  expired: LeaseState.EXPIRED,
};

const TICKET_STATES: Readonly<Record<ModelTicketState, TicketState>> = {
  waiting: TicketState.WAITING,
  granted: TicketState.GRANTED,
  canceled: TicketState.CANCELED,
  expired: TicketState.EXPIRED,
};

const REASON_CODES: Readonly<Record<ModelReasonCode, WaitReasonCode>> = {
  TENANT_QUOTA: WaitReasonCode.TENANT_QUOTA,
  POOL_FULL: WaitReasonCode.POOL_FULL,
  BEHIND_FAIR_SHARE: WaitReasonCode.BEHIND_FAIR_SHARE,
  QUEUED_BEHIND: WaitReasonCode.QUEUED_BEHIND,
  POOL_RESIZING: WaitReasonCode.POOL_RESIZING,
  RECOVERING: WaitReasonCode.RECOVERING,
};

/** A lease as the LeaseService answers it; `state` is the effective state, as `leaseView` shows it. */
export function leaseMessage(lease: Lease, now: Date, certificate?: string): WireLease {
  return create(LeaseSchema, {
    leaseId: lease.id,
    tenant: lease.tenant,
    kind: lease.kind,
    pool: lease.pool,
    units: lease.units,
    holder: lease.holder,
    fencingToken: BigInt(lease.fencingToken),
    grantedAt: timestampFromDate(lease.grantedAt),
    expiresAt: timestampFromDate(lease.expiresAt),
    ...(lease.renewedAt ? { renewedAt: timestampFromDate(lease.renewedAt) } : {}),
    state: LEASE_STATES[effectiveState(lease, now)],
    idempotencyKey: lease.idempotencyKey ?? '',
    certificate: certificate ?? '',
  });
}

/** A ticket as the LeaseService answers it: the fields of `ticketView`. */
export function ticketMessage(view: TicketView, now: Date, certificate?: string): WireTicket {
  const { ticket } = view;
  return create(TicketSchema, {
    requestId: ticket.id,
    state: TICKET_STATES[view.state],
    tenant: ticket.tenant,
    kind: ticket.kind,
    pool: ticket.pool,
    units: ticket.units,
    holder: ticket.holder,
    ttlSeconds: ticket.ttlSeconds,
    requestedAt: timestampFromDate(ticket.requestedAt),
    waitUntil: timestampFromDate(ticket.deadline),
    ...(view.position !== undefined ? { position: view.position } : {}),
    ...(view.reason !== undefined ? { reason: reasonMessage(view.reason) } : {}),
    ...(view.estimatedGrantAt !== undefined ? { estimatedGrantAt: timestampFromDate(view.estimatedGrantAt) } : {}),
    ...(ticket.endedAt !== undefined ? { endedAt: timestampFromDate(ticket.endedAt) } : {}),
    ...(view.lease !== undefined ? { lease: leaseMessage(view.lease, now, certificate) } : {}),
  });
}

function reasonMessage(reason: WaitReason): MessageInitShape<typeof TicketSchema>['reason'] {
  const code = REASON_CODES[reason.code];
  switch (reason.code) {
    case 'TENANT_QUOTA':
      return { code, used: BigInt(reason.used), quota: BigInt(reason.quota) };
    case 'POOL_FULL':
    case 'POOL_RESIZING':
      return { code, used: BigInt(reason.used), capacity: BigInt(reason.capacity) };
    case 'BEHIND_FAIR_SHARE':
      return { code, share: reason.share, weight: reason.weight, fairShare: reason.fairShare };
    case 'QUEUED_BEHIND':
      return { code, position: reason.position };
    case 'RECOVERING':
      return { code, until: timestampFromDate(new Date(reason.until)) };
  }
}
