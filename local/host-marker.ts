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

/** A running host's mark on its state dir. */
export interface HostMark {
  /** Unique among the hosts on the state dir (its file's name). */
  readonly id: string;
  /** How many other hosts were running on the state dir when this one marked it. */
  readonly beside: number;
  /** Removes the mark (on stop). */
  unmark(): void;
}

/** Marks the state dir for this host. */
export function markHostRunning(stateDir: string): HostMark {
  const dir = join(stateDir, HOSTS);
  mkdirSync(dir, { recursive: true });
  // Several hosts of one process (tests) may share a state dir: each has its own file.
  const id = `${process.pid}-${++started}`;
  const file = join(dir, `${id}.pid`);
  writeFileSync(file, `${process.pid}\n`);
  const beside = liveMarks(dir).filter((name) => name !== `${id}.pid`).length;
  return { id, beside, unmark: () => rmSync(file, { force: true }) };
}

/** The processes of the hosts running on a state dir. */
export function runningHosts(stateDir: string): number[] {
  const dir = join(stateDir, HOSTS);
  return [...new Set(liveMarks(dir).map((name) => pidOf(dir, name)))];
}

/** The mark files whose process is alive. */
function liveMarks(dir: string): string[] {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.pid'));
  } catch {
    return [];
  }
  return files.filter((name) => {
    const pid = pidOf(dir, name);
    return Number.isInteger(pid) && pid > 0 && isAlive(pid);
  });
}

function pidOf(dir: string, name: string): number {
  try {
    return Number(readFileSync(join(dir, name), 'utf8').trim());
  } catch {
    // Unmarked meanwhile.
    return 0;
  }
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
