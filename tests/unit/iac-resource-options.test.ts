import { describe, expect, it } from 'vitest';
import { thrown } from '../support/refusal';
import { type Plan, type StackState, type StateResource } from '../../shared/platform/iac/plan';
import { planStack, TargetReadNeeded, type PlanInput, type TargetResource } from '../../local/engine/planner';
import { loadProgram, type LoadedProgram } from '../../local/engine/pulumi-yaml';

/**
 * Resource options, get resources and providers in plans (pure): what each does to the steps, the urns and the
 * digest, as Pulumi's engine has it. Applying them to the local cloud is tests/integration/local-iac-options.test.ts.
 */

const STACK = 'dev';

function program(resources: string, extra = ''): LoadedProgram {
  return loadProgram({ 'Pulumi.yaml': `name: shop\nruntime: yaml\n${extra}resources:\n${resources}` }, STACK);
}

const ops = (plan: Plan) => plan.steps.map((s) => `${s.op} ${s.name}`);
const plan = (p: LoadedProgram, state?: StackState, target?: PlanInput['target']) => planStack({ stack: STACK, program: p, state, ...(target ? { target } : {}) });

/** The state a plan's apply would leave (ids `<name>-id`), options recorded as the engine records them. */
function appliedFrom(planned: Plan, extra: Partial<Record<string, Partial<StateResource>>> = {}): StackState {
  const resources = planned.steps
    .filter((s) => s.op !== 'delete')
    .map((s): StateResource => {
      const id = s.import ?? (s.read && s.id !== undefined ? s.id : `${s.name}-id`);
      const inputs = JSON.parse(JSON.stringify(s.inputs ?? {}).replace(/\{"fn::computed":"\$\{(\w+)\.id\}"\}/g, '"$1-id"')) as StateResource['inputs'];
      return { urn: s.urn, name: s.name, type: s.type, id, inputs, outputs: { ...inputs, id }, protect: s.protect, dependencies: s.dependencies, ...(extra[s.name] ?? {}) };
    });
  return { stack: STACK, project: 'shop', serial: 1, resources };
}

const PARENT = `  app:
    type: local:web:App
    properties:
      size: 1
`;
const child = (options = '    options:\n      parent: ${app}\n', name = 'logs') => `  ${name}:
    type: local:storage:Bucket
    properties:
      tier: hot
${options}`;

describe('resource options: parsing', () => {
  it('when a resource uses every option of upstream ResourceOptionsDecl but the refused ones, then it loads, and dependsOn holds every resource the options name', () => {
    const p = program(`  prov:
    type: pulumi:providers:local
  other:
    type: local:a:Thing
${PARENT}  logs:
    type: local:storage:Bucket
    properties:
      tier: hot
    options:
      additionalSecretOutputs: [key]
      aliases:
        - name: old-logs
        - urn:pulumi:dev::shop::local:storage:Bucket::older
      customTimeouts: { create: 5m, update: 1h30m, delete: 300ms }
      deleteBeforeReplace: true
      dependsOn:
        - \${other}
      ignoreChanges: [tags]
      import: lcr-123
      parent: \${app}
      protect: false
      provider: \${prov}
      providers:
        - \${prov}
      version: 1.2.3
      replaceOnChanges: [tier, 'rules[*].port']
      retainOnDelete: true
      replaceWith:
        - \${other}
      deletedWith: \${app}
      hideDiffs: [tier]
      replacementTrigger: \${other.id}
`);
    const logs = p.project.resources.find((r) => r.name === 'logs');
    expect(logs?.dependsOn).toEqual(['other', 'app', 'prov']);
    expect(logs?.options).toMatchObject({ parent: 'app', provider: 'prov', deletedWith: 'app', replaceWith: ['other'], version: '1.2.3', customTimeouts: { create: '5m', update: '1h30m', delete: '300ms' } });
  });

  it('when pluginDownloadURL or envVarMappings is used, then IAC.UNSUPPORTED names the construct and its path; an option Pulumi does not have is INVALID_PROJECT', () => {
    expect(thrown(() => program(child('    options:\n      noSuchOption: true\n')))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'resources.logs.options.noSuchOption' } });
    for (const [option, value] of [
      ['pluginDownloadURL', 'https://example.com/plugins'],
      ['envVarMappings', '{ A: B }'],
    ] as const) {
      expect(thrown(() => program(child(`    options:\n      ${option}: ${value}\n`)))).toMatchObject({
        code: 'IAC.UNSUPPORTED',
        kind: 'validation',
        details: { construct: `options.${option}`, path: `resources.logs.options.${option}` },
      });
    }
  });

  it('when an option has the wrong shape, then IAC.INVALID_PROJECT names its path', () => {
    const cases: [string, string][] = [
      ['customTimeouts: { create: soon }', 'resources.logs.options.customTimeouts.create'],
      ['customTimeouts: { forever: 5m }', 'resources.logs.options.customTimeouts.forever'],
      ['version: latest', 'resources.logs.options.version'],
      ['parent: app', 'resources.logs.options.parent'],
      ['deleteBeforeReplace: yes-please', 'resources.logs.options.deleteBeforeReplace'],
      ['import: ${app.id}', 'resources.logs.options.import'],
      ['aliases: [{ nam: x }]', 'resources.logs.options.aliases[0].nam'],
      ['hideDiffs: ["a..b"]', 'resources.logs.options.hideDiffs[0]'],
    ];
    for (const [option, path] of cases) {
      expect(thrown(() => program(PARENT + child(`    options:\n      ${option}\n`))), option).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path } });
    }
  });

  it('when an option names a resource the project does not have, then UNKNOWN_REFERENCE names the option', () => {
    expect(thrown(() => plan(program(child())))).toMatchObject({ code: 'IAC.UNKNOWN_REFERENCE', details: { path: 'resources.logs.options.parent' } });
  });
});

