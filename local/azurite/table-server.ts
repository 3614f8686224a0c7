// Before Azurite: its telemetry SDK, never used here, is not loaded.
import './without-telemetry';
import TableConfiguration from 'azurite/dist/src/table/TableConfiguration';
import TableServer from 'azurite/dist/src/table/TableServer';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

/** Azurite's well-known development account (public, documented by Microsoft). */
export const DEV_ACCOUNT = 'devstoreaccount1';
export const DEV_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

/** The connection string of Azurite's development account on a Table endpoint of 127.0.0.1 (needs `allowInsecureConnection`). */
export function devConnectionString(port: number | string): string {
  return `DefaultEndpointsProtocol=http;AccountName=${DEV_ACCOUNT};AccountKey=${DEV_KEY};TableEndpoint=http://127.0.0.1:${port}/${DEV_ACCOUNT};`;
}

export interface RunningTableServer {
  /** Connection string for `@azure/data-tables` (needs `allowInsecureConnection`). */
  readonly connectionString: string;
  close(): Promise<void>;
}

/**
 * Starts Azurite's Table server in this process: in memory (tests) or persisted under `dataDir` (`npm start`).
 * Port 0 picks a free port.
 */
export async function startTableServer(options: { dataDir?: string; port?: number } = {}): Promise<RunningTableServer> {
  let dbPath = join(options.dataDir ?? '.', '__azurite_db_table__.json');
  if (options.dataDir) mkdirSync(options.dataDir, { recursive: true });
  else dbPath = '__azurite_in_memory_table__.json';
  const configuration = new TableConfiguration(
    '127.0.0.1',
    options.port ?? 0,
    undefined,
    dbPath,
    false,
    false,
    undefined,
    undefined,
    false,
    true,
    '',
    '',
    '',
    undefined,
    false,
    options.dataDir === undefined,
  );
  const server = new TableServer(configuration);
  await server.start();
  const port = new URL(`http://${server.getHttpServerAddress().replace(/^https?:\/\//, '')}`).port;
  return {
    connectionString: devConnectionString(port),
    close: () => server.close(),
  };
}
