import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startChildHost, type RunningChild } from '../support/child-process';

const APP = join(__dirname, '..', 'apps', 'durable-sample');

describe('runtime-cloud start --app (another Functions v4 app, in a real process)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-app-'));
  let host: RunningChild;

  beforeAll(async () => {
    host = await startChildHost(stateDir, {}, 60_000, ['--app', APP]);
  }, 90_000);

  afterAll(async () => {
    await host?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('when the app is started over HTTP, then its functions (found by its main glob) run a hello sequence under the api prefix', async () => {
    const started = await fetch(new URL('/api/orchestrators/helloCities', host.url), { method: 'POST' });
    expect(started.status).toBe(202);
    const links = (await started.json()) as { statusQueryGetUri: string };
    const status = await vi.waitFor(
      async () => {
        const body = (await (await fetch(links.statusQueryGetUri)).json()) as { runtimeStatus: string; output: unknown };
        if (body.runtimeStatus !== 'Completed') throw new Error(`not yet: ${body.runtimeStatus}`);
        return body;
      },
      { timeout: 20_000, interval: 50 },
    );
    expect(status.output).toEqual(['Hello Tokyo!', 'Hello London!', 'Hello Seattle!']);
  });

  it('when a function of the app is called with a query, then request.params carries the query values', async () => {
    const response = await fetch(new URL('/api/params/x?instanceId=abc', host.url));
    expect(await response.json()).toEqual({ name: 'x', instanceId: 'abc' });
  });

  it('when the host status is asked, then it answers Running; this project\'s own routes are not there', async () => {
    expect(await (await fetch(new URL('/admin/host/status', host.url))).json()).toMatchObject({ state: 'Running' });
    expect((await fetch(new URL('/runtime-cloud/health', host.url))).status).toBe(404);
  });
});
