/**
 * Lease histories, recorded and checked (issue 19) in the way Jepsen checks lock histories: every acquire, renew and
 * release sent to a host is recorded with the moment it was invoked and the moment its answer arrived (Date.now() of
 * the test process, the clock the hosts stamp `expiresAt` with), and `checkLeaseHistory` then proves from those
 * windows alone what the hosts must have done:
 *  - at no instant do the leases certainly held exceed a pool's capacity or a tenant's quota for a kind;
 *  - fencing tokens are distinct per pool, and a lease granted after another one's grant was answered has a larger one;
 *  - a renew or release presented after its lease certainly expired is refused, never ok;
 *  - one idempotency key (per tenant) names one lease, with one fencing token;
 *  - no answer names another tenant's lease.
 *
 * The checker is sound under uncertainty: an operation's effect happened at some instant inside its window, so only
 * what holds for every such instant is flagged. An operation without a definite answer (5xx, network error, timeout,
 * or still in flight) is indeterminate (Jepsen's "info"): it may or may not have taken effect, and is never counted
 * as having done so where that would raise an alarm.
 */

export type LeaseOp = 'acquire' | 'renew' | 'release';
/** ok: 2xx; refused: 4xx (with its problem code); indeterminate: 5xx, no answer, or no answer yet. */
export type LeaseOutcome = 'ok' | 'refused' | 'indeterminate';

/** One recorded operation. Times are epoch ms of the test process. */
export interface LeaseOperation {
  readonly op: LeaseOp;
  readonly tenant: string;
  /** The pool asked for, or (when ok) the pool the answer names. */
  readonly pool?: string;
  /** The kind of capacity. */
  readonly kind?: string;
  readonly units?: number;
  readonly holder?: string;
  /** The lease acted on, or (acquire, when ok) the lease granted. */
  readonly leaseId?: string;
  readonly idempotencyKey?: string;
  /** The fencing token a renew or release presented. */
  readonly presentedToken?: number;
  /** The fencing token the answer carried (acquire and renew, when ok). */
  readonly fencingToken?: number;
  /**
   * The TTL asked for; for a renew without one, when ok, the TTL the answer shows it was renewed with
   * (`expiresAt - renewedAt`); undefined when not known.
   */
  readonly ttlSeconds?: number;
  /** `expiresAt` of an ok answer, epoch ms (for reading a violation; the checker does not trust it). */
  readonly expiresAt?: number;
  /** `grantedAt` of an ok acquire's answer, epoch ms by the host's clock (for measures; the checker does not trust it). */
  readonly grantedAt?: number;
  readonly invokedAt: number;
  /** Undefined while the operation is in flight: it counts as indeterminate with no end. */
  readonly completedAt?: number;
  readonly outcome: LeaseOutcome;
  /** The HTTP status; undefined when no answer came. */
  readonly status?: number;
  /** The problem code of a refusal or a 5xx. */
  readonly code?: string;
  /** The tenant an ok answer's lease belongs to: always `tenant`, or tenants met. */
  readonly answeredTenant?: string;
  /** An acquire answered 201 (a new lease) rather than 200 (the lease its idempotency key already names). */
  readonly created?: boolean;
  /** An acquire that waited in the pool's queue: its place in the queue's fair order when it joined (1 = next). */
  readonly queuePosition?: number;
  /** When it joined the queue at that position, epoch ms by the host's clock (the ticket's `requestedAt`). */
  readonly queuedAt?: number;
  /** Why an indeterminate operation has no answer. */
  readonly error?: string;
}

/** What the recorder sends through: one HTTP exchange with a host, as the caller's tenant. Throws when no answer. */
export type LeaseSend = (method: 'POST' | 'DELETE' | 'GET', path: string, body?: Readonly<Record<string, unknown>>) => Promise<{ status: number; json: unknown }>;

