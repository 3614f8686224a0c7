import { describe, expect, it } from 'vitest';
import { ROTATED_ON, runInfra, validConfig } from './infra-mocks';

// A file of its own: the program runs once per process (./infra-mocks.ts).
describe('infra configuration', () => {
  it("when a secret's rotation day is not a calendar date, then the program fails naming the setting instead of setting a wrong expiry", async () => {
    const config = { ...validConfig(), secretsRotatedOn: JSON.stringify({ ...ROTATED_ON, 'runtime-cloud-sql': '2026-02-30' }) };

    await expect(runInfra(config)).rejects.toThrow('config secretsRotatedOn.runtime-cloud-sql must be the day its value was set, as YYYY-MM-DD (got "2026-02-30")');
  });
});
