import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  diffResources,
  formatPath,
  ignoreRuleProblems,
  type DriftFinding,
  type IgnoreRule,
  type JsonValue,
  type Resources,
  type ResourceState,
} from '../../shared/inventory/drift';
import { aResource, anIgnoreRule } from '../support/builders';

const NOW = new Date('2026-01-15T00:00:00.000Z');
const WEB = 'azure-native:web:WebApp';

/** The properties of `aResource()`, to edit; a test that changes a value's kind casts to `Record<string, unknown>`. */
interface WebAppProperties {
  name: string;
  location?: string | null;
  sku: { name?: string; tier?: string; capacity: number };
  tags: { env: string; owner: string | null };
  siteConfig: { alwaysOn: boolean; appSettings: { name: string; value: string }[] };
  [key: string]: unknown;
}

/** A copy of `resource` with `edit` applied to a deep clone of its properties. */
function edited(resource: ResourceState, edit: (p: WebAppProperties) => void): ResourceState {
  const properties = structuredClone(resource.properties) as unknown as WebAppProperties;
  edit(properties);
  return { ...resource, properties: properties as unknown as ResourceState['properties'] };
}

function diff(desired: Resources, observed: Resources, rules: IgnoreRule[] = []) {
  return diffResources(desired, observed, rules, NOW);
}

describe('drift diff: findings', () => {
  it('when desired and observed are equal (as distinct objects), then there are no findings', () => {
    const report = diff({ 'urn:a': aResource() }, { 'urn:a': structuredClone(aResource()) });
    expect(report.findings).toEqual([]);
    expect(report.ignored).toEqual([]);
  });

  it('when a desired resource is not observed, then it is missing, with its type', () => {
    const report = diff({ 'urn:a': aResource() }, {});
    expect(report.findings).toEqual([{ kind: 'missing', severity: 'high', urn: 'urn:a', type: WEB }]);
  });

  it('when an observed resource is not desired, then it is unmanaged, with its type', () => {
    const report = diff({}, { 'urn:x': aResource({ type: 'azure-native:storage:StorageAccount' }) });
    expect(report.findings).toEqual([{ kind: 'unmanaged', severity: 'low', urn: 'urn:x', type: 'azure-native:storage:StorageAccount' }]);
  });

  it('when the urn is observed with another type, then it is one replaced finding (not missing + unmanaged) and no paths', () => {
    const report = diff({ 'urn:a': aResource() }, { 'urn:a': aResource({ type: 'azure-native:web:StaticSite', properties: {} }) });
    expect(report.findings).toEqual([{ kind: 'replaced', severity: 'high', urn: 'urn:a', type: WEB, observedType: 'azure-native:web:StaticSite' }]);
  });

  it('when a nested property changed, then the finding has its path and both values', () => {
    const report = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => (p.sku.capacity = 5)) });
    expect(report.findings).toEqual([{ kind: 'modified', severity: 'medium', urn: 'urn:a', type: WEB, path: ['sku', 'capacity'], desired: 2, observed: 5 }]);
  });

  it('when an array element changed, then the path carries its index', () => {
    const report = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => (p.siteConfig.appSettings[1]!.value = '9')) });
    expect(report.findings).toHaveLength(1);
    const [finding] = report.findings;
    expect(finding).toMatchObject({ path: ['siteConfig', 'appSettings', 1, 'value'], desired: '1', observed: '9' });
    expect(formatPath((finding as Extract<DriftFinding, { kind: 'modified' }>).path)).toBe('siteConfig.appSettings.1.value');
  });

  it('when arrays differ in length, then each extra index is a finding with the other side absent', () => {
    const report = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => void p.siteConfig.appSettings.push({ name: 'X', value: 'y' })) });
    expect(report.findings).toEqual([
      { kind: 'modified', severity: 'medium', urn: 'urn:a', type: WEB, path: ['siteConfig', 'appSettings', 2], observed: { name: 'X', value: 'y' } },
    ]);
    const shorter = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => void p.siteConfig.appSettings.pop()) });
    expect(shorter.findings).toEqual([
      { kind: 'modified', severity: 'medium', urn: 'urn:a', type: WEB, path: ['siteConfig', 'appSettings', 1], desired: { name: 'LEVEL', value: '1' } },
    ]);
  });

  it('when a property is absent on one side, then that side is absent in the finding (not null); null is a value', () => {
    const report = diff(
      { 'urn:a': aResource() },
      { 'urn:a': edited(aResource(), (p) => { delete p.location; p.extra = 1; p.tags.owner = null; }) },
    );
    expect(report.findings).toEqual([
      { kind: 'modified', severity: 'medium', urn: 'urn:a', type: WEB, path: ['extra'], observed: 1 },
      { kind: 'modified', severity: 'medium', urn: 'urn:a', type: WEB, path: ['location'], desired: 'westeurope' },
      { kind: 'modified', severity: 'medium', urn: 'urn:a', type: WEB, path: ['tags', 'owner'], desired: 'team-a', observed: null },
    ]);
  });

  it('when a value changes kind (object to array or scalar), then the finding is at that path with both whole values', () => {
    const report = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => Object.assign(p, { sku: ['P1v3'], tags: 'none' })) });
    expect(report.findings).toMatchObject([
      { path: ['sku'], desired: { name: 'P1v3', tier: 'PremiumV3', capacity: 2 }, observed: ['P1v3'] },
      { path: ['tags'], desired: { env: 'dev', owner: 'team-a' }, observed: 'none' },
    ]);
  });

  it('when a urn is an Object.prototype name, then it is looked up as an own key only', () => {
    const report = diff({ constructor: aResource() }, {});
    expect(report.findings).toEqual([{ kind: 'missing', severity: 'high', urn: 'constructor', type: WEB }]);
  });
});

