import { hostClient, type HostClient } from '../../runner/host-client';
import type { TestHost } from './local-host';

/** A tenant's own agent pool on a target (default: the local target's capacity pool `local-runner`). */
export function ownPool(tenant: string, capacityPool = 'local-runner'): string {
  return `${capacityPool}.${tenant}`;
}

/** A test speaking the runner protocol as an agent of `pool`: its pool credential, its client, and raw job calls. */
export interface TestAgent {
  readonly pool: string;
  readonly credential: string;
  readonly client: HostClient;
  /** A call of a job over HTTP with this agent's pool credential and the given job token, answered as is. */
  readonly jobCall: (jobId: string, jobToken: string, path: 'heartbeat' | 'state' | 'target' | 'result', init?: { method?: string; body?: unknown }) => Promise<Response>;
}

export async function testAgent(host: TestHost, pool: string, subject = `agent-of-${pool}`): Promise<TestAgent> {
  const credential = await host.token({ scopes: ['factory.runner.agent'], runnerPool: pool, subject });
  return {
    pool,
    credential,
    client: hostClient({ hostUrl: host.url, pool, credential: () => Promise.resolve(credential) }),
    jobCall: (jobId, jobToken, path, init = {}) =>
      fetch(new URL(`/runtime-cloud/runner-jobs/${jobId}/${path}`, host.url), {
        method: init.method ?? (path === 'state' ? 'GET' : 'POST'),
        headers: { authorization: `Bearer ${credential}`, 'x-runner-job-token': jobToken, ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      }),
  };
}
