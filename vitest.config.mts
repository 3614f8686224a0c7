import { availableParallelism } from 'node:os';
import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Vitest starts the files it has timed longest first, and files it has not timed (a fresh clone, CI) largest first:
 * then the reliability soaks, each a minute or more, started last and ran on alone for the last two minutes of the
 * suite. Until every file has been timed, the soaks, end-to-end, fuzz and browser tests go first (each a minute or
 * more; the browser tests, started with the rest, ran on alone for the last 100 s), then the integration tests, then
 * the rest (each group in Vitest's own order).
 */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const timed = (file: TestSpecification) => this.ctx.cache.getFileTestResults(`${file.project.name}:${relative(this.ctx.config.root, file.moduleId)}`);
    if (sorted.every(timed)) return sorted;
    const rank = (file: TestSpecification) => {
      const path = relative(this.ctx.config.root, file.moduleId).replaceAll('\\', '/');
      if (/^tests\/(reliability|e2e|fuzz|browser)\//.test(path)) return 0;
      return path.startsWith('tests/integration/') ? 1 : 2;
    };
    return sorted.map((file, order) => ({ file, order, rank: rank(file) })).sort((a, b) => a.rank - b.rank || a.order - b.order).map((f) => f.file);
  }
}

/**
 * The unit and integration files share their worker's modules with the files before them (`isolate: false`): loading
 * the host's modules once per worker instead of once per file more than halves the unit tests' time (46 s to 19 s on
 * 2 cores). Those below run in a worker of their own, as the soaks, end-to-end, fuzz and browser files do:
 * - they register functions of their own (test queues, timers, HTTP routes, the Durable sample app): the function
 *   registry is the process's, and every local host started later in that worker would bind them too;
 * - they read the whole registry (the OpenAPI document, the enabled modules);
 * - they set what a process holds once (Pulumi's runtime mocks, OpenTelemetry's global providers, process.env read by
 *   a cached credential or setting) or read a module's state fresh.
 * A shared file must pass whichever files ran before it, and must leave nothing behind that outlives it.
 */
const OWN_WORKER = [
  // Functions of their own, or the whole registry.
  'tests/unit/functions-core.test.ts',
  'tests/unit/durable-protocol.test.ts',
  'tests/unit/durable-sample-orchestrator.test.ts',
  'tests/unit/function-app.test.ts',
  'tests/integration/local-bus-wake.test.ts',
  'tests/integration/local-host-http.test.ts',
  'tests/integration/service-bus-local-host.test.ts',
  'tests/integration/durable-client-triggers.test.ts',
  'tests/integration/durable-host.test.ts',
  'tests/integration/durable-retention.test.ts',
  'tests/integration/durable-retry.test.ts',
  'tests/integration/durable-sub-orchestrations-restart.test.ts',
  'tests/integration/openapi.test.ts',
  'tests/integration/enabled-modules.test.ts',
  'tests/unit/enabled-modules.test.ts',
  // Process-wide state. The metrics are the process's (every host in it counts into one provider), and this file
  // reads exact counts.
  'tests/integration/metrics.test.ts',
  'tests/unit/host-json.test.ts',
  'tests/unit/inventory-arm-observer.test.ts',
  'tests/unit/inventory-kubernetes-observer.test.ts',
  'tests/unit/telemetry-metrics.test.ts',
  'tests/integration/azure-health.test.ts',
  'tests/integration/events-never-wedge.test.ts',
  'tests/integration/inventory-kubernetes-scan.test.ts',
  'tests/integration/postgres-connection-errors.test.ts',
  'tests/integration/runner-wakeups.test.ts',
  'tests/integration/service-bus-inbox-lag.test.ts',
  'tests/integration/service-bus-managed-identity.test.ts',
];
const SHARED_DIRECTORIES = 'unit|integration|contract|apps';
const EXCLUDED = ['tests/bench/**', 'node_modules/**'];

export default defineConfig({
  test: {
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
    projects: [
      {
        extends: true,
        test: { name: 'shared-worker', include: [`tests/+(${SHARED_DIRECTORIES})/**/*.test.ts`], exclude: [...EXCLUDED, ...OWN_WORKER], isolate: false },
      },
      {
        extends: true,
        test: { name: 'own-worker', include: [`tests/!(${SHARED_DIRECTORIES})/**/*.test.ts`, ...OWN_WORKER], exclude: EXCLUDED, isolate: true },
      },
    ],
  },
});
