// Before Azurite: its telemetry SDK, never used here, is not loaded.
import './without-telemetry';
import BlobConfiguration from 'azurite/dist/src/blob/BlobConfiguration';
import BlobServer from 'azurite/dist/src/blob/BlobServer';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DEV_ACCOUNT, DEV_KEY } from './table-server';

export interface RunningBlobServer {
  /** Connection string for `@azure/storage-blob`. */
  readonly connectionString: string;
  close(): Promise<void>;
}

/**
 * Starts Azurite's Blob server in this process (the local host's Blob storage: claim-checked event bodies), in memory
 * (tests) or persisted under `dataDir` (`npm start`). Port 0 picks a free port.
 */
export async function startBlobServer(options: { dataDir?: string; port?: number } = {}): Promise<RunningBlobServer> {
  const dir = options.dataDir;
  if (dir) mkdirSync(dir, { recursive: true });
  const configuration = new BlobConfiguration(
    '127.0.0.1',
    options.port ?? 0,
    undefined,
    dir ? join(dir, '__azurite_db_blob__.json') : '__azurite_in_memory_blob__.json',
    dir ? join(dir, '__azurite_db_blob_extent__.json') : '__azurite_in_memory_blob_extent__.json',
    dir ? [{ locationId: 'Default', locationPath: join(dir, '__blobstorage__'), maxConcurrency: 1 }] : undefined,
    false,
    undefined,
    false,
    undefined,
    true,
    true,
    '',
    '',
    '',
    undefined,
    false,
    dir === undefined,
  );
  const server = new BlobServer(configuration);
  await server.start();
  const port = new URL(server.getHttpServerAddress()).port;
  return {
    connectionString: `DefaultEndpointsProtocol=http;AccountName=${DEV_ACCOUNT};AccountKey=${DEV_KEY};BlobEndpoint=http://127.0.0.1:${port}/${DEV_ACCOUNT};`,
    close: () => server.close(),
  };
}
