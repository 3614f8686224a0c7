import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

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
  },
});