/** One JSON exchange with a host as `bearer`: its status and parsed body; throws when the host does not answer. */
export async function sendJson(base: URL, method: string, path: string, bearer: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const response = await fetch(new URL(path, base), {
    method,
    signal: AbortSignal.timeout(10_000),
    headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, json: text ? (JSON.parse(text) as unknown) : undefined };
}

export interface AcquireRequest {
  readonly kind: string;
  readonly ttlSeconds: number;
  readonly holder: string;
  readonly units?: number;
  readonly pool?: string;
  readonly labels?: Readonly<Record<string, string>>;
  readonly idempotencyKey?: string;
}

/** A lease as a holder knows it: enough to renew or release it. */
export interface HeldLease {
  readonly leaseId: string;
  readonly fencingToken: number;
}

/**
 * Records the lease operations one tenant sends through `send`. Each call appends its operation when invoked and
 * completes it when answered, so `operations` also shows what is still in flight. It never throws for a host's
 * answer or silence: the caller reads the returned operation. Histories of several tenants are checked together
 * by concatenating their `operations`.
 *
 * @example
 * const history = new LeaseHistory('team-a', (method, path, body) => send(method, path, tokenA, body));
 * const grant = await history.acquire({ kind: 'sandbox', pool: 'p', holder: 'w1', ttlSeconds: 2 });
 * if (grant.outcome === 'ok') await history.release(heldLease(grant));
 * expect(checkLeaseHistory(history.operations, { poolCapacity: { p: 5 } })).toEqual([]);
 */
export class LeaseHistory {
  readonly operations: LeaseOperation[] = [];

  constructor(
    readonly tenant: string,
    private readonly send: LeaseSend,
    private readonly now: () => number = Date.now,
  ) {}

  acquire(request: AcquireRequest): Promise<LeaseOperation> {
    const body = { units: 1, ...request };
    return this.record(
      { op: 'acquire', kind: request.kind, units: body.units, holder: request.holder, ttlSeconds: request.ttlSeconds, ...optional({ pool: request.pool, idempotencyKey: request.idempotencyKey }) },
      () => this.send('POST', '/runtime-cloud/leases', body),
      (status, answer) => ({ ...leaseFields(answer), created: status === 201 }),
    );
  }

  /**
   * An acquire that may wait `waitSeconds` in the pool's queue: a 202 is followed by long polls of its ticket until it
   * leaves the queue. One operation from the request to the answer that shows the grant (the grant happened inside
   * that window, which is all the checker assumes); a ticket that expired or was canceled is refused.
   */
  acquireWaiting(request: AcquireRequest, waitSeconds: number): Promise<LeaseOperation> {
    // The call answers at once (a 202 carries the position it joined at); each poll holds at most 5 s, well inside `sendJson`'s timeout.
    const body = { units: 1, ...request, wait: { seconds: waitSeconds, holdSeconds: 0 } };
    let queuePosition: number | undefined;
    let queuedAt: number | undefined;
    const exchange = async (): Promise<{ status: number; json: unknown }> => {
      const first = await this.send('POST', '/runtime-cloud/leases', body);
      if (first.status !== 202) return first;
      const ticket = first.json as { requestId: string; position?: number; requestedAt?: string };
      queuePosition = ticket.position;
      queuedAt = ticket.requestedAt === undefined ? undefined : Date.parse(ticket.requestedAt);
      for (;;) {
        const polled = await this.send('GET', `/runtime-cloud/lease-requests/${encodeURIComponent(ticket.requestId)}?waitSeconds=5`);
        if (polled.status !== 200) return polled;
        const view = polled.json as { state?: string; lease?: unknown };
        if (view.state === 'waiting') continue;
        return view.state === 'granted' ? { status: 201, json: view.lease } : { status: 409, json: { code: `QUEUE.${String(view.state).toUpperCase()}` } };
      }
    };
    return this.record(
      { op: 'acquire', kind: request.kind, units: body.units, holder: request.holder, ttlSeconds: request.ttlSeconds, ...optional({ pool: request.pool, idempotencyKey: request.idempotencyKey }) },
      exchange,
      (status, answer) => ({ ...leaseFields(answer), created: status === 201, ...optional({ queuePosition, queuedAt }) }),
    );
  }

  renew(lease: HeldLease, ttlSeconds?: number): Promise<LeaseOperation> {
    const body = { fencingToken: lease.fencingToken, ...optional({ ttlSeconds }) };
    return this.record(
      { op: 'renew', ...this.leaseOf(lease.leaseId), leaseId: lease.leaseId, presentedToken: lease.fencingToken, ...optional({ ttlSeconds }) },
      () => this.send('POST', `/runtime-cloud/leases/${encodeURIComponent(lease.leaseId)}/renew`, body),
      (_status, answer) => {
        const fields = leaseFields(answer);
        const renewedAt = Date.parse(String(answer.renewedAt));
        const shown = fields.expiresAt !== undefined && !Number.isNaN(renewedAt) ? Math.round((fields.expiresAt - renewedAt) / 1000) : undefined;
        // The lease acted on stays the one asked for: an answer naming another shows as its token or tenant.
        return { ...fields, leaseId: lease.leaseId, ...optional({ ttlSeconds: ttlSeconds ?? shown }) };
      },
    );
  }

  release(lease: HeldLease): Promise<LeaseOperation> {
    return this.record(
      { op: 'release', ...this.leaseOf(lease.leaseId), leaseId: lease.leaseId, presentedToken: lease.fencingToken },
      () => this.send('DELETE', `/runtime-cloud/leases/${encodeURIComponent(lease.leaseId)}?fencingToken=${lease.fencingToken}`),
      () => ({}),
    );
  }

  /** What an earlier ok acquire told about the lease, so that renews and releases name its pool, kind and units. */
  private leaseOf(leaseId: string): Partial<LeaseOperation> {
    const grant = this.operations.find((o) => o.op === 'acquire' && o.outcome === 'ok' && o.leaseId === leaseId);
    return grant ? optional({ pool: grant.pool, kind: grant.kind, units: grant.units, holder: grant.holder }) : {};
  }

  private async record(
    request: Omit<LeaseOperation, 'tenant' | 'invokedAt' | 'outcome'>,
    exchange: () => Promise<{ status: number; json: unknown }>,
    onOk: (status: number, answer: Readonly<Record<string, unknown>>) => Partial<LeaseOperation>,
  ): Promise<LeaseOperation> {
    const at = this.operations.length;
    const invoked: LeaseOperation = { ...request, tenant: this.tenant, invokedAt: this.now(), outcome: 'indeterminate' };
    this.operations.push(invoked);
    let completed: LeaseOperation;
    try {
      const { status, json } = await exchange();
      const answer = json !== null && typeof json === 'object' ? (json as Record<string, unknown>) : {};
      const code = typeof answer.code === 'string' ? answer.code : undefined;
      const outcome: LeaseOutcome = status >= 200 && status < 300 ? 'ok' : status >= 400 && status < 500 ? 'refused' : 'indeterminate';
      completed = { ...invoked, completedAt: this.now(), outcome, status, ...optional({ code }), ...(outcome === 'ok' ? onOk(status, answer) : {}) };
    } catch (thrown) {
      completed = { ...invoked, completedAt: this.now(), outcome: 'indeterminate', error: thrown instanceof Error ? thrown.message : String(thrown) };
    }
    this.operations[at] = completed;
    return completed;
  }
}

/** The lease an ok acquire granted, to renew or release it. */
export function heldLease(grant: LeaseOperation): HeldLease {
  if (grant.outcome !== 'ok' || grant.leaseId === undefined || grant.fencingToken === undefined) {
    throw new Error(`not a granted lease: ${describeOperation(grant)}`);
  }
  return { leaseId: grant.leaseId, fencingToken: grant.fencingToken };
}

export interface LeaseLimits {
  /** Units each pool holds at most; a pool not named is not checked for capacity (its fencing tokens still are). */
  readonly poolCapacity: Readonly<Record<string, number>>;
  /** Units a tenant holds at most per kind, across pools. */
  readonly quota?: Readonly<Record<string, Readonly<Record<string, number>>>>;
}

export type LeaseRule = 'capacity' | 'quota' | 'fencing' | 'expired-holder' | 'idempotency' | 'tenant';

export interface LeaseViolation {
  readonly rule: LeaseRule;
  readonly message: string;
}

/**
 * Checks a history (several tenants' operations together) against the limits; answers every violation found, each
 * spelled out with the instant and the operations involved. `clockSkewMs` is how far the hosts' clocks may be from
 * the test process's: expiry is taken that much earlier where that is the cautious side, and later where that is.
 */
export function checkLeaseHistory(operations: readonly LeaseOperation[], limits: LeaseLimits, clockSkewMs = 0): LeaseViolation[] {
  const leases = leasesOf(operations);
  return [
    ...operations
      .filter((o) => o.answeredTenant !== undefined && o.answeredTenant !== o.tenant)
      .map((o) => ({ rule: 'tenant' as const, message: `tenant ${o.tenant} was answered with tenant ${String(o.answeredTenant)}'s lease: ${describeOperation(o)}` })),
    ...idempotencyViolations(operations, leases),
    ...holdViolations(leases, limits, clockSkewMs),
    ...fencingViolations(leases),
    ...expiredHolderViolations(leases, clockSkewMs),
  ];
}

/** Operations per op and outcome, e.g. `acquire ok×40 refused×12 indeterminate×1; renew …`, for a test's log line. */
export function historyCounts(operations: readonly LeaseOperation[]): string {
  const counts = new Map<string, Map<LeaseOutcome, number>>();
  for (const o of operations) {
    const byOutcome = counts.get(o.op) ?? new Map<LeaseOutcome, number>();
    byOutcome.set(o.outcome, (byOutcome.get(o.outcome) ?? 0) + 1);
    counts.set(o.op, byOutcome);
  }
  return [...counts].map(([op, byOutcome]) => `${op} ${[...byOutcome].map(([outcome, n]) => `${outcome}×${n}`).join(' ')}`).join('; ');
}

/**
 * The most units of `pool` certainly held at one instant, the first instant that many were, and the leases held then
 * (none: `units` 0, `at` NaN). Shows how close a run came to the capacity, and where an over-grant would be.
 */
export function peakHeld(operations: readonly LeaseOperation[], pool: string, clockSkewMs = 0): { units: number; at: number; leaseIds: string[] } {
  let peak = { units: 0, at: Number.NaN, leaseIds: [] as string[] };
  walkHeld(spansOf(leasesOf(operations), clockSkewMs).filter((s) => s.lease.pool === pool), (units, at, held) => {
    if (units > peak.units) peak = { units, at, leaseIds: held().map((s) => s.lease.leaseId) };
  });
  return peak;
}

export function describeOperation(o: LeaseOperation): string {
  const lease = o.leaseId !== undefined ? ` lease ${o.leaseId}` : '';
  const presented = o.presentedToken !== undefined ? ` presenting token ${o.presentedToken}` : '';
  const token = o.fencingToken !== undefined && o.fencingToken !== o.presentedToken ? `${presented} answered with token ${o.fencingToken}` : presented || (o.fencingToken !== undefined ? ` token ${o.fencingToken}` : '');
  const answer = o.status !== undefined ? `${o.status}${o.code ? ` ${o.code}` : ''}` : (o.error ?? 'no answer yet');
  const window = `[${instant(o.invokedAt)} .. ${o.completedAt === undefined ? 'in flight' : instant(o.completedAt)}]`;
  return `${o.op} by ${o.tenant}/${o.holder ?? '?'} (pool ${o.pool ?? '?'}, ${o.units ?? '?'} ${o.kind ?? '?'})${lease}${token} ${window} → ${o.outcome} (${answer})`;
}

// ---- the checker ----

/** A lease as the history shows it: the ok acquires that name it, and the renews and releases that act on it. */
interface HistoryLease {
  readonly tenant: string;
  readonly leaseId: string;
  readonly pool: string;
  readonly kind: string;
  readonly units: number;
  readonly holder: string;
  readonly fencingToken: number;
  /** The grant happened inside [grantFrom, grantBy]: no earlier than any request for it, no later than its first answer. */
  readonly grantFrom: number;
  readonly grantBy: number;
  /** The TTL it was granted with, at least and at most (a replay may ask for another TTL and get the same lease). */
  readonly ttlLeast: number;
  readonly ttlMost: number;
  readonly acquires: readonly LeaseOperation[];
  readonly later: readonly LeaseOperation[];
}

const completion = (o: LeaseOperation) => o.completedAt ?? Number.POSITIVE_INFINITY;
const tenantKey = (tenant: string, name: string) => `${tenant}\u0000${name}`;

function leasesOf(operations: readonly LeaseOperation[]): HistoryLease[] {
  const byKey = new Map<string, LeaseOperation[]>();
  for (const o of operations) {
    if (o.op === 'acquire' && o.idempotencyKey !== undefined) push(byKey, tenantKey(o.tenant, o.idempotencyKey), o);
  }
  const grants = new Map<string, LeaseOperation[]>();
  const later = new Map<string, LeaseOperation[]>();
  for (const o of operations) {
    if (o.leaseId === undefined) continue;
    if (o.op === 'acquire') {
      if (o.outcome === 'ok') push(grants, tenantKey(o.tenant, o.leaseId), o);
    } else push(later, tenantKey(o.tenant, o.leaseId), o);
  }
  return [...grants].map(([key, answered]) => {
    const first = answered[0]!;
    // Requests that may have made the grant: the answered ones, and any other with the same idempotency key.
    const keyed = first.idempotencyKey === undefined ? [] : (byKey.get(tenantKey(first.tenant, first.idempotencyKey)) ?? []);
    const candidates = [...new Set([...answered, ...keyed.filter((o) => o.outcome !== 'refused' && (o.outcome !== 'ok' || o.leaseId === first.leaseId))])];
    const creator = answered.find((o) => o.created === true);
    const ttls = (creator ? [creator] : candidates).map((o) => o.ttlSeconds ?? 0);
    return {
      tenant: first.tenant,
      leaseId: first.leaseId!,
      pool: first.pool ?? '?',
      kind: first.kind ?? '?',
      units: first.units ?? 1,
      holder: first.holder ?? '?',
      fencingToken: first.fencingToken ?? Number.NaN,
      grantFrom: Math.min(...candidates.map((o) => o.invokedAt)),
      grantBy: Math.min(...answered.map(completion)),
      ttlLeast: Math.min(...ttls),
      ttlMost: Math.max(...ttls),
      acquires: answered,
      later: [...(later.get(key) ?? [])].sort((a, b) => a.invokedAt - b.invokedAt),
    };
  });
}

/** One idempotency key (per tenant) names one lease, and every answer for a lease tells the same lease. */
function idempotencyViolations(operations: readonly LeaseOperation[], leases: readonly HistoryLease[]): LeaseViolation[] {
  const violations: LeaseViolation[] = [];
  const named = new Map<string, Set<string>>();
  for (const o of operations) {
    if (o.op === 'acquire' && o.outcome === 'ok' && o.idempotencyKey !== undefined && o.leaseId !== undefined) {
      const key = tenantKey(o.tenant, o.idempotencyKey);
      named.set(key, (named.get(key) ?? new Set()).add(o.leaseId));
    }
  }
  for (const [key, ids] of named) {
    if (ids.size > 1) violations.push({ rule: 'idempotency', message: `idempotency key ${key.replace('\u0000', '/')} was answered with ${ids.size} leases: ${[...ids].join(', ')}` });
  }
  for (const lease of leases) {
    const created = lease.acquires.filter((o) => o.created === true);
    if (created.length > 1) violations.push({ rule: 'idempotency', message: `lease ${lease.leaseId} was created (201) ${created.length} times: ${created.map(describeOperation).join('; ')}` });
    for (const o of lease.acquires) {
      if (o.fencingToken !== lease.fencingToken || o.pool !== lease.acquires[0]!.pool || o.units !== lease.acquires[0]!.units) {
        violations.push({ rule: 'idempotency', message: `lease ${lease.leaseId} was answered as another lease: ${describeOperation(o)} against ${describeOperation(lease.acquires[0]!)}` });
      }
    }
  }
  return violations;
}

/**
 * When the lease is certainly held: from its grant's first answer until the earliest of a release that may have
 * taken effect (invoked, and not refused but as gone) and its expiry reckoned from the earliest moments it could have
 * been granted or renewed (a request's invocation + TTL; only ok renews extend it). Empty when that ends first.
 */
function certainlyHeld(lease: HistoryLease, skewMs: number): { from: number; until: number } {
  let expiry = lease.grantFrom + lease.ttlLeast * 1000;
  for (const o of lease.later) {
    if (o.op === 'renew' && o.outcome === 'ok') expiry = Math.max(expiry, o.invokedAt + (o.ttlSeconds ?? lease.ttlLeast) * 1000);
  }
  const release = lease.later.find((o) => o.op === 'release' && (o.outcome !== 'refused' || o.status === 410));
  return { from: lease.grantBy, until: Math.min(expiry - skewMs, release?.invokedAt ?? Number.POSITIVE_INFINITY) };
}

/**
 * The latest the lease can have expired as far as `o` could know: from the latest moments its grant, and every
 * renew other than `o` invoked before `o` was answered, could have taken effect (answer + the longest TTL it may have).
 */
function latestExpiry(lease: HistoryLease, o: LeaseOperation, skewMs: number): number {
  const ttlMost = Math.max(lease.ttlMost, ...lease.later.map((r) => (r.op === 'renew' ? (r.ttlSeconds ?? 0) : 0)));
  let expiry = lease.grantBy + lease.ttlMost * 1000;
  for (const r of lease.later) {
    if (r !== o && r.op === 'renew' && r.outcome !== 'refused' && r.invokedAt < completion(o)) {
      expiry = Math.max(expiry, completion(r) + (r.ttlSeconds ?? ttlMost) * 1000);
    }
  }
  return expiry + skewMs;
}

interface Span {
  readonly lease: HistoryLease;
  readonly from: number;
  readonly until: number;
}

function spansOf(leases: readonly HistoryLease[], skewMs: number): Span[] {
  return leases.map((lease) => ({ lease, ...certainlyHeld(lease, skewMs) })).filter((s) => s.until > s.from);
}

/** At no instant do the certainly held leases of a pool exceed its capacity, nor a tenant's of a kind its quota. */
function holdViolations(leases: readonly HistoryLease[], limits: LeaseLimits, skewMs: number): LeaseViolation[] {
  const spans = spansOf(leases, skewMs);
  const violations: LeaseViolation[] = [];
  for (const [pool, poolSpans] of groupBy(spans, (s) => s.lease.pool)) {
    const capacity = limits.poolCapacity[pool];
    if (capacity !== undefined) violations.push(...overLimit(poolSpans, capacity, 'capacity', `pool ${pool}`));
  }
  for (const tenantSpans of groupBy(spans, (s) => tenantKey(s.lease.tenant, s.lease.kind)).values()) {
    const { tenant, kind } = tenantSpans[0]!.lease;
    const quota = limits.quota?.[tenant]?.[kind];
    if (quota !== undefined) violations.push(...overLimit(tenantSpans, quota, 'quota', `tenant ${tenant} (${kind})`));
  }
  return violations;
}

/** How many of the leases held at an over-grant its message names. */
const LISTED = 10;

/** Reports each stretch where the units held exceed `limit`, at its first instant, with the leases held then. */
function overLimit(spans: readonly Span[], limit: number, rule: 'capacity' | 'quota', what: string): LeaseViolation[] {
  const violations: LeaseViolation[] = [];
  let over = false;
  walkHeld(spans, (units, at, held) => {
    if (units > limit && !over) {
      const spans = held();
      const which = spans.slice(0, LISTED).map((s) => `${s.lease.leaseId} (${s.lease.tenant}/${s.lease.holder}, ${s.lease.units} units, token ${s.lease.fencingToken}, certainly held ${instant(s.from)} .. ${instant(s.until)})`);
      const more = spans.length > LISTED ? `; and ${spans.length - LISTED} more` : '';
      violations.push({ rule, message: `${what}: ${units} units certainly held at ${instant(at)}, more than its ${rule} of ${limit}: ${which.join('; ')}${more}` });
    }
    over = units > limit;
  });
  return violations;
}

/**
 * Sweeps the spans in time order and tells after each start or end the units held, the instant and (when asked) the
 * spans held.
 * Spans are half-open [from, until): at one instant ends come before starts, so every sum told is one that held.
 */
function walkHeld(spans: readonly Span[], visit: (units: number, at: number, held: () => Span[]) => void): void {
  const edges = spans.flatMap((s) => [
    { at: s.from, delta: s.lease.units, span: s },
    { at: s.until, delta: -s.lease.units, span: s },
  ]);
  edges.sort((a, b) => a.at - b.at || a.delta - b.delta);
  const held = new Set<Span>();
  let units = 0;
  for (const edge of edges) {
    units += edge.delta;
    if (edge.delta > 0) held.add(edge.span);
    else held.delete(edge.span);
    visit(units, edge.at, () => [...held]);
  }
}

/** Per pool: every lease's fencing token distinct, and larger than that of every lease answered before it was asked. */
function fencingViolations(leases: readonly HistoryLease[]): LeaseViolation[] {
  const violations: LeaseViolation[] = [];
  for (const [pool, poolLeases] of groupBy(leases, (l) => l.pool)) {
    const byToken = new Map<number, HistoryLease>();
    for (const lease of poolLeases) {
      const other = byToken.get(lease.fencingToken);
      if (other) violations.push({ rule: 'fencing', message: `pool ${pool}: leases ${other.leaseId} and ${lease.leaseId} share fencing token ${lease.fencingToken}` });
      else byToken.set(lease.fencingToken, lease);
    }
    const byAnswer = [...poolLeases].sort((a, b) => a.grantBy - b.grantBy);
    let next = 0;
    let highest: HistoryLease | undefined;
    for (const b of [...poolLeases].sort((x, y) => x.grantFrom - y.grantFrom)) {
      while (next < byAnswer.length && byAnswer[next]!.grantBy < b.grantFrom) {
        const a = byAnswer[next++]!;
        if (!highest || a.fencingToken > highest.fencingToken) highest = a;
      }
      if (highest && !(highest.fencingToken < b.fencingToken)) {
        violations.push({
          rule: 'fencing',
          message:
            `pool ${pool}: lease ${b.leaseId} (${b.tenant}/${b.holder}) got fencing token ${b.fencingToken}, asked for at ${instant(b.grantFrom)}, ` +
            `after lease ${highest.leaseId} (${highest.tenant}/${highest.holder}) had been granted token ${highest.fencingToken} by ${instant(highest.grantBy)}`,
        });
      }
    }
  }
  return violations;
}

/**
 * A renew or release presenting another fencing token than the lease's is refused; one invoked after the latest its
 * lease can have expired is refused too. A release answered ok then is
 * allowed only as a repeat: when an earlier release that may have taken effect was invoked while the lease could
 * still have been held (the lease is released, and releasing it again answers ok).
 */
function expiredHolderViolations(leases: readonly HistoryLease[], skewMs: number): LeaseViolation[] {
  const violations: LeaseViolation[] = [];
  for (const lease of leases) {
    const mayHaveReleased = (o: LeaseOperation) =>
      lease.later.some((r) => r !== o && r.op === 'release' && r.outcome !== 'refused' && r.invokedAt < o.invokedAt && r.invokedAt <= latestExpiry(lease, r, skewMs));
    for (const o of lease.later) {
      if (o.outcome !== 'ok') continue;
      if (o.presentedToken !== lease.fencingToken || (o.fencingToken !== undefined && o.fencingToken !== lease.fencingToken)) {
        violations.push({ rule: 'fencing', message: `lease ${lease.leaseId} holds fencing token ${lease.fencingToken}, yet ${describeOperation(o)}` });
        continue;
      }
      const expiry = latestExpiry(lease, o, skewMs);
      if (o.invokedAt > expiry && !(o.op === 'release' && mayHaveReleased(o))) {
        violations.push({ rule: 'expired-holder', message: `lease ${lease.leaseId} (${lease.tenant}/${lease.holder}, pool ${lease.pool}) expired by ${instant(expiry)} at the latest, yet ${describeOperation(o)}` });
      }
    }
  }
  return violations;
}

// ---- small helpers ----

function instant(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : 'never';
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) push(groups, key(item), item);
  return groups;
}

