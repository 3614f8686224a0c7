import * as fs from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AccessToken, TokenCredential } from '@azure/identity';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runAgent, type AgentEnd } from '../../runner/agent';
import { hostClient, type HostClient } from '../../runner/host-client';
import { localAgentMain as main } from '../../local/runner-agent';
import { poolWakeups, type Wakeups } from '../../runner/wakeups';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import type { EventPublisher } from '../../shared/platform/bus/event-publisher';
import { toOutgoingMessage } from '../../shared/platform/bus/outbox-relay.service';
import { serviceBusPublisher } from '../../shared/platform/bus/service-bus-publisher';
import { AppError } from '../../shared/platform/errors/app-error';
import { ManualClock } from '../../shared/platform/time/clock';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { startAmqpPeer, type AmqpPeer } from '../support/amqp-peer';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { aStackPromotion, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { ownPool, testAgent, type TestAgent } from '../support/runner-agents';
import { resourceOf, startIdentityEndpoint, startTestEntra, type IdentityEndpoint, type TestEntra } from '../support/test-entra';
import { localEngineFor } from '../../local/runner-agent';

/**
 * Runner wake-ups (issue 32, part 2): an event-driven execution of an agent pool takes one wake-up from its pool's
 * own subscription of the events topic, with the identity that may receive from that subscription only, claims, then
 * completes the wake-up; with nothing to claim it exits after its idle time; failing claims back off and give up,
 * abandoning the wake-up for the next execution; one execution runs one job.
 *
 * Real parts: the local host (its store on SQLite and PostgreSQL, its claim endpoint), the agent's code and entry
 * point, the @azure/service-bus SDK, against the AMQP peer, which checks each Entra token (its identity's roles: each
 * wake-up identity may receive from its own pool's subscription only; the host may send to the topic) and copies
 * what is sent to the topic to the subscriptions whose filter passes it. The wake-ups are the host's own
 * `RunnerJobDispatched` events, mapped as the outbox relay maps them and sent with the relay's publisher. Two tenants
 * use the same environment, project and stack names.
 */
const NAMESPACE = 'rc-bus.servicebus.windows.net';
const HOST_IDENTITY = 'runtime-cloud-host';
/** A tenant's agent pool, its subscription (as infra/runners.ts names it: `runner-<pool name>`) and its wake-up identity (client id, the `appid` of its tokens). */
const poolOf = (tenant: string) => ownPool(tenant);
const subscriptionOf = (tenant: string) => `runner-${tenant}`;
const WAKEUP = 'wakeup-';
const wakeupIdentityOf = (tenant: string) => `${WAKEUP}${tenant}`;
const entityOf = (tenant: string) => `${EVENTS_TOPIC}/Subscriptions/${subscriptionOf(tenant)}`;
const operatorOf = (tenant: string) => ({ tenant, roles: ['Operator'], subject: `operator-${tenant}` });
/** The roles of infra/runners.ts: each wake-up identity receives from its own pool's subscription; the host sends to the topic. */
const permits = (appid: string, entity: string, claim: 'Send' | 'Listen') =>
  appid === HOST_IDENTITY ? claim === 'Send' && entity === EVENTS_TOPIC : claim === 'Listen' && appid.startsWith(WAKEUP) && entity === entityOf(appid.slice(WAKEUP.length)).toLowerCase();

// One Entra and one managed identity endpoint for the file: @azure/identity caches a managed identity's tokens in
// the process, so a second Entra (another signing key) would be sent the first one's tokens.
let entra: TestEntra;
let identityEndpoint: IdentityEndpoint;
const saved = { NODE_TLS_REJECT_UNAUTHORIZED: process.env.NODE_TLS_REJECT_UNAUTHORIZED, IDENTITY_ENDPOINT: process.env.IDENTITY_ENDPOINT, IDENTITY_HEADER: process.env.IDENTITY_HEADER };
beforeAll(async () => {
  // The SDK speaks TLS to a namespace given by name and takes no CA (service-bus-managed-identity.test.ts).
  process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
  entra = await startTestEntra();
  identityEndpoint = await startIdentityEndpoint(entra);
  Object.assign(process.env, identityEndpoint.env);
});
afterAll(async () => {
  await identityEndpoint?.close();
  for (const [key, value] of Object.entries(saved)) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
});

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`runner wake-ups (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    let peer: AmqpPeer;
    let publisher: EventPublisher;
    const agents: Record<string, TestAgent> = {};
    const opened: Wakeups[] = [];
    let promotions = 0;

    beforeAll(async () => {
      peer = await startAmqpPeer({ entra: { namespace: NAMESPACE, issuer: entra.issuer, key: entra.publicKey, permits } });
      publisher = serviceBusPublisher({ connection: NAMESPACE, customEndpointAddress: peer.endpoint, credential: entra.credential(), retryOptions: { maxRetries: 0, timeoutInMs: 10_000 } });

      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-wakeups-'));
      host = await startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS, RuntimeCloud__Local__Runners: '0' }, depsOverrides: database.overrides });
      example = await provisioningExample(root, host.stateDir, 4);
      writeExampleReferences(host.stateDir);
    });
    afterAll(async () => {
      for (const wakeups of opened) await wakeups.close().catch(() => undefined);
      await publisher?.close().catch(() => undefined);
      await host?.stop();
      await database?.drop();
      await peer?.close();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    /** A tenant's name in this dialect's run: its wake-up identity's tokens are cached in the process across runs. */
    const named = (name: string) => `${dialect}-${name}`;
    /** Tenants of their own per test (no test meets another's jobs or wake-ups): each with its pool's agent credential and subscription. */
    async function tenants(...names: string[]): Promise<void> {
      for (const tenant of names) {
        const created = await host.fetch(`/runtime-cloud/tenants/${tenant}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ edition: 'team' }), claims: { roles: ['PlatformAdmin'] } });
        expect(created.status).toBeLessThan(300);
        agents[tenant] = await testAgent(host, poolOf(tenant));
        // The pool's subscription as infra/runners.ts declares it (`runnerFilter`, checked in tests/infra/runners.test.ts).
        peer.subscribe(EVENTS_TOPIC, subscriptionOf(tenant), (p) => p.type === 'RunnerJobDispatched' && p.pool === poolOf(tenant));
      }
    }
    const db = () => provisioningDb(host.host.deps.sql.db);
    const jobsOf = (runId: string) => db().selectFrom('provisioning_runner_jobs').select(['kind', 'state', 'agent', 'pool']).where('run_id', '=', runId).orderBy('created_at').execute();

    /** The tenant's development promotion onto `stack`; answers its run id once it waits for a runner. */
    async function promote(tenant: string, environmentId: string, stack: string): Promise<string> {
      const promotion = aStackPromotion(example.repository, 'development', { stack, environmentId, overrides: { tenantId: tenant } });
      await sendToPromotions(host, promotion, `wakeups-${dialect}-${++promotions}`);
      return eventually(async () => {
        const runs = (await (await host.fetch(`/runtime-cloud/runs?environment=${environmentId}`, { claims: operatorOf(tenant) })).json()) as { items: { runId: string; promotionId: string; waitingFor?: { kind: string } }[] };
        return runs.items.find((r) => r.promotionId === promotion.promotionId && r.waitingFor?.kind === 'runner')?.runId;
      });
    }

    /** Sends the run's `RunnerJobDispatched` events to the bus's topic as the outbox relay does; answers how many. */
    async function relayWakeups(runId: string): Promise<number> {
      const rows = await host.host.deps.sql.db.selectFrom('outbox').select(['seq', 'event_id', 'topic', 'correlation_id', 'payload', 'attempts']).orderBy('seq').execute();
      const messages = rows
        .map((r) => ({ seq: Number(r.seq), eventId: r.event_id, topic: r.topic, correlationId: r.correlation_id, payload: String(r.payload), attempts: r.attempts }))
        .filter((e) => {
          const event = JSON.parse(e.payload) as { type: string; data?: { runId?: string } };
          return event.type === 'RunnerJobDispatched' && event.data?.runId === runId;
        })
        .map(toOutgoingMessage);
      await publisher.publish(EVENTS_TOPIC, messages);
      return messages.length;
    }

    /** The agent's environment in a pool's Container Apps Job (infra/runners.ts), pointed at the test host and the peer. */
    const executionEnv = (tenant: string, overrides: Record<string, string> = {}): NodeJS.ProcessEnv => ({
      RuntimeCloud__Runner__HostUrl: host.url.toString(),
      RuntimeCloud__Runner__Pool: poolOf(tenant),
      RuntimeCloud__Runner__Credential: agents[tenant]!.credential,
      RuntimeCloud__Runner__Agent: `execution-${tenant}`,
      RuntimeCloud__Runner__WorkDir: join(root, 'work', tenant),
      RuntimeCloud__Runner__OneJob: 'true',
      RuntimeCloud__Runner__Engine: 'local',
      RuntimeCloud__Runner__Wakeups__Namespace: NAMESPACE,
      RuntimeCloud__Runner__Wakeups__Topic: EVENTS_TOPIC,
      RuntimeCloud__Runner__Wakeups__Subscription: subscriptionOf(tenant),
      RuntimeCloud__Runner__Wakeups__ClientId: wakeupIdentityOf(tenant),
      RuntimeCloud__Runner__Wakeups__Endpoint: peer.endpoint,
      ...overrides,
    });

    /** The pool's wake-ups as an execution takes them, with its wake-up identity's tokens. */
    function wakeupsOf(tenant: string): Wakeups {
      const credential: TokenCredential = { getToken: (scope): Promise<AccessToken> => entra.issue(resourceOf(scope), 3600, wakeupIdentityOf(tenant)) };
      const wakeups = poolWakeups({ connection: NAMESPACE, customEndpointAddress: peer.endpoint, credential, pool: poolOf(tenant), topic: EVENTS_TOPIC, subscription: subscriptionOf(tenant), holdMs: 60_000, log: () => undefined });
      opened.push(wakeups);
      return wakeups;
    }

    /**
     * A clock that moves as long as the host and the bus were asked to wait: each claim or take is asked with no wait
     * (the host answers at once what it has), and the clock is moved by the wait the agent asked for.
     */
    function compressedTime(client: HostClient, wakeups: Wakeups) {
      const clock = new ManualClock('2026-12-06T10:00:00Z');
      const claimWaits: number[] = [];
      const takeWaits: number[] = [];
      return {
        clock,
        claimWaits,
        takeWaits,
        client: {
          ...client,
          claim: async (agent: string, waitMs: number) => {
            claimWaits.push(waitMs);
            const claimed = await client.claim(agent, 0);
            if (!claimed) clock.advance(waitMs);
            return claimed;
          },
        } satisfies HostClient,
        wakeups: {
          take: async (waitMs: number) => {
            takeWaits.push(waitMs);
            const wakeup = await wakeups.take(100);
            if (!wakeup) clock.advance(waitMs);
            return wakeup;
          },
          close: () => wakeups.close(),
        } satisfies Wakeups,
      };
    }

    it("when two tenants' runs of the same names wait, then each pool's execution takes its own wake-up with its own identity, dead-letters what is not one, runs its tenant's one job, completes the wake-up and exits 0", async () => {
      // Arrange: both runs wait for a runner; on A's subscription a message that is no wake-up and B's wake-up
      // (a filter gone wrong) come before A's own.
      const [A, B] = [named('same-a'), named('same-b')];
      await tenants(A, B);
      const runA = await promote(A, 'env-same', 'development-1');
      const runB = await promote(B, 'env-same', 'development-1');
      peer.enqueue(entityOf(A), { messageId: 'not-a-wakeup', body: { type: 'LeaseExpired' }, enqueuedAt: new Date(), applicationProperties: { type: 'LeaseExpired' } });
      peer.enqueue(entityOf(A), { messageId: 'of-b', body: {}, enqueuedAt: new Date(), applicationProperties: { type: 'RunnerJobDispatched', pool: poolOf(B) } });
      expect(await relayWakeups(runA)).toBe(1);
      expect(await relayWakeups(runB)).toBe(1);
      const wakeupOfA = peer.messagesOf(entityOf(A)).at(-1)!;
      const wakeupOfB = peer.messagesOf(entityOf(B))[0]!;
      const asked = identityEndpoint.asked.length;

      // Act: the two executions at once, as two Container Apps Job executions would run.
      const [exitA, exitB] = await Promise.all([main(executionEnv(A)), main(executionEnv(B))]);

      // Assert
      expect([exitA, exitB]).toEqual([0, 0]);
      expect(wakeupOfA.applicationProperties).toMatchObject({ type: 'RunnerJobDispatched', pool: poolOf(A) });
      expect(wakeupOfB.applicationProperties).toMatchObject({ type: 'RunnerJobDispatched', pool: poolOf(B) });
      // Each wake-up completed by its own pool's execution; nothing left on either subscription.
      expect(peer.messagesOf(entityOf(A))).toEqual([]);
      expect(peer.messagesOf(entityOf(B))).toEqual([]);
      expect(peer.deadLetteredOf(entityOf(A))).toEqual([
        { messageId: 'not-a-wakeup', reason: 'RUNNER.NOT_A_WAKEUP', description: 'its type is "LeaseExpired", not RunnerJobDispatched' },
        { messageId: 'of-b', reason: 'RUNNER.WAKEUP_OF_ANOTHER_POOL', description: `it wakes pool "${poolOf(B)}", not ${poolOf(A)}` },
      ]);
      expect(peer.deadLetteredOf(entityOf(B))).toEqual([]);
      // Each asked the managed identity endpoint for its own wake-up identity's Service Bus token, nothing else.
      expect(new Set(identityEndpoint.asked.slice(asked).map((a) => a.clientId))).toEqual(new Set([wakeupIdentityOf(A), wakeupIdentityOf(B)]));
      expect(new Set(identityEndpoint.asked.slice(asked).map((a) => a.resource))).toEqual(new Set(['https://servicebus.azure.net/']));
      // One job each, its own tenant's: the plan ran, and the apply it led to waits for the next execution.
      for (const [tenant, runId] of [[A, runA], [B, runB]] as const) {
        const jobs = await eventually(async () => {
          const all = await jobsOf(runId);
          return all.length === 2 ? all : undefined;
        }, 20_000);
        expect(jobs, tenant).toEqual([
          { kind: 'plan', state: 'done', agent: `execution-${tenant}`, pool: poolOf(tenant) },
          { kind: 'apply', state: 'queued', agent: null, pool: poolOf(tenant) },
        ]);
      }
    }, 60_000);

    it("when two jobs of a pool and their wake-ups wait, then one execution runs exactly one job, settles one wake-up and leaves the other's for the next execution", async () => {
      // Arrange
      const A = named('two-jobs-a');
      await tenants(A);
      const runs = [await promote(A, 'env-two-1', 'development-1'), await promote(A, 'env-two-2', 'development-2')];
      for (const run of runs) await relayWakeups(run);
      expect(peer.messagesOf(entityOf(A))).toHaveLength(2);

      // Act
      const exit = await main(executionEnv(A));

      // Assert
      expect(exit).toBe(0);
      expect(peer.messagesOf(entityOf(A))).toHaveLength(1);
      const plans = await Promise.all(runs.map(async (run) => (await jobsOf(run))[0]!));
      expect(plans.map((job) => job.state).sort()).toEqual(['done', 'queued']);

      // And the next execution takes the other wake-up and runs the other job.
      expect(await main(executionEnv(A))).toBe(0);
      expect(peer.messagesOf(entityOf(A))).toEqual([]);
      expect(await Promise.all(runs.map(async (run) => (await jobsOf(run))[0]!.state))).toEqual(['done', 'done']);
    }, 60_000);

    it("when a pool's execution is pointed at another pool's subscription, then the bus refuses its identity and nothing is taken from that subscription", async () => {
      // Arrange: a wake-up waits on B's subscription.
      const [A, B] = [named('refused-a'), named('refused-b')];
      await tenants(A, B);
      const runB = await promote(B, 'env-refused', 'development-2');
      await relayWakeups(runB);
      const waiting = peer.messagesOf(entityOf(B));
      expect(waiting).toHaveLength(1);

      // Act
      const { exit, written } = await mainWithStderr(executionEnv(A, { RuntimeCloud__Runner__Wakeups__Subscription: subscriptionOf(B) }));

      // Assert
      expect(exit).toBe(1);
      expect(written).toEqual([
        `runner agent of pool ${poolOf(A)}: could not take a wake-up from ${entityOf(B)}: Unauthorized access. 'Listen' claim(s) are required to perform this operation. Resource: 'sb://${NAMESPACE}/${entityOf(B)}'.\n`,
      ]);
      expect(peer.messagesOf(entityOf(B))).toEqual(waiting);
      expect((await jobsOf(runB)).map((j) => j.state)).toEqual(['queued']);
      // B's own execution takes it.
      expect(await main(executionEnv(B))).toBe(0);
      expect(peer.messagesOf(entityOf(B))).toEqual([]);
    }, 60_000);

    it('when a wake-up comes whose job another agent took, then the execution claims until its idle time is over, completes the wake-up and exits idle', async () => {
      // Arrange: A's job taken by an agent of A's pool that pulls (a customer's), its wake-up still on the bus.
      const A = named('idle-a');
      await tenants(A);
      const runA = await promote(A, 'env-idle', 'development-3');
      await relayWakeups(runA);
      const taken = await eventually(() => agents[A]!.client.claim('pulling-agent', 0));
      expect(taken.job.runId).toBe(runA);
      const time = compressedTime(agents[A]!.client, wakeupsOf(A));
      const deadLettered = peer.deadLetteredOf(entityOf(A));

      // Act
      const end = await runAgent({ client: time.client, engineFor: localEngineFor, wakeups: time.wakeups, agent: 'execution-idle', workRoot: join(root, 'work', 'idle'), oneJob: true, idleMs: 60_000, claimWaitMs: 20_000, clock: time.clock, log: () => undefined });

      // Assert
      expect(end).toBe<AgentEnd>('idle');
      expect(time.takeWaits).toEqual([60_000]);
      // Claimed again and again until the idle time was over, each claim waiting what was left of it.
      expect(time.claimWaits).toEqual([20_000, 20_000, 20_000]);
      expect(peer.messagesOf(entityOf(A))).toEqual([]);
      expect(peer.deadLetteredOf(entityOf(A))).toEqual(deadLettered);
      expect((await jobsOf(runA)).map((j) => [j.state, j.agent])).toEqual([['running', 'pulling-agent']]);
    }, 60_000);

    it('when no wake-up comes, then the execution exits idle after its idle time without claiming', async () => {
      // Arrange
      const B = named('quiet-b');
      await tenants(B);
      const time = compressedTime(agents[B]!.client, wakeupsOf(B));

      // Act
      const end = await runAgent({ client: time.client, engineFor: localEngineFor, wakeups: time.wakeups, agent: 'execution-nothing', workRoot: join(root, 'work', 'nothing'), oneJob: true, idleMs: 90_000, clock: time.clock, log: () => undefined });

      // Assert: two takes (a take waits a minute at most), no claim.
      expect(end).toBe<AgentEnd>('idle');
      expect(time.takeWaits).toEqual([60_000, 30_000]);
      expect(time.claimWaits).toEqual([]);
    }, 30_000);

    it('when every claim fails, then the agent backs off exponentially with jitter, gives up after the bound and abandons its wake-up, which the next execution takes', async () => {
      // Arrange: a wake-up of A's pool, and a host that refuses connections (a port nothing listens on).
      const A = named('failing-a');
      await tenants(A);
      const runA = await promote(A, 'env-failing', 'development-4');
      await relayWakeups(runA);
      const away = hostClient({ hostUrl: new URL(`http://127.0.0.1:${await closedPort()}`), pool: poolOf(A), credential: () => Promise.resolve(agents[A]!.credential) });
      const delays: number[] = [];
      const lines: string[] = [];

      // Act
      const ran = runAgent({
        client: away, engineFor: localEngineFor,
        wakeups: wakeupsOf(A),
        agent: 'execution-failing',
        workRoot: join(root, 'work', 'failing'),
        oneJob: true,
        claimRetry: { firstMs: 1000, maxMs: 8000, attempts: 6 },
        sleep: (ms) => Promise.resolve(void delays.push(ms)),
        random: () => 0.5,
        log: (line) => lines.push(line),
      });

      // Assert: five waits, each its growing delay less a quarter (the jitter drawn: 0.5), the last ones capped.
      const gaveUp = await ran.then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(gaveUp).toBeInstanceOf(AppError);
      expect(gaveUp).toMatchObject({ code: 'RUNNER.CLAIM_GAVE_UP', message: expect.stringMatching(/^execution-failing gives up: 6 claims in a row failed, the last with: fetch failed/) as unknown });
      expect(delays).toEqual([750, 1500, 3000, 6000, 6000]);
      expect(lines[0]).toBe('execution-failing: claim 1 of 6 failed: fetch failed; trying again in 750 ms');
      // Abandoned, not completed: still on the subscription, for the next execution, which takes and completes it.
      expect(peer.messagesOf(entityOf(A))).toHaveLength(1);
      expect(await main(executionEnv(A))).toBe(0);
      expect(peer.messagesOf(entityOf(A))).toEqual([]);
      expect((await jobsOf(runA))[0]).toMatchObject({ kind: 'plan', state: 'done', agent: `execution-${A}` });
    }, 60_000);

    it('when the host cannot be reached, then the entry point gives up, says why on stderr and answers exit code 1', async () => {
      // Arrange
      const B = named('away-b');
      await tenants(B);
      const env = executionEnv(B, { RuntimeCloud__Runner__HostUrl: `http://127.0.0.1:${await closedPort()}`, RuntimeCloud__Runner__Wakeups__Namespace: '' });

      // Act
      const { exit, written } = await mainWithStderr(env, { sleep: () => Promise.resolve() });

      // Assert
      expect(exit).toBe(1);
      expect(written).toEqual([`runner agent of pool ${poolOf(B)}: execution-${B} gives up: 8 claims in a row failed, the last with: fetch failed\n`]);
    }, 30_000);
  });
}

/** The agent's entry point, answering its exit code and what it wrote to stderr. */
async function mainWithStderr(...args: Parameters<typeof main>): Promise<{ exit: number; written: string[] }> {
  const written: string[] = [];
  const stderr = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => written.push(String(chunk)) > 0);
  try {
    return { exit: await main(...args), written };
  } finally {
    stderr.mockRestore();
  }
}

/** A port nothing listens on: one the system gave out and took back. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
