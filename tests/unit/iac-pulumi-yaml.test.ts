import { describe, expect, it } from 'vitest';
import { thrown } from '../support/refusal';
import type { JsonObject } from '../../shared/platform/iac/iac-values';
import { loadProgram, ProgramEvaluator, projectGraph, type LoadedProgram, type ProjectFiles } from '../../local/engine/pulumi-yaml';

function project(body: string, stackYaml?: string): ProjectFiles {
  return { 'Pulumi.yaml': `name: shop\nruntime: yaml\n${body}`, ...(stackYaml === undefined ? {} : { 'Pulumi.dev.yaml': stackYaml }) };
}

/** Evaluates every resource with ids `<name>-id`, as if all existed already. */
function evaluateAll(program: LoadedProgram): Record<string, JsonObject> {
  const evaluated: Record<string, JsonObject> = {};
  const evaluator = new ProgramEvaluator(program.project, program.config, (name) => ({ ...evaluated[name], id: `${name}-id` }));
  for (const name of projectGraph(program.project, program.config).order) {
    const declaration = program.project.resources.find((r) => r.name === name)!;
    evaluated[name] = evaluator.resourceInputs(declaration);
  }
  return { ...evaluated, outputs: evaluator.outputs() };
}

describe('Pulumi YAML projects: config', () => {
  const body = `
config:
  poolSize:
    type: integer
    default: 2
  region: westeurope
  tags:
    type: object
    default: { team: core }
  enabled:
    type: boolean
resources:
  pool:
    type: local:compute:WorkerPool
    properties:
      size: \${poolSize}
      region: \${shop:region}
      tags: \${tags}
      enabled: \${enabled}
      location: \${azure:location}
`;

  it('when the stack file sets plain and namespaced keys, then they override the declared defaults and overrides win over both', () => {
    const program = loadProgram(project(body, 'config:\n  shop:poolSize: 3\n  enabled: true\n  azure:location: local\n'), 'dev', { region: 'northeurope' });
    expect(Object.fromEntries(program.config)).toEqual({
      'shop:poolSize': 3,
      'shop:region': 'northeurope',
      'shop:tags': { team: 'core' },
      'shop:enabled': true,
      'azure:location': 'local',
    });
    expect(evaluateAll(program).pool).toEqual({ size: 3, region: 'northeurope', tags: { team: 'core' }, enabled: true, location: 'local' });
  });

  it('when the same files are loaded again (parsed once, then shared), then one load\'s overrides never reach another', () => {
    const files = project(body, 'config:\n  enabled: true\n  azure:location: local\n');
    const first = loadProgram(files, 'dev', { region: 'northeurope', tags: { team: 'ops' } });
    const second = loadProgram(files, 'dev');
    expect(second.project).toEqual(first.project);
    expect(second.config.get('shop:region')).toBe('westeurope');
    expect(second.config.get('shop:tags')).toEqual({ team: 'core' });
    expect(first.config.get('shop:tags')).toEqual({ team: 'ops' });
    // What is shared between loads is frozen: a caller that tried to change it would fail, not change the next run.
    expect(Object.isFrozen(second.project.resources[0]?.properties)).toBe(true);
  });

  it('when a declared key without a default has no value, then MISSING_CONFIG names the key', () => {
    const error = thrown(() => loadProgram(project(body, 'config:\n  azure:location: local\n'), 'dev'));
    expect(error).toMatchObject({ code: 'IAC.MISSING_CONFIG', details: { key: 'shop:enabled' } });
  });

  it('when a value does not have the declared type, then INVALID_CONFIG names the key and the type', () => {
    const error = thrown(() => loadProgram(project(body, 'config:\n  enabled: true\n  poolSize: "three"\n  azure:location: x\n'), 'dev'));
    expect(error).toMatchObject({ code: 'IAC.INVALID_CONFIG', details: { key: 'shop:poolSize', expected: 'integer' } });
  });

  it('when a secret key is given in the clear or encrypted, then INVALID_CONFIG; as a secretRef it is accepted', () => {
    const secret = 'config:\n  dbPassword:\n    type: string\n    secret: true\n';
    expect(thrown(() => loadProgram(project(secret, 'config:\n  dbPassword: hunter2\n'), 'dev'))).toMatchObject({ code: 'IAC.INVALID_CONFIG', details: { key: 'shop:dbPassword' } });
    expect(thrown(() => loadProgram(project(secret, 'config:\n  dbPassword:\n    secure: v1:abc\n'), 'dev'))).toMatchObject({ code: 'IAC.INVALID_CONFIG' });
    const program = loadProgram(project(secret, 'config:\n  dbPassword:\n    secretRef: kv://shop/db\n'), 'dev');
    expect(program.config.get('shop:dbPassword')).toEqual({ secretRef: 'kv://shop/db' });
  });
});

