import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqlStore } from '../../shared/platform/sql/database';
import { acquireStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { browserAvailable, ConsoleUnderTest, screenshot, UI_WAIT, violationsOf } from '../support/browser';
import { eventually } from '../support/eventually';

/**
 * The console's capacity and stack pages in Debian's chromium, against `runtime-cloud start` on a temporary state
 * dir: the local pools and a tenant's leases (never another tenant's), the example production stack after its
 * promotion was applied, a stack lock held by a hung host as an Observer and a PlatformAdmin see it, accessibility
 * (axe-core) and screenshots of both pages at 1280 px and 390 px (tests/artifacts/console).
 */
const WIDTHS = [1280, 390] as const;
const SCENARIO_MS = 90_000;
const LOCAL_POOLS = ['local-attempt', 'local-browser-session', 'local-build', 'local-runner', 'local-sandbox'];
const PRODUCTION_STACK = 'demo-team/demo-app/production';

interface GrantedLease {
  readonly leaseId: string;
  readonly tenant: string;
  readonly fencingToken: number;
  readonly expiresAt: string;
}

describe.runIf(browserAvailable())('the console capacity and stack pages in chromium (a real host on a temporary state dir)', () => {
  const ui = new ConsoleUnderTest('console-capacity', /^(capacity|stack)-/);
  let runId: string;

  beforeAll(() => ui.start(), 120_000);
  afterAll(() => ui.stop());
  afterEach((test) => ui.after(test));

  async function open(page: Page, path: string, heading: string | RegExp): Promise<void> {
    await page.goto(ui.url(`/runtime-cloud/console${path}`));
    await page.getByRole('heading', { name: heading, level: 1 }).waitFor();
  }

  /** A lease granted through the API as a worker of the tenant would take it (a service token with the lease scope). */
  async function grant(tenant: string, holder: string): Promise<GrantedLease> {
    const token = await ui.cli('token', '--tenant', tenant, '--scope', 'factory.capacity.lease');
    const response = await fetch(ui.url('/runtime-cloud/leases'), {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'attempt', ttlSeconds: 600, holder }),
    });
    expect(response.status).toBe(201);
    return (await response.json()) as GrantedLease;
  }

  async function api<T>(path: string, token: string, init: RequestInit = {}): Promise<{ status: number; body: T }> {
    const response = await fetch(ui.url(path), { ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...init.headers } });
    return { status: response.status, body: (await response.json()) as T };
  }

  async function expectAccessible(page: Page, view: string): Promise<void> {
    expect(await violationsOf(page, view)).toEqual([]);
  }

  it("when a lease is granted to each of two tenants under one holder name, then tenant A's operator sees the local pools with used and free, its quota, and its own lease with a countdown that ticks, never tenant B's", async () => {
    // Arrange
    const mine = await grant('demo-team', 'worker-shared');
    const theirs = await grant('demo-free', 'worker-shared');
    const operator = await ui.signIn('operator-1', 'Operator', 'demo-team');

    // Act
    await operator.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Capacity' }).click();
    await operator.getByRole('heading', { name: 'Capacity and runners', level: 1 }).waitFor();

    // Assert: every local pool with its use; both tenants' leases came from the shared local-attempt pool.
    const pools = operator.getByRole('region', { name: 'Pools', exact: true });
    for (const pool of LOCAL_POOLS) await pools.getByRole('row', { name: new RegExp(`^${pool}\\b`) }).waitFor();
    const attempt = pools.getByRole('row', { name: /^local-attempt\b/ }).getByRole('cell');
    await expect.poll(async () => (await attempt.nth(1).textContent())?.trim(), UI_WAIT).toBe('2');
    expect((await attempt.nth(2).textContent())?.trim()).toBe('48');
    const quota = operator.getByRole('region', { name: 'Quota use by tenant' });
    expect(await quota.getByRole('row', { name: /^demo-team/ }).textContent()).toContain('1 of 20');

    // Assert: its own lease with holder, state and fencing token, and a countdown that ticks; nothing of tenant B.
    const leases = operator.getByRole('region', { name: 'Leases' });
    const row = leases.getByRole('row', { name: /^worker-shared/ });
    await row.waitFor();
    expect(await row.count()).toBe(1);
    expect(await row.getByRole('rowheader').textContent()).toContain(mine.leaseId);
    expect(await row.getByRole('cell').nth(0).textContent()).toBe('active');
    expect(await row.getByRole('cell').nth(3).textContent()).toBe(String(mine.fencingToken));
    const countdown = row.locator('time.countdown');
    const before = (await countdown.textContent()) ?? '';
    expect(before).toMatch(/^\d+ min \d{2} s left$/);
    await expect.poll(() => countdown.textContent(), UI_WAIT).not.toBe(before);
    const text = (await operator.locator('main').textContent()) ?? '';
    expect(text).not.toContain(theirs.leaseId);
    expect(text).not.toContain('demo-free');
  }, SCENARIO_MS);

  it("when two tenants' requests wait in a full pool's queue, then tenant A's operator sees its own request with its place and why it waits, never tenant B's", async () => {
    // Arrange: a pool of one unit held by tenant A; then A and B each ask to wait. B holds nothing, so it goes first.
    const admin = await ui.cli('token', '--role', 'PlatformAdmin');
    expect((await api('/runtime-cloud/pools/queue-demo', admin, { method: 'PUT', body: JSON.stringify({ kind: 'sandbox', target: 'local', capacity: 1 }) })).status).toBe(201);
    const ask = async (tenant: string, holder: string, wait?: object) => {
      const token = await ui.cli('token', '--tenant', tenant, '--scope', 'factory.capacity.lease');
      return api<{ requestId?: string }>('/runtime-cloud/leases', token, { method: 'POST', body: JSON.stringify({ kind: 'sandbox', ttlSeconds: 600, holder, pool: 'queue-demo', ...(wait ? { wait } : {}) }) });
    };
    expect((await ask('demo-team', 'holder-now')).status).toBe(201);
    const theirs = await ask('demo-free', 'worker-waiting', { seconds: 300, holdSeconds: 0 });
    const mine = await ask('demo-team', 'worker-waiting', { seconds: 300, holdSeconds: 0 });
    expect([theirs.status, mine.status]).toEqual([202, 202]);
    const operator = await ui.signIn('operator-1', 'Operator', 'demo-team');

    // Act
    await open(operator, '/capacity', 'Capacity and runners');

    // Assert: position 2 (B's request is first), behind B's fair share; B's request is not shown.
    const queue = operator.getByRole('region', { name: 'Waiting for capacity' });
    const row = queue.getByRole('row', { name: /worker-waiting/ });
    await row.waitFor();
    expect(await row.count()).toBe(1);
    expect(await row.getByRole('rowheader').textContent()).toContain(String(mine.body.requestId));
    expect((await row.getByRole('cell').nth(0).textContent())?.trim()).toBe('2');
    expect(await row.getByRole('cell').nth(2).textContent()).toContain('behind fair share');
    expect(await queue.textContent()).not.toContain(String(theirs.body.requestId));
    expect(await operator.locator('main').textContent()).not.toContain('demo-free');
  }, SCENARIO_MS);

  it("when the example's production promotion was approved and applied, then its stack page, reached from the fleet and from the run, shows the run and that nothing holds the lock", async () => {
    // Arrange: the promotion arrives as the factory sends it; a second person approves its plan through the API.
    const promotion = JSON.parse(await ui.cli('example', 'promotion', 'production')) as unknown;
    const sent = await api('/runtime-cloud/local/queues/runtime-cloud-promotions/messages', ui.admin, { method: 'POST', body: JSON.stringify({ body: promotion }) });
    expect(sent.status).toBe(201);
    const approver = await ui.cli('token', '--role', 'Operator', '--tenant', 'demo-team', '--subject', 'operator-2');
    const waiting = await eventually(async () => {
      const runs = await api<{ items: { runId: string; state: string; planDigest?: string }[] }>('/runtime-cloud/runs', approver);
      return runs.body.items.find((r) => r.state === 'awaiting-approval');
    });
    runId = waiting.runId;
    const approved = await api(`/runtime-cloud/runs/${runId}/approve`, approver, { method: 'POST', body: JSON.stringify({ planDigest: waiting.planDigest }) });
    expect(approved.status).toBe(200);
    await eventually(async () => ((await api<{ state: string }>(`/runtime-cloud/runs/${runId}`, approver)).body.state === 'applied' ? true : undefined));
    const observer = await ui.signIn('observer-1', 'Observer');

    // Act: from the fleet's row of the environment to its stack.
    await observer.getByRole('region', { name: 'All environments' }).getByRole('link', { name: PRODUCTION_STACK }).click();
    await observer.getByRole('heading', { name: 'Stack demo-app/production', level: 1 }).waitFor();

    // Assert
    const lock = observer.getByRole('region', { name: 'Lock' });
    await expect.poll(() => lock.textContent(), UI_WAIT).toContain('not locked');
    const run = observer.getByRole('region', { name: 'Runs' }).getByRole('row', { name: new RegExp(runId) });
    expect(await run.getByRole('cell').nth(0).textContent()).toBe('applied');
    expect(await observer.getByRole('region', { name: 'Environment' }).getByRole('row', { name: /^production/ }).textContent()).toContain('in sync');
    expect(await observer.getByRole('button', { name: 'Break lock' }).count()).toBe(0);

    // Act and assert: the run page's header links to the same stack page.
    await open(observer, `/runs/${encodeURIComponent(runId)}`, /→ production/);
    await observer.locator('.page-header').getByRole('link', { name: PRODUCTION_STACK }).click();
    await observer.getByRole('heading', { name: 'Stack demo-app/production', level: 1 }).waitFor();
    expect(new URL(observer.url()).pathname).toBe('/runtime-cloud/console/stacks/demo-team/demo-app/production');
  }, SCENARIO_MS);

  it('when a hung host holds a stack lock, then an Observer sees its holder and fencing token and no break button, and a PlatformAdmin breaks it through the console with a reason', async () => {
    // Arrange: a run of a host that died holds the development stack (as two hosts on one store would leave it).
    const store = createSqlStore({ dialect: 'sqlite', connection: join(ui.stateDir, 'runtime-cloud.sqlite') });
    const taken = await acquireStackLock(provisioningDb(store.db), store.dialect, {
      stack: { tenant: 'demo-team', project: 'demo-app', stack: 'development' },
      run: 'run-of-a-hung-host',
      host: 'hung-host',
      now: Date.now(),
      ttlMs: 600_000,
    }).finally(() => store.close());
    expect(taken.acquired).toBe(true);
    const version = taken.acquired ? taken.lock.version : 0;
    const observer = await ui.signIn('observer-1', 'Observer');

    // Act
    await open(observer, '/stacks/demo-team/demo-app/development', 'Stack demo-app/development');

    // Assert: the Observer reads who holds it, and has no way to break it.
    const lock = observer.getByRole('region', { name: 'Lock' });
    await expect.poll(() => lock.textContent(), UI_WAIT).toContain('run-of-a-hung-host');
    expect(await lock.textContent()).toContain(`Fencing token${version} (the lock's version)`);
    expect(await lock.locator('time.countdown').textContent()).toMatch(/left$/);
    expect(await observer.getByRole('button', { name: 'Break lock' }).count()).toBe(0);

    // Act: a PlatformAdmin across tenants breaks it, giving why.
    const platform = await ui.signIn('admin-1', 'PlatformAdmin', '');
    await open(platform, '/stacks/demo-team/demo-app/development', 'Stack demo-app/development');
    await platform.getByRole('button', { name: 'Break lock' }).click();
    const dialog = platform.getByRole('dialog', { name: "Break this stack's lock" });
    expect(await dialog.textContent()).toContain('run-of-a-hung-host');
    await dialog.getByLabel('Why (recorded with the break)').fill('its host died mid-plan');
    await dialog.getByRole('button', { name: 'Break lock' }).click();

    // Assert: said on the page, gone in the API.
    await platform.getByRole('status').filter({ hasText: `Broke lock version ${version} of run run-of-a-hung-host` }).first().waitFor();
    await expect.poll(() => platform.getByRole('region', { name: 'Lock' }).textContent(), UI_WAIT).toContain('not locked');
    const after = await api<{ code: string }>('/runtime-cloud/tenants/demo-team/stacks/demo-app/development/lock', ui.admin);
    expect(after.status).toBe(404);
    expect(after.body.code).toBe('PROVISIONING.STACK_NOT_LOCKED');
  }, SCENARIO_MS);

  it('both pages at 1280 px and 390 px: screenshots, and no serious or critical axe violation', async () => {
    expect(runId).toBeTruthy();
    for (const width of WIDTHS) {
      // Arrange
      const operator = await ui.signIn('operator-1', 'Operator', 'demo-team', width);

      // Act and assert: each page with what it shows loaded.
      await open(operator, '/capacity', 'Capacity and runners');
      await operator.getByRole('region', { name: 'Leases' }).getByRole('row', { name: /^worker-shared/ }).waitFor();
      await operator.getByRole('region', { name: 'Runner pools' }).getByText(/^local-runner\.demo-team|^No runner pool/).first().waitFor();
      await expectAccessible(operator, `capacity ${width}`);
      await screenshot(operator, `capacity-${width}`);
      await open(operator, '/stacks/demo-team/demo-app/production', 'Stack demo-app/production');
      await operator.getByRole('region', { name: 'Runs' }).getByRole('row', { name: new RegExp(runId) }).waitFor();
      await expectAccessible(operator, `stack ${width}`);
      await screenshot(operator, `stack-${width}`);
      const overflow = await operator.evaluate<number>('document.documentElement.scrollWidth - document.documentElement.clientWidth');
      expect(overflow, `horizontal overflow at ${width} px`).toBeLessThanOrEqual(0);
    }
  }, SCENARIO_MS);
});
