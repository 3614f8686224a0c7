import { armCrashPoints } from '../shared/platform/faults/crash-points';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { AppError, ensureError } from '../shared/platform/errors/app-error';
import type { IacEngine } from '../shared/platform/iac/iac-runner';
import { pulumiIacRunner } from '../shared/platform/iac/pulumi-runner';
import type { ClaimedJob } from '../shared/platform/iac/runner-job';
import { DEFAULT_IDLE_MS, runAgent, type AgentOptions, type EngineFor } from './agent';
import { hostClient } from './host-client';
import { withTenantBackend } from './state-backend';
import { poolWakeups, type Wakeups } from './wakeups';

/**
 * The runner agent's entry point (its image's ENTRYPOINT, `runtime-cloud runner` locally), configured by its
 * environment and nothing else:
 * - `RuntimeCloud__Runner__HostUrl`, `RuntimeCloud__Runner__Pool`: whose jobs it claims;
 * - `RuntimeCloud__Runner__Credential`: its pool credential (a bearer token), or, without it,
 *   `RuntimeCloud__Runner__Audience`: an Entra token for that audience from its managed identity (`AZURE_CLIENT_ID`);
 * - `RuntimeCloud__Runner__Engine`: `pulumi` (default), over the state backend and secrets provider each job names
 *   (its tenant's container and key on the target: the agent makes them when missing); `local` only where the
 *   local host starts the agent with its local engine (local/runner-agent.ts): the runner image has none;
 * - `RuntimeCloud__Runner__WorkDir`, `RuntimeCloud__Runner__Agent`, `RuntimeCloud__Runner__OneJob`;
 * - `RuntimeCloud__Runner__IdleSeconds`: with nothing to do (no wake-up, then no job) for this long the agent exits
 *   (default 60; 0 never: a long-lived agent);
 * - `RuntimeCloud__Runner__Wakeups__*` (an event-driven execution, all or none): `Namespace` (`ns.servicebus.windows.net`),
 *   `Topic` and `Subscription` (the pool's own), `ClientId` (the managed identity that can receive from that
 *   subscription; default `DefaultAzureCredential`'s), `Endpoint` (another address for the AMQP connection, a gateway).
 * It exits 0 when it ran its job, idled out or was stopped, 1 when its claims failed until it gave up or its
 * wake-ups could not be taken.
 */
const settings = z.object({
  RuntimeCloud__Runner__HostUrl: z.url(),
  RuntimeCloud__Runner__Pool: z.string().min(1),
  RuntimeCloud__Runner__Credential: z.string().default(''),
  RuntimeCloud__Runner__Audience: z.string().default(''),
  RuntimeCloud__Runner__Engine: z.enum(['local', 'pulumi']).default('pulumi'),
  RuntimeCloud__Runner__WorkDir: z.string().default(join(tmpdir(), 'runtime-cloud-runner')),
  RuntimeCloud__Runner__Agent: z.string().default(`${hostname()}-${process.pid}`),
  RuntimeCloud__Runner__OneJob: z.enum(['true', 'false']).default('false'),
  RuntimeCloud__Runner__IdleSeconds: z.coerce.number().int().min(0).default(DEFAULT_IDLE_MS / 1000),
  RuntimeCloud__Runner__Wakeups__Namespace: z.string().default(''),
  RuntimeCloud__Runner__Wakeups__Topic: z.string().default(''),
  RuntimeCloud__Runner__Wakeups__Subscription: z.string().default(''),
  RuntimeCloud__Runner__Wakeups__ClientId: z.string().default(''),
  RuntimeCloud__Runner__Wakeups__Endpoint: z.string().default(''),
  /** Crash points of the agent and their markers folder (the crash tests only; see shared/platform/faults/crash-points.ts). */
  RuntimeCloud__Runner__CrashAt: z.string().default(''),
  RuntimeCloud__Runner__CrashMarkers: z.string().default(''),
});

/**
 * Runs the agent its environment describes; answers its exit code. `inject` is for tests: time and waits. `engines`:
 * the engines besides Pulumi this process has (the local host's agents: the local engine).
 */
