/**
 * `npm run bench -- <name>`: runs one benchmark and prints its table. Figures are printed, never asserted.
 * Benchmarks live beside this file as `<name>.bench.ts` exporting `run(args)`.
 */
import { readdirSync } from 'node:fs';
import * as capacityBench from './capacity.bench';
import * as coldstartBench from './coldstart.bench';
import * as driftBench from './drift.bench';
import * as provisioningBench from './provisioning.bench';

const BENCHES: Record<string, () => Promise<{ run(args: string[]): Promise<void> }>> = {
  capacity: () => Promise.resolve(capacityBench),
  coldstart: () => Promise.resolve(coldstartBench),
  drift: () => Promise.resolve(driftBench),
  provisioning: () => Promise.resolve(provisioningBench),
};

async function main(): Promise<void> {
  const [name, ...args] = process.argv.slice(2);
  const load = name ? BENCHES[name] : undefined;
  if (!load) {
    const files = readdirSync(__dirname).filter((f) => f.endsWith('.bench.ts'));
    process.stderr.write(`usage: npm run bench -- <${Object.keys(BENCHES).join('|')}> (files here: ${files.join(', ')})\n`);
    process.exitCode = 2;
    return;
  }
  await (await load()).run(args);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