describe('resource options: urns, parents and aliases', () => {
  it("when a resource has a parent, then its urn's type is the parent's qualified type before its own, over generations", () => {
    const p = program(PARENT + child() + `  index:\n    type: local:storage:Index\n    options:\n      parent: \${logs}\n`);
    const planned = plan(p);
    expect(planned.steps.map((s) => s.urn)).toEqual([
      'urn:pulumi:dev::shop::local:web:App::app',
      'urn:pulumi:dev::shop::local:web:App$local:storage:Bucket::logs',
      'urn:pulumi:dev::shop::local:web:App$local:storage:Bucket$local:storage:Index::index',
    ]);
    expect(planned.steps[1]).toMatchObject({ parent: 'urn:pulumi:dev::shop::local:web:App::app', dependencies: ['urn:pulumi:dev::shop::local:web:App::app'] });
  });

  it('when a resource is reparented without an alias, then it is a create and a delete; with an alias naming its old parent, the same resource', () => {
    const before = plan(program(PARENT + child('')));
    const state = appliedFrom(before);
    expect(ops(plan(program(PARENT + child()), state))).toEqual(['same app', 'create logs', 'delete logs']);
    const aliased = plan(program(PARENT + child('    options:\n      parent: ${app}\n      aliases:\n        - noParent: true\n')), state);
    expect(ops(aliased)).toEqual(['same app', 'same logs']);
    expect(aliased.steps[1]).toMatchObject({ id: 'logs-id', urn: 'urn:pulumi:dev::shop::local:web:App$local:storage:Bucket::logs', oldUrn: 'urn:pulumi:dev::shop::local:storage:Bucket::logs' });
  });

  it('when a resource is renamed, then an alias by name or by urn keeps it (an update where its properties changed); without one it is replaced by a create and a delete', () => {
    const state = appliedFrom(plan(program(child('', 'logs'))));
    expect(ops(plan(program(child('', 'archive')), state))).toEqual(['create archive', 'delete logs']);
    expect(ops(plan(program(child('    options:\n      aliases:\n        - name: logs\n', 'archive')), state))).toEqual(['same archive']);
    const byUrn = plan(program(child('    options:\n      aliases:\n        - urn:pulumi:dev::shop::local:storage:Bucket::logs\n', 'archive').replace('tier: hot', 'tier: cold')), state);
    expect(ops(byUrn)).toEqual(['update archive']);
    expect(byUrn.steps[0]).toMatchObject({ id: 'logs-id', changedPaths: ['tier'] });
  });

  it('when a resource has name:, then the urn uses it', () => {
    const p = program(`  logs:\n    type: local:storage:Bucket\n    name: audit-logs\n`);
    expect(plan(p).steps[0]?.urn).toBe('urn:pulumi:dev::shop::local:storage:Bucket::audit-logs');
  });
});

