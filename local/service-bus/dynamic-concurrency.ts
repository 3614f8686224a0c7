import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/**
 * Dynamic concurrency, as the Functions host applies it to Service Bus triggers when host.json sets
 * `concurrency.dynamicConcurrencyEnabled`: each function starts at one message at a time and goes up one at a
 * time while the host is healthy and the function uses all it has; while the host is overloaded, no new message is
 * fetched and the level goes down. Messages then wait in the queue, where any other host can take them, instead of
 * being taken in by a host that cannot run them yet: a burst of promotions no longer makes every run slower.
 *
 * The Functions host watches its process's CPU; the local host, one Node process doing everything on one thread,
 * watches the busy share of its event loop (event loop utilization), the same signal for a Node worker.
 */
export interface DynamicConcurrencyOptions {
  /** Busy share of the event loop (0..1) from which the host counts as overloaded. Example: `0.8`. */
  readonly overloadedAbove?: number;
  /**
   * The shortest span over which the busy share is measured, ms: short, so intake resumes as soon as a busy spell
   * ends (on the provisioning bench, 50 ms windows doubled the loaded overhead of 20 ms ones). Example: `20`.
   */
  readonly windowMs?: number;
  /**
   * A function that fetched nothing for this long fetches one message even while the host is overloaded, so load
   * from elsewhere never starves a queue. Example: `1000`.
   */
  readonly starvationMs?: number;
}

const DEFAULTS = { overloadedAbove: 0.8, windowMs: 20, starvationMs: 1000 } as const;

/**
 * The event loop's busy share, measured when asked over the time since the last measurement once that is at least
 * one window long (so a busy spell is seen within a window of its start, and ends being seen as soon as it ends).
 */
export class EventLoopHealth {
  readonly #options: Required<DynamicConcurrencyOptions>;
  readonly #now: () => number;
  #last: EventLoopUtilization = performance.eventLoopUtilization();
  #lastAt: number;
  #busyShare = 0;

  constructor(options: DynamicConcurrencyOptions = {}, now: () => number = () => performance.now()) {
    this.#options = { ...DEFAULTS, ...options };
    this.#now = now;
    this.#lastAt = now();
  }

  get options(): Required<DynamicConcurrencyOptions> {
    return this.#options;
  }

  /** Whether the event loop was busy above the threshold over the last measured window. */
  overloaded(): boolean {
    const at = this.#now();
    if (at - this.#lastAt >= this.#options.windowMs) {
      const current = performance.eventLoopUtilization();
      this.#busyShare = performance.eventLoopUtilization(current, this.#last).utilization;
      this.#last = current;
      this.#lastAt = at;
    }
    return this.#busyShare > this.#options.overloadedAbove;
  }
}

/** One function's concurrency level: how many of its messages may be in flight now. */
export class ConcurrencyLevel {
  readonly #health: EventLoopHealth;
  readonly #maximum: number;
  readonly #now: () => number;
  #level = 1;
  #usedAll = false;
  #lastFetchAt: number;

  constructor(health: EventLoopHealth, maximum: number, now: () => number = () => performance.now()) {
    this.#health = health;
    this.#maximum = maximum;
    this.#now = now;
    this.#lastFetchAt = now();
  }

  get level(): number {
    return this.#level;
  }

  /** How soon to ask again after fetching nothing because of the level: the health's next measurement. */
  get retryMs(): number {
    return this.#health.options.windowMs;
  }

  /**
   * How many messages to fetch now, given how many are in flight. Overloaded: none (the level goes down), unless
   * the function has fetched nothing for the starvation period and has nothing in flight. Healthy after the
   * function used every slot it had: the level goes up one.
   */
  fetchCount(inFlight: number): number {
    if (this.#health.overloaded()) {
      this.#level = Math.max(1, this.#level - 1);
      this.#usedAll = false;
      const starving = inFlight === 0 && this.#now() - this.#lastFetchAt >= this.#health.options.starvationMs;
      return starving ? 1 : 0;
    }
    if (this.#usedAll) this.#level = Math.min(this.#maximum, this.#level + 1);
    this.#usedAll = false;
    return Math.max(0, this.#level - inFlight);
  }

  /** Records a fetch of `count` messages with `inFlight` already running. */
  fetched(count: number, inFlight: number): void {
    if (count === 0) return;
    this.#lastFetchAt = this.#now();
    if (inFlight + count >= this.#level) this.#usedAll = true;
  }
}
