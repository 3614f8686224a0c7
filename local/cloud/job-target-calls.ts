import { z } from 'zod';
import { AppError } from '../../shared/platform/errors/app-error';
import { stateResourceOptionalSchema, type StackState } from '../../shared/platform/iac/plan';
import { parseJsonBody } from '../../shared/platform/validation/validation';
import type { JobCaller, RunnerJobs } from '../../shared/provisioning/provisioning.service';
import type { StackStates } from '../engine/stack-state.repository';
import type { CloudResource, LocalCloud } from './local-cloud';

/**
 * A runner job's calls to a local cloud target, which the local host serves: the stand-in for a cloud API and a
 * state backend that a job on Azure reaches with its pool's own identity. The host's runner jobs say what each call
 * may touch (`authorizeTargetCall`: the job's token from an agent of its pool; writes only for an apply that began,
 * under its current stack lock); these calls keep to it: resources of the job's tenant's scope only, its own stack's
 * urns and state only, every write recorded in the job's log.
 */

const jsonObject = z.record(z.string(), z.json());

/** A call of a job to its local cloud target. */
export const targetCallSchema = z.discriminatedUnion('op', [
  z.object({ op: z.literal('get'), id: z.string().min(1).max(400) }),
  z.object({ op: z.literal('create'), urn: z.string().min(1).max(2000), type: z.string().min(1).max(400), properties: jsonObject }),
  z.object({ op: z.literal('update'), id: z.string().min(1).max(400), properties: jsonObject }),
  z.object({ op: z.literal('delete'), id: z.string().min(1).max(400) }),
  z.object({ op: z.literal('adopt'), id: z.string().min(1).max(400), urn: z.string().min(1).max(2000) }),
  z.object({ op: z.literal('recordApply'), planDigest: z.string().min(1).max(200) }),
]);
export type TargetCall = z.infer<typeof targetCallSchema>;

/** A stack state written by an apply job (the local engine's checkpoint). */
export const stackStateSchema: z.ZodType<StackState> = z.object({
  stack: z.string(),
  project: z.string(),
  serial: z.number().int().positive(),
  resources: z.array(
    z.object({
      urn: z.string(),
      name: z.string(),
      type: z.string(),
      id: z.string(),
      inputs: jsonObject,
      outputs: jsonObject,
      protect: z.boolean(),
      dependencies: z.array(z.string()),
      ignoreChanges: z.array(z.string()).optional(),
      ...stateResourceOptionalSchema,
    }),
  ),
});

export interface JobTargetCalls {
  /** The job's stack state (null: none yet). */
  state(caller: JobCaller): Promise<StackState | null>;
  /** Writes the job's stack state (`StackState` as JSON text): apply jobs, for their own stack only. */
  writeState(caller: JobCaller, body: string): Promise<void>;
  /** A call to the job's local cloud target (`TargetCall` as JSON text). */
  target(caller: JobCaller, body: string): Promise<{ resource?: CloudResource; deleted?: boolean }>;
}

export function jobTargetCalls(runners: Pick<RunnerJobs, 'authorizeTargetCall'>, cloud: LocalCloud, states: StackStates): JobTargetCalls {
  return {
    async state(caller) {
      const grant = await runners.authorizeTargetCall(caller, false);
      return (await states.read(grant.stack)) ?? null;
    },
    async writeState(caller, body) {
      const state = parseJsonBody(body, stackStateSchema);
      const grant = await runners.authorizeTargetCall(caller, true);
      const { stack } = grant;
      if (state.stack !== stack.stack || state.project !== stack.project) throw grant.refuse(`the state is of stack ${state.project}/${state.stack}, not ${stack.project}/${stack.stack}`);
      await states.write(stack, state);
    },
    async target(caller, body) {
      const call = parseJsonBody(body, targetCallSchema);
      const grant = await runners.authorizeTargetCall(caller, call.op !== 'get');
      const { target, tenant: scope, stack } = grant;
      const own = async (id: string) => {
        const found = await cloud.get(target, id);
        return found && found.scope === scope ? found : undefined;
      };
      const ofStack = (urn: string) => {
        if (!urn.startsWith(`urn:pulumi:${stack.stack}::${stack.project}::`)) throw grant.refuse(`the urn ${urn} is not of the job's stack`);
      };
      const mustOwn = async (id: string) => {
        if (!(await own(id))) throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `there is no resource ${id}`);
      };
      switch (call.op) {
        case 'get': {
          const resource = await own(call.id);
          return resource ? { resource } : {};
        }
        case 'recordApply':
          await cloud.recordApply(target, { stack, planDigest: call.planDigest });
          await grant.record(`apply ${call.planDigest} began`);
          return {};
        case 'create': {
          ofStack(call.urn);
          const resource = await cloud.create(target, { scope, urn: call.urn, type: call.type, properties: call.properties });
          await grant.record(`created ${resource.type} ${resource.id} (${resource.urn})`);
          return { resource };
        }
        case 'update': {
          await mustOwn(call.id);
          const resource = await cloud.update(target, call.id, call.properties);
          await grant.record(`updated ${resource.type} ${resource.id}`);
          return { resource };
        }
        case 'adopt': {
          // Pulumi's import: a resource of the job's tenant becomes one of the job's stack.
          ofStack(call.urn);
          await mustOwn(call.id);
          const resource = await cloud.adopt(target, call.id, call.urn);
          await grant.record(`adopted ${resource.type} ${resource.id} as ${resource.urn}`);
          return { resource };
        }
        case 'delete': {
          if (!(await own(call.id))) return { deleted: false };
          const deleted = await cloud.delete(target, call.id);
          await grant.record(`deleted ${call.id}`);
          return { deleted };
        }
      }
    },
  };
}
