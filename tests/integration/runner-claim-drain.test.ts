import { describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually';
import { startTestHost } from '../support/local-host';
import { ownPool } from '../support/runner-agents';

/**
 * An agent's claim waits on the host for work (a long poll of up to 30 s). A host that stops answers it at once,
 * without a job, instead of draining its requests for the rest of the wait: stopping `runtime-cloud start` (and
 * every test host with agents) took the agents' 20 s claim wait before.
 */
describe('a stopping host and the claims waiting on it', () => {
  it('when the host stops while an agent claim waits, then the claim answers 204 at once and the host stops', { timeout: 20_000 }, async () => {
    // Arrange: runner jobs without the host's own agents; this test is the agent, waiting in a claim.
    const host = await startTestHost({ settings: { RuntimeCloud__IaC__Execution: 'runner-jobs', RuntimeCloud__Local__Runners: '0' } });
    const pool = ownPool('demo-team');
    const credential = await host.token({ subject: `runner-agents:${pool}`, scopes: ['factory.runner.agent'], runnerPool: pool });
    const claim = fetch(new URL(`/runtime-cloud/runner-pools/${pool}/claim?waitMs=30000`, host.url), {
      method: 'POST',
      headers: { authorization: `Bearer ${credential}`, 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'drain-test' }),
    });
    // The claim has looked once (and found nothing) once its agent is online.
    await eventually(async () => {
      const agents = (await (await host.fetch(`/runtime-cloud/runner-pools/${pool}/agents`, { claims: { roles: ['PlatformAdmin'] } })).json()) as { items: { agent: string }[] };
      return agents.items.some((a) => a.agent === 'drain-test') ? true : undefined;
    });

    // Act: without the claim's wait ended, stop() drains it for 30 s and the test times out.
    await host.stop();
    const answer = await claim;

    // Assert
    expect(answer.status).toBe(204);
  });
});
