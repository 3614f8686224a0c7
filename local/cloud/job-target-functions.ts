import type { Deps } from '../../shared/deps';
import { moduleApp } from '../../functions/app';
import { jobEndpoint } from '../../functions/provisioning/runner-jobs';
import { sqlStackStates } from '../engine/stack-state.repository';
import { jobTargetCalls, type JobTargetCalls } from './job-target-calls';
import { createLocalCloud } from './local-cloud';

/**
 * The job endpoints of local cloud targets, registered by the local host only (the deployed API has none: a job on
 * Azure reaches its target and its state backend with its pool's own identity). Authenticated as every job call is
 * (functions/provisioning/runner-jobs.ts `jobEndpoint`: the pool credential and the job's token).
 */
const calls = new WeakMap<Deps, JobTargetCalls>();

function callsOf(deps: Deps): JobTargetCalls {
  let known = calls.get(deps);
  if (!known) {
    known = jobTargetCalls(deps.provisioning.runners, createLocalCloud({ store: deps.sql, clock: deps.clock, ids: deps.ids }), sqlStackStates(deps.sql, deps.clock));
    calls.set(deps, known);
  }
  return known;
}

export const getJobState = jobEndpoint({ localOnly: true, summary: "A job's stack state (local cloud targets)" }, async ({ deps, caller }) => ({
  status: 200,
  jsonBody: { state: await callsOf(deps).state(caller) },
}));

export const putJobState = jobEndpoint({ localOnly: true, summary: 'An apply job writes its stack state (local cloud targets)' }, async ({ deps, caller, text }) => {
  await callsOf(deps).writeState(caller, text);
  return { status: 204 };
});

export const jobTargetCall = jobEndpoint({ localOnly: true, summary: "A job's call to its local cloud target, in its tenant's scope" }, async ({ deps, caller, text }) => ({
  status: 200,
  jsonBody: await callsOf(deps).target(caller, text),
}));

const app = moduleApp('provisioning');
app.http('getRunnerJobState', { route: 'runtime-cloud/runner-jobs/{id}/state', methods: ['GET'], authLevel: 'anonymous', handler: getJobState });
app.http('putRunnerJobState', { route: 'runtime-cloud/runner-jobs/{id}/state', methods: ['PUT'], authLevel: 'anonymous', handler: putJobState });
app.http('runnerJobTargetCall', { route: 'runtime-cloud/runner-jobs/{id}/target', methods: ['POST'], authLevel: 'anonymous', handler: jobTargetCall });
