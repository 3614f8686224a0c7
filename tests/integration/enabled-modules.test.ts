import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredFunctions } from '../../local/functions-core/registry';
import { startTestHost, type TestHost } from '../support/local-host';

// Registration happens once per process, so this file owns a host composed without the capacity module.
describe('RuntimeCloud__Host__EnabledModules', () => {
  let host: TestHost;
  beforeAll(async () => {
    host = await startTestHost({ settings: { RuntimeCloud__Host__EnabledModules: 'inventory' } });
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when capacity is not enabled, then none of its functions register and its routes are absent', async () => {
    const names = registeredFunctions().map((r) => r.metadata.name);
    expect(names).toContain('RuntimeCloudHealth');
    expect(names.some((n) => /lease|capacity|pool|edition/i.test(n))).toBe(false);
    const response = await host.fetch('/runtime-cloud/capacity', { claims: { roles: ['PlatformAdmin'] } });
    expect(response.status).toBe(404);
  });

  it('when provisioning is not enabled, then neither its functions nor its orchestration and activities register', async () => {
    const names = registeredFunctions().map((r) => r.metadata.name);
    expect(names.filter((n) => /^(promotionIntake|provisioningRun|listRuns|getRun|approveRun|rejectRun|cancelRun)/.test(n))).toEqual([]);
    const response = await host.fetch('/runtime-cloud/runs', { claims: { roles: ['PlatformAdmin'] } });
    expect(response.status).toBe(404);
  });
});
