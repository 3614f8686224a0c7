import type { Ticket } from './lease-queue';

/**
 * A host's callers waiting on tickets (a `POST /leases` with `wait`, a long poll of `GET /lease-requests/{id}`), in
 * memory. A grant made on this host settles its waiters at once; one made by another host on the same database is
 * seen by a poll of this host's waiting tickets every `pollMs` (one query for all of them, only while some wait).
 * Every `admitMs` the host also runs a pass over the pools its callers wait on: whatever freed units without
 * passing them on (a host that stopped between a release and its pass) is caught up with.
 */
export interface WaiterHandlers {
  /** The tickets of these ids that are no longer waiting. */
  done(ids: readonly string[]): Promise<Ticket[]>;
  /** A pass over a pool's queue (see lease-queue.service.ts `admit`). */
  admit(pool: string): Promise<void>;
}

/** How often a host asks whether its waiting tickets were granted elsewhere. */
const POLL_MS = 20;
/** How often a host runs a pass over the pools its callers wait on, in case a pass was missed. */
const ADMIT_MS = 250;
/** How long "this pool has no waiting ticket" is believed without asking again (see `knownEmpty`). */
const EMPTY_FOR_MS = 25;

interface Waiter {
  readonly pool: string;
  readonly settle: (ticket: Ticket | undefined) => void;
}

export class TicketWaiters {
  readonly #waiters = new Map<string, Set<Waiter>>();
  readonly #emptyUntil = new Map<string, number>();
  readonly #asking = new Map<string, Promise<boolean>>();
  readonly #passes = new Map<string, { again: boolean; done: Promise<void> }>();
  #handlers: WaiterHandlers | undefined;
  #timer: NodeJS.Timeout | undefined;
  #lastAdmit = 0;

  /** Connects the waiters to the queue's use cases (once, when the capacity service is built). */
  serve(handlers: WaiterHandlers): void {
    this.#handlers = handlers;
  }

  /** Waits until the ticket leaves the queue (the ticket as it is then) or `ms` pass (undefined). */
  wait(ticket: Pick<Ticket, 'id' | 'pool'>, ms: number): Promise<Ticket | undefined> {
    if (ms <= 0) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const waiters = this.#waiters.get(ticket.id) ?? new Set<Waiter>();
      const timeout = setTimeout(() => done(undefined), ms);
      const waiter: Waiter = { pool: ticket.pool, settle: (t) => done(t) };
      const done = (result: Ticket | undefined): void => {
        clearTimeout(timeout);
        waiters.delete(waiter);
        if (waiters.size === 0) this.#waiters.delete(ticket.id);
        resolve(result);
      };
      waiters.add(waiter);
      this.#waiters.set(ticket.id, waiters);
      this.#schedule();
    });
  }

  /** Answers this host's waiters of tickets that left the queue. */
  settled(tickets: readonly Ticket[]): void {
    for (const ticket of tickets) for (const waiter of [...(this.#waiters.get(ticket.id) ?? [])]) waiter.settle(ticket);
  }

  /**
   * Whether the pool has a waiting ticket, as `ask` tells from the store. "None", once heard, is believed for
   * `EMPTY_FOR_MS` without asking again (a ticket that joins on this host ends the belief at once; one that joins on
   * another host is seen within that time), and callers that ask meanwhile share one question, answered in the
   * order they asked.
   */
  hasWaiting(pool: string, now: number, ask: () => Promise<boolean>): Promise<boolean> {
    if ((this.#emptyUntil.get(pool) ?? 0) > now) return Promise.resolve(false);
    const asking = this.#asking.get(pool);
    if (asking) return asking;
    const answer = ask()
      .then((waiting) => {
        this.sawQueue(pool, waiting, now);
        return waiting;
      })
      .finally(() => this.#asking.delete(pool));
    this.#asking.set(pool, answer);
    return answer;
  }

  /** Records what the store said about a pool's queue. */
  sawQueue(pool: string, waiting: boolean, now: number): void {
    if (waiting) this.#emptyUntil.delete(pool);
    else this.#emptyUntil.set(pool, now + EMPTY_FOR_MS);
  }

  /**
   * Runs passes over a pool's queue one at a time on this host: asked for while one runs, it runs once more after it
   * (what freed units meanwhile is seen), and the callers wait for that one too.
   */
  passOver(pool: string, pass: () => Promise<void>): Promise<void> {
    const running = this.#passes.get(pool);
    if (running) {
      running.again = true;
      return running.done;
    }
    const entry = { again: true, done: Promise.resolve() };
    entry.done = (async () => {
      try {
        while (entry.again) {
          entry.again = false;
          await pass();
        }
      } finally {
        this.#passes.delete(pool);
      }
    })();
    this.#passes.set(pool, entry);
    return entry.done;
  }

  /** Stops polling (the waits still end at their time). */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(): void {
    if (this.#timer || this.#waiters.size === 0 || !this.#handlers) return;
    this.#timer = setTimeout(() => void this.#poll(), POLL_MS);
    this.#timer.unref();
  }

  async #poll(): Promise<void> {
    const handlers = this.#handlers as WaiterHandlers;
    try {
      this.settled(await handlers.done([...this.#waiters.keys()]));
      if (Date.now() - this.#lastAdmit >= ADMIT_MS) {
        this.#lastAdmit = Date.now();
        const pools = new Set([...this.#waiters.values()].flatMap((set) => [...set].map((w) => w.pool)));
        for (const pool of pools) await handlers.admit(pool);
      }
    } catch {
      // The store is unavailable for a moment: the waits end at their time, and the next poll asks again.
    } finally {
      this.#timer = undefined;
      this.#schedule();
    }
  }
}
