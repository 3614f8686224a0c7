import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { browserAvailable, ConsoleUnderTest, screenshot, UI_WAIT, violationsOf } from '../support/browser';
import { eventually } from '../support/eventually';
import { TestRepository } from '../support/git-repositories';

/**
 * The operator console in Debian's chromium, against `runtime-cloud start` on a temporary state dir: sign in, the
 * fleet, a production run waiting for approval and approved in the console, what an Observer and another tenant's
 * operator see, accessibility (axe-core) and screenshots of every view at 1280 px and 390 px (tests/artifacts/console).
 */
const WIDTHS = [1280, 390] as const;
const SCENARIO_MS = 90_000;
/** Tenant B's own program: one bucket, in a project of the same name as the example's. */
const TENANT_B_PROGRAM = 'name: demo-app\nruntime: yaml\nresources:\n  assets:\n    type: local:storage:Bucket\n    properties:\n      name: tenant-b-assets\n';

describe.runIf(browserAvailable())('the operator console in chromium (a real host on a temporary state dir)', () => {
  const ui = new ConsoleUnderTest('console', /^(fleet|runs?|drift|sign-in)-/);
  let runId: string;

  beforeAll(() => ui.start(), 120_000);
  afterAll(() => ui.stop());
  afterEach((test) => ui.after(test));

  /** Sends the example's production promotion as the factory would (the local queue), answering its promotion id. */
  async function sendProductionPromotion(): Promise<string> {
    const promotion = JSON.parse(await ui.cli('example', 'promotion', 'production')) as { promotionId: string };
    await send(promotion);
    return promotion.promotionId;
  }


  /** Changes a stack's bucket in the local cloud, as someone with portal access would. */
  async function tamperWithBucket(tenant = 'demo-team', stack = 'production', properties: object = { versioning: false }): Promise<void> {
    const headers = { authorization: `Bearer ${ui.admin}` };
    const listed = await fetch(ui.url(`/runtime-cloud/local/cloud/resources?tenant=${tenant}&stack=${stack}`), { headers });
    const bucket = ((await listed.json()) as { items: { urn: string; type: string }[] }).items.find((r) => r.type === 'local:storage:Bucket');
    expect(bucket).toBeDefined();
    const changed = await fetch(ui.url(`/runtime-cloud/local/cloud/resources/${encodeURIComponent(bucket!.urn)}?tenant=${tenant}`), {
      method: 'PATCH',
      headers,
      body: JSON.stringify(properties),
    });
    expect(changed.status).toBe(200);
  }

  /** A call as the PlatformAdmin, in `tenant` when given (X-Tenant-Id). */
  async function api(method: string, path: string, body?: unknown, tenant?: string): Promise<{ status: number }> {
    const response = await fetch(ui.url(path), {
      method,
      headers: { authorization: `Bearer ${ui.admin}`, ...(tenant ? { 'x-tenant-id': tenant } : {}) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    await response.arrayBuffer();
    return { status: response.status };
  }

  /** Sends a promotion as the factory would (the local queue). */
  async function send(promotion: object): Promise<void> {
    expect((await api('POST', '/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { body: promotion })).status).toBe(201);
  }


  async function expectAccessible(page: Page, view: string): Promise<void> {
    expect(await violationsOf(page, view)).toEqual([]);
  }

  it('when an operator signs in and a production promotion arrives, then the fleet shows it waiting; its run page shows the plan; a second person approves it there and sees it applied with its events', async () => {
    // Arrange
    const operator = await ui.signIn('operator-1', 'Operator');
    await expectAccessible(operator, 'fleet (empty)');

    // Act: the promotion arrives; the fleet page refreshes on its own.
    await sendProductionPromotion();
    const waiting = operator.getByRole('region', { name: 'Needs attention' }).getByRole('link', { name: /waits for a second person's approval/ });
    await waiting.waitFor({ timeout: 30_000 });

    // Assert: the fleet counts it as waiting for approval.
    await expect.poll(() => operator.locator('.standing-waiting-for-approval .count-value').textContent(), UI_WAIT).toBe('1');
    await screenshot(operator, 'fleet-1280');

    // Act: open its run.
    await waiting.click();
    await operator.getByRole('heading', { name: 'Plan', exact: true }).waitFor();
    runId = decodeURIComponent(new URL(operator.url()).pathname.split('/').pop() ?? '');

    // Assert: it waits for approval, and the plan shows each step with its action; a secret shows as its reference.
    await expect.poll(() => operator.getByRole('status').first().textContent(), UI_WAIT).toContain("Waits for a second person's approval");
    const steps = operator.locator('.step');
    await expect.poll(() => steps.count(), UI_WAIT).toBe(3);
    expect(await steps.locator('.badge.op-create').count()).toBe(3);
    expect(await operator.locator('.steps').textContent()).toContain('secret · broker://runtime-cloud/app-db-password');
    await operator.getByLabel('Filter by action').selectOption('delete');
    expect(await steps.count()).toBe(0);
    await operator.getByLabel('Filter by action').selectOption('');
    await operator.getByLabel('Filter by address').fill('endpoint');
    expect(await steps.count()).toBe(1);
    await operator.getByLabel('Filter by address').fill('');
    await expectAccessible(operator, 'run (awaiting approval)');
    await screenshot(operator, 'run-awaiting-approval-1280');

    // Act: approve, confirming the digest shown.
    await operator.getByRole('button', { name: 'Approve', exact: true }).click();
    const dialog = operator.getByRole('dialog', { name: 'Approve this plan' });
    const digest = (await operator.locator('.receipts dd code').first().textContent()) ?? '';
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(await dialog.textContent()).toContain(digest);
    await dialog.getByRole('button', { name: 'Approve plan' }).click();

    // Assert: the outcome is said, the run is applied, its events are listed.
    await operator.getByRole('status').filter({ hasText: 'Approved plan' }).waitFor();
    await operator.locator('.page-header .badge', { hasText: 'applied' }).waitFor({ timeout: 30_000 });
    await operator.getByRole('region', { name: 'Events published' }).getByText('ProvisioningApplied').waitFor({ timeout: 15_000 });
    expect(await operator.getByRole('region', { name: 'Policy' }).textContent()).toContain('Approved by operator-1');
    await expectAccessible(operator, 'run (applied)');
    await screenshot(operator, 'run-applied-1280');
  }, SCENARIO_MS);

  it('when the local cloud is changed out of band, then a scan from the console shows the environment drifted, and accepting its proposal (its reconciliation plan shown first) brings it back in sync', async () => {
    // Arrange: someone with portal access turns the bucket's versioning off.
    expect(runId).toBeTruthy();
    const operator = await ui.signIn('operator-1', 'Operator');
    await tamperWithBucket();

    // Act: scan now, from the drift page.
    await operator.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Drift' }).click();
    await operator.getByRole('heading', { name: 'Drift', level: 1 }).waitFor();
    await operator.getByRole('button', { name: 'Scan production now' }).click();
    await operator.getByRole('dialog', { name: 'Scan production now' }).getByRole('button', { name: 'Scan now' }).click();

    // Assert: drifted, with a medium finding, and a proposal under its cause.
    await operator.getByRole('status').filter({ hasText: 'Scanned: drifted' }).waitFor();
    const proposals = operator.getByRole('region', { name: 'Open proposals by cause' });
    await proposals.getByRole('button', { name: 'Accept for production' }).waitFor();
    expect(await proposals.textContent()).toContain('modified local:storage:Bucket');
    expect(await operator.getByRole('region', { name: 'Environments' }).textContent()).toContain('1 medium');
    await expectAccessible(operator, 'drift (drifted)');
    await screenshot(operator, 'drift-drifted-1280');

    // Act: accept, having seen the reconciliation plan.
    await proposals.getByRole('button', { name: 'Accept for production' }).click();
    const dialog = operator.getByRole('dialog', { name: 'Accept: reconcile the environment' });
    expect(await dialog.locator('.badge.op-update').count()).toBe(1);
    await dialog.getByRole('button', { name: 'Accept and start the run' }).click();

    // Assert: a reconciliation run is linked; production's plan waits for a second person, who approves it in the console.
    await operator.getByRole('status').filter({ hasText: 'Accepted' }).getByRole('link', { name: 'its reconciliation run' }).click();
    await operator.getByRole('button', { name: 'Approve', exact: true }).waitFor({ timeout: 30_000 });
    // Its plan shows the changed path with the value the target holds now (old) and the one the apply restores (new).
    const change = operator.getByRole('table', { name: /^Changes of / }).getByRole('row').filter({ hasText: 'versioning' });
    expect([await change.locator('td.old').textContent(), await change.locator('td.new').textContent()]).toEqual(['false', 'true']);
    const reconciliation = new URL(operator.url()).pathname;
    const approver = await ui.signIn('operator-2', 'Operator');
    await approver.goto(ui.url(reconciliation));
    await approver.getByRole('button', { name: 'Approve', exact: true }).click();
    await approver.getByRole('dialog', { name: 'Approve this plan' }).getByRole('button', { name: 'Approve plan' }).click();
    await approver.locator('.page-header .badge', { hasText: 'applied' }).waitFor({ timeout: 30_000 });

    // Assert: once applied, the rescan finds the environment in sync and no proposal is open.
    await approver.goto(ui.url('/runtime-cloud/console/drift'));
    await approver.getByRole('region', { name: 'Environments' }).getByText('in sync', { exact: true }).waitFor({ timeout: 30_000 });
    await approver.getByRole('region', { name: 'Open proposals by cause' }).getByText('No open proposal.').waitFor();
  }, SCENARIO_MS);

  it('when an Observer opens the run, then there is no approve button, and an approval sent with the Observer token is refused by the API', async () => {
    // Arrange
    expect(runId).toBeTruthy();
    const observer = await ui.signIn('observer-1', 'Observer');

    // Act
    await observer.goto(ui.url(`/runtime-cloud/console/runs/${encodeURIComponent(runId)}`));
    await observer.getByRole('heading', { name: 'Plan', exact: true }).waitFor();
    const session = await observer.evaluate<string>("sessionStorage.getItem('runtime-cloud-console.session')");
    const { token } = JSON.parse(session) as { token: string };
    const forged = await fetch(ui.url(`/runtime-cloud/runs/${runId}/approve`), {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ planDigest: `sha256:${'a'.repeat(64)}` }),
    });

    // Assert
    expect(await observer.getByRole('button', { name: 'Approve' }).count()).toBe(0);
    expect(await observer.getByRole('region', { name: 'Actions' }).count()).toBe(0);
    expect(forged.status).toBe(403);
    expect(((await forged.json()) as { code: string }).code).toBe('AUTH.SCOPE_MISSING');
  }, SCENARIO_MS);

  it("when another tenant's operator signs in, then neither the fleet nor the run's own URL shows tenant demo-team's run or environment", async () => {
    // Arrange
    const stranger = await ui.signIn('operator-9', 'Operator', 'other-team');

    // Act
    const fleet = (await stranger.locator('main').textContent()) ?? '';
    await stranger.goto(ui.url(`/runtime-cloud/console/runs/${encodeURIComponent(runId)}`));
    const alert = stranger.getByRole('alert');
    await alert.waitFor();

    const session = await stranger.evaluate<string>("sessionStorage.getItem('runtime-cloud-console.session')");
    const { token } = JSON.parse(session) as { token: string };
    const events = await fetch(ui.url(`/runtime-cloud/runs/${runId}/events`), { headers: { authorization: `Bearer ${token}` } });

    // Assert
    expect(events.status).toBe(404);
    expect(fleet).toContain('No environment yet');
    expect(fleet).not.toContain('demo-team');
    expect(await alert.textContent()).toContain(`there is no run ${runId}`);
  }, SCENARIO_MS);

  it('when two tenants have an environment of the same id and only one drifted, then a PlatformAdmin across tenants sees each with its own status and findings', async () => {
    // Arrange: tenant A's development promotion of the example; tenant B's own program, to the same environment id.
    const promotionA = JSON.parse(await ui.cli('example', 'promotion', 'development')) as { tenantId: string; environment: { id: string } };
    const repository = await TestRepository.init(join(ui.stateDir, 'repos', 'tenant-b'));
    const commit = await repository.commit({ 'app/Pulumi.yaml': TENANT_B_PROGRAM, 'app/Pulumi.development.yaml': 'config: {}\n' });
    expect((await api('PUT', '/runtime-cloud/tenants/tenant-b', { edition: 'team' })).status).toBeLessThan(300);
    const promotionB = { ...promotionA, tenantId: 'tenant-b', desiredState: { repository: pathToFileURL(repository.dir).href, commit, path: 'app', stack: 'development' } };
    await send(promotionA);
    await send(promotionB);
    for (const tenant of ['demo-team', 'tenant-b']) {
      await eventually(async () => ((await api('GET', `/runtime-cloud/environments/${promotionA.environment.id}`, undefined, tenant)).status === 200 ? true : undefined), 60_000);
    }
    // Tenant B's bucket is renamed out of band, and B's environment scanned.
    await tamperWithBucket('tenant-b', 'development', { name: 'renamed-out-of-band' });
    expect((await api('POST', `/runtime-cloud/environments/${promotionA.environment.id}/scan`, undefined, 'tenant-b')).status).toBe(200);

    // Act
    const admin = await ui.signIn('admin-1', 'PlatformAdmin', '');
    await admin.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Drift' }).click();
    const rows = admin.getByRole('group', { name: 'Environments' }).getByRole('row', { name: /^development/ });
    await expect.poll(() => rows.count(), UI_WAIT).toBe(2);

    // Assert
    const rowOf = (tenant: string) => admin.getByRole('group', { name: 'Environments' }).getByRole('row').filter({ hasText: `${tenant} · ${tenant}/` });
    await expect.poll(async () => (await rowOf('tenant-b').textContent()) ?? '', UI_WAIT).toContain('drifted');
    expect(await rowOf('tenant-b').textContent()).toMatch(/1 (high|medium|low)/);
    expect(await rowOf('demo-team').filter({ hasText: 'development' }).textContent()).toContain('in sync');
    expect(await rowOf('demo-team').filter({ hasText: 'development' }).textContent()).toContain('none');
  }, SCENARIO_MS);

  it('every view at 1280 px and 390 px: screenshots, and no serious or critical axe violation', async () => {
    for (const width of WIDTHS) {
      // Arrange
      const operator = await ui.signIn('operator-1', 'Operator', 'demo-team', width);

      // Act and assert: each view, as a person would reach it.
      await operator.getByRole('region', { name: 'All environments' }).getByText('production').first().waitFor();
      await expectAccessible(operator, `fleet ${width}`);
      await screenshot(operator, `fleet-${width}`);
      await operator.goto(ui.url(`/runtime-cloud/console/runs/${encodeURIComponent(runId)}`));
      await operator.getByRole('heading', { name: 'Plan', exact: true }).waitFor();
      await expectAccessible(operator, `run ${width}`);
      await screenshot(operator, `run-${width}`);
      await operator.goto(ui.url('/runtime-cloud/console/runs'));
      await operator.getByRole('heading', { name: /^\d+ runs?/ }).waitFor();
      // The production run and the reconciliation run, newest first; a filter is part of the page's URL. The heading
      // reads "0 runs" while the list loads, so the rows are waited for, not counted as the heading shows.
      await expect.poll(() => operator.locator('tbody tr').count(), UI_WAIT).toBeGreaterThanOrEqual(2);
      await operator.getByLabel('State').selectOption('applied');
      await operator.waitForURL(/\/runs\?status=applied$/);
      await expectAccessible(operator, `runs ${width}`);
      await screenshot(operator, `runs-${width}`);
      await operator.goto(ui.url('/runtime-cloud/console/drift'));
      await operator.getByRole('heading', { name: 'Open proposals by cause' }).waitFor();
      await expectAccessible(operator, `drift ${width}`);
      await screenshot(operator, `drift-${width}`);
      const page = await ui.newPage(width);
      await page.goto(ui.url('/runtime-cloud/console/sign-in'));
      await page.getByRole('button', { name: 'Sign in' }).waitFor();
      await expectAccessible(page, `sign-in ${width}`);
      await screenshot(page, `sign-in-${width}`);
      const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - document.documentElement.clientWidth');
      expect(overflow, `horizontal overflow at ${width} px`).toBeLessThanOrEqual(0);
    }
  }, SCENARIO_MS);
});
