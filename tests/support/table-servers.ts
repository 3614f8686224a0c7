import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { devConnectionString, startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import type { PipelinePolicy } from '@azure/core-rest-pipeline';
import { createTableStore, type TableStore } from '../../shared/platform/tables/tables';

/**
 * The Table servers the inventory's Table tests run on: `local`, the local host's own (Azurite's Table server
 * started in this process, `local/azurite/table-server.ts`), and `azurite`, Azurite's Table service as its own
 * process (its CLI, as a developer or CI runs it): the Table REST API over a real socket to another process, which
 * can also be stopped under a test.
 */
export const TABLE_SERVERS = ['local', 'azurite'] as const;
export type TableServerKind = (typeof TABLE_SERVERS)[number];

export function startTableServerOf(kind: TableServerKind): Promise<RunningTableServer> {
  return kind === 'local' ? startTableServer() : startAzuriteTableProcess();
}

/**
 * Azurite's Table service in a child process, in memory, on a free port of 127.0.0.1 (its CLI reports the port it
 * was given, not the one a port 0 gets, so a free one is picked first). `close()` kills it (SIGKILL: Table storage
 * gone at once, as when its host is lost).
 */
export async function startAzuriteTableProcess(): Promise<RunningTableServer> {
  const port = await freePort();
  const main = join(__dirname, '../../node_modules/azurite/dist/src/table/main.js');
  const child = spawn(process.execPath, [main, '--inMemoryPersistence', '--tableHost', '127.0.0.1', '--tablePort', String(port), '--disableTelemetry', '--skipApiVersionCheck', '--loose'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let output = '';
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (/successfully started/.test(output)) resolve();
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`azurite's Table service exited with ${code}: ${output}`)));
  });
  return {
    connectionString: devConnectionString(port),
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** A point a test holds an operation at, and lets it go on (or fail) when the test says: no sleeps. */
export class Gate {
  #reached!: () => void;
  #release!: (error?: Error) => void;
  /** Resolves once the operation has reached the gate. */
  readonly reached = new Promise<void>((resolve) => (this.#reached = resolve));
  readonly #released = new Promise<Error | undefined>((resolve) => (this.#release = resolve));

  /** Called by the held operation: waits until `open()`, then goes on, or throws what `open` was given. */
  async pass(): Promise<void> {
    this.#reached();
    const error = await this.#released;
    if (error) throw error;
  }

  open(error?: Error): void {
    this.#release(error);
  }
}

/** A Table store whose every table client sends its requests through `policy` first (to count, hold or inspect them). */
export function tableStoreWithPolicy(connection: string, policy: PipelinePolicy): TableStore {
  const inner = createTableStore(connection);
  const wired = new Set<unknown>();
  return {
    ping: () => inner.ping(),
    async table(name) {
      const client = await inner.table(name);
      if (!wired.has(client)) {
        wired.add(client);
        client.pipeline.addPolicy(policy);
      }
      return client;
    },
  };
}

/**
 * A Table store whose clients hold their `n`-th transaction (`$batch` request, counted from 1) at `gate` before
 * sending it: another writer goes first, then the held batch is sent as it was built.
 */
export function tableStoreHoldingBatch(connection: string, n: number, gate: Gate): TableStore {
  let batches = 0;
  return tableStoreWithPolicy(connection, {
    name: 'holdBatch',
    async sendRequest(request, next) {
      if (request.method === 'POST' && request.url.includes('$batch') && ++batches === n) await gate.pass();
      return next(request);
    },
  });
}
