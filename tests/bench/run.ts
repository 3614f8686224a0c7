/**
 * `npm run bench`: every benchmark, one after the other, then one table of all their rows and `bench/results.json`
 * (every row, its figure where the value is one number, each benchmark's time, and the machine it ran on).
 * `npm run bench -- --quick`: the same rows on smaller loads, in about a minute. `npm run bench -- <name> [options]`:
 * one benchmark, its table only. Figures are printed, never asserted; ratios are against baselines measured in the
 * same run. Benchmarks live beside this file as `<name>.bench.ts` exporting `run(args)`, which returns its rows.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, freemem, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import * as capacityBench from './capacity.bench';
import * as coldstartBench from './coldstart.bench';
import * as driftBench from './drift.bench';
import * as eventsBench from './events.bench';
import * as provisioningBench from './provisioning.bench';
import * as queueBench from './queue.bench';
import { figureOf, tableOf, type Row } from './table';

const BENCHES: Readonly<Record<string, { run(args: string[]): Promise<Row[]> }>> = {
  coldstart: coldstartBench,
  drift: driftBench,
  capacity: capacityBench,
  queue: queueBench,
  provisioning: provisioningBench,
  events: eventsBench,
};

const RESULTS = join(__dirname, '..', '..', 'bench', 'results.json');

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const [name, ...rest] = args;
  if (name !== undefined && !name.startsWith('--')) {
    const bench = BENCHES[name];
    if (!bench) {
      process.stderr.write(`usage: npm run bench [-- --quick] | npm run bench -- <${Object.keys(BENCHES).join('|')}> [options]\n`);
      process.exitCode = 2;
      return;
    }
    process.stdout.write(`\n${tableOf(await bench.run(rest))}`);
    return;
  }
  const quick = args.includes('--quick');
  const unknown = args.filter((a) => a !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`npm run bench: only --quick applies to all benchmarks (given: ${unknown.join(' ')}); options go to one: npm run bench -- <name> [options]\n`);
    process.exitCode = 2;
    return;
  }
  const startedAt = new Date().toISOString();
  const machine = { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', memoryGiB: round(totalmem() / 2 ** 30), freeMemoryGiB: round(freemem() / 2 ** 30), loadAverage: loadavg().map(round), node: process.version, platform: `${process.platform} ${process.arch}` };
  const results: Record<string, { seconds: number; rows: (Row & { figure?: number })[] }> = {};
  for (const [bench, module] of Object.entries(BENCHES)) {
    process.stderr.write(`\n== ${bench}${quick ? ' (quick)' : ''}\n`);
    const t0 = performance.now();
    const rows = await module.run(quick ? ['--quick'] : []);
    results[bench] = { seconds: round((performance.now() - t0) / 1000), rows: rows.map((row) => ({ ...row, ...withFigure(row.value) })) };
  }
  const all = Object.entries(results).flatMap(([bench, { rows }]) => rows.map((row) => ({ ...row, name: `${bench}: ${row.name}` })));
  process.stdout.write(`\n${tableOf(all)}`);
  mkdirSync(join(RESULTS, '..'), { recursive: true });
  writeFileSync(RESULTS, `${JSON.stringify({ startedAt, quick, machine, benches: results }, null, 2)}\n`);
  const took = Object.entries(results).map(([bench, { seconds }]) => `${bench} ${seconds} s`).join(', ');
  process.stdout.write(`\nwritten: ${RESULTS} (${took})\n`);
}

function withFigure(value: string): { figure?: number } {
  const figure = figureOf(value);
  return figure === undefined ? {} : { figure };
}

function round(n: number): number {
  return Math.round(n * 100) / 100;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