describe('resource options: replacement', () => {
  const bucket = (tier: string, options: string) => `  logs:\n    type: local:storage:Bucket\n    properties:\n      tier: ${tier}\n      tags: { env: dev }\n    options:\n${options}`;

  it('when a replaceOnChanges path changes, then replace; a change elsewhere is an update; * replaces on any change', () => {
    const state = appliedFrom(plan(program(bucket('hot', '      replaceOnChanges: [tier]\n'))));
    const replaced = plan(program(bucket('cold', '      replaceOnChanges: [tier]\n')), state);
    expect(replaced.steps[0]).toMatchObject({ op: 'replace', id: 'logs-id', changedPaths: ['tier'], replaceBecause: 'replaceOnChanges tier' });
    expect(ops(plan(program(bucket('hot', '      replaceOnChanges: [tier]\n').replace('env: dev', 'env: prod')), state))).toEqual(['update logs']);
    expect(ops(plan(program(bucket('hot', "      replaceOnChanges: ['*']\n").replace('env: dev', 'env: prod')), state))).toEqual(['replace logs']);
    expect(ops(plan(program(bucket('hot', '      replaceOnChanges: [tags.env]\n').replace('tags: { env: dev }', 'tags: { env: prod }')), state))).toEqual(['replace logs']);
  });

  it('when deleteBeforeReplace or retainOnDelete is set, then the replace step says so', () => {
    const state = appliedFrom(plan(program(bucket('hot', '      replaceOnChanges: [tier]\n'))));
    expect(plan(program(bucket('cold', '      replaceOnChanges: [tier]\n      deleteBeforeReplace: true\n')), state).steps[0]).toMatchObject({ op: 'replace', deleteBeforeReplace: true });
    expect(plan(program(bucket('cold', '      replaceOnChanges: [tier]\n      retainOnDelete: true\n')), state).steps[0]).toMatchObject({ op: 'replace', retain: 'retainOnDelete' });
    expect(plan(program(bucket('cold', '      replaceOnChanges: [tier]\n')), state).steps[0]).not.toHaveProperty('deleteBeforeReplace');
  });

  it('when a replaceWith resource is replaced, then this one is replaced too; when it is only updated, not', () => {
    const program2 = (cidr: string, type = 'local:network:Vnet') => program(`  net:\n    type: ${type}\n    properties:\n      cidr: ${cidr}\n  logs:\n    type: local:storage:Bucket\n    options:\n      replaceWith:\n        - \${net}\n`);
    const state = appliedFrom(plan(program2('10.0.0.0/16')));
    expect(ops(plan(program2('10.1.0.0/16'), state))).toEqual(['update net', 'same logs']);
    expect(plan(program2('10.0.0.0/16', 'local:network:Vnet2'), state).steps.map((s) => [s.op, s.replaceBecause])).toEqual([
      ['replace', undefined],
      ['replace', 'replaceWith net'],
    ]);
  });

  it("when a new resource's replacementTrigger reads an output no provider here computes, then the plan fails IAC.UNKNOWN_OUTPUT (not its apply)", () => {
    const p = program(`  source:\n    type: output:index:Resource\n  logs:\n    type: local:storage:Bucket\n    options:\n      replacementTrigger: \${source.output}\n`);
    expect(thrown(() => plan(p))).toMatchObject({ code: 'IAC.UNKNOWN_OUTPUT', details: { resource: 'source', output: 'output', path: 'resources.logs.options.replacementTrigger' } });
  });

  it('when the replacementTrigger value changes from what the state recorded, then replace; the same value is same', () => {
    const withTrigger = (value: string) => program(`  logs:\n    type: local:storage:Bucket\n    options:\n      replacementTrigger: ${value}\n`);
    const state = appliedFrom(plan(withTrigger('v1')), { logs: { replacementTrigger: 'v1' } });
    expect(ops(plan(withTrigger('v1'), state))).toEqual(['same logs']);
    expect(plan(withTrigger('v2'), state).steps[0]).toMatchObject({ op: 'replace', replaceBecause: 'replacementTrigger' });
  });

  it('when a protected resource would be replaced by replaceOnChanges, then PROTECTED', () => {
    const state = appliedFrom(plan(program(bucket('hot', '      replaceOnChanges: [tier]\n      protect: true\n'))));
    expect(thrown(() => plan(program(bucket('cold', '      replaceOnChanges: [tier]\n      protect: true\n')), state))).toMatchObject({ code: 'IAC.PROTECTED', details: { op: 'replace' } });
  });
});

