/**
 * Reads a V8 CPU profile (`node --cpu-prof`, or `npm run bench -- provisioning --profile DIR`) and prints where the
 * time went: the functions by self time and by inclusive time (each function counted once per sample, however deep
 * it recurses), and the files (or packages) by self time. `npx tsx tests/bench/cpu-profile.ts FILE [--top N]
 * [--from MS] [--under NAME]`: `--from` leaves out the first MS of the profile (the host's start); `--under` prints
 * instead the call stacks, in our files, that lead to a function whose name holds NAME.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly children?: readonly number[];
}

interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly startTime: number;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** Self and inclusive milliseconds by function, self milliseconds by file, over the samples from `fromMs` on. */
export function summarize(
  profile: Profile,
  fromMs = 0,
  /** Also the call stacks (outermost 12 frames of ours) of the samples under a function whose name holds this. */
  under?: string,
): { totalMs: number; idleMs: number; self: Map<string, number>; inclusive: Map<string, number>; files: Map<string, number>; stacks: Map<string, number> } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const files = new Map<string, number>();
  const stacks = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, ms: number) => map.set(key, (map.get(key) ?? 0) + ms);
  let elapsed = 0;
  let totalMs = 0;
  let idleMs = 0;
  profile.samples.forEach((id, i) => {
    // A sample's time is the delta to the next one.
    const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    elapsed += (profile.timeDeltas[i] ?? 0) / 1000;
    if (elapsed < fromMs) return;
    const node = byId.get(id);
    if (!node) return;
    const name = nameOf(node);
    if (node.callFrame.functionName === '(idle)') {
      idleMs += ms;
      return;
    }
    totalMs += ms;
    add(self, name, ms);
    add(files, fileOf(node.callFrame.url), ms);
    const seen = new Set<string>();
    const chain: string[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at);
      if (!frame) break;
      const key = nameOf(frame);
      if (/^(shared|local|functions|runner)\//.test(fileOf(frame.callFrame.url))) chain.push(key);
      if (seen.has(key)) continue;
      seen.add(key);
      add(inclusive, key, ms);
    }
    if (under !== undefined && [...seen].some((key) => key.includes(under))) add(stacks, chain.reverse().slice(0, 12).join(' > '), ms);
  });
  return { totalMs, idleMs, self, inclusive, files, stacks };
}

function nameOf(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  return `${functionName || '(anonymous)'} ${url ? `${fileOf(url)}:${lineNumber + 1}` : ''}`.trim();
}

/** A file of the repository by its path from the root; a package's files by the package. */
function fileOf(url: string): string {
  if (!url) return '(native)';
  const path = url.replace(/^file:\/\//, '');
  const modules = path.lastIndexOf('node_modules/');
  if (modules >= 0) {
    const [scope, name] = path.slice(modules + 'node_modules/'.length).split('/');
    return `npm:${scope?.startsWith('@') ? `${scope}/${name}` : scope}`;
  }
  const root = /\/(functions|shared|local|runner|tests|bin)\//.exec(path);
  return root ? path.slice(root.index + 1) : path;
}

function top(map: Map<string, number>, n: number, totalMs: number): string {
  return [...map]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([name, ms]) => `  ${ms.toFixed(0).padStart(7)} ms ${((ms / totalMs) * 100).toFixed(1).padStart(5)} %  ${name}`)
    .join('\n');
}

if (require.main === module) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: 'string' }, from: { type: 'string' }, under: { type: 'string' } } });
  const file = positionals[0];
  if (!file) {
    process.stderr.write('usage: npx tsx tests/bench/cpu-profile.ts FILE [--top N] [--from MS]\n');
    process.exit(2);
  }
  const n = Number(values.top ?? '30');
  const { totalMs, idleMs, self, inclusive, files, stacks } = summarize(JSON.parse(readFileSync(file, 'utf8')) as Profile, Number(values.from ?? '0'), values.under);
  if (values.under !== undefined) {
    process.stdout.write(`stacks (our frames) under ${values.under}:\n${top(stacks, n, totalMs)}\n`);
    process.exit(0);
  }
  process.stdout.write(`busy ${totalMs.toFixed(0)} ms, idle ${idleMs.toFixed(0)} ms\n`);
  process.stdout.write(`\nby self time:\n${top(self, n, totalMs)}\n`);
  process.stdout.write(`\nby inclusive time:\n${top(inclusive, n, totalMs)}\n`);
  process.stdout.write(`\nfiles and packages by self time:\n${top(files, n, totalMs)}\n`);
}
