import { describe, expect, it } from 'vitest';
import { thrown } from '../support/refusal';
import { MAX_PATH_INDEX, type JsonObject } from '../../shared/platform/iac/iac-values';
import { changedPaths, planDigest, planSchema, type HeldIgnoreRule, type Plan, type StackState, type StateResource } from '../../shared/platform/iac/plan';
import { resourceUrn } from '../../shared/platform/iac/stack-ref';
import { planStack, refreshedInputs } from '../../local/engine/planner';
import { loadProgram, ProgramEvaluator, projectGraph, type LoadedProgram } from '../../local/engine/pulumi-yaml';

const STACK = 'dev';

function program(resources: string, extra = ''): LoadedProgram {
  return loadProgram({ 'Pulumi.yaml': `name: shop\nruntime: yaml\n${extra}resources:\n${resources}` }, STACK);
}

/** The state an apply of `p` would leave, with ids `<name>-id` (the real apply is tested over the local cloud). */
function applied(p: LoadedProgram, serial = 1, protect: readonly string[] = []): StackState {
  const resources: StateResource[] = [];
  const graph = projectGraph(p.project, p.config);
  const evaluator = new ProgramEvaluator(p.project, p.config, (name) => resources.find((r) => r.name === name)?.outputs ?? {});
  for (const name of graph.order) {
    const declaration = p.project.resources.find((r) => r.name === name)!;
    const inputs = evaluator.resourceInputs(declaration);
    resources.push({
      urn: resourceUrn(STACK, p.project.name, declaration.type, name),
      name,
      type: declaration.type,
      id: `${name}-id`,
      inputs,
      outputs: { ...inputs, id: `${name}-id` },
      protect: declaration.protect || protect.includes(name),
      dependencies: (graph.dependencies.get(name) ?? []).map((d) => resourceUrn(STACK, 'shop', p.project.resources.find((r) => r.name === d)!.type, d)),
    });
  }
  return { stack: STACK, project: p.project.name, serial, resources };
}

function ops(plan: Plan): string[] {
  return plan.steps.map((s) => `${s.op} ${s.name}`);
}

const NETWORK = `  net:
    type: local:network:VirtualNetwork
    properties:
      cidr: 10.0.0.0/16
      tags: { env: dev, team: core }
      subnets: [10.0.1.0/24, 10.0.2.0/24]
`;
const DB = `  db:
    type: local:sql:Database
    properties:
      network: \${net.id}
      sku: basic
`;
const APP = `  app:
    type: local:web:App
    properties:
      db: \${db.id}
      size: 2
`;

