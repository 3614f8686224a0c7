import { TableClient, TableServiceClient } from '@azure/data-tables';
import { DefaultAzureCredential } from '@azure/identity';

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
 */
export function createTableStore(connection: string): TableStore {
  if (!connection) throw new Error('RuntimeCloud__Tables__Connection is empty');
  const isUrl = /^https?:\/\//i.test(connection);
  const insecure = /http:\/\//i.test(connection) || /DefaultEndpointsProtocol=http;/i.test(connection);
  const options = { allowInsecureConnection: insecure };
  const credential = isUrl ? new DefaultAzureCredential() : undefined;
  const service = credential
    ? new TableServiceClient(connection, credential, options)
    : TableServiceClient.fromConnectionString(connection, options);
  const created = new Map<string, Promise<TableClient>>();
  return {
    table(name) {
      let client = created.get(name);
      if (!client) {
        client = (async () => {
          const table = credential
            ? new TableClient(connection, name, credential, options)
            : TableClient.fromConnectionString(connection, name, options);
          await table.createTable();
          return table;
        })();
        created.set(name, client);
        client.catch(() => created.delete(name));
      }
      return client;
    },
    async ping() {
      await service.getProperties();
    },
  };
}