describe('resource options: deletes', () => {
  const two = (childOptions: string) => program(`  app:\n    type: local:web:App\n  logs:\n    type: local:storage:Bucket\n    options:\n${childOptions}`);

  it('when a retainOnDelete resource leaves the program, then its delete retains it', () => {
    const state = appliedFrom(plan(two('      retainOnDelete: true\n')), { logs: { retainOnDelete: true } });
    expect(plan(program(`  app:\n    type: local:web:App\n`), state).steps[1]).toMatchObject({ op: 'delete', name: 'logs', retain: 'retainOnDelete' });
  });

  it('when a resource and its deletedWith resource both leave the program, then its delete is skipped; when it leaves alone, it is deleted', () => {
    const state = appliedFrom(plan(two('      deletedWith: ${app}\n')), { logs: { deletedWith: 'urn:pulumi:dev::shop::local:web:App::app' } });
    expect(plan(program(`  other:\n    type: local:a:B\n`), state).steps.map((s) => [s.op, s.name, s.retain])).toEqual([
      ['create', 'other', undefined],
      ['delete', 'logs', 'deletedWith'],
      ['delete', 'app', undefined],
    ]);
    expect(plan(program(`  app:\n    type: local:web:App\n`), state).steps[1]).toMatchObject({ op: 'delete', name: 'logs' });
    expect(plan(program(`  app:\n    type: local:web:App\n`), state).steps[1]).not.toHaveProperty('retain');
  });
});

describe('resource options: what a plan shows', () => {
  it('when hideDiffs names a path, then the plan shows it [hidden] and still lists it as changed; its value still moves the digest', () => {
    const p = (password: string) => program(`  db:\n    type: local:sql:Database\n    properties:\n      sku: basic\n      password: ${password}\n    options:\n      hideDiffs: [password]\n`);
    const state = appliedFrom(plan(p('one')));
    const changed = plan(p('two'), state);
    expect(changed.steps[0]).toMatchObject({ op: 'update', changedPaths: ['password'], inputs: { sku: 'basic', password: '[hidden]' }, hiddenPaths: ['password'] });
    expect(changed.steps[0]?.oldValues).toEqual({ password: '[hidden]' });
    expect(JSON.stringify(changed)).not.toContain('two');
    expect(JSON.stringify(changed)).not.toContain('one');
    expect(plan(p('three'), state).digest).not.toBe(changed.digest);
  });

  it('when additionalSecretOutputs names an output, then what reads it sees [secret] in the plan and so do the stack outputs', () => {
    const p = program(`  db:\n    type: local:sql:Database\n    properties:\n      password: pa55word\n    options:\n      additionalSecretOutputs: [password]\n  app:\n    type: local:web:App\n    properties:\n      dbPassword: \${db.password}\n`, 'outputs:\n  pw: ${db.password}\n');
    const planned = plan(p);
    expect(planned.steps[1]?.inputs).toEqual({ dbPassword: '[secret]' });
    expect(planned.outputs).toEqual({ pw: '[secret]' });
  });

  it('when version and customTimeouts are set, then the step records them', () => {
    const p = program(child('    options:\n      version: 4.2.0\n      customTimeouts: { create: 10m }\n'));
    expect(plan(p).steps[0]).toMatchObject({ version: '4.2.0', customTimeouts: { create: '10m' } });
    // A timeout may come from config, as upstream's l2-resource-option-custom-timeouts does; it must still be a duration.
    const fromConfig = (value: string) => program(child('    options:\n      customTimeouts:\n        create: ${createTimeout}\n        delete: 1m\n'), `config:\n  createTimeout: ${value}\n`);
    expect(plan(fromConfig('7m')).steps[0]?.customTimeouts).toEqual({ create: '7m', delete: '1m' });
    expect(thrown(() => plan(fromConfig('soon')))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'resources.logs.options.customTimeouts.create' } });
  });

  it('when a program uses none of the new options, then its plans keep the digests they had before them', () => {
    const resources = '  net:\n    type: local:network:VirtualNetwork\n    properties:\n      cidr: 10.0.0.0/16\n  db:\n    type: local:sql:Database\n    properties:\n      network: ${net.id}\n    options:\n      protect: true\n      ignoreChanges: [tags]\n      dependsOn:\n        - ${net}\n';
    const loaded = loadProgram({ 'Pulumi.yaml': `name: shop\nruntime: yaml\nresources:\n${resources}outputs:\n  db: \${db.id}\n` }, STACK);
    // Digests of the engine before resource options, for the same program and state (computed on main at ac53c1d).
    expect(plan(loaded).digest).toBe('sha256:6d4953233adf9d76f1b8a27e84b1af4ad7c15a93adcba73faf818fc9944c422a');
    const state: StackState = {
      stack: STACK,
      project: 'shop',
      serial: 3,
      resources: [
        { urn: 'urn:pulumi:dev::shop::local:network:VirtualNetwork::net', name: 'net', type: 'local:network:VirtualNetwork', id: 'net-1', inputs: { cidr: '10.0.0.0/8' }, outputs: { cidr: '10.0.0.0/8', id: 'net-1' }, protect: false, dependencies: [] },
        { urn: 'urn:pulumi:dev::shop::local:old:Gone::gone', name: 'gone', type: 'local:old:Gone', id: 'gone-1', inputs: {}, outputs: { id: 'gone-1' }, protect: false, dependencies: [] },
      ],
    };
    expect(plan(loaded, state).digest).toBe('sha256:d552868ee37c9f9553ff033bd348afb8dbfeead4f2ec23f39ceb1cefab8a9652');
  });
});

