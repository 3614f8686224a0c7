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

declare module 'azurite/dist/src/blob/BlobServer' {
  import type BlobConfiguration from 'azurite/dist/src/blob/BlobConfiguration';
  export default class BlobServer {
    constructor(configuration: BlobConfiguration);
    start(): Promise<void>;
    close(): Promise<void>;
    getHttpServerAddress(): string;
  }
}

declare module 'azurite/dist/src/blob/BlobConfiguration' {
  export default class BlobConfiguration {
    constructor(
      host?: string,
      port?: number,
      keepAliveTimeout?: number,
      metadataDBPath?: string,
      extentDBPath?: string,
      persistencePathArray?: readonly { readonly locationId: string; readonly locationPath: string; readonly maxConcurrency: number }[],
      enableAccessLog?: boolean,
      accessLogWriteStream?: unknown,
      enableDebugLog?: boolean,
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
