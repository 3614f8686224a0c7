import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, settingKeys } from '../../shared/platform/config/config';

describe('configuration', () => {
  it('when nothing is set, then the seed defaults apply and the config is frozen', () => {
    const config = parseConfig({});
    expect(config.host.enabledModules).toEqual(['provisioning', 'inventory', 'capacity']);
    expect(config.iac.runner).toBe('pulumi');
    expect(config.host.serviceName).toBe('runtime-cloud');
    expect(config.targets).toEqual([{ id: 'local', kind: 'local-cloud', name: 'Local cloud', location: 'local' }]);
    expect(Object.isFrozen(config.store)).toBe(true);
  });

  it('when EnabledModules lists some modules, then only those are enabled', () => {
    const config = parseConfig({ RuntimeCloud__Host__EnabledModules: 'capacity, inventory' });
    expect(config.host.enabledModules).toEqual(['capacity', 'inventory']);
  });

  it.each([
    ['RuntimeCloud__Host__EnabledModules', 'capacity,billing'],
    ['RuntimeCloud__IaC__Runner', 'terraform'],
    ['RuntimeCloud__Store__Dialect', 'oracle'],
    ['RuntimeCloud__Local__Port', 'eighty'],
    ['RuntimeCloud__Auth__JwksUrl', 'not a url'],
    ['RuntimeCloud__Targets', '{"oops"'],
    ['RuntimeCloud__Targets', '[{"id":"x","kind":"mainframe","name":"X"}]'],
  ])('when %s is %s, then parsing fails naming that key', (key, value) => {
    let caught: unknown;
    try {
      parseConfig({ [key]: value });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).problems.map((p) => p.field.split('.')[0])).toContain(key);
    expect((caught as Error).message).toContain(key);
  });

  it('when local.settings.sample.json is read, then it lists exactly the schema keys', () => {
    const sample = JSON.parse(readFileSync(join(__dirname, '../../local.settings.sample.json'), 'utf8')) as {
      Values: Record<string, string>;
    };
    expect(Object.keys(sample.Values).sort()).toEqual([...settingKeys].sort());
    expect(() => parseConfig(sample.Values)).not.toThrow();
  });
});
