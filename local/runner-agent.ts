import { AppError } from '../shared/platform/errors/app-error';
import type { IacEngine } from '../shared/platform/iac/iac-runner';
import type { ClaimedJob } from '../shared/platform/iac/runner-job';
import { systemClock } from '../shared/platform/time/clock';
import type { AgentOptions } from '../runner/agent';
import type { JobClient } from '../runner/host-client';
import { main, runAsProcess } from '../runner/main';
import { jobTargetClient } from './cloud/job-target-client';
import { createLocalEngine } from './engine/local-engine';

/**
 * The local host's runner agents: the runner's own entry (runner/main.ts) with the local engine besides Pulumi, over
 * the job's local cloud target and stack state, reached through the job's endpoints. The runner image has no local
 * engine: this is how the local host's agents (local/runner-agents.ts, `runtime-cloud runner`) get it.
 */
export function localEngineFor(claimed: ClaimedJob, job: Pick<JobClient, 'call'>): IacEngine {
  if (claimed.job.engine !== 'local') throw new AppError('PROVISIONING.RUNNER_UNAVAILABLE', 'unavailable', `this agent runs the local engine, not ${claimed.job.engine}`);
  const { states, cloud } = jobTargetClient(claimed, job);
  return createLocalEngine({ states, cloud, clock: systemClock, targetOf: () => claimed.job.target });
}

/** Runs the agent its environment describes, with the local engine: as runner/main.ts `main`. */
export function localAgentMain(env: NodeJS.ProcessEnv = process.env, inject: Pick<AgentOptions, 'clock' | 'sleep' | 'random'> = {}): Promise<number> {
  return main(env, inject, { local: localEngineFor });
}

if (require.main === module) runAsProcess(() => localAgentMain());
