import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Marks a state dir as in use by a running host: a file per host under `<state dir>/hosts/` naming its process.
 * `runtime-cloud restore` refuses while one is alive: replacing the store under a running host would lose what it
 * writes and leave it on a file that is no longer the store. A host killed without stopping leaves its file; a file
 * whose process is gone counts for nothing.
 */
const HOSTS = 'hosts';
let started = 0;

/** Marks the state dir; the answer unmarks it (on stop). */
export function markHostRunning(stateDir: string): () => void {
  const dir = join(stateDir, HOSTS);
  mkdirSync(dir, { recursive: true });
  // Several hosts of one process (tests) may share a state dir: each has its own file.
  const file = join(dir, `${process.pid}-${++started}.pid`);
  writeFileSync(file, `${process.pid}\n`);
  return () => rmSync(file, { force: true });
}

/** The processes of the hosts running on a state dir. */
export function runningHosts(stateDir: string): number[] {
  const dir = join(stateDir, HOSTS);
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.pid'));
  } catch {
    return [];
  }
  const pids = files.map((f) => Number(readFileSync(join(dir, f), 'utf8').trim()));
  return [...new Set(pids.filter((pid) => Number.isInteger(pid) && pid > 0 && isAlive(pid)))];
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but is another user's.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