describe('Pulumi YAML projects: interpolation', () => {
  it('when a value is exactly one interpolation, then it keeps its type; inside text it is joined as text', () => {
    const program = loadProgram(
      project(`
config:
  size: 3
  on: true
variables:
  labels: { app: shop, tier: web }
  ports: [80, 443]
  name: shop-\${size}
resources:
  net:
    type: local:network:VirtualNetwork
    properties:
      cidr: 10.0.0.0/16
      subnets:
        - { name: a, range: 10.0.1.0/24 }
        - { name: b, range: 10.0.2.0/24 }
      settings: { dns: { primary: 10.0.0.2 } }
  app:
    type: local:web:App
    properties:
      size: \${size}
      on: \${on}
      labels: \${labels}
      ports: \${ports}
      name: \${name}
      text: size=\${size} on=\${on} net=\${net.id}
      subnet: \${net.subnets[1].range}
      dns: \${net.settings.dns.primary}
      escaped: $\${not.an.interpolation}
outputs:
  app: \${app.name}
  netId: \${net.id}
`),
      'dev',
    );
    const evaluated = evaluateAll(program);
    expect(evaluated.app).toEqual({
      size: 3,
      on: true,
      labels: { app: 'shop', tier: 'web' },
      ports: [80, 443],
      name: 'shop-3',
      text: 'size=3 on=true net=net-id',
      subnet: '10.0.2.0/24',
      dns: '10.0.0.2',
      escaped: '${not.an.interpolation}',
    });
    expect(evaluated.outputs).toEqual({ app: 'shop-3', netId: 'net-id' });
  });

  it('when a reference to a resource property does not exist, then UNKNOWN_REFERENCE names the path and the reference', () => {
    const program = loadProgram(
      project(`
resources:
  net:
    type: local:network:VirtualNetwork
    properties: { cidr: 10.0.0.0/16 }
  app:
    type: local:web:App
    properties:
      settings:
        dns: \${net.dns}
`),
      'dev',
    );
    expect(thrown(() => evaluateAll(program))).toMatchObject({
      code: 'IAC.UNKNOWN_REFERENCE',
      details: { path: 'resources.app.properties.settings.dns', reference: 'net.dns' },
    });
  });

  it('when an interpolation names nothing in the project, then UNKNOWN_REFERENCE at plan time, before any evaluation', () => {
    const program = loadProgram(project('resources:\n  app:\n    type: local:web:App\n    properties:\n      ports: [80, "${nope.port}"]\n'), 'dev');
    expect(thrown(() => projectGraph(program.project, program.config))).toMatchObject({
      code: 'IAC.UNKNOWN_REFERENCE',
      details: { path: 'resources.app.properties.ports[1]', reference: 'nope.port' },
    });
  });

  it('when dependsOn names a resource that does not exist, then UNKNOWN_REFERENCE names the option', () => {
    const program = loadProgram(project('resources:\n  app:\n    type: local:web:App\n    options:\n      dependsOn:\n        - ${db}\n'), 'dev');
    expect(thrown(() => projectGraph(program.project, program.config))).toMatchObject({
      code: 'IAC.UNKNOWN_REFERENCE',
      details: { path: 'resources.app.options.dependsOn[0]', reference: 'db' },
    });
  });

  it('when resources depend on each other through a variable, then PLAN_CYCLE names the whole cycle', () => {
    const program = loadProgram(
      project(`
variables:
  appName: \${app.name}
resources:
  db:
    type: local:sql:Database
    properties: { owner: "\${appName}" }
  app:
    type: local:web:App
    properties: { name: web }
    options:
      dependsOn:
        - \${db}
`),
      'dev',
    );
    const error = thrown(() => projectGraph(program.project, program.config));
    expect(error.code).toBe('IAC.PLAN_CYCLE');
    expect(error.details.cycle).toEqual(['variables.appName', 'resources.app', 'resources.db', 'variables.appName']);
  });

  it('when a secret reference is part of a longer string, then REFERENCE_IN_TEXT: the text would hold the secret', () => {
    const program = loadProgram(
      project('config:\n  pw:\n    type: string\n    secret: true\nresources:\n  db:\n    type: local:sql:Database\n    properties:\n      conn: "Password=${pw}"\n'),
      'dev',
      { pw: { secretRef: 'kv://db' } },
    );
    expect(thrown(() => evaluateAll(program))).toMatchObject({ code: 'IAC.REFERENCE_IN_TEXT', details: { path: 'resources.db.properties.conn', reference: 'pw' } });
  });

  it('when an object is embedded in text, then INVALID_INTERPOLATION', () => {
    const program = loadProgram(project('variables:\n  o: { a: 1 }\nresources:\n  x:\n    type: local:a:B\n    properties:\n      t: "v=${o}"\n'), 'dev');
    expect(thrown(() => evaluateAll(program))).toMatchObject({ code: 'IAC.INVALID_INTERPOLATION', details: { path: 'resources.x.properties.t' } });
  });

  it('when resources are ordered, then each comes after what it refers to or depends on, and ties keep declaration order', () => {
    const program = loadProgram(
      project(`
variables:
  netId: \${net.id}
resources:
  app:
    type: local:web:App
    properties: { db: "\${db.id}" }
  db:
    type: local:sql:Database
    properties: { network: "\${netId}" }
  logs:
    type: local:logs:Workspace
  net:
    type: local:network:VirtualNetwork
  alerts:
    type: local:logs:Alerts
    options:
      dependsOn:
        - \${app}
`),
      'dev',
    );
    const graph = projectGraph(program.project, program.config);
    expect(graph.order).toEqual(['logs', 'net', 'db', 'app', 'alerts']);
    expect(graph.dependencies.get('db')).toEqual(['net']);
  });
});

