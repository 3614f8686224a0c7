import type { TenantFilter } from '../platform/auth/auth';
import { AppError, ensureError } from '../platform/errors/app-error';
import { problemError } from '../platform/errors/catalogue';
import { isUniqueViolation } from '../platform/sql/dialect';
import { retryingContention } from '../platform/sql/transaction';
import { recordLeaseGrant, recordQueueWait } from '../platform/telemetry/metrics';
import { acquire } from './acquire.service';
import { nowOf, type AcquireResult, type CapacityContext } from './capacity.context';
import { capacityByKind, listPools, poolsOfKind, tenantLimit } from './capacity.repository';
import { CapacityErrors } from './errors';
import { leaseRequestDigest, type Lease, type LeaseRequest } from './lease';
import { findLeaseByIdempotencyKey, getLease } from './lease.repository';
import { estimateGrant, fairOrder, MAX_HOLD_SECONDS, tenantShare, ticketState, waitReason, type ShareInputs, type Ticket, type WaitReason } from './lease-queue';
import {
  endWaiting,
  expireOverdue,
  findTicket,
  findTicketByKey,
  hasWaiting,
  insertTicket,
  markGranted,
  poolExpiries,
  poolsWithWaiting,
  tenantQuotas,
  tenantWeights,
  ticketsDone,
  waitingTickets,
} from './lease-requests.repository';
import { CAPACITY_KINDS, DEFAULT_MAX_WAIT_SECONDS, poolMatchesLabels, type Pool } from './pool';
import { poolScope, quotaScope } from './slots';

/**
 * The lease queue's use cases (the model is lease-queue.ts): a request that may wait joins its pool's queue when it
 * finds no room; a pass over the queue (`admit`) hands free units to tickets in fair order whenever units may have
 * come free (a release, an expiry, a resize, a ticket joining, and a host's periodic look while its callers wait).
 */

/** Tickets a pass looks at, oldest first. */
const PASS_LIMIT = 500;

export interface WaitingRequest extends LeaseRequest {
  /** How long the request may wait in the queue. */
  readonly waitSeconds: number;
  /** How long the call itself waits for the grant before it answers with the ticket; default min(waitSeconds, MAX_HOLD_SECONDS). */
  readonly holdSeconds?: number;
}

/** A ticket as its holder sees it: where it stands in the queue while it waits, its lease once granted. */
export interface TicketView {
  readonly ticket: Ticket;
  readonly state: Ticket['state'];
  readonly position?: number;
  readonly reason?: WaitReason;
  readonly estimatedGrantAt?: Date;
  readonly lease?: Lease;
}

export type WaitResult = AcquireResult | { readonly outcome: 'waiting'; readonly ticket: TicketView };

/**
 * A grant now if the pool has room and nobody waits; else the request joins the queue and is held for up to
 * `MAX_HOLD_SECONDS` (or its wait, if shorter): granted within it, the lease; else the ticket to ask about.
 */
export async function acquireOrWait(ctx: CapacityContext, request: WaitingRequest): Promise<WaitResult> {
  const digest = leaseRequestDigest(request);
  if (request.idempotencyKey !== undefined) {
    const earlier = await findTicketByKey(ctx.db, request.tenant, request.idempotencyKey);
    if (earlier) return answerRepeat(ctx, earlier, digest, holdOf(request));
  }
  const limit = await tenantLimit(ctx.db, ctx.ledger, request.tenant, request.kind);
  const maxWait = limit?.limit?.maxWaitSeconds ?? DEFAULT_MAX_WAIT_SECONDS;
  if (limit?.limit && request.waitSeconds > maxWait) {
    throw problemError(CapacityErrors.waitTooLong, `wait.seconds must not exceed ${maxWait} for this edition`, { edition: limit.edition, kind: request.kind, maxWaitSeconds: maxWait });
  }
  const requestedAt = nowOf(ctx);
  try {
    return await acquire(ctx, request);
  } catch (thrown) {
    const error = ensureError(thrown);
    if (!(error instanceof AppError) || (error.code !== CapacityErrors.quotaExceeded.code && error.code !== CapacityErrors.exhausted.code)) throw error;
  }
  const ticket = await join(ctx, request, digest, requestedAt);
  return hold(ctx, ticket, holdOf(request));
}

