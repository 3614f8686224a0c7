import { describe, expect, it } from 'vitest';
import { runInfra, validConfig } from './infra-mocks';

// A file of its own: the program runs once per process (./infra-mocks.ts).
describe('infra runner configuration', () => {
  it('when Azure targets exist but no runner image is configured, then the program fails naming the setting before declaring a job', async () => {
    const { runnerImage: _image, ...config } = validConfig();

    await expect(runInfra(config)).rejects.toThrow('config runnerImage is required when a target of kind azure-subscription exists');
  });
});
