import type { Environment, Run } from './views';

/** Where an environment stands, in the order the fleet page shows the groups. */
export const STANDINGS = ['needs-attention', 'running', 'waiting-for-approval', 'drifted', 'stale', 'in-sync'] as const;
export type Standing = (typeof STANDINGS)[number];

export const STANDING_LABELS: Record<Standing, string> = {
  'needs-attention': 'Needs attention',
  running: 'Running',
  'waiting-for-approval': 'Waiting for approval',
  drifted: 'Drifted',
  stale: 'Stale or never scanned',
  'in-sync': 'In sync',
};

/** One environment of the fleet: its inventory record (absent until a run applied to it) and its open run. */
export interface FleetEntry {
  readonly key: string;
  readonly tenant: string;
  readonly name: string;
  readonly tier: string;
  readonly qualifiedStack: string;
  readonly environment?: Environment;
  /** Its newest run that has not ended, else its newest run. */
  readonly run?: Run;
  readonly standing: Standing;
  /** Why it stands there, in a sentence. */
  readonly why: string;
}

const OPEN: readonly string[] = ['queued', 'planning', 'applying'];

/**
 * The fleet from the environments the inventory knows and the runs (newest first): an environment no run has
 * applied to yet appears through its runs. A state that was not observed is never in sync: an environment never
 * scanned, or whose last scan could not observe it, is stale.
 */
export function fleetOf(environments: readonly Environment[], runs: readonly Run[]): FleetEntry[] {
  const newest = new Map<string, Run>();
  for (const run of runs) {
    const key = `${run.tenant}/${run.environment.id}`;
    const known = newest.get(key);
    if (!known || (isOpen(run) && !isOpen(known))) newest.set(key, run);
  }
  const entries = new Map<string, FleetEntry>();
  for (const environment of environments) {
    const key = `${environment.tenantId}/${environment.id}`;
    entries.set(key, entryOf(key, environment.tenantId, environment.name, environment.tier, environment.qualifiedStack, environment, newest.get(key)));
  }
  for (const [key, run] of newest) {
    if (!entries.has(key)) entries.set(key, entryOf(key, run.tenant, run.environment.name, run.environment.tier, run.qualifiedStack ?? run.stack, undefined, run));
  }
  return [...entries.values()].sort((a, b) => STANDINGS.indexOf(a.standing) - STANDINGS.indexOf(b.standing) || a.key.localeCompare(b.key));
}

function isOpen(run: Run): boolean {
  return OPEN.includes(run.state) || run.state === 'awaiting-approval';
}

function entryOf(key: string, tenant: string, name: string, tier: string, qualifiedStack: string, environment: Environment | undefined, run: Run | undefined): FleetEntry {
  const base = { key, tenant, name, tier, qualifiedStack, ...(environment ? { environment } : {}), ...(run ? { run } : {}) };
  if (run?.state === 'failed') return { ...base, standing: 'needs-attention', why: `run failed${run.error ? `: ${run.error.message}` : ''}` };
  if (run?.state === 'stale') return { ...base, standing: 'needs-attention', why: 'its plan went stale before it was approved: replan it' };
  if (run && OPEN.includes(run.state)) return { ...base, standing: 'running', why: `run ${run.state}` };
  if (run?.state === 'awaiting-approval') return { ...base, standing: 'waiting-for-approval', why: `plan waits for a second person's approval since ${new Date(run.updatedAt).toLocaleString()}` };
  const drift = environment?.drift;
  if (!environment || !drift) return { ...base, standing: 'stale', why: 'never applied to, never scanned' };
  if (drift.stale || !drift.lastScanAt) return { ...base, standing: 'stale', why: drift.lastObservedAt ? `not checked since ${new Date(drift.lastObservedAt).toLocaleString()}` : 'never scanned' };
  if (drift.status === 'drifted') return { ...base, standing: 'drifted', why: 'differs from what was applied' };
  if (drift.status === 'in-sync') return { ...base, standing: 'in-sync', why: `in sync at the scan of ${new Date(drift.lastScanAt).toLocaleString()}` };
  return { ...base, standing: 'stale', why: `drift status ${drift.status}` };
}
