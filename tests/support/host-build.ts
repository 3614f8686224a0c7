import { build } from 'esbuild';
import { cpSync, readdirSync, symlinkSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * The local host compiled to JavaScript for the tests' child processes: hosts, agents and CLI commands. The
 * installed command (bin/runtime-cloud.js) runs the sources through tsx, which resolves, transforms and source-maps
 * every module as it loads: about a third of a child host's start (1 s of CPU of 2.8 s), paid again by each of its
 * agents, and the suite starts some 75 hosts. This is the same transform (tsx is esbuild, file by file), done once
 * per test run for all files, in about a second.
 *
 * `outDir` mirrors the repository: the compiled folders, the other files in them (JSON, .cjs), and a link to every
 * other top-level entry (package.json, host.json, infra, dist, node_modules, ...), so that a module finds what lies
 * beside it as it does in the repository. Answers the compiled CLI (`node <cli> start ...`).
 */
const ROOT = join(__dirname, '../..');
const COMPILED = ['contracts', 'functions', 'local', 'runner', 'shared', 'verifier'];
const NOT_LINKED = new Set([...COMPILED, '.git', '.tmp']);

export async function buildLocalHost(outDir: string): Promise<string> {
  const sources: string[] = [];
  for (const dir of COMPILED) {
    for (const file of filesUnder(join(ROOT, dir))) {
      if (file.endsWith('.ts') && !file.endsWith('.d.ts')) sources.push(file);
      else cpSync(file, join(outDir, relative(ROOT, file)));
    }
  }
  await build({ entryPoints: sources, outdir: outDir, outbase: ROOT, format: 'cjs', platform: 'node', target: 'node20', logLevel: 'warning' });
  for (const entry of readdirSync(ROOT)) if (!NOT_LINKED.has(entry)) symlinkSync(join(ROOT, entry), join(outDir, entry));
  return join(outDir, 'local', 'cli.js');
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && !entry.parentPath.includes('node_modules'))
    .map((entry) => join(entry.parentPath, entry.name));
}
