/**
 * Drift diff benchmark (`npm run bench -- drift`). Prints figures against the targets of issue 9; nothing here is
 * asserted. Options: `--sizes 1000,10000,100000` (default), `--runs N` timed runs per size (default 5; the median
 * is printed); the fleet scan (drift-scan.ts): `--environments N` (default 200; 0 skips it), `--resources N` per
 * environment (default 500), `--store sqlite|postgres` (default sqlite).
 *
 * Synthetic environments: web apps, storage accounts and container apps with a few nested properties each (sku,
 * tags, settings arrays). Observed is a deep copy of desired (distinct objects, as an observer would hand them over)
 * with about 5% of the resources modified (one nested property), 1% missing and 1% unmanaged extras. For each size:
 *
 * - ours: `diffResources(desired, observed, rules, now)`, with two ignore rules (one matching, one expired);
 * - the floor: `JSON.stringify` of both sides (one pass over the data);
 * - microdiff on the same two maps (the library a user would pick).
 *
 * Memory: before each measured call a full gc (enabled at run time with `v8.setFlagsFromString('--expose-gc')`,
 * which works under tsx), then `heapUsed` right after the call, with its result still held, minus `heapUsed`
 * before. That is everything the call allocated that the young generation's scavenges had not already freed by
 * then, its result included: an estimate of the peak growth (a true peak would need sampling inside the call).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { parseArgs } from 'node:util';
import microdiff from 'microdiff';
import { runScanBench } from './drift-scan';
import { diffResources, type IgnoreRule, type Resources, type ResourceState } from '../../shared/inventory/drift';
import { rowCollector, type Row } from './table';

interface Measured {
  readonly ms: number;
  readonly heapMiB: number;
}

const MiB = 1024 * 1024;
const SIZE_NAMES = ['small', 'medium', 'large'];
const NOW = new Date('2026-06-01T00:00:00.000Z');

export async function run(args: string[]): Promise<Row[]> {
  const { values } = parseArgs({
    args,
    options: {
      sizes: { type: 'string' },
      runs: { type: 'string' },
      environments: { type: 'string' },
      resources: { type: 'string' },
      store: { type: 'string' },
      quick: { type: 'boolean' },
    },
  });
  // --quick: a tenth of the sizes and of the scan, the same rows.
  const quick = values.quick === true;
  const sizes = (values.sizes ?? (quick ? '100,1000,10000' : '1000,10000,100000')).split(',').map(Number);
  const runs = Number(values.runs ?? (quick ? '2' : '5'));
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;

  const { rows, print } = rowCollector();
  process.stderr.write(`drift benchmark: sizes ${sizes.join(', ')}, median of ${runs} runs each\n`);
  const ours = new Map<number, Measured>();
  for (const [index, size] of sizes.entries()) {
    const { desired, observed, expected } = environment(size);
    const rules = ignoreRules();
    const check = diffResources(desired, observed, rules, NOW);
    const counts = `${check.findings.length} findings, ${check.ignored.length} ignored; expected ${expected}`;
    const us = measure(runs, gc, () => diffResources(desired, observed, rules, NOW));
    const floor = measure(runs, gc, () => [JSON.stringify(desired), JSON.stringify(observed)]);
    const micro = measure(runs, gc, () => microdiff(desired, observed));
    ours.set(size, us);
    // Named by rank, not by size, so that --quick gives the same rows.
    const label = SIZE_NAMES[index] ?? `size ${index + 1}`;
    print({ name: `${label} resources: ours (ms)`, value: us.ms.toFixed(1), note: `${size.toLocaleString('en-US')} resources; heap +${us.heapMiB.toFixed(1)} MiB; ${counts}` });
    print({ name: `${label} resources: JSON.stringify both (ms)`, value: floor.ms.toFixed(1), note: `heap +${floor.heapMiB.toFixed(1)} MiB` });
    print({ name: `${label} resources: microdiff (ms)`, value: micro.ms.toFixed(1), note: `heap +${micro.heapMiB.toFixed(1)} MiB` });
    print({ name: `${label} resources: ratio ours / microdiff (target ≤ 1.0)`, value: ratio(us.ms, micro.ms) });
    print({ name: `${label} resources: ratio ours / floor`, value: ratio(us.ms, floor.ms), note: `microdiff / floor ${ratio(micro.ms, floor.ms)}` });
  }
  const [, medium, large] = sizes.map((size) => ours.get(size));
  if (medium && large) {
    print({ name: 'growth medium → large, time (target ≤ 12× for 10k → 100k)', value: ratio(large.ms, medium.ms), note: `${sizes[1]?.toLocaleString('en-US')} → ${sizes[2]?.toLocaleString('en-US')} resources` });
    print({ name: 'peak heap growth at large (target < 50 MiB at 100k)', value: `${large.heapMiB.toFixed(1)} MiB` });
  }

  const environments = Number(values.environments ?? (quick ? '20' : '200'));
  const resources = Number(values.resources ?? (quick ? '100' : '500'));
  const store = values.store ?? 'sqlite';
  if (store !== 'sqlite' && store !== 'postgres') throw new Error(`--store ${store}: expected sqlite or postgres`);
  if (environments > 0) {
    process.stderr.write(`drift scan: ${environments} environments × ${resources} resources on ${store}\n`);
    await runScanBench(print, { environments, resources, store, postgresUrl: process.env.RUNTIME_CLOUD_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test' });
  }
  return rows;
}

/** One warm-up call, then `runs` timed calls; the median time and the largest heap growth (see the file comment). */
function measure(runs: number, gc: () => void, work: () => unknown): Measured {
  work();
  const times: number[] = [];
  let heap = 0;
  for (let i = 0; i < runs; i++) {
    gc();
    const before = process.memoryUsage().heapUsed;
    const t0 = performance.now();
    const result = work();
    times.push(performance.now() - t0);
    heap = Math.max(heap, process.memoryUsage().heapUsed - before);
    if (result === undefined) throw new Error('no result');
  }
  times.sort((a, b) => a - b);
  return { ms: times[Math.floor(times.length / 2)]!, heapMiB: heap / MiB };
}

