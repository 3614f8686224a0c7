import { describe, expect, it } from 'vitest';
import { Batcher } from '../../shared/platform/sql/batcher';

/** A batch runner whose batches finish only when the test says so; it records what each batch held. */
function heldBatches() {
  const batches: number[][] = [];
  const finish: (() => void)[] = [];
  const run = async (items: readonly number[]) => {
    batches.push([...items]);
    await new Promise<void>((resolve) => finish.push(resolve));
    if (items.includes(-1)) throw new Error('batch failed');
    return items.map((i) => i * 10);
  };
  return { batches, finishNext: () => finish.shift()?.(), run };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('Batcher', () => {
  it('when a call arrives alone, then it runs at once, alone', async () => {
    const { batches, finishNext, run } = heldBatches();
    const batcher = new Batcher(run, { maxBatch: 8, maxInFlight: 1 });
    const result = batcher.submit('k', 1);
    expect(batches).toEqual([[1]]);
    finishNext();
    await expect(result).resolves.toBe(10);
  });

  it('when calls arrive while a batch of their key runs, then they go together next, at most maxBatch at a time, each with its own result', async () => {
    const { batches, finishNext, run } = heldBatches();
    const batcher = new Batcher(run, { maxBatch: 3, maxInFlight: 1 });
    const results = [1, 2, 3, 4, 5].map((i) => batcher.submit('k', i));
    expect(batches).toEqual([[1]]);
    finishNext();
    await settle();
    expect(batches).toEqual([[1], [2, 3, 4]]);
    finishNext();
    await settle();
    expect(batches).toEqual([[1], [2, 3, 4], [5]]);
    finishNext();
    await expect(Promise.all(results)).resolves.toEqual([10, 20, 30, 40, 50]);
  });

  it('when keys differ or fewer than maxInFlight batches run, then calls do not wait', async () => {
    const { batches, finishNext, run } = heldBatches();
    const batcher = new Batcher(run, { maxBatch: 8, maxInFlight: 2 });
    const results = [batcher.submit('a', 1), batcher.submit('a', 2), batcher.submit('b', 3), batcher.submit('a', 4)];
    expect(batches).toEqual([[1], [2], [3]]);
    for (let i = 0; i < 4; i++) {
      finishNext();
      await settle();
    }
    expect(batches).toEqual([[1], [2], [3], [4]]);
    await expect(Promise.all(results)).resolves.toEqual([10, 20, 30, 40]);
  });

  it('when a batch of several fails, then each call runs again alone: only the failing call gets the error, and the next batch still runs', async () => {
    const { batches, finishNext, run } = heldBatches();
    const batcher = new Batcher(run, { maxBatch: 8, maxInFlight: 1 });
    const calls = Promise.allSettled([batcher.submit('k', 1), batcher.submit('k', -1), batcher.submit('k', 2)]);
    finishNext();
    await settle();
    const after = batcher.submit('k', 3);
    for (let i = 0; i < 3; i++) {
      finishNext();
      await settle();
    }
    const [first, failing, neighbour] = await calls;
    expect(first).toEqual({ status: 'fulfilled', value: 10 });
    expect(failing).toMatchObject({ status: 'rejected', reason: new Error('batch failed') });
    expect(neighbour).toEqual({ status: 'fulfilled', value: 20 });
    expect(batches).toEqual([[1], [-1, 2], [-1], [2], [3]]);
    finishNext();
    await expect(after).resolves.toBe(30);
  });
});

describe('Batcher that gathers each turn of the event loop', () => {
  const recording = () => {
    const batches: number[][] = [];
    const run = (items: readonly number[]) => {
      batches.push([...items]);
      return Promise.resolve(items.map((i) => i * 10));
    };
    return { batches, run };
  };

  it('when calls are made in one turn, then they go as one batch at its end', async () => {
    const { batches, run } = recording();
    const batcher = new Batcher(run, { maxBatch: 8, maxInFlight: 1, gather: { probeEveryMs: 60_000 } });
    const results = [1, 2, 3].map((i) => batcher.submit('k', i));
    expect(batches).toEqual([]);
    await expect(Promise.all(results)).resolves.toEqual([10, 20, 30]);
    expect(batches).toEqual([[1, 2, 3]]);
  });

  it('when gathered batches find no company four times in a row, then calls go at once until probeEveryMs has passed', async () => {
    const { batches, run } = recording();
    const batcher = new Batcher(run, { maxBatch: 8, maxInFlight: 1, gather: { probeEveryMs: 60_000 } });
    /** Whether the call settles before the current turn of the event loop ends. */
    const withinTurn = async (i: number) => {
      let turnEnded = false;
      setImmediate(() => (turnEnded = true));
      await batcher.submit('k', i);
      return !turnEnded;
    };
    const settled: boolean[] = [];
    for (let i = 1; i <= 6; i++) settled.push(await withinTurn(i));
    expect(settled).toEqual([false, false, false, false, true, true]);
    expect(batches).toEqual([[1], [2], [3], [4], [5], [6]]);
  });

  it('when a lone call probes after probeEveryMs and finds company, then calls gather again', async () => {
    const { batches, run } = recording();
    const batcher = new Batcher(run, { maxBatch: 8, maxInFlight: 1, gather: { probeEveryMs: 1 } });
    for (let i = 1; i <= 4; i++) await batcher.submit('k', i);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await Promise.all([batcher.submit('k', 5), batcher.submit('k', 6)]);
    const seventh = batcher.submit('k', 7);
    expect(batches).toEqual([[1], [2], [3], [4], [5, 6]]);
    await seventh;
    expect(batches.at(-1)).toEqual([7]);
  });
});
