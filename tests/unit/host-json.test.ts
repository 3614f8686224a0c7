import { afterEach, describe, expect, it } from 'vitest';
import { hostJsonSetting } from '../../local/host-json';

const OVERRIDE = 'AzureFunctionsJobHost__concurrency__dynamicConcurrencyEnabled';

describe('host.json settings as the local host reads them', () => {
  afterEach(() => {
    delete process.env[OVERRIDE];
    delete process.env.AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls;
  });

  it('reads a value of the file by its path, and nothing for a path it does not have', () => {
    expect(hostJsonSetting('extensions', 'http', 'routePrefix')).toBe('');
    expect(hostJsonSetting('concurrency', 'dynamicConcurrencyEnabled')).toBe(true);
    expect(hostJsonSetting('extensions', 'nothing', 'here')).toBeUndefined();
  });

  it('lets an AzureFunctionsJobHost__ app setting override the file, with booleans and numbers read as such', () => {
    process.env[OVERRIDE] = 'false';
    process.env.AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls = '4';
    expect(hostJsonSetting('concurrency', 'dynamicConcurrencyEnabled')).toBe(false);
    expect(hostJsonSetting('extensions', 'serviceBus', 'maxConcurrentCalls')).toBe(4);
  });
});
