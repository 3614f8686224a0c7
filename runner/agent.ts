import { crashPoint } from '../shared/platform/faults/crash-points';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, resolve, sep } from 'node:path';
import { AppError, ensureError } from '../shared/platform/errors/app-error';
import type { IacEngine } from '../shared/platform/iac/iac-runner';
import { filesDigest, type ClaimedJob, type JobError, type RunnerInfo, type RunnerJobOutcome } from '../shared/platform/iac/runner-job';
import type { JsonValue } from '../shared/platform/iac/iac-values';
import { referenceKey } from '../shared/platform/iac/iac-values';
import { qualifiedStackName } from '../shared/platform/iac/stack-ref';
import { systemClock, type Clock } from '../shared/platform/time/clock';
import type { HostClient, JobClient } from './host-client';
import type { Wakeup, Wakeups } from './wakeups';

/**
 * A runner agent (ARCHITECTURE.md, "IaC: targets, runner agents and engines"): claims one job of its pool at a
 * time, runs it with its engine in a fresh working directory, beats while it runs and posts its outcome. It holds
 * no store, bus or table credential and no host key: only its pool credential, and per job what the claim gave it;
 * an event-driven execution also takes its pool's wake-ups, with an identity that can receive those and nothing else.
 */
/** The engine that runs a claimed job, in its working directory. */
export type EngineFor = (claimed: ClaimedJob, job: JobClient, workDir: string) => IacEngine;

export interface AgentOptions {
  readonly client: HostClient;
  /** This agent's id in the pool. Example: `local-1`. */
  readonly agent: string;
  /** Root of the jobs' working directories: each job gets `<workRoot>/<job id>`, removed after it. */
  readonly workRoot: string;
  /** The engine for a job: the Pulumi Automation API (runner/main.ts), or the local host's local engine. */
  readonly engineFor: EngineFor;
  /** Run one job, then return (a Container Apps Job execution). */
  readonly oneJob?: boolean;
  /**
   * The pool's wake-ups (an event-driven execution): before it claims, the agent takes one, and settles it once the
   * claim answered. Without them it claims at once (the local host wakes its agents' long-polled claims itself).
   */
  readonly wakeups?: Wakeups;
  /**
   * How long the agent waits for a wake-up and then for a job before it returns, counted afresh after each job; 0
   * never (a long-lived agent). Default {@link DEFAULT_IDLE_MS}. Example: `idleMs: 120_000`.
   */
  readonly idleMs?: number;
  /** How long one claim waits on the host for a job. */
  readonly claimWaitMs?: number;
  /** How failing claims back off and when the agent gives up. Default {@link DEFAULT_CLAIM_RETRY}. */
  readonly claimRetry?: ClaimRetry;
  /** Idle time is read from it. */
  readonly clock?: Clock;
  /** The wait between failing claims (injected: backoff is tested without waiting). */
  readonly sleep?: (ms: number, signal: AbortSignal | undefined) => Promise<void>;
  /** The backoff's jitter, in [0, 1). */
  readonly random?: () => number;
  readonly signal?: AbortSignal;
  readonly log?: (line: string) => void;
}

/**
 * Failing claims (the host away, refusing, or unreachable) are tried again after `firstMs`, doubled per failure up
 * to `maxMs`, each delay jittered down by up to half, so that a pool's agents do not come back in step; after
 * `attempts` failures in a row the agent gives up. Example: `{ firstMs: 500, maxMs: 10_000, attempts: 5 }`.
 */
export interface ClaimRetry {
  readonly firstMs: number;
  readonly maxMs: number;
  readonly attempts: number;
}

/** About a minute and a half of failing claims, then the agent gives up. */
export const DEFAULT_CLAIM_RETRY: ClaimRetry = { firstMs: 1000, maxMs: 30_000, attempts: 8 };
/** An execution woken for a job that another took, or a long-lived agent with nothing to do, ends after this. */
export const DEFAULT_IDLE_MS = 60_000;
/** Longest single wait for a wake-up (an agent that never idles out waits again after it). */
const TAKE_WAIT_MS = 60_000;

/** Why the agent returned: stopped (its signal), idle (no wake-up or no job within its idle time), or its one job done. */
export type AgentEnd = 'stopped' | 'idle' | 'one-job';

