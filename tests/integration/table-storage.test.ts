import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { createTableStore } from '../../shared/platform/tables/tables';

describe('table storage on an in-process Azurite', () => {
  let server: RunningTableServer;
  beforeAll(async () => {
    server = await startTableServer();
  });
  afterAll(async () => {
    await server?.close();
  });

  it('when a table is used, then it is created once and entities round-trip with ETag concurrency', async () => {
    const store = createTableStore(server.connectionString);
    await store.ping();
    const table = await store.table('observedProbe');
    expect(await store.table('observedProbe')).toBe(table);
    await table.createEntity({ partitionKey: 'env-dev', rowKey: 'res-1', state: 'running' });
    const entity = await table.getEntity<{ state: string }>('env-dev', 'res-1');
    expect(entity.state).toBe('running');
    await table.updateEntity({ partitionKey: 'env-dev', rowKey: 'res-1', state: 'stopped' }, 'Merge', { etag: entity.etag });
    // A writer holding the old ETag loses: optimistic concurrency is what observed inventory relies on.
    await expect(
      table.updateEntity({ partitionKey: 'env-dev', rowKey: 'res-1', state: 'late' }, 'Merge', { etag: entity.etag }),
    ).rejects.toMatchObject({ statusCode: 412 });
  });

  it('when the server is unreachable, then ping fails', async () => {
    const store = createTableStore(server.connectionString.replace(/TableEndpoint=http:\/\/127\.0\.0\.1:\d+/, 'TableEndpoint=http://127.0.0.1:9'));
    await expect(store.ping()).rejects.toBeDefined();
  });
});
