import type { CapacityKind } from './pool';

/**
 * The lease queue: the pure model (no I/O). A request that may wait (`POST /leases` with `wait`) and finds no room
 * joins its pool's queue as a *ticket*. Units that come free go to the queue before any new request: the next
 * ticket is the one of the tenant furthest below its fair share, and within a tenant the oldest.
 *
 * - **Weighted fair share.** A tenant's share is its dominant share (of every kind, the units it holds over the
 *   kind's capacity; the largest) divided by its edition's weight. The tenant whose share would be smallest with its
 *   next ticket granted goes next, so held units converge to the weights' proportions (weights 1:1:2 hold a pool 1:1:2).
 * - **Age raises priority.** Each second a tenant's oldest ticket has waited lowers its share by
 *   `1 / AGING_SECONDS`: a tenant far above its share is served at the latest some minutes on, and nothing starves.
 * - **Strict order.** A pass grants tickets in this order until the next one does not fit the pool: later, smaller
 *   tickets do not overtake it (a large request is never starved by small ones). A tenant at its edition's quota is
 *   skipped, since no unit the pool frees would let it hold more.
 */
export const WAIT_REASONS = ['TENANT_QUOTA', 'POOL_FULL', 'BEHIND_FAIR_SHARE', 'QUEUED_BEHIND', 'POOL_RESIZING', 'RECOVERING'] as const;
export type WaitReasonCode = (typeof WAIT_REASONS)[number];

/** Why a request waits (or was refused), with the figures that say so. */
export type WaitReason =
  | { readonly code: 'TENANT_QUOTA'; readonly used: number; readonly quota: number }
  | { readonly code: 'POOL_FULL'; readonly used: number; readonly capacity: number }
  | { readonly code: 'BEHIND_FAIR_SHARE'; readonly share: number; readonly weight: number; readonly fairShare: number }
  | { readonly code: 'QUEUED_BEHIND'; readonly position: number }
  | { readonly code: 'POOL_RESIZING'; readonly used: number; readonly capacity: number }
  | { readonly code: 'RECOVERING'; readonly until: string };

export const TICKET_STATES = ['waiting', 'granted', 'canceled', 'expired'] as const;
export type TicketState = (typeof TICKET_STATES)[number];

/** A lease request in a pool's queue. */
export interface Ticket {
  readonly id: string;
  readonly tenant: string;
  readonly kind: CapacityKind;
  readonly pool: string;
  readonly units: number;
  readonly ttlSeconds: number;
  readonly holder: string;
  readonly idempotencyKey: string;
  readonly requestDigest: string;
  readonly requestedAt: Date;
  /** It leaves the queue unanswered (`expired`) at this time. */
  readonly deadline: Date;
  /** Stored state; a `waiting` ticket past its deadline is expired (see `ticketState`). */
  readonly state: TicketState;
  /** The id its lease gets (chosen when it joins). */
  readonly leaseId: string;
  readonly fencingToken?: number;
  readonly endedAt?: Date;
}

/** How long one HTTP request is held waiting for a grant; a longer wait goes on with the ticket. */
export const MAX_HOLD_SECONDS = 20;
/** Seconds of waiting that lower a tenant's share by one whole pool's worth (see the module comment). */
export const AGING_SECONDS = 600;

/** What the order of a pool's queue is decided from: who holds what now, and their weights. */
export interface ShareInputs {
  /** Units each tenant holds, per kind (its quota scopes' use). */
  readonly held: ReadonlyMap<string, ReadonlyMap<string, number>>;
  /** The capacity of each kind (all pools of it). */
  readonly capacity: ReadonlyMap<string, number>;
  /** Each tenant's weight (its edition's). */
  readonly weight: ReadonlyMap<string, number>;
}

/** A tenant's dominant share of the capacity it holds (with `plus` more units of a kind), over its weight. */
export function tenantShare(inputs: ShareInputs, tenant: string, plus?: { readonly kind: string; readonly units: number }): number {
  const held = new Map(inputs.held.get(tenant) ?? []);
  if (plus) held.set(plus.kind, (held.get(plus.kind) ?? 0) + plus.units);
  let dominant = 0;
  for (const [kind, units] of held) {
    const capacity = inputs.capacity.get(kind) ?? 0;
    if (capacity > 0) dominant = Math.max(dominant, units / capacity);
  }
  return dominant / (inputs.weight.get(tenant) ?? 1);
}

/**
 * The queue's tickets in the order they are to be granted, given what the tenants hold now: each step takes the
 * oldest ticket of the tenant whose share would be smallest with that ticket granted, less its age, and counts its
 * units as held for the next step. (The share with the grant, not before it: with whole units, shares before the
 * grant tie at every step where a heavier tenant holds its weight's multiple, and ties would go to the lighter
 * tenants' older tickets, holding weights 1:1:2 at 1:1:1.) Ties go to the older ticket, then to the smaller id.
 */