describe('Pulumi YAML projects: malformed documents', () => {
  it.each([
    ['invalid YAML', 'resources: [a,\n', 'Pulumi.yaml'],
    ['a duplicate key', 'resources:\n  a:\n    type: local:a:B\n  a:\n    type: local:a:B\n', 'Pulumi.yaml'],
    ['a resource without a type token', 'resources:\n  a:\n    type: Bucket\n', 'resources.a.type'],
    ['an unknown resource field', 'resources:\n  a:\n    type: local:a:B\n    gets: { id: x }\n', 'resources.a.gets'],
    ['an unknown option', 'resources:\n  a:\n    type: local:a:B\n    options:\n      deleteBeforeReplacing: true\n', 'resources.a.options.deleteBeforeReplacing'],
    ['a dependsOn entry that is not a reference', 'resources:\n  a:\n    type: local:a:B\n    options:\n      dependsOn: [b]\n', 'resources.a.options.dependsOn[0]'],
    ['a function beside other keys', 'variables:\n  v:\n    fn::join: ["", []]\n    other: 1\n', 'variables.v["fn::join"]'],
    ['a function with arguments of the wrong shape', 'variables:\n  v:\n    fn::select: [0]\n', 'variables.v["fn::select"]'],
    ['a malformed interpolation', 'resources:\n  a:\n    type: local:a:B\n    properties:\n      x: "${a.b"\n', 'resources.a.properties.x'],
    ['a malformed key interpolation', 'resources:\n  a:\n    type: local:a:B\n    properties:\n      x:\n        "${a[x]}": 1\n', 'resources.a.properties.x["${a[x]}"]'],
    ['a variable named like a resource', 'variables:\n  a: 1\nresources:\n  a:\n    type: local:a:B\n', 'variables.a'],
    ['an infinite number', 'variables:\n  v: .inf\n', 'variables.v'],
    ['an ignoreChanges index past 10,000', 'resources:\n  a:\n    type: local:a:B\n    options:\n      ignoreChanges: ["items[999999999].x"]\n', 'resources.a.options.ignoreChanges[0]'],
  ])('when the project has %s, then INVALID_PROJECT names where', (_what, body, path) => {
    const error = thrown(() => loadProgram(project(body), 'dev'));
    expect(error).toMatchObject({ code: 'IAC.INVALID_PROJECT', kind: 'validation', details: { path } });
  });

  it('when the runtime is not yaml or Pulumi.yaml is missing, then INVALID_PROJECT', () => {
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': 'name: shop\nruntime: nodejs\n' }, 'dev'))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'runtime' } });
    expect(thrown(() => loadProgram({ 'index.ts': '' }, 'dev'))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'Pulumi.yaml' } });
  });
});
