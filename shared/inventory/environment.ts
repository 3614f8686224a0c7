import { isOpaque, SECRET_MASK, writePath, type JsonObject } from '../platform/iac/iac-values';
import { lazySchema } from '../platform/validation/lazy-schema';
import { fieldProblems, type FieldProblem } from '../platform/validation/validation';
import {
  formatPath,
  ignoreRuleProblems,
  type DriftFinding,
  type IgnoreRule,
  type DriftReport,
  type IgnoredFinding,
  type JsonValue,
  type ResourceState,
  type Resources,
  type Severity,
} from './drift';
import { kubernetesListKeys, sameListMapKey, type ListKeys } from './kubernetes-fields';
import type { DesiredResource, ObservedResource } from './observer';

/**
 * The inventory model: an environment's desired state as `SpecificationApplied` gives it, its drift status as a
 * reader must see it (a check that did not happen is never green), proposals' grouped findings and reconciliation
 * plans. Pure.
 */

/** An environment as inventory keeps it: its id is unique within its tenant only. */
export interface EnvironmentKey {
  readonly tenant: string;
  readonly id: string;
}

export const DRIFT_STATUSES = ['in-sync', 'drifted', 'unknown'] as const;
export type DriftStatus = (typeof DRIFT_STATUSES)[number];

const tiers = ['development', 'staging', 'production'] as const;

/** The members of `SpecificationApplied.data` inventory reads (run-events.ts is the producer). */
const specificationAppliedSchema = lazySchema((z) =>
  z.object({
    runId: z.string().min(1),
    tenantId: z.string().min(1),
    environment: z.object({ id: z.string().min(1), name: z.string().min(1), tier: z.enum(tiers) }),
    release: z.object({ name: z.string(), version: z.string() }),
    project: z.string().min(1),
    stack: z.string().min(1),
    resources: z.array(
      z.object({
        urn: z.string().min(1),
        type: z.string().min(1),
        op: z.string(),
        // The provider's id after the apply (azure-native: the ARM resource id), what the Azure observer matches by.
        id: z.string().optional(),
        properties: z.record(z.string(), z.json()).optional(),
        ignoreChanges: z.array(z.string()).optional(),
      }),
    ),
  }),
);

/** What one `SpecificationApplied` says an environment must hold. */
export interface DesiredState {
  readonly runId: string;
  readonly tenant: string;
  readonly environment: { readonly id: string; readonly name: string; readonly tier: (typeof tiers)[number] };
  readonly release: { readonly name: string; readonly version: string };
  /** With the tenant and `stack`, the stack's identity (`tenant/project/stack`). */
  readonly project: string;
  readonly stack: string;
  readonly resources: Resources;
  /** The project's own `ignoreChanges`, as rules: drift there is listed as ignored by them, never as a finding. */
  readonly projectRules: readonly IgnoreRule[];
}

/** Project rules last as long as the desired state that carries them: until the next `SpecificationApplied`. */
const PROJECT_RULES_EXPIRE = '9999-12-31T23:59:59.999Z';

/** The desired state in a `SpecificationApplied`'s data, or the problems that make it unreadable. */
export function desiredStateOf(data: unknown): { ok: DesiredState } | { problems: FieldProblem[] } {
  const parsed = specificationAppliedSchema().safeParse(data);
  if (!parsed.success) return { problems: fieldProblems(parsed.error, '(data)') };
  const d = parsed.data;
  const resources: Record<string, { type: string; id?: string; properties: { [key: string]: JsonValue } }> = {};
  // A deleted resource is not in the target any more; one without properties (an older producer) is desired with none.
  const projectRules: IgnoreRule[] = [];
  for (const r of d.resources) {
    if (r.op === 'delete') continue;
    resources[r.urn] = { type: r.type, ...(r.id ? { id: r.id } : {}), properties: r.properties ?? {} };
    for (const entry of r.ignoreChanges ?? []) {
      // Pulumi writes `rules[0].port`; ignore rules write `rules.0.port`. A path no rule can say stays a finding.
      const rule: IgnoreRule = {
        id: `project:${r.urn}:${entry}`,
        scope: { urn: r.urn },
        path: entry.replace(/\[(\d+)\]/g, '.$1'),
        reason: 'ignoreChanges of the resource in the project',
        owner: 'project',
        expiresAt: PROJECT_RULES_EXPIRE,
        holdsOnApply: true,
      };
      if (ignoreRuleProblems(rule).length === 0) projectRules.push(rule);
    }
  }
  return { ok: { runId: d.runId, tenant: d.tenantId, environment: d.environment, release: d.release, project: d.project, stack: d.stack, resources, projectRules } };
}

