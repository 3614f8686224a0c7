import { existsSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Crash points: named places between a step's effect and its record, where the crash tests (issue 19,
 * tests/reliability/crash-points.test.ts) make this process kill itself with SIGKILL, as a power cut or an OOM kill
 * would, to show that a restart finishes every run exactly once. Off unless `RuntimeCloud__Faults__CrashAt` names
 * points; never set in a deployment.
 *
 * A named point fires once: the first time it is reached for a subject (a run, a job, a message) that has not
 * crashed this process before. Both are marked by a file in the markers folder, created exclusively, so a point
 * fires once across restarts and across the processes sharing the folder (the host and its agents), and a run that
 * crashed once is not crashed again at another point while it recovers. `point#n` names the n-th time the point is
 * reached for one subject in one process (the second orchestration episode of a run: `durable:episode-decided:provisioningRun#2`).
 */
export interface CrashPointSettings {
  readonly points: readonly string[];
  /** The markers folder; required when points are named. */
  readonly markers: string;
}

let armed: { readonly points: ReadonlySet<string>; readonly markers: string } | undefined;
const reached = new Map<string, number>();

/** Arms the points once per process, at start-up; without points it disarms. */
export function armCrashPoints(settings: CrashPointSettings): void {
  if (settings.points.length === 0) {
    armed = undefined;
    return;
  }
  if (!settings.markers) throw new Error('RuntimeCloud__Faults__CrashMarkers is required with RuntimeCloud__Faults__CrashAt');
  armed = { points: new Set(settings.points), markers: settings.markers };
}

/** Kills this process here when `point` is armed and has not fired, for a `subject` that has not crashed. */
export function crashPoint(point: string, subject = ''): void {
  if (!armed) return;
  const key = `${point}\u0000${subject}`;
  const n = (reached.get(key) ?? 0) + 1;
  reached.set(key, n);
  const named = [`${point}#${n}`, point].find((p) => armed?.points.has(p));
  if (!named) return;
  const subjectMarker = join(armed.markers, `subject-${encodeURIComponent(subject)}`);
  if (subject && existsSync(subjectMarker)) return;
  if (!mark(join(armed.markers, `point-${encodeURIComponent(named)}`), subject)) return;
  if (subject) mark(subjectMarker, named);
  writeSync(2, `crash point ${named} reached${subject ? ` (${subject})` : ''}: SIGKILL\n`);
  process.kill(process.pid, 'SIGKILL');
  // Nothing more of this process runs while the signal lands.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10_000);
}

/** Creates the marker file with `text` (which subject a point fired for, or where a subject crashed); false when it exists. */
function mark(path: string, text: string): boolean {
  try {
    writeFileSync(path, text, { flag: 'wx' });
    return true;
  } catch {
    return false;
  }
}
