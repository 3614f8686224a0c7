/**
 * Orchestration versioning as the Durable extension applies it (host.json `extensions.durableTask`): an instance gets
 * a version when it is created (the client's `version`, else `defaultVersion`; a sub-orchestration likewise) and
 * keeps it; the orchestrator reads it as `context.df.version`. A worker runs an instance only when its version
 * matches the worker's `defaultVersion` by `versionMatchStrategy` (`None`, `Strict`, `CurrentOrOlder`: the default);
 * otherwise, by `versionFailureStrategy`, it leaves the instance for a worker that matches (`Reject`: the default) or
 * fails it (`Fail`). Without a `defaultVersion` no version is checked. Pure: the host.json values come in.
 */

export const MATCH_STRATEGIES = ['None', 'Strict', 'CurrentOrOlder'] as const;
export const FAILURE_STRATEGIES = ['Reject', 'Fail'] as const;

export interface DurableVersioning {
  /** The version of new instances without one, and the version this worker runs. */
  readonly defaultVersion?: string;
  readonly match: (typeof MATCH_STRATEGIES)[number];
  readonly failure: (typeof FAILURE_STRATEGIES)[number];
}

export const NO_VERSIONING: DurableVersioning = { match: 'CurrentOrOlder', failure: 'Reject' };

/**
 * The versioning settings from host.json's values (undefined where absent). A value the extension would not take is
 * an error naming the setting: the host does not start on it, rather than run every version unchecked.
 */
export function parseDurableVersioning(settings: { readonly defaultVersion?: string | undefined; readonly versionMatchStrategy?: unknown; readonly versionFailureStrategy?: unknown }): DurableVersioning {
  const { defaultVersion, versionMatchStrategy, versionFailureStrategy } = settings;
  return {
    ...(defaultVersion ? { defaultVersion } : {}),
    match: oneOf('versionMatchStrategy', versionMatchStrategy, MATCH_STRATEGIES) ?? 'CurrentOrOlder',
    failure: oneOf('versionFailureStrategy', versionFailureStrategy, FAILURE_STRATEGIES) ?? 'Reject',
  };
}

/** The setting's value among `allowed` (without case, as .NET reads an enum), undefined when absent. */
function oneOf<T extends string>(name: string, value: unknown, allowed: readonly T[]): T | undefined {
  if (value === undefined) return undefined;
  const found = allowed.find((a) => typeof value === 'string' && a.toLowerCase() === value.toLowerCase());
  if (!found) throw new Error(`host.json extensions.durableTask.${name} must be one of ${allowed.join(', ')}, not ${JSON.stringify(value)}`);
  return found;
}

/**
 * Compares two versions as the extension does: empty or absent versions are equal and older than any other; two
 * versions that are both .NET `System.Version`s (2 to 4 numbers) by their numbers, a missing part older than 0;
 * anything else as text without case. Negative when `a` is older.
 */
export function compareVersions(a: string | null | undefined, b: string | null | undefined): number {
  const left = a ?? '';
  const right = b ?? '';
  if (left === '' || right === '') return (left === '' ? 0 : 1) - (right === '' ? 0 : 1);
  const x = dotnetVersion(left);
  const y = dotnetVersion(right);
  if (x && y) {
    for (let i = 0; i < 4; i++) {
      const d = (x[i] ?? -1) - (y[i] ?? -1);
      if (d !== 0) return Math.sign(d);
    }
    return 0;
  }
  const [p, q] = [left.toUpperCase(), right.toUpperCase()];
  return p < q ? -1 : p > q ? 1 : 0;
}

/** `System.Version.TryParse`: 2 to 4 non-negative 32-bit numbers separated by dots. */
function dotnetVersion(text: string): number[] | undefined {
  if (!/^\s*\d+(\.\d+){1,3}\s*$/.test(text)) return undefined;
  const parts = text.trim().split('.').map(Number);
  return parts.every((n) => n <= 2_147_483_647) ? parts : undefined;
}

/**
 * Why this worker may not run an instance of `version`, or undefined when it may (no `defaultVersion`, strategy
 * `None`, or a match).
 */
export function versionMismatch(versioning: DurableVersioning, version: string | null): string | undefined {
  const worker = versioning.defaultVersion;
  if (worker === undefined || versioning.match === 'None') return undefined;
  const order = compareVersions(version, worker);
  if (versioning.match === 'Strict' ? order === 0 : order <= 0) return undefined;
  const shown = version === null || version === '' ? 'no version' : `version '${version}'`;
  return versioning.match === 'Strict'
    ? `the orchestration has ${shown}; this worker runs only version '${worker}' (versionMatchStrategy Strict)`
    : `the orchestration has ${shown}, newer than this worker's version '${worker}' (versionMatchStrategy CurrentOrOlder)`;
}
