import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { thrown } from '../support/refusal';
import { ASSET_SIG, ARCHIVE_SIG, SECRET_MASK, SIG_KEY, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { loadProgram, ProgramEvaluator, projectGraph, type EvaluatorContext, type LoadedProgram, type ProjectFiles } from '../../local/engine/pulumi-yaml';

/** The Pulumi YAML language as the local engine reads it: program discovery, key spelling, config, expressions. */

const HEAD = 'name: shop\nruntime: yaml\n';

/** Every resource evaluated with ids `<name>-id`, as if all existed already; `outputs` holds the stack outputs. */
function evaluateAll(program: LoadedProgram, context: EvaluatorContext = program.context): Record<string, JsonObject> {
  const evaluated: Record<string, JsonObject> = {};
  const evaluator = new ProgramEvaluator(program.project, program.config, (name) => ({ ...evaluated[name], id: `${name}-id`, urn: `urn:${name}` }), context);
  for (const name of projectGraph(program.project, program.config).order) {
    evaluated[name] = evaluator.resourceInputs(program.project.resources.find((r) => r.name === name)!);
  }
  return { ...evaluated, outputs: evaluator.outputs() };
}

/** The stack outputs of a program written as `outputs:` lines under `body`. */
function outputsOf(body: string, files: ProjectFiles = {}, context?: EvaluatorContext): JsonObject {
  const program = loadProgram({ 'Pulumi.yaml': `${HEAD}${body}`, ...files }, 'dev');
  return evaluateAll(program, context ?? program.context).outputs as JsonObject;
}

describe('Pulumi YAML programs: where the program is', () => {
  const resource = (name: string) => `resources:\n  ${name}:\n    type: local:a:B\n    properties: { n: 1 }\n`;

  it('when the folder has a Main.yaml, then the program is read from it, with the project config of Pulumi.yaml', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}config:\n  size: 2\n`, 'Main.yaml': `${resource('fromMain')}outputs:\n  size: \${size}\n` }, 'dev');
    expect(program.project.resources.map((r) => r.name)).toEqual(['fromMain']);
    expect(evaluateAll(program).outputs).toEqual({ size: 2 });
  });

  it('when the folder has a Main.json and a Main.yaml, then Main.json is the program (the language host looks for it first)', () => {
    const program = loadProgram({ 'Pulumi.yaml': HEAD, 'Main.json': '{"resources": {"fromJson": {"type": "local:a:B"}}}', 'Main.yaml': resource('fromYaml') }, 'dev');
    expect(program.project.resources.map((r) => r.name)).toEqual(['fromJson']);
  });

  it('when main names a folder, then its Main.yaml is the program and the file functions start there', () => {
    const program = loadProgram(
      { 'Pulumi.yaml': `${HEAD}main: src/\n`, 'src/Main.yaml': 'outputs:\n  text: { fn::readFile: ./site/index.html }\n  cwd: ${pulumi.cwd}\n', 'src/site/index.html': '<h1>hi</h1>' },
      'dev',
    );
    expect(program.project.programFolder).toBe('src/');
    expect(evaluateAll(program).outputs).toEqual({ text: '<h1>hi</h1>', cwd: '/workspace/src' });
  });

  it('when main names a folder without a program, then INVALID_PROJECT names the file it looked for', () => {
    const error = thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}main: app\n`, 'Main.yaml': resource('x') }, 'dev'));
    expect(error).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { file: 'app/Main.json' } });
  });

  it('when the project file is Pulumi.yml, then its program is a Main file: the language host reads no program from Pulumi.yml', () => {
    const files = { 'Pulumi.yml': `${HEAD}${resource('inYml')}` };
    expect(thrown(() => loadProgram(files, 'dev'))).toMatchObject({ code: 'IAC.INVALID_PROJECT', message: expect.stringContaining('does not read a program from Pulumi.yml') });
    expect(loadProgram({ ...files, 'Pulumi.yml': HEAD, 'Main.yaml': resource('inMain') }, 'dev').project.resources.map((r) => r.name)).toEqual(['inMain']);
  });

  it('when Pulumi.yaml declares resources but the program is Main.yaml, then INVALID_PROJECT: Pulumi YAML would ignore them', () => {
    const error = thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}${resource('lost')}`, 'Main.yaml': resource('kept') }, 'dev'));
    expect(error).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'resources', file: 'Pulumi.yaml', line: 3 } });
  });

  it('when the program is made by a compiler (runtime options), then UNSUPPORTED: Pulumi.yaml\'s own program is not the program', () => {
    const error = thrown(() => loadProgram({ 'Pulumi.yaml': 'name: cue\nruntime:\n  name: yaml\n  options:\n    compiler: cue export\n' }, 'dev'));
    expect(error).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { construct: 'runtime option compiler', file: 'Pulumi.yaml', line: 5 } });
  });

  it('when an error is in Main.yaml, then it names Main.yaml and the line', () => {
    const error = thrown(() => loadProgram({ 'Pulumi.yaml': HEAD, 'Main.yaml': 'variables:\n  a: 1\n  b:\n    fn::nope: 1\n' }, 'dev'));
    expect(error).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { construct: 'fn::nope', file: 'Main.yaml', line: 4, path: 'variables.b["fn::nope"]' } });
    expect(error.message).toBe('Main.yaml:4: variables.b["fn::nope"]: fn::nope is not supported by the local engine');
  });

  it('when a resource\'s properties are one expression, then UNSUPPORTED naming it and its line, not an invalid program', () => {
    const error = thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}variables:\n  inputs: { a: 1 }\nresources:\n  r:\n    type: local:a:B\n    properties: \${inputs}\n` }, 'dev'));
    expect(error).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { construct: 'properties given as one expression', file: 'Pulumi.yaml', line: 8 } });
  });
});

