/**
 * A local host in a child process for the Durable restart and multi-host tests, with the Durable sample loaded:
 *   node --require tsx/cjs --import tsx/esm tests/support/durable-child-host.ts --state-dir DIR --settings JSON [--lease-ms N] [--worker-id ID]
 * Prints one JSON line `{"url": …}` on stdout once listening. Only the Durable component runs (no other bindings),
 * with short leases, so a test that kills it sees its work taken over quickly.
 */
import { parseArgs } from 'node:util';
import { localDurable } from '../../local/durable/durable-component';
import { installFunctionsCore } from '../../local/functions-core/install';
import { LocalHost } from '../../local/host';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'state-dir': { type: 'string' },
      settings: { type: 'string' },
      'lease-ms': { type: 'string' },
      'worker-id': { type: 'string' },
    },
  });
  installFunctionsCore();
  // The sample registers through @azure/functions, so it loads only once the local functions-core is in place.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  require('./durable-sample');
  const host = new LocalHost(
    {
      port: 0,
      inMemoryTables: true,
      ...(values['state-dir'] !== undefined ? { stateDir: values['state-dir'] } : {}),
      settings: JSON.parse(values.settings ?? '{}') as Record<string, string>,
    },
    [
      localDurable({
        leaseMs: Number(values['lease-ms'] ?? '1500'),
        pollMs: 50,
        ...(values['worker-id'] !== undefined ? { workerId: values['worker-id'] } : {}),
      }),
    ],
  );
  const url = await host.start();
  process.stdout.write(`${JSON.stringify({ url: url.toString() })}\n`);
  process.once('SIGTERM', () => void host.stop().then(() => process.exit(0)));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