describe('drift diff: severity', () => {
  it('when findings of every kind occur, then missing and replaced come first, then changed properties, then unmanaged extras', () => {
    const report = diff(
      { 'urn:a': aResource(), 'urn:m': aResource(), 'urn:r': aResource() },
      { 'urn:a': edited(aResource(), (p) => (p.name = 'x')), 'urn:0': aResource(), 'urn:r': aResource({ type: 'other' }) },
    );
    expect(report.findings.map((f) => [f.kind, f.severity, f.urn])).toEqual([
      ['missing', 'high', 'urn:m'],
      ['replaced', 'high', 'urn:r'],
      ['modified', 'medium', 'urn:a'],
      ['unmanaged', 'low', 'urn:0'],
    ]);
  });
});

describe('drift diff: ignore rules', () => {
  const desired = { 'urn:a': aResource(), 'urn:b': aResource() };
  const observed = {
    'urn:a': edited(aResource(), (p) => { p.tags.owner = 'someone'; p.sku.capacity = 3; }),
    'urn:b': edited(aResource(), (p) => (p.tags.env = 'prod')),
  };

  it('when a rule scoped by type matches a subtree, then its findings are listed as ignored with the rule id, not dropped', () => {
    const report = diff(desired, observed, [anIgnoreRule({ id: 'ir_tags', scope: { type: WEB }, path: 'tags.*' })]);
    expect(report.findings).toMatchObject([{ urn: 'urn:a', path: ['sku', 'capacity'] }]);
    expect(report.ignored).toMatchObject([
      { urn: 'urn:a', path: ['tags', 'owner'], desired: 'team-a', observed: 'someone', ignoredBy: ['ir_tags'], holdsOnApply: false },
      { urn: 'urn:b', path: ['tags', 'env'], ignoredBy: ['ir_tags'] },
    ]);
  });

  it('when a rule is scoped by urn, then only that resource is ignored', () => {
    const report = diff(desired, observed, [anIgnoreRule({ id: 'ir_b', scope: { urn: 'urn:b' }, path: 'tags.env' })]);
    expect(report.ignored.map((f) => f.urn)).toEqual(['urn:b']);
    expect(report.findings.map((f) => f.urn)).toEqual(['urn:a', 'urn:a']);
  });

  it('when a path has no trailing *, then it matches that exact path only (not what is under or beside it)', () => {
    const report = diff(desired, observed, [anIgnoreRule({ path: 'tags' }), anIgnoreRule({ id: 'ir_2', path: 'sku.capacity' })]);
    expect(report.ignored).toMatchObject([{ urn: 'urn:a', path: ['sku', 'capacity'], ignoredBy: ['ir_2'] }]);
    expect(report.findings).toHaveLength(2);
  });

  it('when the rule has expired at now, then it stops applying and is named as expired', () => {
    const rule = anIgnoreRule({ id: 'ir_old', expiresAt: NOW.toISOString() });
    const report = diff(desired, observed, [rule]);
    expect(report.ignored).toEqual([]);
    expect(report.findings).toHaveLength(3);
    expect(report.expiredRules).toEqual(['ir_old']);
    expect(diffResources(desired, observed, [rule], new Date(NOW.getTime() - 1)).ignored).toHaveLength(2);
  });

  it('when a rule expiry does not parse, then it counts as expired (it never silences drift by mistake)', () => {
    const report = diff(desired, observed, [anIgnoreRule({ id: 'ir_bad', expiresAt: 'soon' })]);
    expect(report.expiredRules).toEqual(['ir_bad']);
    expect(report.ignored).toEqual([]);
  });

  it('when several rules match, then all their ids are listed and holdsOnApply is true if any holds', () => {
    const report = diff(desired, observed, [
      anIgnoreRule({ id: 'ir_z', scope: { urn: 'urn:b' }, path: 'tags.env', holdsOnApply: true }),
      anIgnoreRule({ id: 'ir_a', path: 'tags.*' }),
    ]);
    expect(report.ignored.find((f) => f.urn === 'urn:b')).toMatchObject({ ignoredBy: ['ir_a', 'ir_z'], holdsOnApply: true });
  });

  it('when the path is *, then resource-level findings of the scope are ignored too; other paths never match them', () => {
    const report = diff({}, { 'urn:x': aResource() }, [anIgnoreRule({ id: 'ir_tags' }), anIgnoreRule({ id: 'ir_all', scope: { urn: 'urn:x' }, path: '*' })]);
    expect(report.findings).toEqual([]);
    expect(report.ignored).toMatchObject([{ kind: 'unmanaged', urn: 'urn:x', ignoredBy: ['ir_all'] }]);
  });

  it('when a rule is malformed, then each problem is named', () => {
    expect(ignoreRuleProblems(anIgnoreRule())).toEqual([]);
    expect(ignoreRuleProblems(anIgnoreRule({ path: 'a.*.b', reason: ' ', owner: '', expiresAt: 'later' }))).toEqual([
      'path may use * only as its last segment',
      'reason is required',
      'owner is required',
      'expiresAt must be an ISO-8601 time',
    ]);
    expect(ignoreRuleProblems(anIgnoreRule({ path: 'a..b', scope: { urn: '' } }))).toEqual([
      'scope needs a type or a urn',
      'path must be dot-separated property names',
    ]);
  });

  it('when a rule path names an array index past 10,000, then it is a problem; up to it, it is not', () => {
    expect(ignoreRuleProblems(anIgnoreRule({ path: 'items.999999999.x' }))).toEqual(['path may name array indexes up to 10000 only, not 999999999']);
    expect(ignoreRuleProblems(anIgnoreRule({ path: 'items.10001' }))).toHaveLength(1);
    expect(ignoreRuleProblems(anIgnoreRule({ path: 'items.10000.x' }))).toEqual([]);
  });
});

