import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';

/** Debian's chromium (`apt-get install chromium`; .ci/run installs it), driven by playwright-core. */
export const CHROMIUM = process.env.RUNTIME_CLOUD_TEST_CHROMIUM ?? '/usr/bin/chromium';

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
