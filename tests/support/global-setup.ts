import type { TestProject } from 'vitest/node';
import { buildConsoleIfStale } from '../../local/console-build';
import { configuredPostgresUrl, probePostgres } from './postgres-probe';

declare module 'vitest' {
  export interface ProvidedContext {
    /** PostgreSQL URL when a server is reachable, else the empty string. */
    postgresUrl: string;
    /** Why the PostgreSQL tests are skipped (empty when they run). */
    postgresSkipReason: string;
  }
}

/** Probes PostgreSQL once per run. CI sets RUNTIME_CLOUD_TEST_POSTGRES=required, so an absent server fails the run. */
export default async function setup(project: TestProject): Promise<void> {
  const probe = await probePostgres(configuredPostgresUrl(), { required: process.env.RUNTIME_CLOUD_TEST_POSTGRES === 'required' });
  if (probe.skipReason) console.warn(`\n[tests] SKIPPING PostgreSQL tests: ${probe.skipReason}\n`);
  project.provide('postgresUrl', probe.url);
  project.provide('postgresSkipReason', probe.skipReason);
  // The operator console's files, built once before the files that serve or drive it run (a fresh clone has none).
  await buildConsoleIfStale();
}
