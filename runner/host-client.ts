import { AppError } from '../shared/platform/errors/app-error';
import type { ClaimedJob, Heartbeat, RunnerJobOutcome } from '../shared/platform/iac/runner-job';

/**
 * The agent's side of the runner job protocol (shared/platform/iac/runner-job.ts) over HTTP: the pool's claim with
 * the agent's pool credential, and each job's calls with that credential and the job's token. A problem+json answer becomes the AppError it
 * describes (its `code`), so the engine fails a job exactly as it would fail in the host.
 */
export interface HostClient {
  /** The next job of the pool, waiting up to `waitMs` on the host for one; undefined when none came. */
  claim(agent: string, waitMs: number): Promise<ClaimedJob | undefined>;
  job(claimed: ClaimedJob): JobClient;
}

export interface JobClient {
  heartbeat(beat: Heartbeat): Promise<void>;
  result(outcome: RunnerJobOutcome): Promise<void>;
  /**
   * Another call of the job, to `runtime-cloud/runner-jobs/{id}/<path>`, with the job's credentials: what a target the
   * host serves itself answers (the local host's local cloud: local/cloud/job-target-client.ts). Its answer's JSON,
   * undefined for 204; a problem+json answer is thrown as the AppError it describes.
   */
  call(method: 'GET' | 'PUT' | 'POST', path: string, body?: unknown): Promise<unknown>;
}

export function hostClient(options: {
  readonly hostUrl: URL;
  readonly pool: string;
  readonly credential: () => Promise<string>;
  /** Ends a claim waiting on the host (the agent is stopping). */
  readonly signal?: AbortSignal;
}): HostClient {
  const call = async (path: string, init: { method: string; jobToken?: string; body?: unknown; signal?: AbortSignal }): Promise<unknown> => {
    const response = await fetch(new URL(path, options.hostUrl), {
      method: init.method,
      ...(init.signal ? { signal: init.signal } : {}),
      headers: {
        authorization: `Bearer ${await options.credential()}`,
        ...(init.jobToken !== undefined ? { 'x-runner-job-token': init.jobToken } : {}),
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    });
    if (response.status === 204) return undefined;
    const text = await response.text();
    if (!response.ok) throw problemError(response.status, text);
    return text.length > 0 ? (JSON.parse(text) as unknown) : undefined;
  };
  const pool = encodeURIComponent(options.pool);
  return {
    async claim(agent, waitMs) {
      const claimed = await call(`runtime-cloud/runner-pools/${pool}/claim?waitMs=${waitMs}`, { method: 'POST', body: { agent }, ...(options.signal ? { signal: options.signal } : {}) });
      return claimed as ClaimedJob | undefined;
    },
    job(claimed) {
      const base = `runtime-cloud/runner-jobs/${encodeURIComponent(claimed.job.id)}`;
      // Every call of the job carries the pool credential and the job's token: the host wants both.
      const jobToken = claimed.token;
      return {
        heartbeat: async (beat) => void (await call(`${base}/heartbeat`, { method: 'POST', jobToken, body: beat })),
        result: async (outcome) => void (await call(`${base}/result`, { method: 'POST', jobToken, body: outcome })),
        call: (method, path, body) => call(`${base}/${path}`, { method, jobToken, ...(body !== undefined ? { body } : {}) }),
      };
    },
  };
}

/** The AppError a problem+json answer describes; anything else is a fault of the call. */
function problemError(status: number, text: string): Error {
  try {
    const problem = JSON.parse(text) as { code?: unknown; detail?: unknown; title?: unknown };
    if (typeof problem.code === 'string') {
      const kind = status === 409 ? 'conflict' : status === 404 ? 'not-found' : status === 401 ? 'unauthorized' : status === 403 ? 'forbidden' : status === 503 ? 'unavailable' : status >= 500 ? 'internal' : 'validation';
      return new AppError(problem.code, kind, typeof problem.detail === 'string' ? problem.detail : typeof problem.title === 'string' ? problem.title : problem.code);
    }
  } catch {
    // Not JSON: described below.
  }
  return new Error(`the host answered ${status}: ${text.slice(0, 500)}`);
}
