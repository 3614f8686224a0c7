import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { ConfigOverrides, PlanOptions } from './iac-runner';
import type { JsonValue } from './iac-values';
import { planSchema, type ApplyResult, type Plan } from './plan';
import type { ProjectFiles } from './pulumi-yaml-source';
import type { StackRef } from './stack-ref';

/**
 * The runner job protocol between the host and its runner agents (ARCHITECTURE.md, "IaC: targets, runner agents
 * and engines"). The host dispatches a plan or an apply as a job for the pool of the environment's target; an agent
 * of that pool claims it with its pool credential and gets the job's spec and a job token, which authenticates
 * every call of that job (heartbeat, result, and for the local cloud target its state and resources) and nothing
 * else. Every call also carries the job's fencing token (the stack lock's version when the job was dispatched): once
 * another run holds the stack, the job's calls are refused where they would change something.
 *
 * BREAKING-CHANGE SHAPES: agents of an older release talk to a newer host during a rollout.
 */
export const RUNNER_JOB_KINDS = ['plan', 'apply'] as const;
export type RunnerJobKind = (typeof RUNNER_JOB_KINDS)[number];

/** What an agent is handed for one job: everything it needs, so it never talks to Git or to the host's stores. */
export interface RunnerJobSpec {
  readonly id: string;
  readonly kind: RunnerJobKind;
  readonly runId: string;
  readonly pool: string;
  /** The target the stack's resources live on (the environment's target). */
  readonly target: string;
  /** The engine the target's runners use: `local` (the local cloud) or `pulumi`. */
  readonly engine: 'local' | 'pulumi';
  readonly stack: StackRef;
  /** The project's files at the run's commit, read by the host after its source and program policies allowed them. */
  readonly files: ProjectFiles;
  /** `filesDigest(files)`: the agent checks the files it got are the ones the host read. */
  readonly filesDigest: string;
  /** Config set over the stack file (a pool resize's `poolSize`); secret and config values stay references. */
  readonly config: ConfigOverrides;
  readonly options: PlanOptions;
  /** Apply jobs: the recorded (and, where required, approved) plan; the agent applies exactly it or nothing. */
  readonly approvedPlan?: Plan;
  /**
   * `pulumi` jobs: the tenant's state backend and secrets provider on the job's target. The agent makes the
   * container and the key the first time a tenant needs them.
   */
  readonly backend?: JobBackend;
  /** The stack lock's version the job runs under. */
  readonly fencingToken: number;
  /** ISO-8601: when the job's lease lapses unless the agent's heartbeat renews it. */
  readonly leaseExpiresAt: string;
}

/** Where a `pulumi` job keeps its stack's state, and the key its secrets are encrypted with. */
export interface JobBackend {
  /** A Pulumi backend URL. Example: `azblob://state-contoso?storage_account=stprodwe1a2b3c4d`. */
  readonly url: string;
  /** A Pulumi secrets provider. Example: `azurekeyvault://kv-prod-we.vault.azure.net/keys/pulumi-contoso`. */
  readonly secretsProvider?: string;
}

/** A claimed job: its spec, its token, and (apply jobs only) the values of the plan's references, resolved for it. */
export interface ClaimedJob {
  readonly job: RunnerJobSpec;
  readonly token: string;
  /** How often the agent must beat, in ms. */
  readonly heartbeatMs: number;
  /** Reference key (`referenceKey`) → its value, or why it could not be resolved. */
  readonly references?: Readonly<Record<string, { readonly value: JsonValue } | { readonly error: { readonly code: string; readonly message: string } }>>;
}

/** Which engine ran a job. */
export interface RunnerInfo {
  readonly name: string;
  readonly version: string;
  /** The agent that ran it. */
  readonly agent: string;
  /** How long the engine took (the agent's own measure): what a job costs beyond it is dispatch. */
  readonly engineMs?: number;
}

/**
 * What an agent reports at the end of a job:
 * - plan: the plan, or the plan error (`IAC.*`, `PROVISIONING.TARGET_UNREACHABLE` of a refresh);
 * - apply: `stateMoved` when the stack's state is no longer the one the plan was made against (nothing applied),
 *   else the apply result (applied, or failed with each resource's status).
 */
