import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, enabledModulesFromEnvironment as checkedModules } from '../../shared/platform/config/config';
import { enabledModulesFromEnvironment } from '../../shared/platform/config/modules';
import { enabledModules } from '../../functions/runtime';

const SETTING = 'RuntimeCloud__Host__EnabledModules';

describe('the enabled modules, read without the configuration (cold start)', () => {
  const before = process.env[SETTING];
  afterEach(() => {
    if (before === undefined) delete process.env[SETTING];
    else process.env[SETTING] = before;
  });

  it('when the setting is unset or empty, then every module is enabled', () => {
    delete process.env[SETTING];
    expect(enabledModulesFromEnvironment()).toEqual(['provisioning', 'inventory', 'capacity']);
    process.env[SETTING] = '';
    expect(enabledModulesFromEnvironment()).toEqual(['provisioning', 'inventory', 'capacity']);
  });

  it('when the setting names modules, then those are enabled once each, spaces and empty names left out', () => {
    process.env[SETTING] = ' capacity, inventory,,capacity ';
    expect(enabledModulesFromEnvironment()).toEqual(['capacity', 'inventory']);
    expect(enabledModules()).toEqual(['capacity', 'inventory']);
  });

  it('when the setting names a module there is none of, then it is left to the configuration, whose check refuses it naming the setting', () => {
    process.env[SETTING] = 'capacity,billing';
    expect(enabledModulesFromEnvironment()).toBeUndefined();
    // What functions/runtime.ts falls back to (it loads config.ts only then).
    expect(() => checkedModules()).toThrow(ConfigError);
    expect(() => checkedModules()).toThrow(/expected one of "provisioning"|"inventory"|"capacity"/);
  });
});