describe('Pulumi YAML programs: key spelling', () => {
  it('when sections, resource fields and functions are written in another case, then they are read as Pulumi YAML reads them', () => {
    const program = loadProgram(
      {
        'Pulumi.yaml': `${HEAD}Configuration:\n  size:\n    Type: Integer\n    Default: 2\nVariables:\n  joined:\n    Fn::Join: ["-", [a, b]]\nResources:\n  app:\n    Type: local:a:B\n    Properties:\n      size: \${size}\n      name: \${joined}\nOutputs:\n  name: \${app.name}\n`,
      },
      'dev',
    );
    expect(program.config.get('shop:size')).toBe(2);
    expect(evaluateAll(program)).toMatchObject({ app: { size: 2, name: 'a-b' }, outputs: { name: 'a-b' } });
  });

  it('when config and configuration both declare a key, then config wins', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}config:\n  size: 3\nconfiguration:\n  size: 2\n  other: x\n` }, 'dev');
    expect(Object.fromEntries(program.config)).toEqual({ 'shop:size': 3, 'shop:other': 'x' });
  });

  it('when one key is written in two spellings, then INVALID_PROJECT', () => {
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}resources: {}\nResources: {}\n` }, 'dev'))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'Resources' } });
  });
});

describe('Pulumi YAML programs: config as Pulumi passes it', () => {
  const declared = `config:
  count: { type: Integer }
  ratio: { type: number }
  on: { type: Boolean }
  names: { type: List<String> }
  tags: { type: object }
  label: { type: string }
`;

  it('when typed config is given as text, as pulumi config set writes it, then each value is converted to its type', () => {
    const stack = 'config:\n  count: "3"\n  ratio: "0.5"\n  on: "true"\n  names: \'["a","b"]\'\n  tags: \'{"team":"core"}\'\n  label: 42\n';
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}${declared}`, 'Pulumi.dev.yaml': stack }, 'dev');
    expect(Object.fromEntries(program.config)).toEqual({ 'shop:count': 3, 'shop:ratio': 0.5, 'shop:on': true, 'shop:names': ['a', 'b'], 'shop:tags': { team: 'core' }, 'shop:label': '42' });
  });

  it('when a list has elements of another type than declared, then INVALID_CONFIG names List<T>', () => {
    const stack = 'config:\n  count: 1\n  ratio: 1\n  on: false\n  names: [1, 2]\n  tags: {}\n  label: x\n';
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}${declared}`, 'Pulumi.dev.yaml': stack }, 'dev'))).toMatchObject({
      code: 'IAC.INVALID_CONFIG',
      details: { key: 'shop:names', expected: 'List<string>' },
    });
  });

  it('when an undeclared key is text, then it is read as the language host reads it: numbers, booleans and JSON, but 0-led text stays text', () => {
    const program = loadProgram({ 'Pulumi.yaml': HEAD, 'Pulumi.dev.yaml': 'config:\n  a: "3"\n  b: "true"\n  c: "01234"\n  d: "[1]"\n  e: westeurope\n' }, 'dev');
    expect(Object.fromEntries(program.config)).toEqual({ 'shop:a': 3, 'shop:b': true, 'shop:c': '01234', 'shop:d': [1], 'shop:e': 'westeurope' });
  });

  it('when a declaration reads another key (name:), then the program refers to it by its own key, and keys may hold any character', () => {
    const program = loadProgram(
      { 'Pulumi.yaml': `${HEAD}config:\n  short:\n    type: bool\n    name: "cC-Charlie.😃⁉️"\noutputs:\n  v: \${short}\n`, 'Pulumi.dev.yaml': 'config:\n  "shop:cC-Charlie.😃⁉️": "true"\n' },
      'dev',
    );
    expect(evaluateAll(program).outputs).toEqual({ v: true });
  });

  it('when a stack file\'s value does not have the declared type, then INVALID_CONFIG names the stack file and its line', () => {
    const files = { 'Pulumi.yaml': `${HEAD}config:\n  count: { type: integer }\n`, 'Pulumi.dev.yaml': 'config:\n  other: 1\n  shop:count: three\n' };
    expect(thrown(() => loadProgram(files, 'dev'))).toMatchObject({ code: 'IAC.INVALID_CONFIG', details: { file: 'Pulumi.dev.yaml', line: 3, path: 'config["shop:count"]' } });
    expect(thrown(() => loadProgram(files, 'dev', { count: 'x' }))).toMatchObject({ code: 'IAC.INVALID_CONFIG', details: { path: 'overrides.count' } });
  });

  it('when a declared key has no value, then MISSING_CONFIG names the line of its declaration', () => {
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}config:\n  a: { type: string }\n` }, 'dev'))).toMatchObject({ code: 'IAC.MISSING_CONFIG', details: { key: 'shop:a', line: 4 } });
  });

  it('when a declared type is not one Pulumi YAML knows, then INVALID_PROJECT names it', () => {
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}config:\n  a: { type: map }\n` }, 'dev'))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'config.a.type', line: 4 } });
  });
});