export function fairOrder(waiting: readonly Ticket[], inputs: ShareInputs, now: Date): Ticket[] {
  const byTenant = new Map<string, Ticket[]>();
  for (const ticket of [...waiting].sort(olderFirst)) {
    const list = byTenant.get(ticket.tenant) ?? [];
    list.push(ticket);
    byTenant.set(ticket.tenant, list);
  }
  const held = new Map([...inputs.held].map(([tenant, kinds]) => [tenant, new Map(kinds)]));
  const simulated: ShareInputs = { ...inputs, held };
  const order: Ticket[] = [];
  while (byTenant.size > 0) {
    let best: { ticket: Ticket; priority: number } | undefined;
    for (const [tenant, tickets] of byTenant) {
      const head = tickets[0] as Ticket;
      const priority = tenantShare(simulated, tenant, head) - (now.getTime() - head.requestedAt.getTime()) / 1000 / AGING_SECONDS;
      if (!best || priority < best.priority || (priority === best.priority && olderFirst(head, best.ticket) < 0)) best = { ticket: head, priority };
    }
    const next = (best as { ticket: Ticket }).ticket;
    order.push(next);
    const tickets = byTenant.get(next.tenant) as Ticket[];
    tickets.shift();
    if (tickets.length === 0) byTenant.delete(next.tenant);
    const kinds = held.get(next.tenant) ?? new Map<string, number>();
    kinds.set(next.kind, (kinds.get(next.kind) ?? 0) + next.units);
    held.set(next.tenant, kinds);
  }
  return order;
}

function olderFirst(a: Ticket, b: Ticket): number {
  const byTime = a.requestedAt.getTime() - b.requestedAt.getTime();
  return byTime !== 0 ? byTime : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** The state a ticket is in at `now`: a waiting ticket past its deadline has expired, swept or not. */
export function ticketState(ticket: Pick<Ticket, 'state' | 'deadline'>, now: Date): TicketState {
  return ticket.state === 'waiting' && ticket.deadline.getTime() <= now.getTime() ? 'expired' : ticket.state;
}

/** What a pool says about room, for the reason a ticket first in line waits. */
export interface PoolRoom {
  readonly used: number;
  readonly capacity: number;
  /** Shrunk below its use: grants nothing until use falls below the new capacity. */
  readonly retiring: boolean;
}

/** A tenant's use and quota of the ticket's kind. */
export interface QuotaUse {
  readonly used: number;
  readonly quota: number;
}

/**
 * Why a waiting ticket waits, given its place in the fair order (1-based `position`), the tickets of its own tenant
 * ahead of it, its tenant's quota use, the pool, and its tenant's share against the fair share of its weight among
 * the waiting tenants.
 */
export function waitReason(input: {
  readonly ticket: Ticket;
  readonly position: number;
  readonly aheadInTenant: number;
  readonly quota: QuotaUse;
  readonly pool: PoolRoom;
  readonly share: number;
  readonly weight: number;
  readonly fairShare: number;
}): WaitReason {
  const { ticket, position, quota, pool } = input;
  if (quota.used + ticket.units > quota.quota) return { code: 'TENANT_QUOTA', used: quota.used, quota: quota.quota };
  if (position === 1) return pool.retiring ? { code: 'POOL_RESIZING', used: pool.used, capacity: pool.capacity } : { code: 'POOL_FULL', used: pool.used, capacity: pool.capacity };
  if (input.aheadInTenant > 0) return { code: 'QUEUED_BEHIND', position };
  return { code: 'BEHIND_FAIR_SHARE', share: round(input.share), weight: input.weight, fairShare: round(input.fairShare) };
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

/**
 * When a ticket may be granted if every lease of its pool is held until its present expiry and released then:
 * the expiry at which the units freed cover the tickets ahead and its own. Undefined when the leases that expire
 * cannot cover them (the pool shrank, or the queue ahead needs more than the pool holds).
 */
export function estimateGrant(input: { readonly free: number; readonly unitsAhead: number; readonly units: number; readonly expiries: readonly { readonly units: number; readonly expiresAt: number }[]; readonly now: number }): Date | undefined {
  let missing = input.unitsAhead + input.units - input.free;
  if (missing <= 0) return new Date(input.now);
  for (const lease of input.expiries) {
    missing -= lease.units;
    if (missing <= 0) return new Date(Math.max(lease.expiresAt, input.now));
  }
  return undefined;
}