/** The entries whose value is defined (for optional fields under exactOptionalPropertyTypes). */
function optional<T extends Record<string, unknown>>(fields: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> };
}

/** The fields of a lease view answer the history keeps. */
function leaseFields(answer: Readonly<Record<string, unknown>>): Partial<LeaseOperation> {
  const expiresAt = typeof answer.expiresAt === 'string' ? Date.parse(answer.expiresAt) : undefined;
  const grantedAt = typeof answer.grantedAt === 'string' ? Date.parse(answer.grantedAt) : undefined;
  return optional({
    grantedAt: grantedAt !== undefined && !Number.isNaN(grantedAt) ? grantedAt : undefined,
    leaseId: typeof answer.leaseId === 'string' ? answer.leaseId : undefined,
    answeredTenant: typeof answer.tenant === 'string' ? answer.tenant : undefined,
    pool: typeof answer.pool === 'string' ? answer.pool : undefined,
    kind: typeof answer.kind === 'string' ? answer.kind : undefined,
    units: typeof answer.units === 'number' ? answer.units : undefined,
    holder: typeof answer.holder === 'string' ? answer.holder : undefined,
    fencingToken: typeof answer.fencingToken === 'number' ? answer.fencingToken : undefined,
    expiresAt: expiresAt !== undefined && !Number.isNaN(expiresAt) ? expiresAt : undefined,
  });
}