describe('plans: ops', () => {
  it('when the stack has no state, then every resource is a create in dependency order, with ids still to be computed', () => {
    const plan = planStack({ stack: STACK, program: program(APP + DB + NETWORK), state: undefined });
    expect(ops(plan)).toEqual(['create net', 'create db', 'create app']);
    expect(plan.counts).toEqual({ create: 3, update: 0, replace: 0, delete: 0, same: 0 });
    expect(plan.baseSerial).toBe(0);
    expect(plan.steps[1]).toMatchObject({
      urn: 'urn:pulumi:dev::shop::local:sql:Database::db',
      inputs: { network: { 'fn::computed': '${net.id}' }, sku: 'basic' },
      dependencies: ['urn:pulumi:dev::shop::local:network:VirtualNetwork::net'],
    });
    expect(planSchema.safeParse(JSON.parse(JSON.stringify(plan))).success).toBe(true);
  });

  it('when the state matches the program, then every step is same, with the known ids in the inputs', () => {
    const p = program(NETWORK + DB + APP);
    const plan = planStack({ stack: STACK, program: p, state: applied(p, 4) });
    expect(ops(plan)).toEqual(['same net', 'same db', 'same app']);
    expect(plan.steps[1]?.inputs).toEqual({ network: 'net-id', sku: 'basic' });
    expect(plan.baseSerial).toBe(4);
  });

  it('when properties change deep inside objects and arrays, then update lists each changed path', () => {
    const before = program(NETWORK + DB);
    const after = program(NETWORK.replace('env: dev', 'env: test').replace('10.0.2.0/24]', '10.0.3.0/24, 10.0.4.0/24]').replace('cidr: 10.0.0.0/16', 'cidr: 10.1.0.0/16') + DB);
    const plan = planStack({ stack: STACK, program: after, state: applied(before) });
    expect(ops(plan)).toEqual(['update net', 'same db']);
    expect(plan.steps[0]?.changedPaths).toEqual(['cidr', 'subnets[1]', 'subnets[2]', 'tags.env']);
  });

  it('when an update changes paths, then the step carries what the state held at each (none where it held nothing), outside the digest', () => {
    const after = program(NETWORK.replace('env: dev', 'env: test').replace('10.0.2.0/24]', '10.0.3.0/24, 10.0.4.0/24]') + DB);
    const plan = planStack({ stack: STACK, program: after, state: applied(program(NETWORK + DB)) });
    expect(plan.steps[0]?.oldValues).toEqual({ 'subnets[1]': '10.0.2.0/24', 'tags.env': 'dev' });
    expect(plan.steps[1]).not.toHaveProperty('oldValues');
    expect(planSchema.parse(plan).steps[0]?.oldValues).toEqual(plan.steps[0]?.oldValues);
    const steps = plan.steps.map(({ oldValues: _old, ...step }) => step);
    expect(planDigest({ schemaVersion: 1, project: plan.project, stack: plan.stack, steps, outputs: plan.outputs })).toBe(plan.digest);
  });

  it('when a secret reference or an output kept secret changes, then the old value is the old reference, or [secret], never a value', () => {
    const p = (password: string, key: string) =>
      program(NETWORK + DB.replace('sku: basic', `sku: basic\n      password: { secretRef: ${password} }\n      key: ${key}\n    options:\n      additionalSecretOutputs: [key]`));
    const plan = planStack({ stack: STACK, program: p('kv://shop/new', 'k2'), state: applied(p('kv://shop/old', 'k1')) });
    expect(plan.steps[1]?.oldValues).toEqual({ key: '[secret]', password: { secretRef: 'kv://shop/old' } });
    expect(JSON.stringify(plan.steps[1]?.oldValues)).not.toContain('k1');
  });

  it('when only ignored paths change, then same; with another change, update without the ignored paths and with the state value kept', () => {
    const ignoring = NETWORK.concat('    options:\n      ignoreChanges: [tags.env, subnets]\n');
    const before = program(NETWORK);
    const onlyIgnored = program(ignoring.replace('env: dev', 'env: prod').replace('[10.0.1.0/24, 10.0.2.0/24]', '[10.9.0.0/24]'));
    expect(ops(planStack({ stack: STACK, program: onlyIgnored, state: applied(before) }))).toEqual(['same net']);

    const alsoTeam = program(ignoring.replace('env: dev', 'env: prod').replace('team: core', 'team: edge'));
    const plan = planStack({ stack: STACK, program: alsoTeam, state: applied(before) });
    expect(ops(plan)).toEqual(['update net']);
    expect(plan.steps[0]?.changedPaths).toEqual(['tags.team']);
    expect(plan.steps[0]?.inputs).toMatchObject({ tags: { env: 'dev', team: 'edge' } });
  });

  it('when resources leave the program, then they are deleted after the creates and updates, dependents before their dependencies', () => {
    const p = program(NETWORK + DB + APP);
    const plan = planStack({ stack: STACK, program: program(`  cache:\n    type: local:cache:Redis\n`), state: applied(p) });
    expect(ops(plan)).toEqual(['create cache', 'delete app', 'delete db', 'delete net']);
    expect(plan.steps[1]).toMatchObject({ id: 'app-id', urn: 'urn:pulumi:dev::shop::local:web:App::app' });
    expect(plan.steps[1]).not.toHaveProperty('inputs');
  });

  it('when a resource changes type, then it is replaced and whatever reads its id is updated with a computed value', () => {
    const p = program(NETWORK + DB);
    const plan = planStack({ stack: STACK, program: program(NETWORK.replace('local:network:VirtualNetwork', 'local:network:Vnet2') + DB), state: applied(p) });
    expect(ops(plan)).toEqual(['replace net', 'update db']);
    expect(plan.steps[0]).toMatchObject({ oldType: 'local:network:VirtualNetwork', type: 'local:network:Vnet2', id: 'net-id', urn: 'urn:pulumi:dev::shop::local:network:Vnet2::net' });
    expect(plan.steps[1]).toMatchObject({ changedPaths: ['network'], inputs: { network: { 'fn::computed': '${net.id}' } } });
  });

  it('when a protected resource would be deleted or replaced, then PROTECTED names it; an update of it is fine', () => {
    const p = program(NETWORK + DB);
    const state = applied(p, 1, ['net']);
    expect(thrown(() => planStack({ stack: STACK, program: program(`  other:\n    type: local:a:B\n`), state }))).toMatchObject({
      code: 'IAC.PROTECTED',
      details: { urn: 'urn:pulumi:dev::shop::local:network:VirtualNetwork::net', op: 'delete' },
    });
    const retyped = program(NETWORK.replace('VirtualNetwork', 'Vnet2').concat('    options:\n      protect: true\n') + DB);
    expect(thrown(() => planStack({ stack: STACK, program: retyped, state: applied(p) }))).toMatchObject({ code: 'IAC.PROTECTED', details: { op: 'replace' } });
    expect(ops(planStack({ stack: STACK, program: program(NETWORK.replace('cidr: 10.0.0.0/16', 'cidr: 10.2.0.0/16') + DB), state }))).toEqual(['update net', 'same db']);
  });
});