describe('Pulumi YAML programs: interpolation', () => {
  it('when a map key holds an interpolation, then the key is interpolated', () => {
    expect(outputsOf('config:\n  env: prod\noutputs:\n  tags:\n    "team-${env}": core\n    "$${literal}": x\n')).toEqual({ tags: { 'team-prod': 'core', '${literal}': 'x' } });
  });

  it('when a resource\'s property name holds ${...}, then it stays a name, as Pulumi YAML reads property names', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}config:\n  env: prod\nresources:\n  app:\n    type: local:a:App\n    properties:\n      "\${env}": 1\n      tags: { "\${env}": 2 }\n` }, 'dev');
    expect(evaluateAll(program).app).toEqual({ '${env}': 1, tags: { prod: 2 } });
  });

  it('when a resource declaration is malformed, then its error names the file and line too', () => {
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': HEAD, 'Main.yaml': 'resources:\n  a:\n    type: local:a:B\n  b:\n    type: bucket\n' }, 'dev'))).toMatchObject({
      code: 'IAC.INVALID_PROJECT',
      details: { path: 'resources.b.type', file: 'Main.yaml', line: 5 },
    });
  });

  it('when a whole resource is used as a value, then it is the resource\'s id, alone or in text', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}resources:\n  net:\n    type: local:a:Net\n  app:\n    type: local:a:App\n    properties:\n      network: \${net}\n      text: id=\${net}\n` }, 'dev');
    expect(evaluateAll(program).app).toEqual({ network: 'net-id', text: 'id=net-id' });
  });

  it('when an access uses indexes and quoted keys, then it reads as Pulumi YAML parses it', () => {
    const body = 'variables:\n  o:\n    list: [{ x: 1 }, { x: 2, "a.b": { "q\\"k": ok } }]\noutputs:\n  i: ${o.list[1].x}\n  q: ${o.list[1]["a.b"]["q\\"k"]}\n  dollars: "$$5 and $${o}"\n';
    expect(outputsOf(body)).toEqual({ i: 2, q: 'ok', dollars: '$5 and ${o}' });
  });

  it('when pulumi.* is read, then it gives the stack, project, organization (the tenant, or organization) and the folders', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}outputs:\n  all: \${pulumi}\n  text: \${pulumi.organization}/\${pulumi.project}/\${pulumi.stack}\n` }, 'dev', {}, { organization: 'acme' });
    expect(evaluateAll(program).outputs).toEqual({
      all: { stack: 'dev', project: 'shop', organization: 'acme', cwd: '/workspace', rootDirectory: '/workspace' },
      text: 'acme/shop/dev',
    });
    expect(loadProgram({ 'Pulumi.yaml': HEAD }, 'dev').context.organization).toBe('organization');
  });

  it('when an evaluator has no stack context, then pulumi.stack fails the plan instead of guessing', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}outputs:\n  s: \${pulumi.stack}\n  p: \${pulumi.project}\n` }, 'dev');
    const evaluator = new ProgramEvaluator(program.project, program.config, () => ({}));
    expect(thrown(() => evaluator.outputs())).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { path: 'outputs.s', line: 4 } });
  });

  it('when a resource or variable is named pulumi, then INVALID_PROJECT: the name is reserved', () => {
    expect(thrown(() => loadProgram({ 'Pulumi.yaml': `${HEAD}variables:\n  pulumi: 1\n` }, 'dev'))).toMatchObject({ code: 'IAC.INVALID_PROJECT', details: { path: 'variables.pulumi' } });
  });
});