describe('providers', () => {
  const providerAndBucket = (bucketOptions: string, providerType = 'pulumi:providers:local') => program(`  prov:\n    type: ${providerType}\n    properties:\n      region: west\n  logs:\n    type: local:storage:Bucket\n${bucketOptions}`);

  it('when a resource names an explicit provider, then the provider is a resource of the plan before it and the step names its urn', () => {
    const planned = plan(providerAndBucket('    options:\n      provider: ${prov}\n'));
    expect(planned.steps.map((s) => [s.op, s.urn, s.provider])).toEqual([
      ['create', 'urn:pulumi:dev::shop::pulumi:providers:local::prov', undefined],
      ['create', 'urn:pulumi:dev::shop::local:storage:Bucket::logs', 'urn:pulumi:dev::shop::pulumi:providers:local::prov'],
    ]);
  });

  it('when provider: names no provider, or a provider of another package, then IAC.INVALID_PROJECT names the option', () => {
    expect(thrown(() => plan(program(`  app:\n    type: local:web:App\n  logs:\n    type: local:storage:Bucket\n    options:\n      provider: \${app}\n`)))).toMatchObject({
      code: 'IAC.INVALID_PROJECT',
      details: { path: 'resources.logs.options.provider' },
    });
    expect(thrown(() => plan(providerAndBucket('    options:\n      provider: ${prov}\n', 'pulumi:providers:aws')))).toMatchObject({ details: { path: 'resources.logs.options.provider' } });
  });

  it("when a parent has providers: or defaultProvider: true is set, then resources of that package use that provider without saying so", () => {
    const inherited = plan(program(`  prov:\n    type: pulumi:providers:local\n  app:\n    type: other:web:App\n    options:\n      providers:\n        - \${prov}\n  logs:\n    type: local:storage:Bucket\n    options:\n      parent: \${app}\n`));
    expect(inherited.steps.find((s) => s.name === 'logs')?.provider).toBe('urn:pulumi:dev::shop::pulumi:providers:local::prov');
    const byDefault = plan(program(`  prov:\n    type: pulumi:providers:local\n    defaultProvider: true\n  logs:\n    type: local:storage:Bucket\n  other:\n    type: other:a:B\n`));
    expect(byDefault.steps.map((s) => s.provider)).toEqual([undefined, 'urn:pulumi:dev::shop::pulumi:providers:local::prov', undefined]);
    // The provider comes first: the graph orders what uses it after it.
    expect(ops(plan(program(`  logs:\n    type: local:storage:Bucket\n    options:\n      provider: \${prov}\n  prov:\n    type: pulumi:providers:local\n`)))).toEqual(['create prov', 'create logs']);
  });
});