function holdOf(request: WaitingRequest): number {
  return Math.min(request.holdSeconds ?? request.waitSeconds, request.waitSeconds, MAX_HOLD_SECONDS);
}

/** The same request again (its idempotency key): its ticket as it stands, held like the first. */
async function answerRepeat(ctx: CapacityContext, ticket: Ticket, digest: string, holdSeconds: number): Promise<WaitResult> {
  if (ticket.requestDigest !== digest) {
    throw new AppError('REQUEST.IDEMPOTENCY_KEY_REUSED', 'unprocessable', 'this Idempotency-Key was used for a different request');
  }
  const result = await hold(ctx, ticket, holdSeconds);
  return 'lease' in result ? { outcome: 'existing', lease: result.lease } : result;
}

async function join(ctx: CapacityContext, request: WaitingRequest, digest: string, requestedAt: number): Promise<Ticket> {
  const pool = request.pool ?? (await queuePoolFor(ctx, request));
  const id = ctx.ids.next('lreq');
  const ticket: Ticket = {
    id,
    tenant: request.tenant,
    kind: request.kind,
    pool,
    units: request.units,
    ttlSeconds: request.ttlSeconds,
    holder: request.holder,
    idempotencyKey: request.idempotencyKey ?? `lease-request:${id}`,
    requestDigest: digest,
    requestedAt: new Date(requestedAt),
    deadline: new Date(requestedAt + request.waitSeconds * 1000),
    state: 'waiting',
    leaseId: ctx.ids.next('lease'),
  };
  try {
    await retryingContention(() => insertTicket(ctx.db, ticket));
  } catch (thrown) {
    // The same key joined a moment ago on another request: that one's ticket is this one's.
    const earlier = request.idempotencyKey !== undefined && isUniqueViolation(thrown) ? await findTicketByKey(ctx.db, request.tenant, request.idempotencyKey) : undefined;
    if (!earlier) throw thrown;
    return earlier;
  }
  ctx.waiters.sawQueue(pool, true, requestedAt);
  await admit(ctx, pool);
  return ticket;
}

/** The pool a request that names none waits for: the first pool of its kind (by id) that carries its labels. */
async function queuePoolFor(ctx: CapacityContext, request: LeaseRequest): Promise<string> {
  const pool = (await poolsOfKind(ctx.db, request.kind)).find((p) => poolMatchesLabels(p, request.labels));
  if (!pool) throw problemError(CapacityErrors.exhausted, `no ${request.kind} pool carries the labels asked for`, { kind: request.kind, labels: request.labels ?? {} });
  return pool.id;
}

/** Holds the caller until its ticket leaves the queue or the hold ends; then its lease or its ticket as it stands. */
async function hold(ctx: CapacityContext, ticket: Ticket, holdSeconds: number): Promise<WaitResult> {
  const holdMs = holdSeconds * 1000;
  const settled = ticket.state === 'waiting' ? ((await ctx.waiters.wait(ticket, holdMs)) ?? (await findTicket(ctx.db, { kind: 'one', tenant: ticket.tenant }, ticket.id))) : ticket;
  const view = await viewOf(ctx, settled ?? ticket);
  if (view.lease) return { outcome: 'granted', lease: view.lease };
  return { outcome: 'waiting', ticket: view };
}

/**
 * A pass over a pool's queue: expires tickets past their deadline, then grants waiting tickets in fair order
 * (lease-queue.ts `fairOrder`) until the next does not fit the pool. A tenant at its quota is passed over. Each
 * grant is the ledger's own (quota and pool, all or nothing) with the ticket's lease id and key: passes of two
 * hosts at once grant a ticket once, the other's insert failing on the key. One host runs one pass per pool at a time.
 */
