import { createHash } from 'node:crypto';
import { ignorePathProblem } from '../platform/iac/iac-values';

/**
 * Drift: the pure diff of one environment's desired resources (the last applied plan) against its observed ones
 * (no I/O). It finds:
 *
 * - `missing`: desired, not observed;
 * - `replaced`: observed under the same urn with another type. One finding, not missing + unmanaged: the urn is
 *   the resource's identity, and re-applying the desired state replaces it (delete, then create); property paths
 *   between two types mean nothing, so none are reported for it;
 * - `modified`: one finding per differing property path, with the desired and the observed value there (either
 *   absent when that side lacks the property). Objects are compared key by key, arrays index by index; where the
 *   two sides differ in kind (object, array, scalar, null) the finding is at that path, with both whole values.
 *   A type whose target adds to what was desired may be compared its own way instead (`compareAs`: Kubernetes
 *   types as server-side apply sees them, kubernetes-fields.ts);
 * - `unmanaged`: observed, not desired.
 *
 * Severity (what must hold): a missing or replaced resource (`high`) ranks above a changed property (`medium`),
 * which ranks above an unmanaged extra (`low`).
 *
 * Ignore rules are recorded objects. A rule that has expired (expiresAt ≤ now) stops applying. A finding a rule
 * matches is never dropped: it is listed under `ignored` with the ids of every rule that matched it, and it does
 * not count towards the fingerprint or the drift status.
 */

/** A JSON value as properties carry it. */
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** Serialized shape (stored with inventories and plans): changing it is a breaking change. */
export interface ResourceState {
  readonly type: string;
  /** The provider's id (desired state: from the stack state, when the apply gave one). Not compared. */
  readonly id?: string;
  readonly properties: { readonly [key: string]: JsonValue };
}

/** Resources of one environment by urn. Serialized shape: changing it is a breaking change. */
export type Resources = { readonly [urn: string]: ResourceState };

/** One step of a property path: an object key or an array index. */
export type PathSegment = string | number;

/** Serialized shape (an ignore rule's scope): changing it is a breaking change. */
export type IgnoreScope = { readonly type: string } | { readonly urn: string };

/**
 * A recorded ignore rule. Serialized shape (stored, and in the HTTP API): changing it is a breaking change.
 *
 * `path` is dot-separated (`sku.capacity`, `siteConfig.appSettings.1.value`; array indexes as numbers). It matches
 * exactly that property path; a trailing `.*` (`tags.*`) matches the property and its whole subtree; `*` alone
 * matches every property of the scope and also the resource-level findings (missing, replaced, unmanaged), which
 * no other path matches. Keys containing a dot cannot be addressed; `*` anywhere but last, and an all-digit
 * segment past `MAX_PATH_INDEX` (10,000), are problems (`ignoreRuleProblems`, which asks the same function as the
 * engines that apply rules holding on apply: iac-values.ts `ignorePathProblem`).
 *
 * @example { id: 'ir_1', scope: { type: 'azure-native:web:WebApp' }, path: 'tags.*', reason: 'tags are set by
 *   the cost tool', owner: 'platform-team', expiresAt: '2027-01-01T00:00:00.000Z', holdsOnApply: true }
 */
export interface IgnoreRule {
  readonly id: string;
  readonly scope: IgnoreScope;
  readonly path: string;
  readonly reason: string;
  readonly owner: string;
  /** ISO-8601 UTC. A rule whose expiry does not parse counts as expired: it never silences drift by mistake. */
  readonly expiresAt: string;
  /** True: re-applying the desired state leaves the ignored values alone too. False: it only silences the alarm. */
  readonly holdsOnApply: boolean;
}

export const DRIFT_KINDS = ['missing', 'replaced', 'modified', 'unmanaged'] as const;
export type DriftKind = (typeof DRIFT_KINDS)[number];

/** Highest first. */
export const SEVERITIES = ['high', 'medium', 'low'] as const;
export type Severity = (typeof SEVERITIES)[number];

/** Serialized shape (in proposals and events): changing it is a breaking change. */
export interface MissingFinding {
  readonly kind: 'missing';
  readonly severity: 'high';
  readonly urn: string;
  readonly type: string;
}