describe('Pulumi YAML programs: built-in functions', () => {
  it('when the text functions are called, then they compute what Pulumi YAML computes', () => {
    const body = `variables:
  parts: { fn::split: [",", "a,b,c"] }
outputs:
  joined: { fn::join: ["-", "\${parts}"] }
  nullDelimiter: { fn::join: [null, [x, y]] }
  second: { fn::select: [1, "\${parts}"] }
  json: { fn::toJSON: { b: [1, "<&>"], a: true } }
  b64: { fn::toBase64: héllo }
  back: { fn::fromBase64: aMOpbGxv }
  sha1: { fn::sha1: abc }
  lenList: { fn::length: "\${parts}" }
  lenText: { fn::length: "👍🏽x" }
  lenMap: { fn::length: { a: 1, b: 2 } }
  none: { fn::singleOrNone: [] }
  one: { fn::singleOrNone: [z] }
  name: { fn::pulumiResourceName: "\${app}" }
  type: { fn::pulumiResourceType: "\${app}" }
resources:
  app:
    type: local:web:App
`;
    expect(outputsOf(body)).toEqual({
      joined: 'a-b-c',
      nullDelimiter: 'xy',
      second: 'b',
      json: '{"a":true,"b":[1,"\\u003c\\u0026\\u003e"]}',
      b64: 'aMOpbGxv',
      back: 'héllo',
      sha1: 'a9993e364706816aba3e25717850c26c9cd0d89d',
      lenList: 3,
      lenText: 2,
      lenMap: 2,
      none: null,
      one: 'z',
      name: 'app',
      type: 'local:web:App',
    });
  });

  it('when the file functions and assets are called, then they read the project files and give Pulumi\'s asset shapes', () => {
    const files = { 'site/index.html': '<p>x</p>', 'site/app.js': '1' };
    const body = `outputs:
  text: { fn::readFile: site/index.html }
  b64: { fn::filebase64: site/app.js }
  sha: { fn::filebase64sha256: site/app.js }
  file: { fn::fileAsset: site/index.html }
  str: { fn::stringAsset: hello }
  remote: { fn::remoteAsset: "https://example.com/a.txt" }
  folder: { fn::fileArchive: ./site }
  archive:
    fn::assetArchive:
      b.txt: { fn::stringAsset: b }
      a: { fn::fileArchive: site }
`;
    expect(outputsOf(body, files)).toEqual({
      text: '<p>x</p>',
      b64: 'MQ==',
      sha: createHash('sha256').update('1').digest('base64'),
      file: { [SIG_KEY]: ASSET_SIG, path: 'site/index.html' },
      str: { [SIG_KEY]: ASSET_SIG, text: 'hello' },
      remote: { [SIG_KEY]: ASSET_SIG, uri: 'https://example.com/a.txt' },
      folder: { [SIG_KEY]: ARCHIVE_SIG, path: './site' },
      archive: { [SIG_KEY]: ARCHIVE_SIG, assets: { a: { [SIG_KEY]: ARCHIVE_SIG, path: 'site' }, 'b.txt': { [SIG_KEY]: ASSET_SIG, text: 'b' } } },
    });
  });

  it.each([
    ['a file outside the project folder', 'fn::readFile: ../secrets.txt'],
    ['an absolute path', 'fn::readFile: /etc/passwd'],
    ['a missing file asset', 'fn::fileAsset: nope.txt'],
  ])('when a file function names %s, then INVALID_FUNCTION at its line', (_what, call) => {
    expect(thrown(() => outputsOf(`outputs:\n  x:\n    ${call}\n`))).toMatchObject({ code: 'IAC.INVALID_FUNCTION', details: { line: 5 } });
  });

  it('when a function is given an argument of the wrong type, then INVALID_FUNCTION names the function', () => {
    expect(thrown(() => outputsOf('outputs:\n  x: { fn::select: [5, [a]] }\n'))).toMatchObject({ code: 'IAC.INVALID_FUNCTION', details: { function: 'fn::select', path: 'outputs.x["fn::select"]' } });
    expect(thrown(() => outputsOf('outputs:\n  x: { fn::fromBase64: "not base64!" }\n'))).toMatchObject({ code: 'IAC.INVALID_FUNCTION' });
  });

  it('when a function\'s argument is unknown at plan, then its result is unknown too', () => {
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}resources:\n  net:\n    type: local:a:Net\noutputs:\n  joined: { fn::join: ["/", ["\${net.id}", x]] }\n  len: { fn::length: "\${net.id}" }\n` }, 'dev');
    const evaluator = new ProgramEvaluator(program.project, program.config, () => ({ id: { 'fn::computed': '${net.id}' } }), program.context);
    const outputs = evaluator.outputs();
    expect(Object.keys(outputs.joined as JsonObject)).toEqual(['fn::computed']);
    expect(Object.keys(outputs.len as JsonObject)).toEqual(['fn::computed']);
  });

  it('when a value is marked fn::secret, then resources get the value and the stack outputs show it as secret', () => {
    const program = loadProgram(
      { 'Pulumi.yaml': `${HEAD}variables:\n  pw: { fn::secret: hunter2 }\nresources:\n  db:\n    type: local:a:Db\n    properties:\n      password: \${pw}\n      conn: "pw=\${pw}"\noutputs:\n  pw: \${pw}\n  text: "pw=\${pw}"\n  len: { fn::length: "\${pw}" }\n  open: { fn::unsecret: "\${pw}" }\n` },
      'dev',
    );
    const evaluated = evaluateAll(program);
    expect(evaluated.db).toEqual({ password: 'hunter2', conn: 'pw=hunter2' });
    expect(evaluated.outputs).toEqual({ pw: SECRET_MASK, text: SECRET_MASK, len: SECRET_MASK, open: 'hunter2' });
  });

  it('when fn::invoke (or its short form) is called and no emulation answers, then UNSUPPORTED names the token, file and line', () => {
    const body = 'variables:\n  ami:\n    fn::invoke:\n      function: aws:ec2:getAmi\n      arguments: { owners: [amazon] }\n      return: id\n';
    const error = thrown(() => outputsOf(`${body}outputs:\n  ami: \${ami}\n`));
    expect(error).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { construct: 'fn::invoke of aws:ec2:getAmi', function: 'aws:ec2:getAmi', file: 'Pulumi.yaml', line: 5 } });
    expect(thrown(() => outputsOf('outputs:\n  ns:\n    fn::oci:ObjectStorage/getNamespace:getNamespace: {}\n'))).toMatchObject({ details: { function: 'oci:ObjectStorage/getNamespace:getNamespace' } });
  });

  it('when an emulation answers an invoke, then its result (or the field return names) is the value, with the arguments evaluated', () => {
    const calls: [string, JsonValue][] = [];
    const invoke = (token: string, args: JsonObject) => {
      calls.push([token, args]);
      return { id: 'ami-123', name: 'x' };
    };
    const body = 'config:\n  owner: amazon\noutputs:\n  id:\n    fn::invoke:\n      Function: aws:getAmi\n      Arguments: { owners: ["${owner}"] }\n      Return: id\n  all:\n    fn::aws:getAmi: { owners: [me] }\n';
    const program = loadProgram({ 'Pulumi.yaml': `${HEAD}${body}` }, 'dev');
    expect(evaluateAll(program, { ...program.context, invoke }).outputs).toEqual({ id: 'ami-123', all: { id: 'ami-123', name: 'x' } });
    expect(calls).toEqual([
      ['aws:index:getAmi', { owners: ['amazon'] }],
      ['aws:index:getAmi', { owners: ['me'] }],
    ]);
  });

  it.each([['fn::abs: -1'], ['fn::floor: 1.5'], ['fn::stringLen: abc'], ['fn::method: {}'], ['fn::stackReference: [a/b/c, out]']])(
    'when the program calls %s, which the local engine does not evaluate, then UNSUPPORTED names it',
    (call) => {
      const error = thrown(() => outputsOf(`outputs:\n  x:\n    ${call}\n`));
      expect(error).toMatchObject({ code: 'IAC.UNSUPPORTED', details: { file: 'Pulumi.yaml', line: 5 } });
      expect(error.details.construct).toBe(call.split(':').slice(0, 3).join(':'));
    },
  );
});
