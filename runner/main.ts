import { armCrashPoints } from '../shared/platform/faults/crash-points';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { AppError } from '../shared/platform/errors/app-error';
import { pulumiIacRunner, type IacEngine } from '../shared/platform/iac/iac-runner';
import type { ClaimedJob } from '../shared/platform/iac/runner-job';
import { createLocalEngine } from '../shared/platform/iac/local-engine';
import { systemClock } from '../shared/platform/time/clock';
import { runAgent } from './agent';
import { hostClient } from './host-client';
import { withTenantBackend } from './state-backend';

/**
 * The runner agent's entry point (its image's ENTRYPOINT, `runtime-cloud runner` locally), configured by its
 * environment and nothing else:
 * - `RuntimeCloud__Runner__HostUrl`, `RuntimeCloud__Runner__Pool`: whose jobs it claims;
 * - `RuntimeCloud__Runner__Credential`: its pool credential (a bearer token), or, without it,
 *   `RuntimeCloud__Runner__Audience`: an Entra token for that audience from its managed identity (`AZURE_CLIENT_ID`);
 * - `RuntimeCloud__Runner__Engine`: `local` (local cloud targets) or `pulumi`, over the state backend and secrets
 *   provider each job names (its tenant's container and key on the target: the agent makes them when missing);
 * - `RuntimeCloud__Runner__WorkDir`, `RuntimeCloud__Runner__Agent`, `RuntimeCloud__Runner__OneJob`.
 */
const settings = z.object({
  RuntimeCloud__Runner__HostUrl: z.url(),
  RuntimeCloud__Runner__Pool: z.string().min(1),
  RuntimeCloud__Runner__Credential: z.string().default(''),
  RuntimeCloud__Runner__Audience: z.string().default(''),
  RuntimeCloud__Runner__Engine: z.enum(['local', 'pulumi']).default('local'),
  RuntimeCloud__Runner__WorkDir: z.string().default(join(tmpdir(), 'runtime-cloud-runner')),
  RuntimeCloud__Runner__Agent: z.string().default(`${hostname()}-${process.pid}`),
  RuntimeCloud__Runner__OneJob: z.enum(['true', 'false']).default('false'),
  /** Crash points of the agent and their markers folder (the crash tests only; see shared/platform/faults/crash-points.ts). */
  RuntimeCloud__Runner__CrashAt: z.string().default(''),
  RuntimeCloud__Runner__CrashMarkers: z.string().default(''),
});

export async function main(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const parsed = settings.safeParse(env);
  if (!parsed.success) throw new Error(`runner settings: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const s = parsed.data;
  armCrashPoints({ points: s.RuntimeCloud__Runner__CrashAt.split(',').filter((p) => p.length > 0), markers: s.RuntimeCloud__Runner__CrashMarkers });
  const controller = new AbortController();
  process.once('SIGTERM', () => controller.abort());
  process.once('SIGINT', () => controller.abort());
  // Started by a local host (an IPC channel to it): the agent goes when the host goes, however it ended.
  process.once('disconnect', () => controller.abort());
  const client = hostClient({ hostUrl: new URL(s.RuntimeCloud__Runner__HostUrl), pool: s.RuntimeCloud__Runner__Pool, credential: credentialOf(s.RuntimeCloud__Runner__Credential, s.RuntimeCloud__Runner__Audience), signal: controller.signal });
  await runAgent({
    client,
    agent: s.RuntimeCloud__Runner__Agent,
    workRoot: s.RuntimeCloud__Runner__WorkDir,
    oneJob: s.RuntimeCloud__Runner__OneJob === 'true',
    signal: controller.signal,
    engineFor: (claimed, job, workDir) =>
      s.RuntimeCloud__Runner__Engine === 'pulumi'
        ? pulumiEngine(claimed, workDir, env)
        : createLocalEngine({ states: job.states, cloud: job.cloud, clock: systemClock, targetOf: () => claimed.job.target }),
  });
  // The agent is done: the IPC channel to a local host would keep this process alive until the host kills it.
  if (process.connected) process.disconnect();
}

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

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  });
}
