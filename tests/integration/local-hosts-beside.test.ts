import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { parseConfig } from '../../shared/platform/config/config';
import { startChildHost, type RunningChild } from '../support/child-process';

/**
 * Several local hosts on one state dir (tests and the bench run two or three on one store): Azurite writes its
 * metadata file whole from its own process, so two hosts sharing `azurite/` overwrote each other's and a start could
 * fail renaming it (`__azurite_db_blob__.json~`: ENOENT). The first host keeps `azurite/`; one beside it has its own.
 */
describe('local hosts beside each other on one state dir', () => {
  const root = mkdtempSync(join(tmpdir(), 'rch-hosts-beside-'));
  const stateDir = join(root, 'state');
  const hosts: RunningChild[] = [];
  afterAll(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    rmSync(root, { recursive: true, force: true });
  });

  it('when two start at once beside a running one, then each runs its own Azurite, and one that stops takes its folder with it', { timeout: 180_000 }, async () => {
    // The first makes the state dir (keys, store, example repository); the next two start together beside it.
    hosts.push(await startChildHost(stateDir));
    hosts.push(...(await Promise.all([0, 1].map(() => startChildHost(stateDir)))));

    const beside = () => (existsSync(join(stateDir, 'azurite', 'beside')) ? readdirSync(join(stateDir, 'azurite', 'beside')) : []);
    // The first keeps `azurite/`; the other two each have a folder of their own.
    expect(existsSync(join(stateDir, 'azurite', '__azurite_db_blob__.json'))).toBe(true);
    expect(beside()).toHaveLength(2);
    // Each answers (its API asks for a token), and serves what it loads on first use (run from source, as the CLI
    // runs it: a lazy import() of a .js path failed there).
    const config = parseConfig({});
    const token = await issueLocalToken(await ensureLocalKeys(stateDir), { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 600, roles: ['PlatformAdmin'] });
    for (const host of hosts) {
      expect((await fetch(new URL('/runtime-cloud/openapi.json', host.url))).status).toBe(401);
      expect((await fetch(new URL('/runtime-cloud/metrics', host.url), { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    }

    const last = hosts.pop();
    await last?.stop();
    // Its timers ran (the outbox relay's every 2 s) without an error.
    expect(last?.output()).not.toMatch(/"level":"error"/);
    expect(beside()).toHaveLength(1);
  });
});
