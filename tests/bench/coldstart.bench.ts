/**
 * Cold start benchmark (`npm run bench -- coldstart`). Prints figures against the target of issue 33 (≤ 1.3× the floor; issue 10 set 1.5×); nothing here
 * is asserted. Options: `--runs N` fresh processes per row (default 5; the median is printed), `--build` to run
 * `npm run build` even when `dist/` is up to date.
 *
 * What the Functions host pays before the first invocation is loading the app's entry (package.json "main",
 * `dist/functions/index.js`). Each sample is a fresh `node` process that times `require` of one thing and then
 * reports its memory (heap after a full gc, and RSS):
 *
 * - the entry with the embedded defaults (every `RuntimeCloud__*` and `ServiceBusConnection*` setting removed);
 * - the entry with production-like settings (Azure SQL, Service Bus, the Pulumi runner): the configured choice
 *   must load nothing more at start, since stores, drivers and SDKs load on first use;
 * - the floor: `@azure/functions` and `durable-functions` alone, which any app of this kind loads.
 *
 * Outside the Functions host `@azure/functions` runs in test mode: registrations are skipped (with a warning each,
 * dropped here), so the figure is the cost of loading every function file and what it imports, as in Azure.
 * Samples of the three rows are interleaved, after one discarded warm-up each, so that a machine busy with other
 * work weighs on all rows alike.
 *
 * `dist/` is built first (`npm run build`) when the entry is missing or older than any source under functions/ or
 * shared/ (or the tsconfig files); a build with type errors still emits, and is measured with a warning.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { rowCollector, type Row } from './table';

const ROOT = join(__dirname, '..', '..');
const ENTRY = join(ROOT, 'dist', 'functions', 'index.js');
const MiB = 1024 * 1024;
const TARGET_RATIO = 1.3;

/** One fresh process: the time to require, memory after, and the packages it loaded. */
interface Sample {
  readonly ms: number;
  /** CPU time (user + system, all threads) spent in the require: less disturbed than `ms` on a busy machine. */
  readonly cpuMs: number;
  readonly heapMiB: number;
  readonly rssMiB: number;
  readonly packages: readonly string[];
}

interface Subject {
  readonly name: string;
  readonly modules: readonly string[];
  readonly env: NodeJS.ProcessEnv;
}

export async function run(args: string[]): Promise<Row[]> {
  const { values } = parseArgs({ args, options: { runs: { type: 'string' }, build: { type: 'boolean' }, quick: { type: 'boolean' } } });
  const runs = Number(values.runs ?? (values.quick === true ? '2' : '5'));
  ensureBuilt(values.build ?? false);

  const defaults = withoutSettings(process.env);
  const subjects: Subject[] = [
    { name: 'entry, embedded defaults', modules: [ENTRY], env: defaults },
    {
      name: 'entry, Azure settings',
      modules: [ENTRY],
      env: {
        ...defaults,
        RuntimeCloud__Store__Dialect: 'mssql',
        RuntimeCloud__Store__Connection: 'Server=tcp:example.database.windows.net,1433;Database=runtime-cloud',
        RuntimeCloud__IaC__Runner: 'pulumi',
        RuntimeCloud__Tables__Connection: 'https://example.table.core.windows.net',
        RuntimeCloud__Auth__JwksUrl: 'https://login.example.com/keys',
        ServiceBusConnection__fullyQualifiedNamespace: 'example.servicebus.windows.net',
      },
    },
    { name: 'floor: @azure/functions + durable-functions', modules: ['@azure/functions', 'durable-functions'], env: defaults },
  ];

  process.stderr.write(`cold start benchmark: ${subjects.length} rows, median of ${runs} fresh processes each\n`);
  const samples = subjects.map(() => [] as Sample[]);
  for (let i = -1; i < runs; i++) {
    subjects.forEach((subject, s) => {
      const sample = measure(subject);
      if (i >= 0) samples[s]!.push(sample);
    });
  }
  const [entry, azure, floor] = samples.map(median) as [Sample, Sample, Sample];

  const { rows, print } = rowCollector();
  subjects.forEach((subject, s) => {
    const m = median(samples[s]!);
    print({
      name: `${subject.name}: require (ms)`,
      value: m.ms.toFixed(0),
      note: `CPU ${m.cpuMs.toFixed(0)} ms; heap ${m.heapMiB.toFixed(1)} MiB, RSS ${m.rssMiB.toFixed(1)} MiB; ${m.packages.length} packages`,
    });
  });
  for (const [name, m] of [['defaults', entry], ['Azure settings', azure]] as const) {
    print({
      name: `ratio entry / floor, ${name} (target ≤ ${TARGET_RATIO}×)`,
      value: ratio(m.ms, floor.ms),
      note: `CPU ${ratio(m.cpuMs, floor.cpuMs)}, RSS ${ratio(m.rssMiB, floor.rssMiB)}`,
    });
  }
  const extra = entry.packages.filter((p) => !floor.packages.includes(p));
  const shown = extra.length > 12 ? `${extra.slice(0, 12).join(', ')}, … (${extra.length - 12} more)` : extra.join(', ') || '(none)';
  print({ name: 'packages the entry loads beyond the floor', value: String(extra.length), note: shown });
  return rows;
}