const TYPES = ['azure-native:web:WebApp', 'azure-native:storage:StorageAccount', 'azure-native:app:ContainerApp'] as const;

function resource(i: number): ResourceState {
  const type = TYPES[i % TYPES.length]!;
  return {
    type,
    properties: {
      name: `res-${i}`,
      location: i % 2 === 0 ? 'westeurope' : 'northeurope',
      sku: { name: 'P1v3', tier: 'PremiumV3', capacity: 1 + (i % 4) },
      tags: { env: 'dev', owner: `team-${i % 7}`, costCenter: `cc-${i % 13}` },
      config: {
        alwaysOn: i % 3 !== 0,
        minTlsVersion: '1.2',
        settings: [
          { name: 'MODE', value: 'standard' },
          { name: 'LEVEL', value: String(i % 5) },
          { name: 'REGION', value: 'eu' },
        ],
      },
    },
  };
}

/** Deterministic: resource i is modified when i % 20 === 1 (5%), missing when i % 100 === 7 (1%); 1% extras. */
function environment(size: number): { desired: Resources; observed: Resources; expected: string } {
  const desired: Record<string, ResourceState> = {};
  const observed: Record<string, ResourceState> = {};
  let modified = 0;
  let missing = 0;
  for (let i = 0; i < size; i++) {
    const urn = `urn:pulumi:dev::app::${TYPES[i % TYPES.length]}::res-${i}`;
    desired[urn] = resource(i);
    if (i % 100 === 7) {
      missing++;
      continue;
    }
    const copy = structuredClone(resource(i)) as unknown as {
      type: string;
      properties: { sku: { capacity: number }; tags: { owner: string }; config: { settings: { value: string }[] } };
    };
    if (i % 20 === 1) {
      modified++;
      if (i % 60 === 1) copy.properties.sku.capacity = 9;
      else if (i % 60 === 21) copy.properties.tags.owner = 'someone-else';
      else copy.properties.config.settings[1]!.value = 'tampered';
    }
    observed[urn] = copy;
  }
  const extras = Math.floor(size / 100);
  for (let i = 0; i < extras; i++) observed[`urn:pulumi:dev::app::manual::extra-${i}`] = resource(size + i);
  return { desired, observed, expected: `${modified} modified, ${missing} missing, ${extras} unmanaged` };
}

function ignoreRules(): IgnoreRule[] {
  const base = { reason: 'bench', owner: 'bench', holdsOnApply: false };
  return [
    { ...base, id: 'ir_owner', scope: { type: 'azure-native:web:WebApp' }, path: 'tags.owner', expiresAt: '2027-01-01T00:00:00.000Z' },
    { ...base, id: 'ir_old', scope: { type: 'azure-native:storage:StorageAccount' }, path: 'sku.*', expiresAt: '2026-01-01T00:00:00.000Z' },
  ];
}

function ratio(a: number, b: number): string {
  return `${(a / b).toFixed(2)}×`;
}