describe('import and get', () => {
  const target = (entries: [string, TargetResource | null][]) => new Map(entries);
  const bucketProps = '    properties:\n      tier: hot\n      tags: { env: dev }\n';
  const imported = (options = '    options:\n      import: lcr-9\n') => program(`  logs:\n    type: local:storage:Bucket\n${bucketProps}${options}  app:\n    type: local:web:App\n    properties:\n      logs: \${logs.id}\n`);

  it('when a resource imports an id, then the plan asks the target for it; found and equal, a create that adopts it, its id known to what reads it', () => {
    expect(() => plan(imported())).toThrow(TargetReadNeeded);
    const planned = plan(imported(), undefined, target([['lcr-9', { id: 'lcr-9', type: 'local:storage:Bucket', properties: { tier: 'hot', tags: { env: 'dev' } } }]]));
    expect(planned.steps[0]).toMatchObject({ op: 'create', import: 'lcr-9' });
    expect(planned.steps[1]?.inputs).toEqual({ logs: 'lcr-9' });
    expect(planned.counts.create).toBe(2);
    expect(planned.references).toEqual([]);
  });

  it('when the imported id is missing (or another tenant holds it), of another type, or holds other values, then the plan fails naming the import', () => {
    expect(thrown(() => plan(imported(), undefined, target([['lcr-9', null]])))).toMatchObject({ code: 'IAC.IMPORT_NOT_FOUND', details: { path: 'resources.logs.options.import', id: 'lcr-9' } });
    expect(thrown(() => plan(imported(), undefined, target([['lcr-9', { id: 'lcr-9', type: 'local:storage:Other', properties: {} }]])))).toMatchObject({ code: 'IAC.IMPORT_MISMATCH' });
    expect(thrown(() => plan(imported(), undefined, target([['lcr-9', { id: 'lcr-9', type: 'local:storage:Bucket', properties: { tier: 'cold', tags: { env: 'dev' }, extra: 1 } }]])))).toMatchObject({
      code: 'IAC.IMPORT_MISMATCH',
      details: { paths: ['extra', 'tier'] },
    });
    // ignoreChanges paths are not compared.
    const ignoring = imported('    options:\n      import: lcr-9\n      ignoreChanges: [tier]\n');
    expect(plan(ignoring, undefined, target([['lcr-9', { id: 'lcr-9', type: 'local:storage:Bucket', properties: { tier: 'cold', tags: { env: 'dev' } } }]])).steps[0]?.op).toBe('create');
  });

  it('when the resource is already in the state, then import does nothing more: the state is what it is', () => {
    const state = appliedFrom(plan(imported(), undefined, target([['lcr-9', { id: 'lcr-9', type: 'local:storage:Bucket', properties: { tier: 'hot', tags: { env: 'dev' } } }]])));
    expect(ops(plan(imported(), state))).toEqual(['same logs', 'same app']);
  });

  const got = (extra = '') => program(`  shared:\n    type: local:network:VirtualNetwork\n    get:\n      id: \${netId}\n${extra}  app:\n    type: local:web:App\n    properties:\n      cidr: \${shared.cidr}\n      net: \${shared.id}\n`, 'config:\n  netId: lcr-net\n');

  it('when a get resource is planned, then it is read from the target (a same with read), and its outputs are what the target holds', () => {
    const reads = target([['lcr-net', { id: 'lcr-net', type: 'local:network:VirtualNetwork', properties: { cidr: '10.9.0.0/16' } }]]);
    const planned = plan(got(), undefined, reads);
    expect(planned.steps[0]).toMatchObject({ op: 'same', read: true, id: 'lcr-net', urn: 'urn:pulumi:dev::shop::local:network:VirtualNetwork::shared' });
    expect(planned.steps[1]?.inputs).toEqual({ cidr: '10.9.0.0/16', net: 'lcr-net' });
  });

  it('when the get id is missing, of another type, or get.state differs from what the target holds, then the plan fails naming the get', () => {
    expect(thrown(() => plan(got(), undefined, target([['lcr-net', null]])))).toMatchObject({ code: 'IAC.GET_NOT_FOUND', details: { path: 'resources.shared.get.id', id: 'lcr-net' } });
    expect(thrown(() => plan(got(), undefined, target([['lcr-net', { id: 'lcr-net', type: 'local:a:B', properties: {} }]])))).toMatchObject({ code: 'IAC.GET_TYPE_MISMATCH' });
    const withState = got('      state:\n        cidr: 10.0.0.0/16\n');
    expect(thrown(() => plan(withState, undefined, target([['lcr-net', { id: 'lcr-net', type: 'local:network:VirtualNetwork', properties: { cidr: '10.9.0.0/16' } }]])))).toMatchObject({
      code: 'IAC.GET_STATE_MISMATCH',
      details: { paths: ['cidr'] },
    });
  });

  it('when a get resource leaves the program, then its delete step is a read: only the state forgets it', () => {
    const reads = target([['lcr-net', { id: 'lcr-net', type: 'local:network:VirtualNetwork', properties: { cidr: '10.9.0.0/16' } }]]);
    const state = appliedFrom(plan(got(), undefined, reads), { shared: { external: true } });
    expect(plan(program('  other:\n    type: local:a:B\n'), state).steps.find((s) => s.name === 'shared')).toMatchObject({ op: 'delete', read: true });
  });

  it("when a get's id is an output this plan still has to create, then IAC.UNSUPPORTED: the read happens at plan time (after what the id names)", () => {
    const p = program(`  net:\n    type: local:network:VirtualNetwork\n  shared:\n    type: local:network:VirtualNetwork\n    get:\n      id: \${net.id}\n`);
    expect(thrown(() => plan(p))).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { construct: 'get.id', path: 'resources.shared.get.id' } });
  });

  it('when a get has properties, then IAC.INVALID_PROJECT', () => {
    expect(thrown(() => program(`  shared:\n    type: local:network:VirtualNetwork\n    properties: { a: 1 }\n    get:\n      id: x\n`))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'resources.shared.properties' } });
  });
});