export function admit(ctx: CapacityContext, pool: string): Promise<void> {
  return ctx.waiters.passOver(pool, () => pass(ctx, pool));
}

async function pass(ctx: CapacityContext, pool: string): Promise<void> {
  const now = nowOf(ctx);
  const read = await waitingTickets(ctx.db, ctx.dialect, pool, PASS_LIMIT);
  // Tickets past their deadline leave the queue unanswered (those beyond this pass's reach, at the sweep's pass).
  if (read.some((t) => ticketState(t, new Date(now)) === 'expired')) await retryingContention(() => expireOverdue(ctx.db, pool, now));
  const waiting = read.filter((t) => ticketState(t, new Date(now)) === 'waiting');
  ctx.waiters.sawQueue(pool, waiting.length > 0, now);
  if (waiting.length === 0) return;
  const kind = (waiting[0] as Ticket).kind;
  if ((await ctx.recovery.until(kind, now)) !== undefined) return;
  const inputs = await shareInputs(ctx, waiting);
  // What the pool has free as the pass starts: no grant is tried that cannot fit (units freed meanwhile start a pass of their own).
  let { free } = await ctx.ledger.use(ctx.db, poolScope(pool));
  const passedOver = new Set<string>();
  const granted: Ticket[] = [];
  for (const ticket of fairOrder(waiting, inputs, new Date(now))) {
    if (passedOver.has(ticket.tenant)) continue;
    if (ticket.units > free) break;
    const outcome = await grantTicket(ctx, ticket, now);
    if (outcome === 'pool') break;
    if (outcome === 'quota') passedOver.add(ticket.tenant);
    else if (outcome) {
      granted.push(outcome);
      free -= ticket.units;
    }
  }
  ctx.waiters.settled(granted);
}

/** Grants one ticket: the granted ticket, `quota` or `pool` when short of units, or undefined when it left the queue. */
async function grantTicket(ctx: CapacityContext, ticket: Ticket, now: number): Promise<Ticket | 'quota' | 'pool' | undefined> {
  const lease: Omit<Lease, 'fencingToken'> = {
    id: ticket.leaseId,
    tenant: ticket.tenant,
    kind: ticket.kind,
    pool: ticket.pool,
    units: ticket.units,
    holder: ticket.holder,
    grantedAt: new Date(now),
    expiresAt: new Date(now + ticket.ttlSeconds * 1000),
    state: 'active',
    idempotencyKey: ticket.idempotencyKey,
  };
  let fencingToken: number;
  try {
    const outcome = await retryingContention(() => ctx.ledger.grant(ctx.db, lease, ticket.ttlSeconds, ticket.requestDigest));
    if ('shortOf' in outcome) return outcome.shortOf;
    fencingToken = outcome.fencingToken;
  } catch (thrown) {
    // Another host's pass granted it first (or this one stopped before recording it): its lease is the ticket's.
    const earlier = isUniqueViolation(thrown) ? await findLeaseByIdempotencyKey(ctx.db, ctx.dialect, ticket.tenant, ticket.idempotencyKey) : undefined;
    if (!earlier) throw thrown;
    fencingToken = earlier.lease.fencingToken;
  }
  if (await retryingContention(() => markGranted(ctx.db, ticket.id, fencingToken, now))) {
    recordLeaseGrant(ticket.kind, ticket.pool);
    recordQueueWait(ticket.pool, ticket.tenant, (now - ticket.requestedAt.getTime()) / 1000);
    return { ...ticket, state: 'granted', fencingToken, endedAt: new Date(now) };
  }
  const current = await findTicket(ctx.db, { kind: 'one', tenant: ticket.tenant }, ticket.id);
  // Canceled (or past its deadline) while the lease was granted: its units go back.
  if (current && current.state !== 'granted') await retryingContention(() => ctx.ledger.release(ctx.db, ticket.tenant, ticket.leaseId, fencingToken, now));
  return undefined;
}