/** How a run ended, as `ProvisioningApplied` / `ProvisioningFailed` tell inventory (run-events.ts is the producer). */
export interface RunOutcome {
  readonly runId: string;
  readonly environment: EnvironmentKey;
  readonly state: string;
  /** Epoch ms, when the event says. */
  readonly finishedAt?: number;
  readonly code?: string;
}

/** The members of a run's terminal event inventory reads. */
const runOutcomeSchema = lazySchema((z) =>
  z.object({
    runId: z.string().min(1),
    tenantId: z.string().min(1),
    environment: z.object({ id: z.string().min(1) }),
    state: z.string().min(1),
    finishedAt: z.iso.datetime({ offset: true }).optional(),
    code: z.string().optional(),
  }),
);

/**
 * The run outcome of a terminal event's `data`; `none` for a `ProvisioningFailed` of a message rejected before any
 * run existed (it names the message, no run and no environment); or what is wrong with it.
 */
export function runOutcomeOf(data: unknown): { ok: RunOutcome } | { none: true } | { problems: FieldProblem[] } {
  const d = data as { runId?: unknown; messageId?: unknown } | undefined;
  if (d?.runId === undefined && typeof d?.messageId === 'string') return { none: true };
  const parsed = runOutcomeSchema().safeParse(data);
  if (!parsed.success) return { problems: fieldProblems(parsed.error, '(data)') };
  const r = parsed.data;
  return {
    ok: {
      runId: r.runId,
      environment: { tenant: r.tenantId, id: r.environment.id },
      state: r.state,
      ...(r.finishedAt !== undefined ? { finishedAt: Date.parse(r.finishedAt) } : {}),
      ...(r.code !== undefined ? { code: r.code } : {}),
    },
  };
}

/**
 * The observed resources as inventory keeps, shows, compares and publishes them. Wherever the desired value is
 * opaque (iac-values.ts `isOpaque`: a `{ secretRef }` or `{ configRef }` reference, a `{ "fn::computed": … }`
 * marker, or a runner's `"[secret]"` mask), at any depth, the observed value there, whatever its shape (text, a
 * whole object, an array), is replaced by that same marker: the value resolved at apply time is never stored,
 * served, put in a finding or published, and is not compared (it lives in the Secret Broker or the Config
 * Platform, not in Git). Where the target holds another shape than a desired value that has a marker inside it
 * (text where an object with a `{ secretRef }` member is desired), or more elements than a desired array that has
 * one, the observed value there is `"[secret]"`: it differs, and which part of it is secret no path says. This is
 * the only place observed values enter inventory.
 *
 * Elements of a list the target merges by key (a Kubernetes associative list: containers by name, env by name, …)
 * are matched with the desired element of the same key, wherever each is, as the comparison matches them
 * (kubernetes-fields.ts): a secret's marker follows its element, not its position.
 *
 * An unmanaged resource (observed, desired by no one) has no marker to go by: nothing says which of its values are
 * secret, and its finding names the resource, never a property. So inventory keeps its urn, type and id and none
 * of its property values.
 */
export function observedForInventory(desired: Resources, observed: readonly ObservedResource[]): Resources {
  const result: Record<string, { type: string; properties: { [key: string]: JsonValue } }> = {};
  for (const r of observed) {
    const want = Object.hasOwn(desired, r.urn) ? desired[r.urn] : undefined;
    const properties = want ? withMarkers(want.properties, r.properties, kubernetesListKeys(r.type), []) : {};
    result[r.urn] = { type: r.type, properties: properties as { [key: string]: JsonValue } };
  }
  return result;
}

/** The desired resources as an observer is told them (`ObservationScope.desired`). */
export function desiredResources(desired: Resources): DesiredResource[] {
  return Object.entries(desired).map(([urn, r]) => ({ urn, type: r.type, ...(r.id ? { id: r.id } : {}), properties: r.properties }));
}

/**
 * The desired side of the diff: the resources the observer can see (`reaches`; all when it does not say), each
 * without the paths its observation says it cannot show (`ObservedResource.uncompared`), which are neither equal
 * nor drift.
 */
