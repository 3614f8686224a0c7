import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { buildConsoleIfStale } from '../../local/console-build';
import { buildLocalHost } from './host-build';
import { configuredPostgresUrl, probePostgres } from './postgres-probe';

declare module 'vitest' {
  export interface ProvidedContext {
    /** PostgreSQL URL when a server is reachable, else the empty string. */
    postgresUrl: string;
    /** Why the PostgreSQL tests are skipped (empty when they run). */
    postgresSkipReason: string;
  }
}

/**
 * Probes PostgreSQL once per run. CI sets RUNTIME_CLOUD_TEST_POSTGRES=required, so an absent server fails the run.
 * Compiles the local host for the child processes (host-build.ts) into a folder of this run's own, which the
 * workers (forked after this) find in RUNTIME_CLOUD_TEST_HOST_CLI, and removes it at the end.
 */
export default async function setup(project: TestProject): Promise<() => void> {
  const probe = await probePostgres(configuredPostgresUrl(), { required: process.env.RUNTIME_CLOUD_TEST_POSTGRES === 'required' });
  if (probe.skipReason) console.warn(`\n[tests] SKIPPING PostgreSQL tests: ${probe.skipReason}\n`);
  project.provide('postgresUrl', probe.url);
  project.provide('postgresSkipReason', probe.skipReason);
  // The operator console's files, built once before the files that serve or drive it run (a fresh clone has none).
  await buildConsoleIfStale();
  const build = mkdtempSync(join(tmpdir(), 'rch-host-build-'));
  process.env.RUNTIME_CLOUD_TEST_HOST_CLI = await buildLocalHost(build);
  return () => rmSync(build, { recursive: true, force: true });
}