describe('drift diff: fingerprint', () => {
  const desired = { 'urn:a': aResource(), 'urn:b': aResource(), 'urn:c': aResource() };
  const observed = { 'urn:a': edited(aResource(), (p) => (p.sku = { capacity: 1, name: 'B1' })), 'urn:x': aResource() };

  it('when the same findings are rescanned from inputs in another order, then the fingerprint is the same', () => {
    const first = diff(desired, observed);
    const again = diff(reorderDeep(desired) as Resources, reorderDeep(observed) as Resources);
    expect(again.fingerprint).toBe(first.fingerprint);
    expect(again.fingerprint).toMatch(/^[0-9a-f]{64}$/);
  });

  it('when any observed value changes, then the fingerprint changes', () => {
    const first = diff(desired, observed);
    const other = diff(desired, { ...observed, 'urn:a': edited(observed['urn:a'], (p) => (p.sku.capacity = 7)) });
    expect(other.findings.length).toBe(first.findings.length);
    expect(other.fingerprint).not.toBe(first.fingerprint);
  });

  it('when a finding is ignored, then the fingerprint leaves it out; absent and null values differ', () => {
    const plain = diff({ 'urn:a': aResource() }, {});
    const ignoredAll = diff({ 'urn:a': aResource() }, {}, [anIgnoreRule({ path: '*' })]);
    expect(ignoredAll.fingerprint).toBe(diff({}, {}).fingerprint);
    expect(ignoredAll.fingerprint).not.toBe(plain.fingerprint);
    const absent = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => delete p.location) });
    const nulled = diff({ 'urn:a': aResource() }, { 'urn:a': edited(aResource(), (p) => (p.location = null)) });
    expect(absent.fingerprint).not.toBe(nulled.fingerprint);
  });
});

// ---- properties ------------------------------------------------------------------------------------------------

