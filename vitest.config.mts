import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/bench/**', 'node_modules/**'],
    pool: 'forks',
    // Vitest's default is one worker fewer than the cores: one worker on a 2-core machine (CI's), where most test
    // time is waiting on PostgreSQL, Azurite, child hosts and durable timers rather than on the CPU.
    maxWorkers: Math.max(2, availableParallelism()),
    globalSetup: ['tests/support/global-setup.ts'],
    setupFiles: ['tests/support/setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
