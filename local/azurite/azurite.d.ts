// Azurite ships no type declarations for its internal modules; these are the members the local host uses.
declare module 'azurite/dist/src/table/TableServer' {
  import type TableConfiguration from 'azurite/dist/src/table/TableConfiguration';
  export default class TableServer {
    constructor(configuration: TableConfiguration);
    start(): Promise<void>;
    close(): Promise<void>;
    clean(): Promise<void>;
    getHttpServerAddress(): string;
  }
}

declare module 'azurite/dist/src/table/TableConfiguration' {
  export default class TableConfiguration {
    constructor(
      host?: string,
      port?: number,
      keepAliveTimeout?: number,
      metadataDBPath?: string,
      enableDebugLog?: boolean,
      enableAccessLog?: boolean,
      accessLogWriteStream?: unknown,
      debugLogFilePath?: string,
      loose?: boolean,
      skipApiVersionCheck?: boolean,
      cert?: string,
      key?: string,
      pwd?: string,
      oauth?: string,
      disableProductStyleUrl?: boolean,
      isMemoryPersistence?: boolean,
    );
  }
}