/** The same value with object keys in reverse insertion order at every depth. */
function reorderDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reorderDeep);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value).reverse()) out[key] = reorderDeep((value as Record<string, unknown>)[key]);
  return out;
}

const keyArb = fc.constantFrom('a', 'b', 'c', 'd');
const { json } = fc.letrec<{ json: JsonValue }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small', maxDepth: 3 },
    fc.constantFrom<JsonValue>(null, true, false, 0, 1, 'x', 'y'),
    fc.array(tie('json'), { maxLength: 3 }),
    fc.dictionary(keyArb, tie('json'), { maxKeys: 3 }),
  ),
}));
const resourceArb: fc.Arbitrary<ResourceState> = fc.record({ type: fc.constantFrom('T1', 'T2'), properties: fc.dictionary(keyArb, json, { maxKeys: 4 }) });
const resourcesArb: fc.Arbitrary<Resources> = fc.dictionary(fc.constantFrom('urn:1', 'urn:2', 'urn:3', 'urn:4'), resourceArb, { maxKeys: 4 });
const ruleArb: fc.Arbitrary<IgnoreRule> = fc.record({
  id: fc.constantFrom('r1', 'r2', 'r3'),
  scope: fc.oneof(fc.record({ type: fc.constantFrom('T1', 'T2') }), fc.record({ urn: fc.constantFrom('urn:1', 'urn:2') })),
  path: fc.constantFrom('*', 'a', 'a.*', 'b.c', 'b.*', 'c.0'),
  reason: fc.constant('r'),
  owner: fc.constant('o'),
  expiresAt: fc.constantFrom('2026-01-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z'),
  holdsOnApply: fc.boolean(),
});

/** Applies findings to a deep copy of `observed`: what re-applying the desired state would do for them. */
function applyFindings(desired: Resources, observed: Resources, findings: readonly DriftFinding[]): Record<string, ResourceState> {
  const out = structuredClone(observed) as Record<string, ResourceState>;
  for (const f of findings) {
    if (f.kind === 'unmanaged') delete out[f.urn];
    else if (f.kind === 'missing' || f.kind === 'replaced') out[f.urn] = structuredClone(desired[f.urn]!);
    else {
      type Node = Record<string | number, unknown>;
      let node = out[f.urn]!.properties as Node;
      for (const segment of f.path.slice(0, -1)) node = node[segment] as Node;
      const last = f.path[f.path.length - 1]!;
      if (f.desired !== undefined) node[last] = structuredClone(f.desired);
      else if (Array.isArray(node)) node.length = Math.min(node.length, Number(last));
      else delete node[last];
    }
  }
  return out;
}

describe('drift diff: properties', () => {
  it('when a map is diffed against a copy of itself, then there are no findings', () => {
    fc.assert(fc.property(resourcesArb, (x) => diff(x, structuredClone(x)).findings.length === 0));
  });

  it('when the reported (not ignored) findings are applied to observed, then only the ignored differences remain', () => {
    fc.assert(
      fc.property(resourcesArb, resourcesArb, fc.array(ruleArb, { maxLength: 3 }), (desired, observed, rules) => {
        const report = diff(desired, observed, rules);
        const patched = applyFindings(desired, observed, report.findings);
        const again = diff(desired, patched, rules);
        expect(again.findings).toEqual([]);
        expect(again.ignored).toEqual(report.ignored);
        if (report.ignored.length === 0) expect(patched).toEqual(desired);
      }),
    );
  });

  it('when the inputs are the same up to key order, then findings and fingerprint are the same', () => {
    fc.assert(
      fc.property(resourcesArb, resourcesArb, (desired, observed) => {
        const first = diff(desired, observed);
        const reordered = diff(reorderDeep(desired) as Resources, reorderDeep(observed) as Resources);
        expect(reordered.fingerprint).toBe(first.fingerprint);
        expect(reordered.findings).toEqual(first.findings);
      }),
    );
  });

  it('when two inputs differ, then their fingerprints against the same desired state differ unless the findings are equal', () => {
    fc.assert(
      fc.property(resourcesArb, resourcesArb, resourcesArb, (desired, one, two) => {
        const a = diff(desired, one);
        const b = diff(desired, two);
        expect(a.fingerprint === b.fingerprint).toBe(JSON.stringify(reorderSorted(a.findings)) === JSON.stringify(reorderSorted(b.findings)));
      }),
    );
  });
});

/** Findings with object keys sorted at every depth, for comparing them as text. */
function reorderSorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reorderSorted);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) out[key] = reorderSorted((value as Record<string, unknown>)[key]);
  return out;
}
