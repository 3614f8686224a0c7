/**
 * Runs concurrent calls that share a key as one batch (one statement for many requests, where the statement's
 * fixed cost, a round trip, executor start and a commit, is most of its cost). A call goes at once while fewer than
 * `maxInFlight` batches of its key run; otherwise it waits, and the calls that waited go together as the next batch
 * (at most `maxBatch`) when one finishes. A lone call therefore never waits for company. Each call gets its own
 * result; when a batch fails, every call in it gets the error.
 */
export class Batcher<I, O> {
  readonly #lanes = new Map<string, Lane<I, O>>();

  constructor(
    private readonly run: (items: readonly I[]) => Promise<readonly O[]>,
    private readonly limits: { readonly maxBatch: number; readonly maxInFlight: number },
  ) {}

  submit(key: string, item: I): Promise<O> {
    let lane = this.#lanes.get(key);
    if (!lane) this.#lanes.set(key, (lane = { waiting: [], inFlight: 0 }));
    const result = new Promise<O>((resolve, reject) => lane.waiting.push({ item, resolve, reject }));
    if (lane.inFlight < this.limits.maxInFlight) this.#start(key, lane);
    return result;
  }

  #start(key: string, lane: Lane<I, O>): void {
    const batch = lane.waiting.splice(0, this.limits.maxBatch);
    lane.inFlight++;
    void this.#runBatch(batch).finally(() => {
      lane.inFlight--;
      if (lane.waiting.length > 0) this.#start(key, lane);
      else if (lane.inFlight === 0) this.#lanes.delete(key);
    });
  }

  async #runBatch(batch: readonly Waiting<I, O>[]): Promise<void> {
    try {
      const results = await this.run(batch.map((w) => w.item));
      batch.forEach((w, i) => w.resolve(results[i] as O));
    } catch (error) {
      for (const w of batch) w.reject(error);
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
}