describe('plans: digest', () => {
  it('when the same program is planned against the same state twice, even with keys written in another order, then the digest is the same', () => {
    const p = program(NETWORK + DB);
    const reordered = program(`  net:\n    type: local:network:VirtualNetwork\n    properties:\n      subnets: [10.0.1.0/24, 10.0.2.0/24]\n      tags: { team: core, env: dev }\n      cidr: 10.0.0.0/16\n` + DB);
    const a = planStack({ stack: STACK, program: p, state: undefined });
    const b = planStack({ stack: STACK, program: reordered, state: undefined });
    expect(a.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(b.digest).toBe(a.digest);
  });

  it('when anything the apply would do changes, then the digest changes; the state serial alone does not change it', () => {
    const p = program(NETWORK + DB);
    const base = planStack({ stack: STACK, program: p, state: undefined }).digest;
    const variants = [
      planStack({ stack: STACK, program: program(NETWORK + DB.replace('basic', 'premium')), state: undefined }),
      planStack({ stack: 'prod', program: p, state: undefined }),
      planStack({ stack: STACK, program: p, state: applied(p) }),
      planStack({ stack: STACK, program: program(NETWORK.concat('    options:\n      protect: true\n') + DB), state: undefined }),
      planStack({ stack: STACK, program: program(NETWORK + DB, 'outputs:\n  n: ${net.cidr}\n'), state: undefined }),
    ];
    for (const variant of variants) expect(variant.digest).not.toBe(base);
    const digests = new Set(variants.map((v) => v.digest));
    expect(digests.size).toBe(variants.length);
    expect(planStack({ stack: STACK, program: p, state: applied(p, 7) }).digest).toBe(planStack({ stack: STACK, program: p, state: applied(p, 8) }).digest);
  });
});

describe('plans: references', () => {
  it('when a property is a secret reference, then the plan carries the reference and lists it, never a value', () => {
    const p = loadProgram(
      {
        'Pulumi.yaml': `name: shop\nruntime: yaml\nconfig:\n  dbPassword:\n    type: string\n    secret: true\n  flags:\n    type: object\nresources:\n${DB.replace('sku: basic', 'sku: basic\n      password: ${dbPassword}\n      flags: ${flags}')}${NETWORK}`,
        'Pulumi.dev.yaml': 'config:\n  dbPassword:\n    secretRef: kv://shop/db-password\n  flags:\n    configRef: appconfig://shop/flags\n',
      },
      STACK,
    );
    const plan = planStack({ stack: STACK, program: p, state: undefined });
    expect(plan.steps[1]?.inputs).toMatchObject({ password: { secretRef: 'kv://shop/db-password' }, flags: { configRef: 'appconfig://shop/flags' } });
    expect(plan.references).toEqual([{ configRef: 'appconfig://shop/flags' }, { secretRef: 'kv://shop/db-password' }]);
  });
});

describe('changed property paths', () => {
  it.each<[string, JsonObject, JsonObject, string[]]>([
    ['equal values', { a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 }, []],
    ['an added and a removed key', { a: 1 }, { b: 1 }, ['a', 'b']],
    ['a nested key in an array element', { r: [{ p: 80 }, { p: 443 }] }, { r: [{ p: 80 }, { p: 8443 }] }, ['r[1].p']],
    ['a shorter array', { r: [1, 2, 3] }, { r: [1] }, ['r[1]', 'r[2]']],
    ['a changed type', { a: { b: 1 } }, { a: [1] }, ['a']],
    ['a key that is not an identifier', { labels: { 'app.io/name': 'x' } }, { labels: { 'app.io/name': 'y' } }, ['labels["app.io/name"]']],
    ['another reference', { pw: { secretRef: 'a' } }, { pw: { secretRef: 'b' } }, ['pw']],
  ])('when comparing %s, then the paths are exact', (_what, before, after, expected) => {
    expect(changedPaths(before, after)).toEqual(expected);
  });
});

describe('refreshed inputs', () => {
  it('when the target differs from the recorded inputs, then its values win, except where the state holds a reference or a computed marker', () => {
    const recorded: JsonObject = {
      size: 2,
      password: { secretRef: 'kv://db' },
      network: { 'fn::computed': '${net.id}' },
      tags: { env: 'dev', team: 'core' },
      rules: [{ port: 80 }, { port: 443, token: { configRef: 'cfg://token' } }],
      gone: true,
    };
    const observed: JsonObject = {
      size: 9,
      password: 'the-secret-value',
      network: 'net-7',
      tags: { env: 'dev', owner: 'ops' },
      rules: [{ port: 80 }, { port: 8443, token: 'resolved-token' }, { port: 22 }],
      added: 'by hand',
    };
    expect(refreshedInputs(recorded, observed)).toEqual({
      size: 9,
      password: { secretRef: 'kv://db' },
      network: { 'fn::computed': '${net.id}' },
      tags: { env: 'dev', owner: 'ops' },
      rules: [{ port: 80 }, { port: 8443, token: { configRef: 'cfg://token' } }, { port: 22 }],
      added: 'by hand',
    });
  });
});

describe('held ignore rules', () => {
  const p = program(NETWORK.replace('tags: { env: dev, team: core }', 'tags: { env: dev, team: core }\n      rules: [{ port: 80 }, { port: 443 }]'));
  const state = applied(p);
  const net = state.resources[0]!;
  const target = { ...net, inputs: { ...net.inputs, cidr: '10.9.0.0/16', tags: { env: 'prod' }, rules: [{ port: 80 }, { port: 8443 }], subnets: ['10.0.1.0/24'] } };
  const drifted: StackState = { ...state, resources: [target] };
  const plan = (ignore: HeldIgnoreRule[]) => planStack({ stack: STACK, program: p, state: drifted, ignore });

  it('when rules match by type or urn, then exact, subtree and index paths keep what the resource has; rules of other resources do nothing', () => {
    expect(plan([]).steps[0]?.changedPaths).toEqual(['cidr', 'rules[1].port', 'subnets[1]', 'tags.env', 'tags.team']);
    const held = plan([
      { scope: { type: 'local:network:VirtualNetwork' }, path: 'tags.*' },
      { scope: { urn: net.urn }, path: 'rules.1.port' },
      { scope: { urn: net.urn }, path: 'subnets' },
      { scope: { type: 'local:sql:Database' }, path: 'cidr' },
    ]);
    expect(held.steps[0]?.changedPaths).toEqual(['cidr']);
    expect(held.steps[0]?.inputs).toMatchObject({ cidr: '10.0.0.0/16', tags: { env: 'prod' }, rules: [{ port: 80 }, { port: 8443 }], subnets: ['10.0.1.0/24'] });
  });

  it('when a rule is `*`, then the resource keeps everything: same', () => {
    expect(plan([{ scope: { urn: net.urn }, path: '*' }]).steps[0]?.op).toBe('same');
  });

  it('when a rule path is not dot-separated names with * last only, then IAC.INVALID_IGNORE_RULE', () => {
    for (const path of ['tags..env', '*.env', 'a.*.b', '.tags']) {
      expect(thrown(() => plan([{ scope: { urn: net.urn }, path }]))).toMatchObject({ code: 'IAC.INVALID_IGNORE_RULE', kind: 'validation' });
    }
  });

  it('when a rule names an array index past 10,000, then IAC.INVALID_IGNORE_RULE; up to it the rule is read', () => {
    for (const path of ['rules.999999999.port', `rules.${MAX_PATH_INDEX + 1}`]) {
      expect(thrown(() => plan([{ scope: { urn: net.urn }, path }]))).toMatchObject({ code: 'IAC.INVALID_IGNORE_RULE', kind: 'validation', details: { path } });
    }
    expect(plan([{ scope: { urn: net.urn }, path: `rules.${MAX_PATH_INDEX}.port` }]).steps[0]?.changedPaths).toEqual(plan([]).steps[0]?.changedPaths);
  });

  it('when a rule names an element that neither the resource nor the program has, then no array is padded and nothing is added', () => {
    const unheld = plan([]).steps[0]?.inputs;
    const held = plan([
      { scope: { urn: net.urn }, path: 'rules.5000.port' },
      { scope: { urn: net.urn }, path: 'subnets.9999' },
      { scope: { urn: net.urn }, path: 'labels.team' },
    ]);
    expect(held.steps[0]?.inputs).toEqual(unheld);
  });

  it("when the program's ignoreChanges name elements that neither side has, then no array is padded and nothing is added", () => {
    const ignoring = program(NETWORK.replace('tags: { env: dev, team: core }', 'tags: { env: dev, team: core }\n      rules: [{ port: 80 }]').concat('    options:\n      ignoreChanges: ["rules[7].port", "subnets[9000]", labels.team]\n'));
    const before = program(NETWORK.replace('tags: { env: dev, team: core }', 'tags: { env: dev, team: core }\n      rules: [{ port: 80 }]'));
    const step = planStack({ stack: STACK, program: ignoring, state: applied(before) }).steps[0];
    expect(step).toMatchObject({ op: 'same', inputs: applied(before).resources[0]!.inputs });
  });
});
