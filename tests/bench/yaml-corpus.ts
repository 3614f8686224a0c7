/**
 * `npm run yaml-corpus -- <dir> [<dir>...] [--json FILE]`: measures the local IaC engine on Pulumi's own YAML
 * programs (pulumi-yaml's examples, tests, conformance projects and templates, fetched beside the project and
 * never committed). Every folder under a `<dir>` holding a `Pulumi.yaml` is a program; its subfolders belong to
 * it (a `main:` folder, a component) and are not searched, as Pulumi finds a project by its nearest Pulumi.yaml.
 * Each program runs on its own in-memory SQLite store, as tenant `organization` (yaml-corpus-stages.ts says the stages,
 * yaml-corpus-program.ts the stack, config and change rules). Prints a per-stage table per corpus source, the
 * refusals, the dangerous outcomes, a per-error-code table and the failing programs by cause. A measurement, run
 * by hand: nothing here is asserted, and it is not part of CI.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve, sep } from 'node:path';
import { parseArgs } from 'node:util';
import type { LocalEngine } from '../../local/engine/local-engine';
import type { ProjectFiles } from '../../local/engine/pulumi-yaml';
import { prepareProgram, type CorpusProgram } from './yaml-corpus-program';
import { corpusEngine, measureProgram, measureSequence, STAGES, type ProgramReport } from './yaml-corpus-stages';

/** Folders never searched for programs nor read as a program's files: dependencies and VCS data. */
const SKIPPED_DIRS = new Set(['node_modules', '.git']);

/** Every program folder under `root`, relative to it, sorted. */
export function discoverPrograms(root: string): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    const entries = readdirSync(dir, { withFileTypes: true });
    if (entries.some((e) => e.isFile() && (e.name === 'Pulumi.yaml' || e.name === 'Pulumi.yml'))) {
      found.push(relative(root, dir).split(sep).join('/') || '.');
      return;
    }
    for (const entry of entries) if (entry.isDirectory() && !SKIPPED_DIRS.has(entry.name)) walk(join(dir, entry.name));
  };
  walk(root);
  return found.sort();
}

/**
 * The program folder's files by path relative to it (`Pulumi.yaml`, `subdir/Main.yaml`), every one read as UTF-8
 * text, as the host hands a project to an engine (shared/platform/git/desired-state.ts).
 */
export function readProgramFiles(dir: string): ProjectFiles {
  const files: Record<string, string> = {};
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) {
        if (!SKIPPED_DIRS.has(entry.name)) walk(path);
      } else if (entry.isFile()) {
        files[relative(dir, path).split(sep).join('/')] = readFileSync(path).toString('utf8');
      }
    }
  };
  walk(dir);
  return files;
}

/** The organization pulumi-test-language runs its programs as (`pulumi.organization`); here, the tenant. */
const TENANT = 'organization';

