export interface BatchLimits {
  /** The most calls one batch takes. */
  readonly maxBatch: number;
  /** The most batches of one key that run at once. */
  readonly maxInFlight: number;
  /**
   * Where a batch finishes within the turn of the event loop it started in (SQLite runs on the calling thread),
   * calls made by different requests would never meet: with `gather`, a call that finds its key idle may start its
   * batch only at the end of the turn (setImmediate), so that the calls made by the rest of this turn's work join
   * it. It does so while such batches find company; after a few in a row that found none, calls go at once again
   * until `probeEveryMs` has passed, so that one caller at a time waits for a turn only that rarely.
   */
  readonly gather?: { readonly probeEveryMs: number };
}

/** Gathered batches in a row without company after which calls go at once again (a lull in concurrent load). */
const GATHER_ALONE_LIMIT = 4;

/**
 * Runs concurrent calls that share a key as one batch (one statement or transaction for many requests, where its
 * fixed cost, a round trip, executor start, a commit, is most of its cost). A call goes at once while fewer than
 * `maxInFlight` batches of its key run (with `gather`, possibly at the end of the turn); otherwise it
 * waits, and the calls that waited go together as the next batch (at most `maxBatch`) when one finishes. Each call
 * gets its own result. A batch runs all or nothing (one transaction or statement), so when one of several fails,
 * each call runs again alone: one call's failure (its key already taken) is its own, not its neighbours'.
 */
export class Batcher<I, O> {
  readonly #lanes = new Map<string, Lane<I, O>>();
  /** Whether batches start at the end of a turn; when not, the time to try again. */
  #gathering = true;
  #probeAt = 0;
  /** Batches in a row that started at the end of a turn and found no company. */
  #alone = 0;

  constructor(
    private readonly run: (items: readonly I[]) => Promise<readonly O[]>,
    private readonly limits: BatchLimits,
  ) {}

  submit(key: string, item: I): Promise<O> {
    let lane = this.#lanes.get(key);
    if (!lane) this.#lanes.set(key, (lane = { waiting: [], inFlight: 0, gathering: false }));
    const result = new Promise<O>((resolve, reject) => lane.waiting.push({ item, resolve, reject }));
    if (lane.inFlight < this.limits.maxInFlight && !lane.gathering) {
      if (this.#gatherNow()) this.#startAtEndOfTurn(key, lane);
      else this.#start(key, lane);
    }
    return result;
  }

  #gatherNow(): boolean {
    return this.limits.gather !== undefined && (this.#gathering || performance.now() >= this.#probeAt);
  }

  #startAtEndOfTurn(key: string, lane: Lane<I, O>): void {
    lane.gathering = true;
    setImmediate(() => {
      lane.gathering = false;
      // Company keeps gathering on (or turns it back on, after a probe); a probe without company, or a run of lone
      // batches, turns it off until the next probe.
      this.#alone = lane.waiting.length > 1 ? 0 : this.#alone + 1;
      this.#gathering = this.#alone === 0 || (this.#gathering && this.#alone < GATHER_ALONE_LIMIT);
      if (!this.#gathering) {
        this.#alone = 0;
        this.#probeAt = performance.now() + (this.limits.gather?.probeEveryMs ?? 0);
      }
      this.#next(key, lane);
    });
  }

  #start(key: string, lane: Lane<I, O>): void {
    const batch = lane.waiting.splice(0, this.limits.maxBatch);
    lane.inFlight++;
    void this.#runBatch(batch).finally(() => {
      lane.inFlight--;
      this.#next(key, lane);
    });
  }

  /** Starts the calls that waited, if there is room; forgets an idle key. */
  #next(key: string, lane: Lane<I, O>): void {
    if (lane.waiting.length > 0) {
      if (lane.inFlight < this.limits.maxInFlight) this.#start(key, lane);
    } else if (lane.inFlight === 0 && !lane.gathering) {
      this.#lanes.delete(key);
    }
  }

  async #runBatch(batch: readonly Waiting<I, O>[]): Promise<void> {
    try {
      const results = await this.run(batch.map((w) => w.item));
      batch.forEach((w, i) => w.resolve(results[i] as O));
    } catch (error) {
      if (batch.length === 1) (batch[0] as Waiting<I, O>).reject(error);
      else for (const w of batch) await this.#runBatch([w]);
    }
  }
}

interface Waiting<I, O> {
  readonly item: I;
  resolve(value: O): void;
  reject(error: unknown): void;
}

interface Lane<I, O> {
  readonly waiting: Waiting<I, O>[];
  inFlight: number;
  /** A start is scheduled for the end of this turn of the event loop. */
  gathering: boolean;
}
