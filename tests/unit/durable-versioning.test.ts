import { describe, expect, it } from 'vitest';
import { compareVersions, parseDurableVersioning, versionMismatch } from '../../local/durable/durable-versioning';

/** The extension's version comparison rules (Durable Functions docs, "Version comparison rules") and strategies. */
describe('orchestration versions as the Durable extension compares them', () => {
  it.each([
    ['', undefined, 0],
    [null, '1.0', -1],
    ['1.0', '', 1],
    ['1.0', '1.0', 0],
    ['1.9', '1.10', -1],
    ['2.0', '10.0', -1],
    ['1.0', '1.0.0', -1],
    ['1.0.0.1', '1.0.0', 1],
    ['v2', 'V2', 0],
    ['release-b', 'Release-A', 1],
    ['1', '2', -1],
    ['10', '9', -1],
  ])('when %j is compared with %j, then the order is %d', (a, b, order) => {
    expect(Math.sign(compareVersions(a, b))).toBe(order);
  });

  it('when no defaultVersion is set or the strategy is None, then every version runs', () => {
    expect(versionMismatch(parseDurableVersioning({}), '9.0')).toBeUndefined();
    expect(versionMismatch(parseDurableVersioning({ defaultVersion: '1.0', versionMatchStrategy: 'none' }), '9.0')).toBeUndefined();
  });

  it('when the strategy is CurrentOrOlder (the default), then older and equal versions run and a newer one is named', () => {
    const versioning = parseDurableVersioning({ defaultVersion: '2.0' });
    expect(versioning).toEqual({ defaultVersion: '2.0', match: 'CurrentOrOlder', failure: 'Reject' });
    expect([null, '1.0', '2.0'].map((v) => versionMismatch(versioning, v))).toEqual([undefined, undefined, undefined]);
    expect(versionMismatch(versioning, '2.1')).toBe("the orchestration has version '2.1', newer than this worker's version '2.0' (versionMatchStrategy CurrentOrOlder)");
  });

  it('when the strategy is Strict, then only the same version runs', () => {
    const versioning = parseDurableVersioning({ defaultVersion: '2.0', versionMatchStrategy: 'Strict', versionFailureStrategy: 'fail' });
    expect(versioning.failure).toBe('Fail');
    expect(versionMismatch(versioning, '2.0')).toBeUndefined();
    expect(versionMismatch(versioning, '1.0')).toBe("the orchestration has version '1.0'; this worker runs only version '2.0' (versionMatchStrategy Strict)");
    expect(versionMismatch(versioning, null)).toBe("the orchestration has no version; this worker runs only version '2.0' (versionMatchStrategy Strict)");
  });

  it('when a strategy is not one the extension knows, then the settings are refused naming it', () => {
    expect(() => parseDurableVersioning({ versionMatchStrategy: 'Newest' })).toThrow('host.json extensions.durableTask.versionMatchStrategy must be one of None, Strict, CurrentOrOlder, not "Newest"');
    expect(() => parseDurableVersioning({ versionFailureStrategy: 3 })).toThrow('versionFailureStrategy must be one of Reject, Fail');
  });
});