/** Who holds what of every kind now, the kinds' capacities and the waiting tenants' weights. */
async function shareInputs(ctx: CapacityContext, waiting: readonly Ticket[]): Promise<ShareInputs> {
  const tenants = [...new Set(waiting.map((t) => t.tenant))];
  const scopes = tenants.flatMap((tenant) => CAPACITY_KINDS.map((kind) => quotaScope(tenant, kind)));
  const use = await ctx.ledger.held(ctx.db, scopes);
  const held = new Map(tenants.map((tenant) => [tenant, new Map(CAPACITY_KINDS.map((kind) => [kind as string, use.get(quotaScope(tenant, kind)) ?? 0]))]));
  return { held, capacity: await capacityByKind(ctx.db), weight: await tenantWeights(ctx.db, tenants) };
}

/** A pass over a pool's queue if a ticket waits in it (a release asks: most pools have no queue). */
export async function admitIfWaiting(ctx: CapacityContext, pool: string): Promise<void> {
  if (await ctx.waiters.hasWaiting(pool, nowOf(ctx), () => hasWaiting(ctx.db, ctx.dialect, pool))) await admit(ctx, pool);
}

/** Runs a pass over every pool with a waiting ticket (the expiry sweep does, so no ticket outlives its deadline long). */
export async function admitAll(ctx: CapacityContext): Promise<void> {
  for (const pool of await poolsWithWaiting(ctx.db)) await admit(ctx, pool);
}

/** A ticket of the caller's tenant; long-polled, it is held until it leaves the queue or `waitSeconds` pass. */
export async function getTicket(ctx: CapacityContext, tenants: TenantFilter, id: string, waitSeconds = 0): Promise<TicketView> {
  const ticket = await findTicket(ctx.db, tenants, id);
  if (!ticket) throw ticketNotFound(id);
  if (ticketState(ticket, ctx.clock.now()) !== 'waiting' || waitSeconds <= 0) return viewOf(ctx, ticket);
  const settled = await ctx.waiters.wait(ticket, Math.min(waitSeconds, MAX_HOLD_SECONDS) * 1000);
  return viewOf(ctx, settled ?? (await findTicket(ctx.db, tenants, id)) ?? ticket);
}

/** Takes a waiting ticket out of the queue; a granted one is refused (release its lease instead). */
export async function cancelTicket(ctx: CapacityContext, tenants: TenantFilter, id: string): Promise<TicketView> {
  const ticket = await findTicket(ctx.db, tenants, id);
  if (!ticket) throw ticketNotFound(id);
  const now = nowOf(ctx);
  if (ticketState(ticket, new Date(now)) === 'waiting') await retryingContention(() => endWaiting(ctx.db, id, 'canceled', now));
  const after = (await findTicket(ctx.db, tenants, id)) ?? ticket;
  if (after.state === 'granted') {
    throw problemError(CapacityErrors.ticketGranted, `lease request ${id} was granted: release its lease instead`, { leaseId: after.leaseId });
  }
  ctx.waiters.settled([after]);
  return viewOf(ctx, after);
}

function ticketNotFound(id: string): AppError {
  return problemError(CapacityErrors.ticketNotFound, `lease request ${id} does not exist`);
}

/** What a ticket's holder is told: the lease once granted; while waiting, its place, why, and an estimate. */
async function viewOf(ctx: CapacityContext, ticket: Ticket): Promise<TicketView> {
  const now = ctx.clock.now();
  const state = ticketState(ticket, now);
  if (state === 'granted') {
    const lease = await getLease(ctx.db, ticket.tenant, ticket.leaseId);
    return { ticket, state, ...(lease ? { lease } : {}) };
  }
  if (state !== 'waiting') return { ticket, state };
  const standing = (await queueStanding(ctx, ticket.pool)).find((s) => s.ticket.id === ticket.id);
  return standing ? { ...standing, state } : { ticket, state };
}

