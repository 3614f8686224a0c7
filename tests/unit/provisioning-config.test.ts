import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../shared/platform/config/config';
import { approvalRequired, DEFAULT_APPROVAL_POLICY, planExpiryMs } from '../../shared/provisioning/run';

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

  it('when no approval rule is set, then production plans and plans that delete or replace need approval, as before', () => {
    const { approval } = parseConfig({}).provisioning;
    expect(approval).toEqual(DEFAULT_APPROVAL_POLICY);
  });

  it('when approval names a default and environments, then each environment gets its override over the default', () => {
    const { approval } = parseConfig({
      RuntimeCloud__Provisioning__Approval: '{"default":{"tiers":["production","staging"],"onDeleteOrReplace":true},"env-dev-1":{"always":true},"sandbox":{"onDeleteOrReplace":false}}',
    }).provisioning;
    const creates = { create: 1, update: 0, replace: 0, delete: 0, same: 0 };
    const deletes = { ...creates, delete: 1 };
    expect(approvalRequired({ id: 'env-dev-1', name: 'development', tier: 'development' }, creates, approval).required).toBe(true);
    expect(approvalRequired({ id: 'env-stg-1', name: 'staging', tier: 'staging' }, creates, approval).required).toBe(true);
    expect(approvalRequired({ id: 'env-sb', name: 'sandbox', tier: 'development' }, deletes, approval).required).toBe(false);
    expect(approvalRequired({ id: 'env-dev-2', name: 'development', tier: 'development' }, deletes, approval).required).toBe(true);
  });

  it.each([
    'not json',
    '{"default":{"tiers":["prod"]}}',
    '{"default":{"always":true}}',
    '{"env-1":{"tiers":["production"]}}',
    '{"env-1":{"always":"yes"}}',
    '{"env-1":true}',
  ])('when approval is %s, then parsing fails naming the key', (value) => {
    expect(() => parseConfig({ RuntimeCloud__Provisioning__Approval: value })).toThrow(ConfigError);
    expect(() => parseConfig({ RuntimeCloud__Provisioning__Approval: value })).toThrow(/RuntimeCloud__Provisioning__Approval/);
  });

  it('when no source, fetch or runtime setting is set, then nothing is allowed, fetches are bounded at 64 MiB and 120 s, and only yaml runs', () => {
    // Act
    const { sources, fetchMaxBytes, fetchTimeoutMs, runtimes } = parseConfig({}).provisioning;

    // Assert
    expect({ sources, fetchMaxBytes, fetchTimeoutMs, runtimes }).toEqual({ sources: {}, fetchMaxBytes: 64 * 1024 * 1024, fetchTimeoutMs: 120_000, runtimes: ['yaml'] });
  });

  it('when the source, fetch and runtime settings are set, then configuration holds them', () => {
    // Act
    const { sources, fetchMaxBytes, fetchTimeoutMs, runtimes } = parseConfig({
      RuntimeCloud__Provisioning__Sources:
        '{"*":[{"prefix":"https://git.example.com/shared/"}],"acme":[{"prefix":"https://git.example.com/acme/","credentialRef":"broker://git/acme-read"},{"prefix":"file:///srv/repos/"}]}',
      RuntimeCloud__Provisioning__FetchMaxBytes: '1048576',
      RuntimeCloud__Provisioning__FetchTimeoutSeconds: '30',
      RuntimeCloud__Provisioning__Runtimes: 'yaml, nodejs',
    }).provisioning;

    // Assert
    expect(sources).toEqual({
      '*': [{ prefix: 'https://git.example.com/shared/' }],
      acme: [{ prefix: 'https://git.example.com/acme/', credentialRef: 'broker://git/acme-read' }, { prefix: 'file:///srv/repos/' }],
    });
    expect([fetchMaxBytes, fetchTimeoutMs, runtimes]).toEqual([1_048_576, 30_000, ['yaml', 'nodejs']]);
  });

  it.each([
    ['RuntimeCloud__Provisioning__Sources', '{"acme":[{"prefix":"http://git.example.com/acme/"}]}'],
    ['RuntimeCloud__Provisioning__Sources', '{"acme":[{"prefix":"/srv/repos/"}]}'],
    ['RuntimeCloud__Provisioning__Sources', '{"acme":[{"prefix":"https://user:token@git.example.com/acme/"}]}'],
    ['RuntimeCloud__Provisioning__Sources', '{"acme":[{"prefix":"https://git.example.com/acme/?x=1"}]}'],
    ['RuntimeCloud__Provisioning__Sources', '{"acme":[{"prefix":"file:///srv/repos/","credentialRef":"broker://x"}]}'],
    ['RuntimeCloud__Provisioning__Sources', '{"acme":[{"prefix":"https://git.example.com/acme/","token":"x"}]}'],
    ['RuntimeCloud__Provisioning__Sources', '{"acme":"https://git.example.com/acme/"}'],
    ['RuntimeCloud__Provisioning__FetchMaxBytes', '-1'],
    ['RuntimeCloud__Provisioning__FetchTimeoutSeconds', '0'],
    ['RuntimeCloud__Provisioning__Runtimes', 'yaml,Node JS'],
  ])('when %s is %s, then parsing fails naming the key', (key, value) => {
    expect(() => parseConfig({ [key]: value })).toThrow(ConfigError);
    expect(() => parseConfig({ [key]: value })).toThrow(new RegExp(key));
  });
});
