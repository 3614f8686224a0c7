export type HealthStatus = 'healthy' | 'degraded' | 'unhealthy';

export interface HealthCheckResult {
  readonly name: string;
  readonly status: HealthStatus;
  readonly latencyMs: number;
  readonly error?: string;
  readonly details?: Readonly<Record<string, unknown>>;
}

/** One dependency check. `critical` checks make the host unhealthy when they fail; others degrade it. */
export interface HealthCheck {
  readonly name: string;
  readonly critical: boolean;
  /** Resolves with details when healthy, `{status:'degraded', …}` to report a soft problem; throws when down. */
  run(): Promise<{ status?: HealthStatus; details?: Record<string, unknown>; error?: string } | void>;
}

const TIMEOUT_MS = 5_000;

export async function runHealthChecks(checks: readonly HealthCheck[]): Promise<{ status: HealthStatus; checks: HealthCheckResult[] }> {
  const results = await Promise.all(checks.map(runOne));
  const worst = results.reduce<HealthStatus>((acc, r, i) => {
    if (r.status === 'healthy') return acc;
    const failedHard = r.status === 'unhealthy' && checks[i]?.critical;
    if (failedHard) return 'unhealthy';
    return acc === 'unhealthy' ? acc : 'degraded';
  }, 'healthy');
  return { status: worst, checks: results };
}

async function runOne(check: HealthCheck): Promise<HealthCheckResult> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    });
    const outcome = (await Promise.race([check.run(), timeout])) ?? {};
    return {
      name: check.name,
      status: outcome.status ?? 'healthy',
      latencyMs: elapsed(started),
      ...(outcome.error ? { error: outcome.error } : {}),
      ...(outcome.details ? { details: outcome.details } : {}),
    };
  } catch (error) {
    return {
      name: check.name,
      status: 'unhealthy',
      latencyMs: elapsed(started),
      error: error instanceof Error ? error.message : String(error),
    };
  } finally {
    clearTimeout(timer);
  }
}

function elapsed(started: number): number {
  return Math.round((performance.now() - started) * 10) / 10;
}