/** Each waiting ticket of a pool with its place in the fair order, why it waits and when it may be granted. */
export async function queueStanding(ctx: CapacityContext, pool: string): Promise<QueueStanding[]> {
  const now = ctx.clock.now();
  const waiting = (await waitingTickets(ctx.db, ctx.dialect, pool, PASS_LIMIT)).filter((t) => ticketState(t, now) === 'waiting');
  if (waiting.length === 0) return [];
  const kind = (waiting[0] as Ticket).kind;
  const inputs = await shareInputs(ctx, waiting);
  const room = await poolRoom(ctx, pool);
  const quotas = await tenantQuotas(ctx.db, [...inputs.weight.keys()], kind);
  const expiries = await poolExpiries(ctx.db, ctx.dialect, pool, 1000);
  const recovering = await ctx.recovery.until(kind, now.getTime());
  const totalWeight = [...inputs.weight.values()].reduce((sum, w) => sum + w, 0);
  const seen = new Map<string, number>();
  let unitsAhead = 0;
  return fairOrder(waiting, inputs, now).map((ticket, index) => {
    const aheadInTenant = seen.get(ticket.tenant) ?? 0;
    seen.set(ticket.tenant, aheadInTenant + 1);
    const weight = inputs.weight.get(ticket.tenant) ?? 1;
    const share = tenantShare(inputs, ticket.tenant) * weight;
    const reason: WaitReason =
      recovering !== undefined
        ? { code: 'RECOVERING', until: new Date(recovering).toISOString() }
        : waitReason({
            ticket,
            position: index + 1,
            aheadInTenant,
            quota: { used: inputs.held.get(ticket.tenant)?.get(kind) ?? 0, quota: quotas.get(ticket.tenant) ?? 0 },
            pool: room,
            share,
            weight,
            fairShare: totalWeight > 0 ? weight / totalWeight : 0,
          });
    const estimate = estimateGrant({ free: Math.max(0, room.capacity - room.used), unitsAhead, units: ticket.units, expiries, now: now.getTime() });
    unitsAhead += ticket.units;
    return { ticket, state: 'waiting' as const, position: index + 1, reason, share, weight, ...(estimate ? { estimatedGrantAt: estimate } : {}) };
  });
}

async function poolRoom(ctx: CapacityContext, id: string): Promise<{ used: number; capacity: number; retiring: boolean }> {
  const pool: Pool | undefined = (await listPools(ctx.db, ctx.ledger)).find((p) => p.id === id);
  const use = await ctx.ledger.use(ctx.db, poolScope(id));
  return { used: pool?.used ?? use.held, capacity: pool?.capacity ?? 0, retiring: use.retiring };
}

export type QueueStanding = TicketView & { readonly share: number; readonly weight: number };
export type QueueView = { readonly pool: string; readonly standing: readonly QueueStanding[] }[];

/** Every pool's queue as the caller may see it: its own tenant's tickets, or every tenant's for a caller of all. */
export async function queueView(ctx: CapacityContext, tenants: TenantFilter): Promise<QueueView> {
  const pools = await poolsWithWaiting(ctx.db);
  const views = [];
  for (const pool of pools) {
    const standing = (await queueStanding(ctx, pool)).filter((s) => tenants.kind === 'all' || s.ticket.tenant === tenants.tenant);
    if (standing.length > 0) views.push({ pool, standing });
  }
  return views;
}

/** Settles this host's waiters of tickets granted elsewhere (see lease-queue-waiters.ts). */
export function ticketsLeftQueue(ctx: CapacityContext, ids: readonly string[]): Promise<Ticket[]> {
  return ticketsDone(ctx.db, ids);
}
