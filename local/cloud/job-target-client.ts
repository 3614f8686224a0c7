import { AppError } from '../../shared/platform/errors/app-error';
import type { StackState } from '../../shared/platform/iac/plan';
import type { ClaimedJob } from '../../shared/platform/iac/runner-job';
import type { JobClient } from '../../runner/host-client';
import type { StackStates } from '../engine/stack-state.repository';
import type { TargetCall } from './job-target-calls';
import type { CloudApply, CloudResource, LocalCloud } from './local-cloud';

/**
 * A job's local cloud target and its stack state as an agent of the local host reaches them: through the job's
 * endpoints on the host (job-target-functions.ts), with the job's credentials, for its own target and stack only.
 */
export function jobTargetClient(claimed: ClaimedJob, job: Pick<JobClient, 'call'>): { readonly states: StackStates; readonly cloud: LocalCloud } {
  const target = async (body: TargetCall) => (await job.call('POST', 'target', body)) as { resource?: CloudResource; deleted?: boolean };
  const resourceOf = async (body: TargetCall) => {
    const { resource } = await target(body);
    if (!resource) throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', 'the target answered without the resource');
    return resource;
  };
  const notForJobs = (): never => {
    throw new AppError('RUNNER.CALL_REFUSED', 'forbidden', 'a job reaches only its own stack on its target');
  };
  const targetName = claimed.job.target;
  let known: StackState | null | undefined;
  return {
    states: {
      // The job is the stack's only writer while it runs under the lock: the state is read once, then the job's own last write.
      read: async () => {
        if (known === undefined) known = ((await job.call('GET', 'state')) as { state: StackState | null }).state;
        return known ?? undefined;
      },
      write: async (_stack, state) => {
        await job.call('PUT', 'state', state);
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
}
