import type { CloudApply, CloudResource, LocalCloud } from '../local/cloud/local-cloud';
import { AppError } from '../shared/platform/errors/app-error';
import type { StackState } from '../shared/platform/iac/plan';
import type { ClaimedJob, Heartbeat, RunnerJobOutcome, TargetCall } from '../shared/platform/iac/runner-job';
import type { StackStates } from '../local/engine/stack-state.repository';

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
  /** The local cloud target and the stack's state, through the job's endpoints (local cloud targets only). */
  readonly states: StackStates;
  readonly cloud: LocalCloud;
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
      const target = async (body: TargetCall) => (await call(`${base}/target`, { method: 'POST', jobToken, body })) as { resource?: CloudResource; deleted?: boolean };
      const resourceOf = async (body: TargetCall) => {
        const { resource } = await target(body);
        if (!resource) throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', 'the target answered without the resource');
        return resource;
      };
      const notForJobs = (): never => {
        throw new AppError('RUNNER.CALL_REFUSED', 'forbidden', 'a job reaches only its own stack on its target');
      };
      const targetName = claimed.job.target;
      let known = claimed.state;
      return {
        heartbeat: async (beat) => void (await call(`${base}/heartbeat`, { method: 'POST', jobToken, body: beat })),
        result: async (outcome) => void (await call(`${base}/result`, { method: 'POST', jobToken, body: outcome })),
        states: {
          // The job is the stack's only writer while it runs: the state is the claim's, then the job's own last write.
          read: async () => {
            if (known === undefined) known = ((await call(`${base}/state`, { method: 'GET', jobToken })) as { state: StackState | null }).state;
            return known ?? undefined;
          },
          write: async (_stack, state) => {
            await call(`${base}/state`, { method: 'PUT', jobToken, body: state });
            known = state;
          },
          probe: async () => undefined,
        },
        cloud: {
          create: (t, resource) => (t === targetName ? resourceOf({ op: 'create', urn: resource.urn, type: resource.type, properties: resource.properties as Record<string, never> }) : notForJobs()),
          update: (t, id, properties) => (t === targetName ? resourceOf({ op: 'update', id, properties: properties as Record<string, never> }) : notForJobs()),
          adopt: (t, id, urn) => (t === targetName ? resourceOf({ op: 'adopt', id, urn }) : notForJobs()),
          delete: async (t, id) => (t === targetName ? ((await target({ op: 'delete', id })).deleted ?? false) : notForJobs()),
          get: async (t, id) => (t === targetName ? (await target({ op: 'get', id })).resource : notForJobs()),
          recordApply: async (t, apply) => void (t === targetName ? await target({ op: 'recordApply', planDigest: apply.planDigest }) : notForJobs()),
          list: notForJobs,
          listStack: notForJobs,
          setReachable: notForJobs,
          isReachable: notForJobs,
          applies: (): Promise<CloudApply[]> => notForJobs(),
        },
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