export function desiredToCompare(desired: Resources, observed: readonly ObservedResource[], reaches: (resource: DesiredResource) => boolean = () => true): Resources {
  const uncompared = new Map(observed.map((r) => [r.urn, r.uncompared ?? []]));
  const result: Record<string, ResourceState> = {};
  for (const resource of desiredResources(desired)) {
    if (!reaches(resource)) continue;
    let properties: JsonValue = resource.properties;
    for (const path of uncompared.get(resource.urn) ?? []) properties = writePath(properties, path, undefined);
    result[resource.urn] = { ...desired[resource.urn]!, properties: properties as JsonObject };
  }
  return result;
}

/** `fieldPath` (object keys only) is kept only where `listKeys` asks for it. */
function withMarkers(desired: JsonValue, observed: JsonValue, listKeys: ListKeys | undefined, fieldPath: readonly string[]): JsonValue {
  if (isOpaque(desired)) return desired;
  const kind = (value: JsonValue) => (Array.isArray(value) ? 'array' : typeof value === 'object' && value !== null ? 'object' : 'scalar');
  if (kind(desired) === 'scalar') return observed;
  // The desired value holds a secret somewhere inside, and the target holds something of another shape there (or an
  // element past the desired ones): no path says which part is the secret, so none of it is kept. The finding still
  // shows that it differs.
  if (kind(desired) !== kind(observed)) return holdsOpaque(desired) ? SECRET_MASK : observed;
  if (Array.isArray(desired)) {
    const want: readonly JsonValue[] = desired;
    const extra = holdsOpaque(desired) ? SECRET_MASK : undefined;
    const keys = listKeys?.(fieldPath);
    return (observed as readonly JsonValue[]).map((o, i) => {
      const match = keys ? want.find((w) => sameListMapKey(w, o, keys)) : want[i];
      return match !== undefined ? withMarkers(match, o, listKeys, fieldPath) : (extra ?? o);
    });
  }
  const want = desired as { readonly [key: string]: JsonValue };
  const seen = observed as { readonly [key: string]: JsonValue };
  const out: Record<string, JsonValue> = {};
  for (const key of Object.keys(seen)) {
    out[key] = Object.hasOwn(want, key) ? withMarkers(want[key]!, seen[key]!, listKeys, listKeys ? [...fieldPath, key] : fieldPath) : seen[key]!;
  }
  return out;
}

function holdsOpaque(value: JsonValue): boolean {
  if (isOpaque(value)) return true;
  if (Array.isArray(value)) return (value as readonly JsonValue[]).some(holdsOpaque);
  return typeof value === 'object' && value !== null && Object.values(value).some(holdsOpaque);
}

/** What an environment's drift checks last did, as stored. Times are epoch ms. */
export interface DriftChecks {
  readonly intervalMs: number;
  readonly desiredAt: number;
  readonly lastScanAt?: number;
  readonly lastObservedAt?: number;
  readonly staleSince?: number;
  readonly staleReason?: string;
  /** in-sync or drifted as of `lastObservedAt`. */
  readonly observedStatus?: 'in-sync' | 'drifted';
  readonly scanDisabled?: { readonly by: string; readonly reason: string; readonly at: number };
}

/** The drift status a reader sees. Serialized shape (HTTP API): changing it is a breaking change. */
export interface DriftStatusView {
  readonly status: DriftStatus;
  /** True when the last observation failed: the status is unknown and `staleSince` says since when. */
  readonly stale: boolean;
  /** Why the status is unknown; absent otherwise. */
  readonly reason?: string;
  readonly lastObservedAt?: string;
  readonly staleSince?: string;
  readonly lastScanAt?: string;
}

/**
 * The status a reader sees at `now`: the observed status only while it is current. Unknown when the last
 * observation failed (stale), when no observation has happened, when the desired state changed after it, or when
 * none succeeded within twice the scan interval: a check that did not happen is never green.
 */