/** Runs `measure` on an engine over a new store, so programs sharing a project and stack name never meet. */
async function onOwnStore<T>(measure: (engine: LocalEngine) => Promise<T>): Promise<T> {
  const { engine, store } = await corpusEngine();
  try {
    return await measure(engine);
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({ options: { json: { type: 'string' } }, allowPositionals: true });
  if (positionals.length === 0) {
    process.stderr.write('usage: npm run yaml-corpus -- <dir> [<dir>...] [--json FILE]\n');
    process.exitCode = 2;
    return;
  }
  const reports: ProgramReport[] = [];
  const started = Date.now();
  for (const root of positionals.map((p) => resolve(p))) {
    const source = basename(root);
    // Steps of a multi-step test (`<test>/0`, `<test>/1`, ...), by test, in step order.
    const sequences = new Map<string, { program: CorpusProgram; at: number }[]>();
    for (const id of discoverPrograms(root)) {
      let program: CorpusProgram;
      try {
        program = prepareProgram({ id, source, files: readProgramFiles(join(root, id)) });
      } catch (thrown) {
        process.stderr.write(`  ${source}/${id}: not prepared: ${String(thrown)}\n`);
        continue;
      }
      reports.push(await onOwnStore((engine) => measureProgram(engine, program, TENANT)));
      const step = /^(.*)\/(\d+)$/.exec(id);
      if (program.group === 'conformance' && step?.[1]) sequences.set(step[1], [...(sequences.get(step[1]) ?? []), { program, at: reports.length - 1 }]);
    }
    for (const steps of sequences.values()) {
      const last = steps[steps.length - 1];
      if (!last || steps.length < 2 || !steps.every((s) => s.program.expectation.kind === 'run')) continue;
      const ordered = steps.map((s) => s.program).sort((a, b) => Number(a.id.split('/').pop()) - Number(b.id.split('/').pop()));
      const sequence = await onOwnStore((engine) => measureSequence(engine, ordered, TENANT));
      reports[last.at] = { ...(reports[last.at] as ProgramReport), sequence };
    }
  }
  process.stdout.write(render(reports, Date.now() - started));
  if (values.json) {
    writeFileSync(values.json, `${JSON.stringify(reports, null, 2)}\n`);
    process.stdout.write(`\n${reports.length} rows written to ${values.json}\n`);
  }
}

/** How a program is named in the tables: conformance programs by their test (and step). */
function label(r: ProgramReport): string {
  return r.group === 'conformance' ? `conformance/${r.id.replace(/^.*testdata\/projects\//, '')}` : `${r.source}/${r.id}`;
}

/** The tables and lists the measurement prints. */
export function render(reports: readonly ProgramReport[], elapsedMs: number): string {
  const out: string[] = [];
  const sources = [...new Set(reports.map((r) => `${r.source}/${r.group}`))].sort();
  const table = (header: readonly string[], rows: readonly (readonly (string | number)[])[]): void => {
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? '').length)));
    const line = (cells: readonly (string | number)[]) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i] ?? 0) : String(c).padStart(widths[i] ?? 0))).join(' | ');
    out.push(line(header), widths.map((w) => '-'.repeat(w)).join('-|-'), ...rows.map(line), '');
  };

  const runs = reports.filter((r) => r.expectation === 'run');
  const refused = reports.filter((r) => r.expectation === 'refusal');
  const dangerous = reports.filter((r) => r.dangers.length > 0);
  out.push(
    `Summary: of ${runs.length} programs Pulumi runs, ${runs.filter((r) => r.outcome === 'faithful').length} pass every stage with Pulumi's outputs and ` +
      `${runs.filter((r) => r.outcome === 'passed-unchecked').length} more with outputs not known; of ${refused.length} Pulumi refuses, ` +
      `${refused.filter((r) => r.outcome === 'refused').length} are refused with a clear code; ${dangerous.length} dangerous outcomes; ` +
      `${reports.filter((r) => r.outcome === 'not-measured').length} not measured.`,
    '',
  );
  const reached = (rows: readonly ProgramReport[]) => {
    const passed = (stage: (typeof STAGES)[number]) => rows.filter((r) => STAGES.slice(0, STAGES.indexOf(stage) + 1).every((s) => r.stages[s] === 'passed' || r.stages[s] === 'skipped' || r.stages[s] === 'not-checked')).length;
    return [
      rows.length,
      passed('parse'),
      passed('plan'),
      passed('apply'),
      passed('replan'),
      passed('change'),
      rows.filter((r) => r.stages.change === 'skipped').length,
      rows.filter((r) => r.outcome === 'faithful').length,
      rows.filter((r) => r.outcome === 'passed-unchecked').length,
    ];
  };
  out.push(`Programs Pulumi runs: how many passed each stage (and every stage before it). ${reports.length} programs in ${(elapsedMs / 1000).toFixed(1)} s.`, '');
  table(
    ['source', 'programs', 'parse', 'plan', 'apply', 're-plan same', 'change converges', '(no change)', 'outputs = Pulumi', 'all, outputs unchecked'],
    [...sources.map((s) => [s, ...reached(runs.filter((r) => `${r.source}/${r.group}` === s))]), ['total', ...reached(runs)]],
  );

  const refusals = refused;
  const refusalRow = (rows: readonly ProgramReport[]) => [rows.length, rows.filter((r) => r.outcome === 'refused').length, rows.filter((r) => r.outcome === 'refused-unclearly').length, rows.filter((r) => r.outcome === 'accepted-refusal').length];
  out.push('Programs Pulumi refuses (or whose result only a real provider gives): refused with a clear code is faithful.', '');
  table(['source', 'programs', 'refused clearly', 'refused by a crash', 'accepted (DANGER)'], [...sources.map((s) => [s, ...refusalRow(refusals.filter((r) => `${r.source}/${r.group}` === s))]), ['total', ...refusalRow(refusals)]]);

  const notMeasured = reports.filter((r) => r.outcome === 'not-measured');
  if (notMeasured.length > 0) out.push(`Not measured (${notMeasured.length}): ${notMeasured.map((r) => `${label(r)} (${r.reason ?? ''})`).join('; ')}`, '');

  const sequences = reports.filter((r) => r.sequence);
  if (sequences.length > 0) {
    out.push(`Multi-step conformance tests, every step applied on the stack the step before left: ${sequences.filter((r) => r.sequence?.converged).length} of ${sequences.length} converged.`);
    for (const r of sequences.filter((x) => !x.sequence?.converged)) {
      const f = r.sequence?.failure;
      out.push(`  ${f?.step ?? label(r)} ${f?.stage ?? ''} ${f?.code ?? ''}: ${f?.message ?? ''}`);
    }
    out.push('');
  }

  out.push('Dangerous outcomes:');
  for (const danger of ['empty-plan', 'dropped-resources', 'accepted-refusal'] as const) {
    const rows = reports.filter((r) => r.dangers.includes(danger));
    const what = { 'empty-plan': 'declares resources, planned zero steps', 'dropped-resources': 'planned fewer steps than declared resources', 'accepted-refusal': 'Pulumi refuses it, the engine planned it' }[danger];
    out.push(`  ${danger} (${what}): ${rows.length}${rows.length > 0 ? ` — ${rows.map((r) => `${label(r)}${r.emptyPlanApplied || r.stages.apply === 'passed' ? ' [applied]' : ''}`).join(', ')}` : ''}`);
  }
  out.push('');

  const failed = reports.filter((r) => r.failure && r.outcome !== 'refused');
  const byCode = new Map<string, ProgramReport[]>();
  for (const r of failed) {
    const key = `${r.failure?.stage ?? ''} ${r.failure?.code ?? ''}`;
    byCode.set(key, [...(byCode.get(key) ?? []), r]);
  }
  const codes = [...byCode.entries()].sort((a, b) => b[1].length - a[1].length || a[0].localeCompare(b[0]));
  out.push('First failure of every program not faithfully refused, by stage and error code:', '');
  table(['stage', 'code', 'programs'], codes.map(([key, rows]) => [...key.split(' '), rows.length]));
  const refusedCodes = new Map<string, number>();
  for (const r of refusals.filter((x) => x.outcome === 'refused')) refusedCodes.set(`${r.failure?.stage ?? ''} ${r.failure?.code ?? ''}`, (refusedCodes.get(`${r.failure?.stage ?? ''} ${r.failure?.code ?? ''}`) ?? 0) + 1);
  out.push('Codes of the faithful refusals:', '');
  table(['stage', 'code', 'programs'], [...refusedCodes.entries()].sort((a, b) => b[1] - a[1]).map(([key, n]) => [...key.split(' '), n]));

  out.push('Failing programs by stage, code and cause:');
  for (const [key, rows] of codes) {
    out.push(`  ${key} (${rows.length})`);
    const byCause = new Map<string, ProgramReport[]>();
    for (const r of rows) byCause.set(r.failure?.cause ?? '', [...(byCause.get(r.failure?.cause ?? '') ?? []), r]);
    for (const [cause, same] of [...byCause.entries()].sort((a, b) => b[1].length - a[1].length || a[0].localeCompare(b[0]))) {
      out.push(`    ${cause} (${same.length})`);
      for (const r of same) out.push(`      ${label(r)}: ${r.failure?.message ?? ''}`);
    }
  }
  return `${out.join('\n')}\n`;
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  });
}
