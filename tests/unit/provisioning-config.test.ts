import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../shared/platform/config/config';
import { planExpiryMs } from '../../shared/provisioning/run';

describe('provisioning configuration', () => {
  it('when no plan expiry is set, then plans expire after 24 hours in every environment', () => {
    const { planExpiry } = parseConfig({}).provisioning;
    expect(planExpiry).toEqual({ defaultMs: 86_400_000, byEnvironment: {} });
  });

  it('when plan expiry names a default and environments, then those environments get theirs and the rest the default', () => {
    const { planExpiry } = parseConfig({ RuntimeCloud__Provisioning__PlanExpirySeconds: '{"default":3600,"production":600,"env-eu-1":120}' }).provisioning;
    expect(planExpiryMs(planExpiry, { id: 'env-eu-1', name: 'production' })).toBe(120_000);
    expect(planExpiryMs(planExpiry, { id: 'env-us-1', name: 'production' })).toBe(600_000);
    expect(planExpiryMs(planExpiry, { id: 'env-dev', name: 'development' })).toBe(3_600_000);
  });

  it.each(['{"production":0}', '{"production":"1h"}', 'not json'])('when plan expiry is %s, then parsing fails naming the key', (value) => {
    expect(() => parseConfig({ RuntimeCloud__Provisioning__PlanExpirySeconds: value })).toThrow(ConfigError);
    expect(() => parseConfig({ RuntimeCloud__Provisioning__PlanExpirySeconds: value })).toThrow(/RuntimeCloud__Provisioning__PlanExpirySeconds/);
  });
});