/** Serialized shape (in proposals and events): changing it is a breaking change. `type` is the desired type. */
export interface ReplacedFinding {
  readonly kind: 'replaced';
  readonly severity: 'high';
  readonly urn: string;
  readonly type: string;
  readonly observedType: string;
}

/**
 * Serialized shape (in proposals and events): changing it is a breaking change. `desired` or `observed` is absent
 * when that side lacks the property (which is not the same as a `null` value).
 */
export interface ModifiedFinding {
  readonly kind: 'modified';
  readonly severity: 'medium';
  readonly urn: string;
  readonly type: string;
  readonly path: readonly PathSegment[];
  readonly desired?: JsonValue;
  readonly observed?: JsonValue;
}

/** Serialized shape (in proposals and events): changing it is a breaking change. */
export interface UnmanagedFinding {
  readonly kind: 'unmanaged';
  readonly severity: 'low';
  readonly urn: string;
  readonly type: string;
}

export type DriftFinding = MissingFinding | ReplacedFinding | ModifiedFinding | UnmanagedFinding;

/** A finding rules matched: listed, never dropped. Serialized shape: changing it is a breaking change. */
export type IgnoredFinding = DriftFinding & {
  /** Ids of every unexpired rule that matched, sorted. */
  readonly ignoredBy: readonly string[];
  /** True when any of them holds on apply. */
  readonly holdsOnApply: boolean;
};

/** Serialized shape (stored per scan, in proposals): changing it is a breaking change. */
export interface DriftReport {
  /** Findings no rule matched, by severity (highest first), then urn, then path. */
  readonly findings: readonly DriftFinding[];
  /** Findings rules matched, in the same order. */
  readonly ignored: readonly IgnoredFinding[];
  /** Ids of the given rules that had expired at `now` and so applied to nothing, sorted. */
  readonly expiredRules: readonly string[];
  /** sha-256 (hex) of the canonical form of `findings`: the same findings give the same value in any input order. */
  readonly fingerprint: string;
}

const SEVERITY_RANK: Record<Severity, number> = { high: 0, medium: 1, low: 2 };

/** One differing property path as a type's own comparison finds it; `desired` or `observed` absent as in `ModifiedFinding`. */
export interface PropertyDifference {
  readonly path: readonly PathSegment[];
  readonly desired?: JsonValue;
  readonly observed?: JsonValue;
}

/** A type's own comparison of desired with observed properties: each difference becomes a `modified` finding. */
export type PropertyComparison = (desired: ResourceState['properties'], observed: ResourceState['properties']) => readonly PropertyDifference[];

/**
 * Diffs desired against observed resources of one environment under the rules unexpired at `now`. `compareAs` gives
 * the comparison of a type compared its own way; without one (or for a type it gives none), every property both ways.
 */
export function diffResources(
  desired: Resources,
  observed: Resources,
  rules: readonly IgnoreRule[],
  now: Date,
  compareAs?: (type: string) => PropertyComparison | undefined,
): DriftReport {
  const all: DriftFinding[] = [];
  for (const urn in desired) {
    const want = desired[urn]!;
    const seen = Object.hasOwn(observed, urn) ? observed[urn] : undefined;
    if (seen === undefined) all.push({ kind: 'missing', severity: 'high', urn, type: want.type });
    else if (seen.type !== want.type) all.push({ kind: 'replaced', severity: 'high', urn, type: want.type, observedType: seen.type });
    else {
      const compare = compareAs?.(want.type);
      if (!compare) diffObject(urn, want.type, want.properties, seen.properties, [], all);
      else for (const d of compare(want.properties, seen.properties)) all.push(modified(urn, want.type, d.path, d.desired, d.observed));
    }
  }
  for (const urn in observed) {
    if (!Object.hasOwn(desired, urn)) all.push({ kind: 'unmanaged', severity: 'low', urn, type: observed[urn]!.type });
  }
  all.sort(compareFindings);

  const { index, expired } = compileRules(rules, now);
  const findings: DriftFinding[] = [];
  const ignored: IgnoredFinding[] = [];
  for (const finding of all) {
    const matched = index.size === 0 ? undefined : matchingRules(index, finding);
    if (matched === undefined) findings.push(finding);
    else ignored.push({ ...finding, ignoredBy: matched.map((r) => r.id).sort(), holdsOnApply: matched.some((r) => r.holdsOnApply) });
  }
  return { findings, ignored, expiredRules: expired.sort(), fingerprint: fingerprintFindings(findings) };
}

