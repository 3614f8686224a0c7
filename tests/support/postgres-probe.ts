import pg from 'pg';

const DEFAULT_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** The PostgreSQL the tests use: RUNTIME_CLOUD_TEST_POSTGRES_URL, else the local default. */
export function configuredPostgresUrl(): string {
  return process.env.RUNTIME_CLOUD_TEST_POSTGRES_URL ?? DEFAULT_URL;
}

/** What the tests run against: the URL when a server answered there, else why the PostgreSQL tests are skipped. */
export type PostgresProbe = { readonly url: string; readonly skipReason: '' } | { readonly url: ''; readonly skipReason: string };

/**
 * Connects once and runs `select 1`. An absent server gives a skip reason naming the URL and the driver's error;
 * when PostgreSQL is `required` (CI), it fails instead.
 */
export async function probePostgres(url: string, options: { required: boolean }): Promise<PostgresProbe> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('select 1');
    return { url, skipReason: '' };
  } catch (error) {
    const reason = `PostgreSQL not reachable at ${url} (${error instanceof Error ? error.message : String(error)})`;
    if (options.required) throw new Error(`${reason}; RUNTIME_CLOUD_TEST_POSTGRES=required`);
    return { url: '', skipReason: reason };
  } finally {
    await client.end().catch(() => undefined);
  }
}
