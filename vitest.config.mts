import { availableParallelism } from 'node:os';
import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Vitest starts the files it has timed longest first, and files it has not timed (a fresh clone, CI) largest first:
 * then the reliability soaks, each a minute or more, started last and ran on alone for the last two minutes of the
 * suite. Until every file has been timed, the soaks, end-to-end tests and fuzzers go first, then the integration
 * tests, then the rest (each group in Vitest's own order).
 */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const timed = (file: TestSpecification) => this.ctx.cache.getFileTestResults(`${file.project.name}:${relative(this.ctx.config.root, file.moduleId)}`);
    if (sorted.every(timed)) return sorted;
    const rank = (file: TestSpecification) => {
      const path = relative(this.ctx.config.root, file.moduleId).replaceAll('\\', '/');
      if (/^tests\/(reliability|e2e|fuzz)\//.test(path)) return 0;
      return path.startsWith('tests/integration/') ? 1 : 2;
    };
    return sorted.map((file, order) => ({ file, order, rank: rank(file) })).sort((a, b) => a.rank - b.rank || a.order - b.order).map((f) => f.file);
  }
}

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/bench/**', 'node_modules/**'],
    pool: 'forks',
    // Vitest's default is one worker fewer than the cores: one worker on a 2-core machine (CI's), where most test
    // time is waiting on PostgreSQL, Azurite, child hosts and durable timers rather than on the CPU:
    // three workers kept 1.5 cores busy over the whole suite (6 min 53 s on 2 cores, with other work beside it).
    maxWorkers: Math.max(3, availableParallelism() + 1),
    globalSetup: ['tests/support/global-setup.ts'],
    setupFiles: ['tests/support/setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    sequence: { sequencer: LongestFirst },
  },
});
