import pg from 'pg';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** PostgreSQL URL when a server is reachable, else the empty string. */
    postgresUrl: string;
    /** Why the PostgreSQL tests are skipped (empty when they run). */
    postgresSkipReason: string;
  }
}

const DEFAULT_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** Probes PostgreSQL once per run. CI sets RUNTIME_CLOUD_TEST_POSTGRES=required, so an absent server fails the run. */
export default async function setup(project: TestProject): Promise<void> {
  const url = process.env.RUNTIME_CLOUD_TEST_POSTGRES_URL ?? DEFAULT_URL;
  const required = process.env.RUNTIME_CLOUD_TEST_POSTGRES === 'required';
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('select 1');
    project.provide('postgresUrl', url);
    project.provide('postgresSkipReason', '');
  } catch (error) {
    const reason = `PostgreSQL not reachable at ${url} (${error instanceof Error ? error.message : String(error)})`;
    if (required) throw new Error(`${reason}; RUNTIME_CLOUD_TEST_POSTGRES=required`);
    console.warn(`\n[tests] SKIPPING PostgreSQL tests: ${reason}\n`);
    project.provide('postgresUrl', '');
    project.provide('postgresSkipReason', reason);
  } finally {
    await client.end().catch(() => undefined);
  }
}
