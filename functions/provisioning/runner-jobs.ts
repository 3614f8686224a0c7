import { crashPoint } from '../../shared/platform/faults/crash-points';
import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import * as df from 'durable-functions';
import { AppError } from '../../shared/platform/errors/app-error';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import type { Deps } from '../../shared/deps';
import { describeHandler, endpoint, errorResponse, type Documented } from '../http/endpoint';
import { moduleApp } from '../app';
import { getDeps } from '../runtime';
import { logOf } from '../log';
import type { JobCaller } from '../../shared/provisioning/provisioning.service';
import { requireScope } from '../../shared/platform/auth/auth';
import { RUNNER_RESULT_EVENT, type RunnerResultEvent } from './provisioning-run.orchestrator';
import { problemError } from '../../shared/platform/errors/catalogue';
import { ProvisioningErrors } from '../../shared/provisioning/errors';

/** What the runner pool views answer (runner-pools.service.ts `RunnerPoolView`, `RunnerAgentView`), for the OpenAPI document. */
const runnerPoolsSchema = lazySchema((z) =>
  z.object({
    items: z.array(
      z.object({
        pool: z.string(),
        target: z.string(),
        engine: z.enum(['local', 'pulumi']),
        capacityPool: z.string(),
        tenants: z.array(z.string()),
        agentsOnline: z.number().int(),
        jobsRunning: z.number().int(),
        jobsWaiting: z.number().int(),
      }),
    ),
  }),
);
const runnerAgentsSchema = lazySchema((z) => z.object({ items: z.array(z.object({ agent: z.string(), online: z.boolean(), jobId: z.string().optional(), lastHeartbeat: z.string() })) }));

/**
 * The runner agents' endpoints (runner-job-agents.service.ts) and the operators' view of runner pools.
 * - An agent claims work for its pool with its pool credential (scope `factory.runner.agent`, bound to the pool).
 * - Every call of a claimed job carries both: the pool credential as the bearer token, and the job's token in
 *   `X-Runner-Job-Token`, for that job only: its heartbeat and its result (and, on the local host's local cloud
 *   targets, its stack state and target calls: local/cloud/job-target-functions.ts). A job token that leaked is of no use to an agent of another pool or tenant.
 */

/** Results carry a whole plan or apply receipt: larger bodies than the API's other requests. */
const MAX_JOB_BODY_BYTES = 8 * 1024 * 1024;

const claimBody = lazySchema((z) => z.object({ agent: z.string().regex(/^[A-Za-z0-9._:-]{1,200}$/, 'an agent id is 1 to 200 letters, digits, ".", "_", ":" and "-"') }));

/** How long a claim waits for a job (a long poll). */
const claimQuery = lazySchema((z) => z.object({ waitMs: z.coerce.number().int().min(0).max(30_000).default(0) }));

export const claimJob = endpoint({
  tag: 'Runner agents',
  summary: 'Claim the next job of a runner pool',
  description:
    "A runner agent claims the next queued job of its pool, on its pool's target and of the tenants the pool serves, waiting up to " +
    '`waitMs` (at most 30 s) for one: 200 with the job (its kind, files and their digest, config and secret references, for an apply ' +
    "the approved plan and its references' resolved values) and the job's token, which every call of the job then carries in " +
    "`X-Runner-Job-Token`; 204 when none came. Called with the pool's credential (scope `factory.runner.agent`, bound to the pool): " +
    "403 `RUNNER.POOL_MISMATCH` for another pool's credential, 404 `RUNNER.POOL_NOT_FOUND` for a pool no target has.",
  scope: 'factory.runner.agent',
  body: claimBody,
  query: claimQuery,
}, async ({ request, deps, principal, body, query }) => {
  const pool = request.params.pool ?? '';
  if (principal.runnerPool !== pool) {
    throw problemError(ProvisioningErrors.poolMismatch, `this credential serves runner pool ${principal.runnerPool ?? '(none)'}, not ${pool}`, { pool });
  }
  const claimed = await deps.provisioning.runners.claim(pool, body.agent, query.waitMs);
  // The run is not woken: while its job is queued it looks again every job lease, and then waits on the lease.
  return claimed ? { status: 200, jsonBody: claimed } : { status: 204 };
});

export const listRunnerPools = endpoint({
  tag: 'Runner pools',
  summary: 'List runner agent pools',
  description:
    "Each runner agent pool: its target and capacity pool, the tenants it serves, agents online, jobs running and waiting (the installation's " +
    "configured groups, and tenants' own pools with open jobs or agents online). A token bound to a tenant sees only the pools serving " +
    'its tenant, since a pool names the tenants it serves.',
  scope: 'factory.runtime.read',
  response: runnerPoolsSchema,
}, async ({ deps, principal }) => ({
  status: 200,
  jsonBody: { items: await deps.provisioning.runners.pools(principal.tenant) },
}));

export const listRunnerAgents = endpoint({
  tag: 'Runner pools',
  summary: "List a runner pool's agents",
  description:
    'The agents of one runner pool: whether each is online, the job it runs and its last heartbeat. 404 `RUNNER.POOL_NOT_FOUND` for a ' +
    'pool no target has, and for a token bound to a tenant also for a pool not serving its tenant.',
  scope: 'factory.runtime.read',
  response: runnerAgentsSchema,
}, async ({ request, deps, principal }) => ({
  status: 200,
  jsonBody: { items: await deps.provisioning.runners.agents(request.params.pool ?? '', principal.tenant) },
}));

