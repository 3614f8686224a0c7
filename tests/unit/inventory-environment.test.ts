import { describe, expect, it } from 'vitest';
import { diffResources } from '../../shared/inventory/drift';
import { desiredStateOf, driftStatusAt, observedForInventory, reconciliationPlan } from '../../shared/inventory/environment';

const base = {
  runId: 'run-1',
  tenantId: 'tenant-a',
  environment: { id: 'env-1', name: 'development', tier: 'development' },
  release: { name: 'app', version: '1.0.0' },
  project: 'app',
  stack: 'dev',
};

describe('inventory environment model', () => {
  it('when a SpecificationApplied is read, then deleted resources are left out and the project ignoreChanges become rules', () => {
    const read = desiredStateOf({
      ...base,
      resources: [
        { urn: 'u:a', type: 't:A', op: 'create', properties: { size: 1 }, ignoreChanges: ['replicas', 'rules[0].port'] },
        { urn: 'u:b', type: 't:B', op: 'delete' },
      ],
    });
    if (!('ok' in read)) throw new Error(JSON.stringify(read.problems));
    expect(read.ok).toMatchObject({ tenant: 'tenant-a', project: 'app', stack: 'dev' });
    expect(read.ok.resources).toEqual({ 'u:a': { type: 't:A', properties: { size: 1 } } });
    expect(read.ok.projectRules.map((r) => [r.id, r.path, r.holdsOnApply])).toEqual([
      ['project:u:a:replicas', 'replicas', true],
      ['project:u:a:rules[0].port', 'rules.0.port', true],
    ]);
    expect(desiredStateOf({ ...base, environment: { id: 'e' } })).toEqual({ problems: expect.arrayContaining([expect.objectContaining({ field: 'environment.name' })]) });
    // Without its project the stack is not known: two projects of a tenant may have a stack of the name.
    const { project: _project, ...withoutProject } = base;
    expect(desiredStateOf({ ...withoutProject, resources: [] })).toEqual({ problems: expect.arrayContaining([expect.objectContaining({ field: 'project' })]) });
  });

  it('when the desired value is a secret reference, then the observed value is replaced by it and not compared', () => {
    const desired = { 'u:a': { type: 't', properties: { env: { PASSWORD: { secretRef: 'broker://x' }, MODE: 'a' } } } };
    const observed = observedForInventory(desired, [{ urn: 'u:a', type: 't', id: '1', properties: { env: { PASSWORD: 'hunter2', MODE: 'b' } } }]);
    expect(JSON.stringify(observed)).not.toContain('hunter2');
    const report = diffResources(desired, observed, [], new Date());
    expect(report.findings.map((f) => (f.kind === 'modified' ? f.path : f.kind))).toEqual([['env', 'MODE']]);
  });

  it("when the desired state holds the pulumi runner's [secret] mask, nested, in an array and for a whole object, then the observed values there are the mask and not compared", () => {
    const desired = {
      'u:db': {
        type: 't',
        properties: { sku: 'basic', password: '[secret]', admin: { user: 'sa', password: '[secret]' }, keys: ['[secret]', 'public-key'], connection: '[secret]' },
      },
    };
    const seen = { sku: 'premium', password: 'hunter2', admin: { user: 'sa', password: 'hunter3' }, keys: ['hunter4', 'public-key'], connection: { host: 'db', password: 'hunter5' } };
    const observed = observedForInventory(desired, [{ urn: 'u:db', type: 't', id: '1', properties: seen }]);
    expect(observed['u:db']?.properties).toEqual({ ...desired['u:db'].properties, sku: 'premium' });
    const report = diffResources(desired, observed, [], new Date());
    expect(report.findings.map((f) => (f.kind === 'modified' ? f.path : f.kind))).toEqual([['sku']]);
  });

  it('when the target holds another shape where a desired value has a secret inside, or more elements than a desired array with one, then those are [secret] and still differ', () => {
    const desired = { 'u:a': { type: 't', properties: { creds: { user: 'sa', password: { secretRef: 'broker://x' } }, tokens: [{ secretRef: 'broker://t' }], plain: ['a'] } } };
    const seen = { creds: 'sa:hunter2', tokens: ['hunter3', 'hunter4'], plain: ['a', 'b'] };
    const observed = observedForInventory(desired, [{ urn: 'u:a', type: 't', id: '1', properties: seen }]);
    expect(observed['u:a']?.properties).toEqual({ creds: '[secret]', tokens: [{ secretRef: 'broker://t' }, '[secret]'], plain: ['a', 'b'] });
    const report = diffResources(desired, observed, [], new Date());
    expect(report.findings.map((f) => (f.kind === 'modified' ? [f.path.join('.'), f.observed] : f.kind))).toEqual([
      ['creds', '[secret]'],
      ['plain.1', 'b'],
      ['tokens.1', '[secret]'],
    ]);
  });

  it('when a resource is observed that no desired state holds, then inventory keeps its type and none of its property values', () => {
    const observed = observedForInventory({}, [{ urn: 'u:stray', type: 't', id: '9', properties: { name: 'stray', password: 'hunter2' } }]);
    expect(observed).toEqual({ 'u:stray': { type: 't', properties: {} } });
  });

  it('when checks are stale, overdue, never made or older than the desired state, then the status is unknown with the reason', () => {
    const fresh = { intervalMs: 60_000, desiredAt: 1_000, lastObservedAt: 2_000, lastScanAt: 2_000, observedStatus: 'in-sync' as const };
    expect(driftStatusAt(fresh, 2_000 + 120_000).status).toBe('in-sync');
    expect(driftStatusAt(fresh, 2_000 + 120_001)).toMatchObject({ status: 'unknown', stale: false, reason: expect.stringContaining('twice the scan interval') });
    expect(driftStatusAt({ ...fresh, staleSince: 3_000, staleReason: 'down' }, 4_000)).toMatchObject({ status: 'unknown', stale: true, staleSince: new Date(3_000).toISOString() });
    expect(driftStatusAt({ ...fresh, desiredAt: 5_000 }, 6_000)).toMatchObject({ status: 'unknown', reason: expect.stringContaining('desired state changed') });
    expect(driftStatusAt({ intervalMs: 60_000, desiredAt: 1_000 }, 2_000)).toMatchObject({ status: 'unknown', reason: 'not observed yet' });
  });

  it('when findings are planned, then missing is created, replaced replaced, modified updated at its paths and unmanaged left alone', () => {
    const desired = {
      'u:gone': { type: 't', properties: {} },
      'u:retyped': { type: 't', properties: {} },
      'u:changed': { type: 't', properties: { a: 1, b: 2 } },
    };
    const observed = { 'u:retyped': { type: 'other', properties: {} }, 'u:changed': { type: 't', properties: { a: 9, b: 8 } }, 'u:extra': { type: 't', properties: {} } };
    const rules = [{ id: 'r1', scope: { urn: 'u:changed' }, path: 'b', reason: 'x', owner: 'o', expiresAt: '2099-01-01T00:00:00Z', holdsOnApply: true }];
    const plan = reconciliationPlan(diffResources(desired, observed, rules, new Date('2026-01-01T00:00:00Z')));
    expect(plan).toEqual({
      steps: [
        { urn: 'u:gone', type: 't', op: 'create' },
        { urn: 'u:retyped', type: 't', op: 'replace' },
        { urn: 'u:changed', type: 't', op: 'update', paths: ['a'] },
      ],
      leftAlone: ['u:extra'],
      keptByRules: [{ urn: 'u:changed', path: 'b', ruleIds: ['r1'] }],
    });
  });
});
