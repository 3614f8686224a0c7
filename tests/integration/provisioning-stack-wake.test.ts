import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { acquireStackLock, getStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { startTestHost, type TestHost } from '../support/local-host';
import { aStackPromotion, EXAMPLE_PROJECT, EXAMPLE_TENANT, exampleStack, provisioningExample, qualifiedExampleStack, writeExampleReferences, sendToPromotions, type ProvisioningExample } from '../support/provisioning';

/**
 * Runs waiting for a stack are woken when it is released, on a local host whose runs would otherwise ask again only
 * every minute (`lockRetryMs` 60 s): an operator's unlock wakes the first waiting run, and the end of its apply wakes
 * the next one, so both finish within seconds.
 */

const admin = { roles: ['PlatformAdmin'], subject: 'admin-1' };
const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator-1' };
const STACK = 'development-1';

interface RunBody {
  runId: string;
  promotionId: string;
  state: string;
  waitingFor?: { kind: string; stack?: string; heldBy?: string };
}

describe('provisioning runs woken when their stack is released', () => {
  let host: TestHost;
  let example: ProvisioningExample;
  let root: string;

  beforeAll(async () => {
    root = fs.mkdtempSync(join(tmpdir(), 'rch-provisioning-wake-'));
    host = await startTestHost({ depsOverrides: { provisioningTimings: { lockRetryMs: 60_000 } } });
    example = await provisioningExample(root, host.stateDir, 1);
    writeExampleReferences(host.stateDir);
  });
  afterAll(async () => {
    await host?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const send = (body: unknown, messageId: string) => sendToPromotions(host, body, messageId);
  const runsOf = async (): Promise<RunBody[]> => {
    const response = await host.fetch('/runtime-cloud/runs?limit=1000', { claims: operator });
    expect(response.status).toBe(200);
    return ((await response.json()) as { items: RunBody[] }).items;
  };
  /** Polls until `probe` answers something (not undefined). */
  const eventually = <T>(probe: () => Promise<T | undefined>, timeout: number): Promise<T> =>
    vi.waitFor(
      async () => {
        const value = await probe();
        if (value === undefined) throw new Error('not yet');
        return value;
      },
      { timeout, interval: 50 },
    );

  it('when a held stack is unlocked, then the first waiting run is woken, and when it has applied the second is too, long before their one-minute retry', async () => {
    // Arrange: another host's run holds the stack; two promotions of it (two environments, so none supersedes the
    // other) try it, find it busy, and sleep on their one-minute timers.
    await acquireStackLock(provisioningDb(host.host.deps.sql.db), host.host.deps.sql.dialect, { stack: exampleStack(STACK), run: 'run-elsewhere', host: 'other', now: Date.now(), ttlMs: 120_000 });
    const first = aStackPromotion(example.repository, 'development', { stack: STACK, environmentId: 'env-wake-first' });
    const second = aStackPromotion(example.repository, 'development', { stack: STACK, environmentId: 'env-wake-second' });
    await send(first, `wake-${first.promotionId}`);
    await send(second, `wake-${second.promotionId}`);
    // The queue may take the two in either order; the runs list them in the order they were taken in (FIFO).
    const waiting = await eventually(async () => {
      const runs = (await runsOf()).filter((r) => r.promotionId === first.promotionId || r.promotionId === second.promotionId);
      return runs.length === 2 && runs.every((r) => r.state === 'queued' && r.waitingFor?.kind === 'stack-lock') ? runs : undefined;
    }, 20_000);
    expect(waiting[0]?.waitingFor).toMatchObject({ stack: qualifiedExampleStack(STACK), heldBy: 'run-elsewhere' });

    // Act
    const unlocked = await host.fetch(`/runtime-cloud/tenants/${EXAMPLE_TENANT}/stacks/${EXAMPLE_PROJECT}/${STACK}/unlock`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'host other is gone' }),
      claims: admin,
    });
    const since = Date.now();

    // Assert: both applied in seconds; without the wake-ups the first would sleep out its minute.
    expect(unlocked.status).toBe(200);
    const ended = await eventually(async () => {
      const runs = (await runsOf()).filter((r) => r.promotionId === first.promotionId || r.promotionId === second.promotionId);
      return runs.every((r) => r.state === 'applied' || r.state === 'failed') ? runs : undefined;
    }, 20_000);
    expect(ended.map((r) => r.state)).toEqual(['applied', 'applied']);
    expect(Date.now() - since).toBeLessThan(20_000);
    expect(await getStackLock(provisioningDb(host.host.deps.sql.db), exampleStack(STACK))).toBeUndefined();
  });
});