export type JobCall = (input: { deps: Deps; caller: JobCaller; text: string; context: InvocationContext }) => Promise<HttpResponseInit>;

/** The header that carries a job's token on its calls (the bearer token is the agent's pool credential). */
export const JOB_TOKEN_HEADER = 'x-runner-job-token';

/**
 * A call of one job, authenticated by the agent's pool credential (`Authorization: Bearer`, scope
 * `factory.runner.agent`) and the job's token (`X-Runner-Job-Token`), its errors as problem+json. Its body goes to
 * the service as sent, and is validated there: the job protocol's schemas reach the YAML parser, which registering
 * the functions must not load (cold start).
 */
export function jobEndpoint(text: Documented, call: JobCall) {
  const handler = async (request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> => {
    try {
      const deps = await getDeps();
      const principal = await deps.auth.authenticate(request.headers.get('authorization'));
      requireScope(principal, 'factory.runner.agent');
      const token = /^([A-Za-z0-9_-]{20,200})$/.exec(request.headers.get(JOB_TOKEN_HEADER) ?? '')?.[1];
      if (!token) throw problemError(ProvisioningErrors.jobTokenInvalid, `a job call needs its job token in ${JOB_TOKEN_HEADER}`);
      const declared = Number(request.headers.get('content-length') ?? '0');
      const text = declared > MAX_JOB_BODY_BYTES ? '' : await request.text();
      if (declared > MAX_JOB_BODY_BYTES || Buffer.byteLength(text) > MAX_JOB_BODY_BYTES) {
        throw new AppError('REQUEST.TOO_LARGE', 'too-large', `job requests are limited to ${MAX_JOB_BODY_BYTES} bytes`, { limitBytes: MAX_JOB_BODY_BYTES });
      }
      return await call({ deps, caller: { jobId: request.params.id ?? '', token, pool: principal.runnerPool }, text, context });
    } catch (error) {
      return errorResponse(error, context);
    }
  };
  describeHandler(handler, { ...text, scope: 'factory.runner.agent', headers: [{ name: JOB_TOKEN_HEADER, description: "The job's token, from its claim." }] });
  return handler;
}

export const jobHeartbeat = jobEndpoint({
  tag: 'Runner agents',
  summary: 'Beat for a running job',
  description:
    "The agent running a claimed job beats (every `heartbeatMs` of its claim): the job's lease, its capacity lease and the stack lock are renewed, " +
    "and the log lines sent are recorded; an apply says `applyBegins` before it changes anything. 200 with the lease's new expiry " +
    "(never past the job's deadline). Needs both the pool's credential and the job's token: 401 `RUNNER.JOB_TOKEN_INVALID`, " +
    '403 `RUNNER.POOL_MISMATCH`; 409 `RUNNER.JOB_SUPERSEDED` once the job was lost or handed to another agent (the agent stops); ' +
    '413 `REQUEST.TOO_LARGE` above 8 MiB.',
}, async ({ deps, caller, text }) => ({
  status: 200,
  jsonBody: await deps.provisioning.runners.heartbeat(caller, text),
}));

/**
 * The request does no step of the run, so no request races the orchestration for one. A wake-up that is lost is made
 * up by the job's deadline timer.
 */
export const postJobResult = jobEndpoint({
  tag: 'Runner agents',
  summary: "Post a job's outcome",
  description:
    "The agent posts a claimed job's outcome: its plan, or its apply's per-resource results. 202 once it is accepted; the run's " +
    "orchestration then checks and records it (its receipt, the apply job after a plan, the run's end). Accepted only with the job's " +
    "token while the job runs under the stack lock's current version: 401 `RUNNER.JOB_TOKEN_INVALID`, 403 `RUNNER.POOL_MISMATCH`, " +
    "409 `RUNNER.JOB_SUPERSEDED` for a late or superseded result (recorded in the job's log, nothing else); 413 `REQUEST.TOO_LARGE` above 8 MiB.",
}, async ({ deps, caller, text, context }) => {
  const { runId } = await deps.provisioning.runners.accept(caller, text);
  crashPoint('runner-result:accepted', runId);
  try {
    await df.getClient(context).raiseEvent(runId, RUNNER_RESULT_EVENT, { jobId: caller.jobId } satisfies RunnerResultEvent);
  } catch (error) {
    logOf(context).warn(`could not wake run ${runId} for job ${caller.jobId}: ${error instanceof Error ? error.message : String(error)}`);
  }
  crashPoint('runner-result:woken', runId);
  return { status: 202, jsonBody: { accepted: true } };
});

const durableClient = [df.input.durableClient()];
const app = moduleApp('provisioning');
app.http('claimRunnerJob', { route: 'runtime-cloud/runner-pools/{pool}/claim', methods: ['POST'], authLevel: 'anonymous', handler: claimJob });
app.http('listRunnerPools', { route: 'runtime-cloud/runner-pools', methods: ['GET'], authLevel: 'anonymous', handler: listRunnerPools });
app.http('listRunnerAgents', { route: 'runtime-cloud/runner-pools/{pool}/agents', methods: ['GET'], authLevel: 'anonymous', handler: listRunnerAgents });
app.http('runnerJobHeartbeat', { route: 'runtime-cloud/runner-jobs/{id}/heartbeat', methods: ['POST'], authLevel: 'anonymous', handler: jobHeartbeat });
app.http('postRunnerJobResult', { route: 'runtime-cloud/runner-jobs/{id}/result', methods: ['POST'], authLevel: 'anonymous', extraInputs: durableClient, handler: postJobResult });