/**
 * Takes a wake-up (when the agent has them), claims until a job comes or the idle time is over, settles the wake-up,
 * runs the job. Throws `RUNNER.CLAIM_GAVE_UP` when claims failed `claimRetry.attempts` times in a row, after
 * abandoning the wake-up it held, which the next execution then takes.
 */
export async function runAgent(options: AgentOptions): Promise<AgentEnd> {
  const log = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const clock = options.clock ?? systemClock;
  const idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
  let idleFrom = clock.now().getTime();
  const idleLeft = () => (idleMs === 0 ? Number.POSITIVE_INFINITY : idleFrom + idleMs - clock.now().getTime());
  const idle = (what: string): AgentEnd => {
    if (options.signal?.aborted) return 'stopped';
    log(`${options.agent}: ${what} within ${idleMs / 1000} s; exiting`);
    return 'idle';
  };
  while (!options.signal?.aborted) {
    const wakeup = options.wakeups && (await takeWakeup(options.wakeups, idleLeft, options.signal));
    if (options.wakeups && !wakeup) return idle('no wake-up');
    let claimed: ClaimedJob | undefined;
    try {
      claimed = await claimNext(options, idleLeft, log);
    } catch (error) {
      await wakeup?.abandon().catch((e: unknown) => log(`could not abandon wake-up ${wakeup.messageId}: ${ensureError(e).message}`));
      throw error;
    }
    // Spent whether a job came or not (another agent may have taken it). Should this fail (the lock lost), the wake-up
    // comes again and its execution finds nothing to claim.
    await wakeup?.complete().catch((e: unknown) => log(`could not complete wake-up ${wakeup.messageId}: ${ensureError(e).message}`));
    if (!claimed) return idle('nothing to claim');
    await runJob(options, claimed, log);
    if (options.oneJob) return 'one-job';
    idleFrom = clock.now().getTime();
  }
  return 'stopped';
}

/** The next wake-up within the idle time; undefined when none came (or the agent is stopping). */
async function takeWakeup(wakeups: Wakeups, idleLeft: () => number, signal: AbortSignal | undefined): Promise<Wakeup | undefined> {
  for (let left = idleLeft(); left > 0 && !signal?.aborted; left = idleLeft()) {
    const wakeup = await wakeups.take(Math.min(left, TAKE_WAIT_MS), signal);
    if (wakeup) return wakeup;
  }
  return undefined;
}

/**
 * Claims until a job comes or, claims answering, the idle time is over. A failing claim is tried again after a
 * jittered, growing delay, whatever the idle time says: a host that did not answer has not said there is nothing.
 */
async function claimNext(options: AgentOptions, idleLeft: () => number, log: (line: string) => void): Promise<ClaimedJob | undefined> {
  const retry = options.claimRetry ?? DEFAULT_CLAIM_RETRY;
  const wait = options.claimWaitMs ?? 20_000;
  for (let failures = 0; !options.signal?.aborted; ) {
    try {
      const claimed = await options.client.claim(options.agent, Math.max(0, Math.min(wait, idleLeft())));
      if (claimed || idleLeft() <= 0) return claimed;
      failures = 0;
    } catch (thrown) {
      if (options.signal?.aborted) return undefined;
      const error = ensureError(thrown);
      if (++failures >= retry.attempts) {
        throw new AppError('RUNNER.CLAIM_GAVE_UP', 'unavailable', `${options.agent} gives up: ${failures} claims in a row failed, the last with: ${error.message}`);
      }
      const delayMs = Math.round(Math.min(retry.maxMs, retry.firstMs * 2 ** (failures - 1)) * (1 - (options.random ?? Math.random)() / 2));
      log(`${options.agent}: claim ${failures} of ${retry.attempts} failed: ${error.message}; trying again in ${delayMs} ms`);
      await (options.sleep ?? sleep)(delayMs, options.signal);
    }
  }
  return undefined;
}