/** Highest severity first, then urn, then path (segment by segment; a prefix before what extends it). */
export function compareFindings(a: DriftFinding, b: DriftFinding): number {
  const bySeverity = SEVERITY_RANK[a.severity] - SEVERITY_RANK[b.severity];
  if (bySeverity !== 0) return bySeverity;
  if (a.urn !== b.urn) return a.urn < b.urn ? -1 : 1;
  const pa = a.kind === 'modified' ? a.path : [];
  const pb = b.kind === 'modified' ? b.path : [];
  for (let i = 0; i < pa.length && i < pb.length; i++) {
    const sa = String(pa[i]);
    const sb = String(pb[i]);
    if (sa !== sb) return sa < sb ? -1 : 1;
  }
  return pa.length - pb.length;
}

/**
 * sha-256 (hex) over the sorted canonical lines of the findings (object keys sorted at every depth), so neither the
 * order of the findings nor the key order of their values changes it, and any change of kind, urn, type, path or
 * value does.
 */
export function fingerprintFindings(findings: readonly DriftFinding[]): string {
  const lines = findings.map(canonicalFinding).sort();
  const hash = createHash('sha256');
  for (const line of lines) hash.update(`${line}\n`);
  return hash.digest('hex');
}

/** The display form of a property path, as ignore rules write it. */
export function formatPath(path: readonly PathSegment[]): string {
  return path.map(String).join('.');
}

/** What is wrong with a rule to be recorded; empty when it may be recorded. */
export function ignoreRuleProblems(rule: IgnoreRule): string[] {
  const problems: string[] = [];
  if (!rule.id) problems.push('id is required');
  const scopeValue = 'urn' in rule.scope ? rule.scope.urn : rule.scope.type;
  if (!scopeValue) problems.push('scope needs a type or a urn');
  const pathProblem = ignorePathProblem(rule.path);
  if (pathProblem) problems.push(pathProblem);
  if (!rule.reason.trim()) problems.push('reason is required');
  if (!rule.owner.trim()) problems.push('owner is required');
  if (Number.isNaN(Date.parse(rule.expiresAt))) problems.push('expiresAt must be an ISO-8601 time');
  return problems;
}

// ---- the diff ------------------------------------------------------------------------------------------------

type JsonObject = { readonly [key: string]: JsonValue };

/** `path` is a stack shared down the recursion: it is copied only into a finding, so equal subtrees allocate nothing. */
function diffObject(urn: string, type: string, want: JsonObject, seen: JsonObject, path: PathSegment[], out: DriftFinding[]): void {
  for (const key in want) {
    path.push(key);
    if (Object.hasOwn(seen, key)) diffValue(urn, type, want[key]!, seen[key]!, path, out);
    else out.push(modified(urn, type, path, want[key], undefined));
    path.pop();
  }
  for (const key in seen) {
    if (Object.hasOwn(want, key)) continue;
    path.push(key);
    out.push(modified(urn, type, path, undefined, seen[key]));
    path.pop();
  }
}

function diffValue(urn: string, type: string, want: JsonValue, seen: JsonValue, path: PathSegment[], out: DriftFinding[]): void {
  if (want === seen) return;
  if (typeof want === 'object' && typeof seen === 'object' && want !== null && seen !== null) {
    const wantArray = Array.isArray(want);
    if (wantArray === Array.isArray(seen)) {
      if (wantArray) diffArray(urn, type, want as readonly JsonValue[], seen as readonly JsonValue[], path, out);
      else diffObject(urn, type, want as JsonObject, seen as JsonObject, path, out);
      return;
    }
  }
  out.push(modified(urn, type, path, want, seen));
}

