import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { runCli, startChildHost, type RunningChild } from './child-process';

/** Debian's chromium (`apt-get install chromium`; .ci/run installs it), driven by playwright-core. */
export const CHROMIUM = process.env.RUNTIME_CLOUD_TEST_CHROMIUM ?? '/usr/bin/chromium';

/**
 * How long an `expect.poll` on the page waits: its 1 s default is less than a page's requests can take with the
 * whole suite running on two cores.
 */
export const UI_WAIT = { timeout: 15_000 } as const;

/** Where the console's screenshots go (and a failing test's). */
export const ARTIFACTS = join(__dirname, '..', 'artifacts', 'console');

/**
 * Whether the browser tests run: they need Debian's chromium. CI sets RUNTIME_CLOUD_TEST_BROWSER=required, so an
 * absent browser fails the run there instead of skipping.
 */
export function browserAvailable(): boolean {
  if (existsSync(CHROMIUM)) return true;
  if (process.env.RUNTIME_CLOUD_TEST_BROWSER === 'required') throw new Error(`the browser tests need chromium at ${CHROMIUM} (apt-get install chromium)`);
  process.stderr.write(`browser tests skipped: no chromium at ${CHROMIUM} (apt-get install chromium, or set RUNTIME_CLOUD_TEST_CHROMIUM)\n`);
  return false;
}

export async function launchChromium(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  // --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

export interface AxeViolation {
  readonly id: string;
  readonly impact: string | null;
  readonly help: string;
  readonly nodes: readonly { readonly target: readonly string[] }[];
}

/** axe-core's check of the page as it is now: the serious and critical violations. */
export async function seriousViolations(page: Page): Promise<AxeViolation[]> {
  const axe = (await import('axe-core')).default;
  // Evaluated, not added as a script tag: the console's content security policy allows no inline script.
  await page.evaluate(axe.source);
  const result = await page.evaluate<{ violations: AxeViolation[] }>('axe.run(document)');
  return result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/**
 * A browser test's console: `runtime-cloud start` on a temporary state dir and chromium, a fresh browser context for
 * each person signed in, the PlatformAdmin token for the factory's side (sending promotions, changing the local cloud),
 * and the failing scenario's page saved as a screenshot.
 */
export class ConsoleUnderTest {
  readonly stateDir: string;
  host!: RunningChild;
  browser!: Browser;
  /** The latest person's browser context and page. */
  context?: BrowserContext;
  page?: Page;
  admin = '';

  /**
   * `screenshots`: the names of this file's screenshots, removed before it runs (another file writes beside them);
   * `settings`: app settings the host starts with (its environment).
   */
  constructor(
    name: string,
    private readonly screenshots: RegExp,
    private readonly settings: Record<string, string> = {},
  ) {
    this.stateDir = mkdtempSync(join(tmpdir(), `rch-${name}-`));
  }

  async start(): Promise<void> {
    for (const file of existsSync(ARTIFACTS) ? readdirSync(ARTIFACTS) : []) {
      if (this.screenshots.test(file)) rmSync(join(ARTIFACTS, file), { force: true });
    }
    [this.host, this.browser] = await Promise.all([startChildHost(this.stateDir, this.settings), launchChromium()]);
    this.admin = await this.cli('token', '--role', 'PlatformAdmin');
  }

  async stop(): Promise<void> {
    await this.browser?.close();
    await this.host?.stop();
    rmSync(this.stateDir, { recursive: true, force: true });
  }

  /** After each scenario: a failed one's page is saved (failed-<scenario>.png); the context closes. */
  async after(test: { task: { name: string; result?: { state?: string } } }): Promise<void> {
    if (test.task.result?.state === 'fail' && this.page) await screenshot(this.page, `failed-${test.task.name.slice(0, 60).replace(/\W+/g, '-')}`).catch(() => undefined);
    await this.context?.close();
  }

  /** A CLI command on the host's state dir (as `npm run -s …` there): its stdout. */
  async cli(...args: string[]): Promise<string> {
    const result = await runCli([...args, '--state-dir', this.stateDir]);
    if (result.code !== 0) throw new Error(`runtime-cloud ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
    return result.stdout.trim();
  }

  url(path: string): string {
    return new URL(path, this.host.url).href;
  }

  /** A new browser context (no session) at the given width. */
  async newPage(width: number): Promise<Page> {
    await this.context?.close();
    this.context = await this.browser.newContext({ viewport: { width, height: 900 } });
    this.page = await this.context.newPage();
    return this.page;
  }

  /** A new browser signed in as the person through the console's sign-in page; tenant '' is across tenants. */
  async signIn(name: string, role: string, tenant = 'demo-team', width = 1280): Promise<Page> {
    const page = await this.newPage(width);
    await page.goto(this.url('/runtime-cloud/console/'));
    await page.waitForURL(/\/sign-in/);
    await page.getByLabel('Your name').fill(name);
    await page.getByLabel('Role').selectOption(role);
    await page.getByLabel(/^Tenant/).fill(tenant);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Fleet', level: 1 }).waitFor();
    return page;
  }
}

/** The serious and critical axe-core violations of the page, one line each, named by the view (expected: none). */
export async function violationsOf(page: Page, view: string): Promise<string[]> {
  return (await seriousViolations(page)).map((v) => `${view}: ${v.id} (${v.impact}) ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}
