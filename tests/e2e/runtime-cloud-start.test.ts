import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, runCli, startChildHost, type RunningChild } from '../support/child-process';

/** The installed command itself (bin/runtime-cloud.js, the sources through tsx), not the tests' compiled host. */
describe('runtime-cloud start (a real process on a temporary state dir)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-e2e-'));
  let host: RunningChild;

  beforeAll(async () => {
    host = await startChildHost(stateDir, {}, 60_000, [], [], CLI);
  }, 90_000);

  afterAll(async () => {
    await host?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  async function token(...args: string[]): Promise<string> {
    const result = await runCli(['token', '--state-dir', stateDir, ...args], {}, CLI);
    expect(result.code).toBe(0);
    // `token` prints the token and nothing else, so `$(runtime-cloud token …)` works in a shell.
    expect(result.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
    return result.stdout.trim();
  }

  it('when health is asked with factory.health.read, then every dependency check is reported healthy', async () => {
    const bearer = await token('--scope', 'factory.health.read');
    const response = await fetch(new URL('/runtime-cloud/health', host.url), { headers: { authorization: `Bearer ${bearer}` } });
    // A fresh host on its embedded defaults: every dependency is local (in process or on loopback), so every check must pass.
    expect(response.status).toBe(200);
    const body = (await response.json()) as { status: string; checkedAt: string; checks: { name: string; status: string; latencyMs: number }[] };
    expect(body.status).toBe('healthy');
    expect(Date.parse(body.checkedAt)).not.toBeNaN();
    expect(body.checks.map((c) => [c.name, c.status]).sort()).toEqual(
      [
        ['runtime-cloud-store', 'healthy'],
        ['table-storage', 'healthy'],
        ['store-recovery', 'healthy'],
        ['iac-runner', 'healthy'],
        ['git-cache', 'healthy'],
        ['targets', 'healthy'],
        ['runner-pools', 'healthy'],
        // The external services' stand-ins, real servers on loopback, asked through the gRPC health protocol.
        ['governance-host', 'healthy'],
        ['control-plane-api', 'healthy'],
        ['knowledge-host', 'healthy'],
        ['config-platform', 'healthy'],
        ['delivery-host', 'healthy'],
        ['inbox-lag:provisioning', 'healthy'],
        ['inbox-lag:inventory', 'healthy'],
        ['inbox-lag:capacity', 'healthy'],
        ['outbox-dead-letters', 'healthy'],
      ].sort(),
    );
    for (const check of body.checks) expect(check.latencyMs).toBeGreaterThanOrEqual(0);
  });

  it('when the live probe is asked without a token, then 200 with the status only', async () => {
    const response = await fetch(new URL('/runtime-cloud/health?probe=live', host.url));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'healthy' });
  });

  it('when targets are asked with factory.meta.read, then the local target and the IaC runner version are listed', async () => {
    const bearer = await token('--role', 'Observer');
    const response = await fetch(new URL('/runtime-cloud/meta/targets', host.url), { headers: { authorization: `Bearer ${bearer}` } });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { targets: unknown[]; iacRunner: { name: string; version: string } };
    // The local target's runners under its capacity pool; the host starts a tenant's agent pool on its first job.
    expect(body.targets).toEqual([
      { id: 'local', kind: 'local-cloud', name: 'Local cloud', location: 'local', runners: { pool: 'local-runner', engine: 'local', agentPools: expect.any(Number), agentsOnline: expect.any(Number), jobsRunning: 0, jobsWaiting: 0, answered: expect.any(Boolean) } },
    ]);
    expect(body.iacRunner.name).toBe('local');
    expect(body.iacRunner.version).toMatch(/\d+\.\d+\.\d+/);
  });

  it('when no token is sent for the full health, then 401 with WWW-Authenticate; when the scope is missing, then 403 naming it', async () => {
    const anonymous = await fetch(new URL('/runtime-cloud/health', host.url));
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Bearer /);
    expect(anonymous.headers.get('content-type')).toBe('application/problem+json');
    expect(await anonymous.json()).toMatchObject({ status: 401, code: 'AUTH.TOKEN_MISSING' });

    const bearer = await token('--scope', 'factory.health.read');
    const forbidden = await fetch(new URL('/runtime-cloud/meta/targets', host.url), { headers: { authorization: `Bearer ${bearer}` } });
    expect(forbidden.status).toBe(403);
    expect(await forbidden.json()).toMatchObject({ code: 'AUTH.SCOPE_MISSING', requiredScope: 'factory.meta.read' });
  });

  it('when a token from another issuer key is sent, then 401', async () => {
    const otherDir = mkdtempSync(join(tmpdir(), 'rch-e2e-other-'));
    try {
      const result = await runCli(['token', '--state-dir', otherDir, '--scope', 'factory.health.read']);
      const response = await fetch(new URL('/runtime-cloud/health', host.url), {
        headers: { authorization: `Bearer ${result.stdout.trim()}` },
      });
      expect(response.status).toBe(401);
    } finally {
      rmSync(otherDir, { recursive: true, force: true });
    }
  });
});

describe('runtime-cloud start with invalid settings', () => {
  it('when a setting is invalid, then start-up fails with a message naming the key', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'rch-e2e-bad-'));
    try {
      const result = await runCli(['start', '--port', '0', '--state-dir', stateDir], { RuntimeCloud__Store__Dialect: 'oracle' });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('RuntimeCloud__Store__Dialect');
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  });
});

describe('runtime-cloud graceful shutdown', () => {
  it('when SIGTERM arrives, then the host stops and exits 0', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'rch-e2e-stop-'));
    try {
      const host = await startChildHost(stateDir);
      const code = await host.stop('SIGTERM');
      expect(code, host.output()).toBe(0);
      expect(host.output()).toContain('SIGTERM: stopping');
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  }, 90_000);
});
