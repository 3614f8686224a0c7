import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../shared/platform/config/config';
import { field, inventory, runInfra, validConfig } from './infra-mocks';

/**
 * The operator console's Entra sign-in, written to the Function App when the installation configures it (without it,
 * tests/infra/deployment.test.ts finds no console setting). The program runs once per file: the mocks are global.
 */
describe('infra: the console sign-in settings', () => {
  const settingsOf = async (config: Record<string, string>) => {
    const { declared } = await runInfra(config);
    return field(inventory(declared).all('web:WebAppApplicationSettings')[0]!, 'properties') as Record<string, string>;
  };

  it('when the console registration is configured, then the app gets its client id, authority and scope as the host parses them', async () => {
    const clientId = '11111111-2222-4333-8444-555555555555';
    const settings = await settingsOf({
      ...validConfig(),
      consoleClientId: clientId,
      consoleAuthority: 'https://login.microsoftonline.com/contoso.onmicrosoft.com',
      consoleApiScope: 'api://runtime-cloud/user_impersonation',
    });
    expect(parseConfig(settings).console).toEqual({ clientId, authority: 'https://login.microsoftonline.com/contoso.onmicrosoft.com', apiScope: 'api://runtime-cloud/user_impersonation' });
  });
});