describe('emulated providers in plans', () => {
  it('when a random resource is created, then its outputs are computed values; one of an output no provider here computes fails naming resource, output and type', () => {
    const p = program(`  pw:\n    type: random:RandomPassword\n    properties:\n      length: 16\n  db:\n    type: local:sql:Database\n    properties:\n      password: \${pw.result}\n`);
    expect(plan(p).steps[1]?.inputs).toEqual({ password: { 'fn::computed': '${pw.result}' } });
    const queue = program(`  queue:\n    type: aws:mq:Broker\n  site:\n    type: local:web:Site\n    properties:\n      origin: \${queue.arn}\n`);
    expect(thrown(() => plan(queue))).toMatchObject({ code: 'IAC.UNKNOWN_OUTPUT', details: { resource: 'queue', output: 'arn', type: 'aws:mq:Broker', path: 'resources.site.properties.origin' } });
    // A member the provider fills in under an input object and the emulation does not (a ConfigMap's metadata.resourceVersion).
    const configMap = program(`  config:\n    type: kubernetes:core/v1:ConfigMap\n    properties:\n      metadata: { namespace: web }\n  app:\n    type: local:web:Site\n    properties:\n      configName: \${config.metadata.resourceVersion}\n`);
    expect(thrown(() => plan(configMap))).toMatchObject({ code: 'IAC.UNKNOWN_OUTPUT', details: { resource: 'config', output: 'metadata.resourceVersion', type: 'kubernetes:core/v1:ConfigMap', path: 'resources.app.properties.configName' } });
    const bcrypt = program(`  pw:\n    type: random:RandomPassword\n    properties:\n      length: 16\n  db:\n    type: local:sql:Database\n    properties:\n      hash: \${pw.bcryptHash}\n`);
    expect(thrown(() => plan(bcrypt)).message).toMatch(/does not emulate random:index:RandomPassword's bcryptHash/);
  });

  it('when keepers of a random resource change, then it is replaced (every input of random resources replaces)', () => {
    const p = (keeper: string) => program(`  suffix:\n    type: random:RandomId\n    properties:\n      byteLength: 4\n      keepers: { image: ${keeper} }\n`);
    const state = appliedFrom(plan(p('v1')));
    expect(ops(plan(p('v1'), state))).toEqual(['same suffix']);
    expect(plan(p('v2'), state).steps[0]).toMatchObject({ op: 'replace', changedPaths: ['keepers.image'] });
  });

  it('when a program uses command:local:Command, then IAC.UNSUPPORTED: it would run code on the host', () => {
    expect(thrown(() => plan(program(`  run:\n    type: command:local:Command\n    properties:\n      create: rm -rf /\n`)))).toMatchObject({
      code: 'IAC.UNSUPPORTED',
      details: { construct: 'command:local:Command', path: 'resources.run.type' },
    });
  });
});