function diffArray(urn: string, type: string, want: readonly JsonValue[], seen: readonly JsonValue[], path: PathSegment[], out: DriftFinding[]): void {
  const length = Math.max(want.length, seen.length);
  for (let i = 0; i < length; i++) {
    path.push(i);
    if (i >= seen.length) out.push(modified(urn, type, path, want[i], undefined));
    else if (i >= want.length) out.push(modified(urn, type, path, undefined, seen[i]));
    else diffValue(urn, type, want[i]!, seen[i]!, path, out);
    path.pop();
  }
}

function modified(urn: string, type: string, path: readonly PathSegment[], desired: JsonValue | undefined, observed: JsonValue | undefined): ModifiedFinding {
  return {
    kind: 'modified',
    severity: 'medium',
    urn,
    type,
    path: path.slice(),
    ...(desired !== undefined ? { desired } : {}),
    ...(observed !== undefined ? { observed } : {}),
  };
}

// ---- ignore rules ----------------------------------------------------------------------------------------------

interface CompiledRule {
  readonly id: string;
  readonly holdsOnApply: boolean;
  /** The path's segments without a trailing `*`. */
  readonly segments: readonly string[];
  /** A trailing `*`: the subtree under `segments` (all of it for `*` alone). */
  readonly subtree: boolean;
}

/** Unexpired rules keyed by `urn:<urn>` or `type:<type>`; the ids of the expired ones. */
function compileRules(rules: readonly IgnoreRule[], now: Date): { index: Map<string, CompiledRule[]>; expired: string[] } {
  const index = new Map<string, CompiledRule[]>();
  const expired: string[] = [];
  for (const rule of rules) {
    const expiresAt = Date.parse(rule.expiresAt);
    if (!(expiresAt > now.getTime())) {
      expired.push(rule.id);
      continue;
    }
    const segments = rule.path.split('.');
    const subtree = segments[segments.length - 1] === '*';
    if (subtree) segments.pop();
    const key = 'urn' in rule.scope ? `urn:${rule.scope.urn}` : `type:${rule.scope.type}`;
    const list = index.get(key) ?? [];
    list.push({ id: rule.id, holdsOnApply: rule.holdsOnApply, segments, subtree });
    index.set(key, list);
  }
  return { index, expired };
}

function matchingRules(index: Map<string, CompiledRule[]>, finding: DriftFinding): CompiledRule[] | undefined {
  const candidates = [
    ...(index.get(`urn:${finding.urn}`) ?? []),
    ...(index.get(`type:${finding.type}`) ?? []),
    ...(finding.kind === 'replaced' ? (index.get(`type:${finding.observedType}`) ?? []) : []),
  ];
  const matched = candidates.filter((rule) => ruleMatches(rule, finding));
  return matched.length > 0 ? [...new Set(matched)] : undefined;
}

function ruleMatches(rule: CompiledRule, finding: DriftFinding): boolean {
  if (finding.kind !== 'modified') return rule.subtree && rule.segments.length === 0;
  const path = finding.path;
  if (rule.subtree ? path.length < rule.segments.length : path.length !== rule.segments.length) return false;
  return rule.segments.every((segment, i) => segment === String(path[i]));
}

// ---- canonical form ------------------------------------------------------------------------------------------

function canonicalFinding(finding: DriftFinding): string {
  switch (finding.kind) {
    case 'missing':
    case 'unmanaged':
      return canonicalJson({ kind: finding.kind, urn: finding.urn, type: finding.type });
    case 'replaced':
      return canonicalJson({ kind: finding.kind, urn: finding.urn, type: finding.type, observedType: finding.observedType });
    case 'modified':
      return canonicalJson({
        kind: finding.kind,
        urn: finding.urn,
        type: finding.type,
        path: finding.path,
        ...(finding.desired !== undefined ? { desired: finding.desired } : {}),
        ...(finding.observed !== undefined ? { observed: finding.observed } : {}),
      });
  }
}

/** JSON with object keys sorted at every depth. */
export function canonicalJson(value: JsonValue): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${(value as readonly JsonValue[]).map(canonicalJson).join(',')}]`;
  const object = value as JsonObject;
  const keys = Object.keys(object).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(object[k]!)}`).join(',')}}`;
}
