/**
 * The fuzz tests' seed and run counts: a fixed seed by default, so a run is repeatable; `FUZZ_SEED` and
 * `FUZZ_RUNS` override them (`FUZZ_RUNS` scales every count given here, as a share of 10,000).
 */
export function fuzzSettings(name: string, defaultRuns: number): { seed: number; numRuns: number } {
  const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : 20_261_202;
  const numRuns = process.env.FUZZ_RUNS ? Math.max(1, Math.round((Number(process.env.FUZZ_RUNS) * defaultRuns) / 10_000)) : defaultRuns;
  console.log(`${name}: seed ${seed} (FUZZ_SEED), ${numRuns} runs (FUZZ_RUNS)`);
  return { seed, numRuns };
}