/** Requires `modules` in a fresh process and reads the clock and memory there. */
function measure(subject: Subject): Sample {
  const script = `
    const cpu = process.cpuUsage();
    const t0 = performance.now();
    for (const m of ${JSON.stringify(subject.modules)}) require(m);
    const ms = performance.now() - t0;
    const { user, system } = process.cpuUsage(cpu);
    globalThis.gc();
    const { heapUsed, rss } = process.memoryUsage();
    const packages = new Set();
    // A dot stands for either path separator; the last node_modules names the package.
    for (const file of Object.keys(require.cache)) {
      const match = /.*node_modules.((?:@[^\\\\/]+.)?[^\\\\/]+)/.exec(file);
      if (match) packages.add(match[1].replace(/\\\\/g, '/'));
    }
    process.stdout.write(JSON.stringify({ ms, cpuMs: (user + system) / 1000, heapUsed, rss, packages: [...packages].sort() }));`;
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { cwd: ROOT, env: subject.env, encoding: 'utf8' });
  if (child.status !== 0) throw new Error(`${subject.name}: the process failed (${child.status ?? child.signal}): ${child.stderr.slice(-2000)}`);
  const out = JSON.parse(child.stdout) as { ms: number; cpuMs: number; heapUsed: number; rss: number; packages: string[] };
  return { ms: out.ms, cpuMs: out.cpuMs, heapMiB: out.heapUsed / MiB, rssMiB: out.rss / MiB, packages: out.packages };
}

/** The median of each figure; the packages are the median-time sample's (they do not vary between runs). */
function median(samples: readonly Sample[]): Sample {
  const mid = (by: (x: Sample) => number): number => samples.map(by).sort((a, b) => a - b)[Math.floor(samples.length / 2)]!;
  const byTime = samples.find((s) => s.ms === mid((x) => x.ms))!;
  return { ms: byTime.ms, cpuMs: mid((s) => s.cpuMs), heapMiB: mid((s) => s.heapMiB), rssMiB: mid((s) => s.rssMiB), packages: byTime.packages };
}

/** Builds `dist/` when forced, missing, or older than a source file. */
function ensureBuilt(force: boolean): void {
  const built = existsSync(ENTRY) ? statSync(ENTRY).mtimeMs : 0;
  const sources = [...sourceFiles(join(ROOT, 'functions')), ...sourceFiles(join(ROOT, 'shared')), join(ROOT, 'tsconfig.json'), join(ROOT, 'tsconfig.build.json')];
  const stale = sources.filter((file) => statSync(file).mtimeMs > built);
  if (!force && stale.length === 0) {
    process.stderr.write('dist/ is up to date\n');
    return;
  }
  process.stderr.write(`building dist/ (${force ? '--build' : built === 0 ? 'no entry' : `sources newer than the entry: ${stale.length}`}): npm run build\n`);
  try {
    execFileSync('npm', ['run', '-s', 'build'], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  } catch (error) {
    // tsc emits despite type errors; measure what it emitted, but say so.
    if (!existsSync(ENTRY) || statSync(ENTRY).mtimeMs <= built) throw error;
    process.stderr.write('WARNING: the build reported errors; measuring the JavaScript it emitted\n');
  }
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .map((name) => join(dir, name));
}

/** The environment without the app's settings, so the entry starts with its documented defaults. */
function withoutSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([key]) => !/^(RuntimeCloud__|ServiceBusConnection)/.test(key)));
}

function ratio(a: number, b: number): string {
  return `${(a / b).toFixed(2)}×`;
}
