import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ProvisioningTarget } from '../config/setting-schemas';
import type { IacRunner } from '../iac/iac-runner';
import type { HealthCheck } from './health';

const PROBE_TIMEOUT_MS = 3_000;

/**
 * Can this host reach its provisioning targets? The local cloud runs in-process. Remote targets (Azure
 * subscriptions, AKS clusters, on-prem endpoints) are probed by an HTTPS request to their endpoint: any HTTP
 * answer means reachable. A target without an endpoint cannot be probed from here and degrades the check.
 */
export function targetsCheck(targets: readonly ProvisioningTarget[], fetchImpl: typeof fetch = fetch): HealthCheck {
  return {
    name: 'targets',
    critical: false,
    async run() {
      const results = await Promise.all(
        targets.map(async (target) => {
          if (target.kind === 'local-cloud') return { id: target.id, reachable: true, probe: 'in-process' };
          if (!target.endpoint) return { id: target.id, reachable: false, probe: 'none', error: 'no endpoint configured' };
          try {
            await fetchImpl(target.endpoint, { method: 'GET', signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
            return { id: target.id, reachable: true, probe: 'http' };
          } catch (error) {
            return { id: target.id, reachable: false, probe: 'http', error: error instanceof Error ? error.message : String(error) };
          }
        }),
      );
      const unreachable = results.filter((r) => !r.reachable);
      return {
        status: unreachable.length === 0 ? 'healthy' : 'degraded',
        details: { targets: results },
        ...(unreachable.length ? { error: `unreachable: ${unreachable.map((r) => r.id).join(', ')}` } : {}),
      };
    },
  };
}

/**
 * The IaC engine the host runs itself answers with its version (the local engine's also proves its state store
 * answers). Only such a host has this check: where plans and applies run in runner jobs alone (Azure), the engine is
 * the agents', and the `runner-pools` check covers it.
 */
export function engineCheck(engine: IacRunner): HealthCheck {
  return {
    name: 'iac-runner',
    critical: false,
    async run() {
      return { details: { runner: engine.name, version: await engine.version() } };
    },
  };
}

/**
 * Can this instance write its Git cache (`RuntimeCloud__Provisioning__GitCacheDir`)? Every run from a remote
 * repository fetches into it, so a folder that cannot be written (the app's own folder when it runs from a package)
 * would fail them all: the check makes the folder and writes and removes a file in it.
 */
export function gitCacheCheck(cacheDir: string): HealthCheck {
  return {
    name: 'git-cache',
    critical: false,
    async run() {
      await mkdir(cacheDir, { recursive: true });
      const probe = join(cacheDir, `.health-${process.pid}`);
      await writeFile(probe, '');
      await rm(probe, { force: true });
      return { details: { folder: cacheDir } };
    },
  };
}