export function driftStatusAt(checks: DriftChecks, now: number): DriftStatusView {
  const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
  const times = {
    ...(checks.lastObservedAt !== undefined ? { lastObservedAt: iso(checks.lastObservedAt)! } : {}),
    ...(checks.staleSince !== undefined ? { staleSince: iso(checks.staleSince)! } : {}),
    ...(checks.lastScanAt !== undefined ? { lastScanAt: iso(checks.lastScanAt)! } : {}),
  };
  const unknown = (reason: string) => ({ status: 'unknown' as const, stale: checks.staleSince !== undefined, reason, ...times });
  if (checks.staleSince !== undefined) return unknown(`the last observation failed: ${checks.staleReason ?? 'no reason recorded'}`);
  if (checks.lastObservedAt === undefined || checks.observedStatus === undefined) return unknown('not observed yet');
  if (checks.desiredAt > checks.lastObservedAt) return unknown(`the desired state changed at ${iso(checks.desiredAt)} and has not been observed since`);
  if (now - checks.lastObservedAt > 2 * checks.intervalMs) {
    const paused = checks.scanDisabled ? `; scans are paused by ${checks.scanDisabled.by}: ${checks.scanDisabled.reason}` : '';
    return unknown(`not observed within twice the scan interval (${Math.round(checks.intervalMs / 1000)} s)${paused}`);
  }
  return { status: checks.observedStatus, stale: false, ...times };
}

/** Findings of one resource, highest severity first. Serialized shape (proposals): changing it is a breaking change. */
export interface ResourceFindings {
  readonly urn: string;
  readonly type: string;
  /** The highest severity among the resource's findings. */
  readonly severity: Severity;
  readonly findings: readonly DriftFinding[];
}

/** Findings grouped by resource; groups ordered by their highest severity, then urn (the report's own order). */
export function groupByResource(findings: readonly DriftFinding[]): ResourceFindings[] {
  const groups = new Map<string, { urn: string; type: string; severity: Severity; findings: DriftFinding[] }>();
  for (const finding of findings) {
    const group = groups.get(finding.urn);
    if (group) group.findings.push(finding);
    else groups.set(finding.urn, { urn: finding.urn, type: finding.type, severity: finding.severity, findings: [finding] });
  }
  // The report is sorted by severity then urn, so each group's first finding has its highest severity, in order.
  return [...groups.values()];
}

/**
 * What re-applying the desired state would do about the findings. Serialized shape (proposals): changing it is a
 * breaking change. The reconciliation run itself re-plans against what is really there (refresh), and that plan is
 * what gets approved and applied; this is the preview shown for review.
 */
export interface ReconciliationPlan {
  readonly steps: readonly { readonly urn: string; readonly type: string; readonly op: 'create' | 'replace' | 'update'; readonly paths?: readonly string[] }[];
  /** Unmanaged resources: not in the stack, so re-applying leaves them alone; import or remove them by hand. */
  readonly leftAlone: readonly string[];
  /** Changed paths that rules holding on apply keep as they are. */
  readonly keptByRules: readonly { readonly urn: string; readonly path: string; readonly ruleIds: readonly string[] }[];
}

export function reconciliationPlan(report: Pick<DriftReport, 'findings' | 'ignored'>): ReconciliationPlan {
  const steps: { urn: string; type: string; op: 'create' | 'replace' | 'update'; paths?: string[] }[] = [];
  const leftAlone: string[] = [];
  for (const group of groupByResource(report.findings)) {
    const kinds = new Set(group.findings.map((f) => f.kind));
    if (kinds.has('missing')) steps.push({ urn: group.urn, type: group.type, op: 'create' });
    else if (kinds.has('replaced')) steps.push({ urn: group.urn, type: group.type, op: 'replace' });
    else if (kinds.has('modified')) {
      const paths = group.findings.flatMap((f) => (f.kind === 'modified' ? [formatPath(f.path)] : []));
      steps.push({ urn: group.urn, type: group.type, op: 'update', paths });
    } else leftAlone.push(group.urn);
  }
  const keptByRules = report.ignored
    .filter((f): f is IgnoredFinding & { kind: 'modified' } => f.kind === 'modified' && f.holdsOnApply)
    .map((f) => ({ urn: f.urn, path: formatPath(f.path), ruleIds: f.ignoredBy }));
  return { steps, leftAlone, keptByRules };
}

/** Counts of findings by kind, for events and lists. */
export function countByKind(findings: readonly DriftFinding[]): Record<DriftFinding['kind'], number> {
  const counts = { missing: 0, replaced: 0, modified: 0, unmanaged: 0 };
  for (const f of findings) counts[f.kind]++;
  return counts;
}

/** The scan interval of an environment: by id, else by name, else the default. */
export function scanIntervalMs(policy: { readonly defaultMs: number; readonly byEnvironment: Readonly<Record<string, number>> }, environment: { readonly id: string; readonly name: string }): number {
  return policy.byEnvironment[environment.id] ?? policy.byEnvironment[environment.name] ?? policy.defaultMs;
}