/** Runs one claimed job to its outcome and posts it; a refused post (the job was superseded) is logged. */
export async function runJob(options: AgentOptions, claimed: ClaimedJob, log: (line: string) => void): Promise<void> {
  const { job } = claimed;
  const client = options.client.job(claimed);
  const workDir = resolve(options.workRoot, job.id);
  const lines: string[] = [`${new Date().toISOString()} ${options.agent} claimed ${job.kind} job ${job.id} of stack ${qualifiedStackName(job.stack)}`];
  crashPoint('agent:claimed', job.runId);
  const beat = new Beat(client, claimed.heartbeatMs, lines);
  let outcome: RunnerJobOutcome;
  try {
    await writeProject(workDir, claimed);
    const engine = options.engineFor(claimed, client, workDir);
    const runner: RunnerInfo = { name: engine.name, version: await engine.version(), agent: options.agent };
    const started = performance.now();
    const evaluated = await evaluate(claimed, engine, runner, beat);
    outcome = { ...evaluated, runner: { ...runner, engineMs: Math.round((performance.now() - started) * 10) / 10 } };
  } catch (thrown) {
    outcome = { kind: job.kind, runner: { name: job.engine, version: 'unknown', agent: options.agent }, error: jobError(thrown) } as RunnerJobOutcome;
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
  await beat.stop();
  crashPoint(`agent:evaluated:${job.kind}`, job.runId);
  try {
    await postResult(() => client.result(outcome), options.signal);
    log(`${job.kind} job ${job.id}: outcome accepted`);
  } catch (error) {
    log(`${job.kind} job ${job.id}: outcome refused: ${ensureError(error).message}`);
  }
}

/** How long an agent goes on offering an outcome the host did not answer: the default job lease, after which the host has given up on the job. */
const RESULT_RETRY_MS = 60_000;

/**
 * Posts the outcome until the host answers it: a host restarting or briefly unavailable (a connection refused, a
 * 503) would otherwise lose an apply that was made (its run would fail `RUNNER_LOST`). An answer that refuses the
 * outcome (the job superseded, its token invalid) is final; a repeated post of an accepted outcome is refused too,
 * its job having ended.
 */
export async function postResult(post: () => Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  const giveUpAt = Date.now() + RESULT_RETRY_MS;
  for (let delayMs = 250; ; delayMs = Math.min(delayMs * 2, 5000)) {
    try {
      return await post();
    } catch (thrown) {
      const error = ensureError(thrown);
      const transient = !(error instanceof AppError) || error.kind === 'unavailable' || error.kind === 'internal';
      if (!transient || signal?.aborted || Date.now() + delayMs > giveUpAt) throw error;
      await sleep(delayMs, signal);
    }
  }
}

/** The job's step with the engine: a plan, or an apply of exactly the approved plan on the state it was made against. */
async function evaluate(claimed: ClaimedJob, engine: IacEngine, runner: RunnerInfo, beat: Beat): Promise<RunnerJobOutcome> {
  const { job } = claimed;
  if (job.kind === 'plan') {
    try {
      return { kind: 'plan', runner, plan: await engine.preview(job.stack, job.files, job.config, job.options) };
    } catch (thrown) {
      return { kind: 'plan', runner, error: jobError(thrown) };
    }
  }
  const approved = job.approvedPlan;
  if (!approved) return { kind: 'apply', runner, error: { code: 'RUNNER.INVALID_JOB', message: 'an apply job without its approved plan' } };
  try {
    // The state's serial only: a plan is an answer about the state it was made against.
    const current = await engine.preview(job.stack, job.files, job.config, { ...job.options, refresh: false });
    if (current.baseSerial !== approved.baseSerial) return { kind: 'apply', runner, stateMoved: { baseSerial: current.baseSerial } };
  } catch (thrown) {
    return { kind: 'apply', runner, error: jobError(thrown) };
  }
  const references = claimed.references ?? {};
  const resolveReference = (reference: Parameters<typeof referenceKey>[0]): Promise<JsonValue> => {
    const entry = references[referenceKey(reference)];
    if (!entry) return Promise.reject(new AppError('PROVISIONING.REFERENCE_UNRESOLVED', 'not-found', `the reference ${referenceKey(reference)} was not resolved for this job`));
    return 'error' in entry ? Promise.reject(new AppError(entry.error.code, 'not-found', entry.error.message)) : Promise.resolve(entry.value);
  };
  // Nothing changes on the target before the host recorded that the apply begins: a job lost before then changed
  // nothing and is dispatched again; one lost after is never applied again (RUNNER_LOST).
  try {
    await beat.applyBegins();
  } catch (thrown) {
    return { kind: 'apply', runner, error: jobError(thrown) };
  }
  // Before each step the agent stops if the host said the job was superseded; it does not beat per step: the host
  // refuses the writes of a superseded job at the resource anyway (its fencing), and the timer keeps the lease.
  const result = await engine.apply(job.stack, job.files, job.config, approved, resolveReference, { ...job.options, beforeStep: () => beat.check() });
  return { kind: 'apply', runner, result };
}

/** The job's heartbeat, every `everyMs`; once the host says the job is superseded, `check` stops every next step. */
class Beat {
  #lost: AppError | undefined;
  #chain: Promise<void> = Promise.resolve();
  readonly #timer: NodeJS.Timeout;

  constructor(
    private readonly client: JobClient,
    private readonly everyMs: number,
    private readonly lines: string[],
  ) {
    this.#timer = setInterval(() => void this.now().catch(() => undefined), everyMs);
    this.#timer.unref();
  }

  now(): Promise<void> {
    this.#chain = this.#chain.then(async () => {
      if (this.#lost) return;
      const log = this.lines.splice(0);
      try {
        await this.client.heartbeat({ log });
      } catch (thrown) {
        const error = ensureError(thrown);
        if (error instanceof AppError && (error.kind === 'conflict' || error.kind === 'unauthorized')) this.#lost = new AppError('PROVISIONING.STACK_LOCK_LOST', 'conflict', error.message);
        // Anything else (the host busy, the network): the lease holds until it lapses; the next beat asks again.
      }
    });
    return this.#chain.then(() => {
      if (this.#lost) throw this.#lost;
    });
  }

  /**
   * The beat that asks the host to record that the apply begins, sent again while the host does not answer (a
   * restart, a 503) for three beats (the lease is four); throws unless the host recorded it.
   */
  async applyBegins(): Promise<void> {
    await this.#chain;
    if (this.#lost) throw this.#lost;
    const giveUpAt = Date.now() + 3 * this.everyMs;
    for (let delayMs = 100; ; delayMs = Math.min(delayMs * 2, 2000)) {
      try {
        await this.client.heartbeat({ log: this.lines.splice(0), applyBegins: true });
        return;
      } catch (thrown) {
        const error = ensureError(thrown);
        const transient = !(error instanceof AppError) || error.kind === 'unavailable' || error.kind === 'internal';
        if (!transient || Date.now() + delayMs > giveUpAt) throw error;
        await sleep(delayMs, undefined);
      }
    }
  }

  /** Throws once a beat found the job superseded. */
  check(): Promise<void> {
    return this.#lost ? Promise.reject(this.#lost) : Promise.resolve();
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#chain;
  }
}

/** The project's files in the job's fresh working directory, after checking they are the bytes the host read. */
async function writeProject(workDir: string, claimed: ClaimedJob): Promise<void> {
  const { files } = claimed.job;
  if (filesDigest(files) !== claimed.job.filesDigest) throw new AppError('RUNNER.FILES_MISMATCH', 'validation', 'the project files are not the ones the host read');
  const paths = Object.entries(files).map(([name, text]) => {
    const path = resolve(workDir, name);
    if (!path.startsWith(`${workDir}${sep}`)) throw new AppError('RUNNER.FILES_MISMATCH', 'validation', `the file name ${name} leaves the working directory`);
    return { path, text };
  });
  await rm(workDir, { recursive: true, force: true });
  for (const folder of new Set([workDir, ...paths.map(({ path }) => dirname(path))])) await mkdir(folder, { recursive: true });
  await Promise.all(paths.map(({ path, text }) => writeFile(path, text)));
}

function jobError(thrown: unknown): JobError {
  const error = ensureError(thrown);
  if (error instanceof AppError) return { code: error.code, message: error.message };
  return { code: 'RUNNER.ENGINE_FAULT', message: error.message.slice(0, 2000) };
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((done) => {
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      done();
    });
  });
}

