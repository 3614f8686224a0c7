import type { TableClient, TableServiceClient } from '@azure/data-tables';

/** Table storage (observed inventory, scan records). */
export interface TableStore {
  /** A client for one table; the table is created on first use. */
  table(name: string): Promise<TableClient>;
  /** A cheap round trip, for health. */
  ping(): Promise<void>;
}

/**
 * `connection` is either a connection string (Azurite, or an account key in development) or an account URL
 * (`https://acct.table.core.windows.net`), which is used with the host's managed identity.
 *
 * The SDK is loaded on the first `table()` or `ping()`, not here: only inventory and health use Table storage, and
 * a host that starts (or serves only capacity) does not pay for it.
 */
export function createTableStore(connection: string): TableStore {
  if (!connection) throw new Error('RuntimeCloud__Tables__Connection is empty');
  let clients: TableClients | undefined;
  const sdk = () => (clients ??= tableClients(connection));
  const created = new Map<string, Promise<TableClient>>();
  return {
    table(name) {
      let client = created.get(name);
      if (!client) {
        client = (async () => {
          const table = sdk().table(name);
          await table.createTable();
          return table;
        })();
        created.set(name, client);
        client.catch(() => created.delete(name));
      }
      return client;
    },
    async ping() {
      await sdk().service.getProperties();
    },
  };
}

interface TableClients {
  readonly service: TableServiceClient;
  table(name: string): TableClient;
}

/** The SDK's clients for `connection`: @azure/data-tables, and @azure/identity for an account URL, load here. */
function tableClients(connection: string): TableClients {
  const insecure = /http:\/\//i.test(connection) || /DefaultEndpointsProtocol=http;/i.test(connection);
  const options = { allowInsecureConnection: insecure };
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { TableClient, TableServiceClient } = require('@azure/data-tables') as typeof import('@azure/data-tables');
  if (!/^https?:\/\//i.test(connection)) {
    return {
      service: TableServiceClient.fromConnectionString(connection, options),
      table: (name) => TableClient.fromConnectionString(connection, name, options),
    };
  }
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { DefaultAzureCredential } = require('@azure/identity') as typeof import('@azure/identity');
  const credential = new DefaultAzureCredential();
  return { service: new TableServiceClient(connection, credential, options), table: (name) => new TableClient(connection, name, credential, options) };
}
