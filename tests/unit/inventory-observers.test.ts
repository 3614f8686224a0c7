import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * What the observer adapters cost a host that does not use them. Each adapter has its own tests on what its peer
 * really says: inventory-arm-observer.test.ts (Microsoft's published REST examples and SDK recordings) and
 * inventory-kubernetes-observer.test.ts (API server objects published upstream).
 */
describe('observer adapters: start-up cost', () => {
  it('when the adapter modules are loaded, then neither SDK is: a host observing the local cloud never pays for them', () => {
    // A fresh process, because this one has loaded both SDKs for the tests above.
    const adapters = ['arm-observer.adapter', 'kubernetes-observer.adapter', 'local-cloud-observer.adapter'].map((name) => join(__dirname, '../../shared/inventory', `${name}.ts`));
    const script = `
      for (const adapter of ${JSON.stringify(adapters)}) require(adapter);
      // A dot stands for either path separator.
      const sdks = () => Object.keys(require.cache).filter((k) => /node_modules.(@azure.(arm-resources|identity)|@kubernetes.client-node)./.test(k)).length;
      const before = sdks();
      require('@azure/arm-resources');
      console.log(JSON.stringify({ before, after: sdks() }));`;
    const output = execFileSync(process.execPath, ['--import', 'tsx', '-e', script], { cwd: join(__dirname, '../..'), encoding: 'utf8' });
    const { before, after } = JSON.parse(output) as { before: number; after: number };
    expect(before).toBe(0);
    // The check sees an SDK once something loads it.
    expect(after).toBeGreaterThan(0);
  });
});