export async function main(env: NodeJS.ProcessEnv = process.env, inject: Pick<AgentOptions, 'clock' | 'sleep' | 'random'> = {}, engines: { readonly local?: EngineFor } = {}): Promise<number> {
  const parsed = settings.safeParse(env);
  if (!parsed.success) throw new Error(`runner settings: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const s = parsed.data;
  const localEngine = engines.local;
  if (s.RuntimeCloud__Runner__Engine === 'local' && !localEngine) throw new Error('runner settings: RuntimeCloud__Runner__Engine=local: this runner has the pulumi engine only (the local engine runs in the local host\'s agents)');
  const log = (line: string) => process.stdout.write(`${line}\n`);
  const idleMs = s.RuntimeCloud__Runner__IdleSeconds * 1000;
  armCrashPoints({ points: s.RuntimeCloud__Runner__CrashAt.split(',').filter((p) => p.length > 0), markers: s.RuntimeCloud__Runner__CrashMarkers });
  const controller = new AbortController();
  process.once('SIGTERM', () => controller.abort());
  process.once('SIGINT', () => controller.abort());
  // Started by a local host (an IPC channel to it): the agent goes when the host goes, however it ended.
  process.once('disconnect', () => controller.abort());
  const client = hostClient({ hostUrl: new URL(s.RuntimeCloud__Runner__HostUrl), pool: s.RuntimeCloud__Runner__Pool, credential: credentialOf(s.RuntimeCloud__Runner__Credential, s.RuntimeCloud__Runner__Audience), signal: controller.signal });
  const wakeups = wakeupsOf(s, idleMs, log);
  try {
    await runAgent({
      client,
      agent: s.RuntimeCloud__Runner__Agent,
      workRoot: s.RuntimeCloud__Runner__WorkDir,
      oneJob: s.RuntimeCloud__Runner__OneJob === 'true',
      ...(wakeups ? { wakeups } : {}),
      idleMs,
      ...inject,
      signal: controller.signal,
      log,
      engineFor: (claimed, job, workDir) => (s.RuntimeCloud__Runner__Engine === 'local' && localEngine ? localEngine(claimed, job, workDir) : pulumiEngine(claimed, workDir, env)),
    });
    return 0;
  } catch (thrown) {
    const error = ensureError(thrown);
    // Its claims gave up, or the bus refused its wake-ups: said in one line, and the exit code says it failed.
    if (!(error instanceof AppError && error.kind === 'unavailable')) throw error;
    process.stderr.write(`runner agent of pool ${s.RuntimeCloud__Runner__Pool}: ${error.message}\n`);
    return 1;
  } finally {
    await wakeups?.close();
  }
}

/**
 * The pool's wake-ups, when the environment names its subscription: received with the identity `ClientId` names,
 * their locks renewed for as long as the agent may claim before it settles one (its idle time and its retries).
 */
function wakeupsOf(s: z.infer<typeof settings>, idleMs: number, log: (line: string) => void): Wakeups | undefined {
  const namespace = s.RuntimeCloud__Runner__Wakeups__Namespace;
  if (!namespace) return undefined;
  if (!s.RuntimeCloud__Runner__Wakeups__Topic || !s.RuntimeCloud__Runner__Wakeups__Subscription) {
    throw new Error('runner settings: RuntimeCloud__Runner__Wakeups__Namespace needs RuntimeCloud__Runner__Wakeups__Topic and RuntimeCloud__Runner__Wakeups__Subscription');
  }
  const clientId = s.RuntimeCloud__Runner__Wakeups__ClientId;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const identity = require('@azure/identity') as typeof import('@azure/identity');
  return poolWakeups({
    connection: namespace,
    credential: clientId ? new identity.ManagedIdentityCredential({ clientId }) : new identity.DefaultAzureCredential(),
    ...(s.RuntimeCloud__Runner__Wakeups__Endpoint ? { customEndpointAddress: s.RuntimeCloud__Runner__Wakeups__Endpoint } : {}),
    pool: s.RuntimeCloud__Runner__Pool,
    topic: s.RuntimeCloud__Runner__Wakeups__Topic,
    subscription: s.RuntimeCloud__Runner__Wakeups__Subscription,
    holdMs: idleMs + WAKEUP_HOLD_MARGIN_MS,
    log,
  });
}

/** Beyond the idle time, what failing claims may take before the agent gives up (DEFAULT_CLAIM_RETRY) and more. */
const WAKEUP_HOLD_MARGIN_MS = 5 * 60_000;

/** The Pulumi Automation API over the job's backend: its tenant's state container and secrets key on the target. */
function pulumiEngine(claimed: ClaimedJob, workDir: string, env: NodeJS.ProcessEnv): IacEngine {
  const { backend } = claimed.job;
  if (!backend) throw new AppError('RUNNER.INVALID_JOB', 'validation', `job ${claimed.job.id} names no state backend: its target ${claimed.job.target} has no \`backend\` in RuntimeCloud__Targets`);
  return withTenantBackend(backend, (settings) => pulumiIacRunner({ workRoot: workDir, ...settings }), env);
}

/** The pool credential: the configured token, or an Entra token of the agent's managed identity for the host's audience. */
function credentialOf(token: string, audience: string): () => Promise<string> {
  if (token) return () => Promise.resolve(token);
  if (!audience) throw new Error('runner settings: RuntimeCloud__Runner__Credential or RuntimeCloud__Runner__Audience is required');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { DefaultAzureCredential } = require('@azure/identity') as typeof import('@azure/identity');
  // One credential for the agent's life: it caches the token until shortly before it expires.
  const identity = new DefaultAzureCredential();
  return async () => (await identity.getToken(`${audience}/.default`)).token;
}

/** Runs `agent` as the process: its exit code, or 1 with the error's stack. */
export function runAsProcess(agent: () => Promise<number>): void {
  agent()
    .then(
      (code) => (process.exitCode = code),
      (error: unknown) => {
        process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
        process.exitCode = 1;
      },
    )
    // The agent is done: the IPC channel to a local host would keep this process alive until the host kills it.
    .finally(() => process.connected && process.disconnect());
}

if (require.main === module) runAsProcess(() => main());
