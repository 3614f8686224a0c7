import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';

describe('the local host\'s source rules', () => {
  let host: TestHost | undefined;
  afterEach(async () => {
    await host?.stop();
    host = undefined;
  });

  it('when nothing is set, then every tenant may promote from the host\'s example repository and <state dir>/repos/, nothing else', async () => {
    // Act
    host = await startTestHost({ components: [] });

    // Assert
    expect(host.host.config.provisioning.sources).toEqual({
      '*': [{ prefix: pathToFileURL(join(host.stateDir, 'desired-state.git')).href }, { prefix: `${pathToFileURL(join(host.stateDir, 'repos')).href}/` }],
    });
  });

  it('when the setting is given, then it replaces the local default', async () => {
    // Act
    host = await startTestHost({ components: [], settings: { RuntimeCloud__Provisioning__Sources: '{"acme":[{"prefix":"https://git.example.com/acme/"}]}' } });

    // Assert
    expect(host.host.config.provisioning.sources).toEqual({ acme: [{ prefix: 'https://git.example.com/acme/' }] });
  });
});
