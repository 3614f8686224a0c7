import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { capacitySeedSchema, type CapacitySeed } from '../shared/capacity/capacity.seed';
import { describeFieldProblems, fieldProblems } from '../shared/platform/validation/validation';
import type { HostComponent } from './host';

/** The seed the embedded default starts with: editions free, team, enterprise, a pool per kind, two demo tenants. */
export const BUNDLED_CAPACITY_SEED = join(__dirname, 'capacity-seed.json');

/** Reads and validates a seed file; a bad file stops the host with the file name and the problems. */
export function readCapacitySeed(file: string): CapacitySeed {
  const parsed = capacitySeedSchema().safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) {
    throw new Error(`capacity seed ${file} is not valid: ${describeFieldProblems(fieldProblems(parsed.error, '(file)'))}`);
  }
  return parsed.data;
}

/**
 * Upserts the capacity seed (RuntimeCloud__Capacity__SeedFile, else the bundled file) at start-up. Idempotent, so
 * several hosts on one store may all run it. In Azure the admin PUT endpoints make pools and editions instead.
 */
export function capacitySeedComponent(): HostComponent {
  return {
    name: 'capacity-seed',
    async start({ config, deps }) {
      if (!config.host.enabledModules.includes('capacity')) return;
      const setting = config.capacity.seedFile;
      if (setting === 'none') return;
      await deps.capacity.applySeed(readCapacitySeed(setting === '' ? BUNDLED_CAPACITY_SEED : resolve(setting)));
    },
    stop: () => Promise.resolve(),
  };
}