export type RunnerJobOutcome =
  | { readonly kind: 'plan'; readonly runner: RunnerInfo; readonly plan: Plan }
  | { readonly kind: 'plan'; readonly runner: RunnerInfo; readonly error: JobError }
  | { readonly kind: 'apply'; readonly runner: RunnerInfo; readonly stateMoved: { readonly baseSerial: number } }
  | { readonly kind: 'apply'; readonly runner: RunnerInfo; readonly result: ApplyResult }
  | { readonly kind: 'apply'; readonly runner: RunnerInfo; readonly error: JobError };

export interface JobError {
  readonly code: string;
  readonly message: string;
}

const jobError = z.object({ code: z.string().min(1).max(200), message: z.string().max(4000) });
const runnerInfo = z.object({ name: z.string().min(1).max(100), version: z.string().min(1).max(200), agent: z.string().min(1).max(200), engineMs: z.number().nonnegative().optional() });
const jsonObject = z.record(z.string(), z.json());

const applyResultSchema = z.object({
  status: z.enum(['applied', 'failed']),
  stack: z.string(),
  planDigest: z.string(),
  serial: z.number().int().nonnegative(),
  resources: z.array(
    z.object({
      urn: z.string(),
      name: z.string(),
      type: z.string(),
      op: z.enum(['create', 'update', 'replace', 'delete', 'same']),
      status: z.enum(['succeeded', 'unchanged', 'failed', 'skipped']),
      id: z.string().optional(),
      inputs: jsonObject.optional(),
      ignoreChanges: z.array(z.string()).optional(),
      read: z.literal(true).optional(),
      error: jobError.optional(),
    }),
  ),
  outputs: jsonObject,
  error: jobError.optional(),
  startedAt: z.string(),
  finishedAt: z.string(),
});

/** The body of a job's result, as the host validates it. */
export const jobOutcomeSchema: z.ZodType<RunnerJobOutcome> = z.union([
  z.object({ kind: z.literal('plan'), runner: runnerInfo, plan: planSchema }).strict(),
  z.object({ kind: z.literal('plan'), runner: runnerInfo, error: jobError }).strict(),
  z.object({ kind: z.literal('apply'), runner: runnerInfo, stateMoved: z.object({ baseSerial: z.number().int().nonnegative() }) }).strict(),
  z.object({ kind: z.literal('apply'), runner: runnerInfo, result: applyResultSchema }).strict(),
  z.object({ kind: z.literal('apply'), runner: runnerInfo, error: jobError }).strict(),
]);

/**
 * A heartbeat: lines of the job's log since the last beat (the host keeps an excerpt). `applyBegins` (apply jobs):
 * the agent is about to change the target and changes nothing unless this beat is answered; from then on a lost job
 * is never applied again, while a lost job without it changed nothing and is dispatched again.
 */
export const heartbeatSchema = z.object({ log: z.array(z.string().max(2000)).max(200).default([]), applyBegins: z.boolean().optional() });
export type Heartbeat = z.infer<typeof heartbeatSchema>;


/**
 * The project's files a job of `stack` needs: all of them but the config files of the project's other stacks
 * (`Pulumi.<other>.yaml` beside `Pulumi.yaml`), which no evaluation of this stack reads. A project with many stacks
 * would otherwise hand every job, and every store read of it, every stack's config.
 */
export function filesOfStack(files: ProjectFiles, stack: string): ProjectFiles {
  const kept: Record<string, string> = {};
  for (const [name, text] of Object.entries(files)) {
    const config = /^Pulumi\.(.+)\.ya?ml$/.exec(name);
    if (!config || config[1] === stack) kept[name] = text;
  }
  return kept;
}

/** The digest of a project's files, by name: what the host read and the agent evaluates must be the same bytes. */
export function filesDigest(files: ProjectFiles): string {
  const hash = createHash('sha256');
  for (const name of Object.keys(files).sort()) hash.update(`${name.length}:${name}${files[name]?.length ?? 0}:${files[name] ?? ''}`);
  return `sha256:${hash.digest('hex')}`;
}
