import { describe, expect, it } from 'vitest';
import { DEFAULT_PACKAGES } from '../../shared/platform/config/setting-schemas';
import { parseConfig } from '../../shared/platform/config/config';
import { settings } from '../../shared/platform/config/settings';
import { PackageErrors, packageNotAllowed, packageProblems, type PackagePolicy } from '../../shared/provisioning/package-policy';
import { programFiles, type PolicyProjectFiles } from '../../shared/provisioning/project-policy';

/** The package policy on Pulumi YAML programs as the language host reads them. */

const DEFAULTS: PackagePolicy = { packages: settings.RuntimeCloud__Provisioning__Packages.parse(DEFAULT_PACKAGES) };
const BASE = 'name: demo\nruntime: yaml\n';

/** A project whose Pulumi.yaml is BASE plus `program`, with other files of the folder. */
const project = (program: string, files: Record<string, string> = {}): PolicyProjectFiles => ({
  project: `${BASE}${program}`,
  stacks: {},
  files: { 'Pulumi.yaml': `${BASE}${program}`, ...files },
});

/** The problems as `file:line type`. */
const refusedOf = (files: PolicyProjectFiles, policy = DEFAULTS) => packageProblems(programFiles(files), policy).map((p) => `${p.file}:${p.line} ${p.type}`);

describe('packageProblems: which packages a program names', () => {
  it('when a program uses only the default packages, at their versions or none, then it has no problem', () => {
    // Arrange: resources, a get, an explicit provider, invokes in both forms, options.providers as a map.
    const program = [
      'resources:',
      '  sa:',
      '    type: azure-native:storage:StorageAccount',
      '    options:',
      '      version: 3.28.0',
      '      providers:',
      '        azure-native: ${azure}',
      '  azure:',
      '    type: pulumi:providers:azure-native',
      '  pod:',
      '    type: kubernetes:core/v1:Pod',
      '  pw:',
      '    type: random:RandomPassword',
      '  existing:',
      '    type: tls:index:PrivateKey',
      '    get:',
      '      id: abc',
      '  stash:',
      '    type: pulumi:index:Stash',
      '  other:',
      '    type: pulumi:pulumi:StackReference',
      'variables:',
      '  keys:',
      '    fn::invoke:',
      '      function: azure-native:storage:listStorageAccountKeys',
      '      options:',
      '        provider: ${azure}',
      '        version: 3.28.0',
      '  client:',
      '    fn::azuread:getClientConfig: {}',
      '',
    ].join('\n');

    // Act / Assert
    expect(refusedOf(project(program))).toEqual([]);
  });

  it.each([
    ['a command resource', 'resources:\n  run:\n    type: command:local:Command\n', 'Pulumi.yaml:5 command:local:Command'],
    ['an invoke of command:local:run', 'variables:\n  out:\n    fn::invoke:\n      function: command:local:run\n', 'Pulumi.yaml:6 command:local:run'],
    ['the short invoke form of command', 'outputs:\n  out:\n    fn::command:local:run:\n      command: id\n', 'Pulumi.yaml:5 command:local:run'],
    ['an explicit command provider', 'resources:\n  p:\n    type: pulumi:providers:command\n', 'Pulumi.yaml:5 pulumi:providers:command'],
    ['an explicit aws provider', 'resources:\n  p:\n    type: pulumi:providers:aws\n', 'Pulumi.yaml:5 pulumi:providers:aws'],
    ['a bucket of aws (short form)', 'resources:\n  b:\n    type: aws:s3:Bucket\n', 'Pulumi.yaml:5 aws:s3:Bucket'],
    ['a two-part token of an unlisted package', 'resources:\n  b:\n    type: std:Thing\n', 'Pulumi.yaml:5 std:Thing'],
    ['a get of an unlisted package', 'resources:\n  b:\n    type: aws:s3:Bucket\n    get:\n      id: my-bucket\n', 'Pulumi.yaml:5 aws:s3:Bucket'],
    ['an invoke inside a resource property', 'resources:\n  b:\n    type: random:RandomString\n    properties:\n      length:\n        fn::invoke:\n          function: aws:index:getRegion\n          return: name\n', 'Pulumi.yaml:9 aws:index:getRegion'],
    ['a case variant of a listed name', 'resources:\n  b:\n    type: Random:index:RandomPet\n', 'Pulumi.yaml:5 Random:index:RandomPet'],
    ['a pulumi builtin the host does not know', 'resources:\n  b:\n    type: pulumi:pulumi:Something\n', 'Pulumi.yaml:5 pulumi:pulumi:Something'],
    ['a pulumi invoke', 'variables:\n  r:\n    fn::invoke:\n      function: pulumi:pulumi:getResource\n', 'Pulumi.yaml:6 pulumi:pulumi:getResource'],
    ['a type that is no token, of a listed package', 'resources:\n  b:\n    type: random:a:b:Pet\n', 'Pulumi.yaml:5 random:a:b:Pet'],
    ['a type given as an expression', 'resources:\n  b:\n    type: ${kind}\n', 'Pulumi.yaml:5 ${kind}'],
    ['a type that is not text', 'resources:\n  b:\n    type: 42\n', 'Pulumi.yaml:5 42'],
    ['an invoke without a function', 'variables:\n  r:\n    fn::invoke:\n      arguments: {}\n', 'Pulumi.yaml:5 "(none)"'],
    ['an invoke function given as an expression', 'variables:\n  r:\n    fn::invoke:\n      function: ${fn}\n', 'Pulumi.yaml:6 ${fn}'],
    ['a providers map naming an unlisted package', 'resources:\n  b:\n    type: random:RandomPet\n    options:\n      providers:\n        aws: ${p}\n', 'Pulumi.yaml:8 pulumi:providers:aws'],
  ])('when the program has %s, then it is refused naming the type, file and line', (_case, program, expected) => {
    // Act / Assert
    expect(refusedOf(project(program))).toEqual([expected]);
  });

  it('when a policy lists command anyway, then a command resource is still refused', () => {
    // Arrange: a policy made without the config's check.
    const policy: PackagePolicy = { packages: { ...DEFAULTS.packages, command: '*' } };

    // Act / Assert
    expect(refusedOf(project('resources:\n  run:\n    type: command:local:Command\n'), policy)).toEqual(['Pulumi.yaml:5 command:local:Command']);
  });

  it('when sections and fields are spelled in another case, then they are read as the language host reads them', () => {
    // Arrange
    const program = 'Resources:\n  run:\n    Type: command:local:Command\nVariables:\n  v:\n    Fn::Invoke:\n      Function: aws:index:getRegion\n      Options:\n        Version: 9.9.9\n';

    // Act / Assert
    expect(refusedOf(project(program))).toEqual(['Pulumi.yaml:5 command:local:Command', 'Pulumi.yaml:9 aws:index:getRegion']);
  });

  it('when the program is in a Main.yaml, or in the folder main names, then the type is named in that file at its line', () => {
    // Arrange
    const main = 'description: x\nresources:\n  run:\n    type: command:local:Command\n';

    // Act / Assert
    expect(refusedOf(project('', { 'Main.yaml': main }))).toEqual(['Main.yaml:4 command:local:Command']);
    expect(refusedOf(project('main: src/\n', { 'src/Main.yaml': main }))).toEqual(['src/Main.yaml:4 command:local:Command']);
    expect(refusedOf(project('main: app\n', { 'app/Pulumi.yaml': `name: x\n${main}` }))).toEqual(['app/Pulumi.yaml:5 command:local:Command']);
    expect(refusedOf(project('', { 'Main.json': JSON.stringify({ resources: { run: { type: 'command:local:Command' } } }, null, 2) }))).toEqual(['Main.json:4 command:local:Command']);
  });
});

describe('packageProblems: versions and plugin sources', () => {
  it.each([
    ['a resource', 'resources:\n  pw:\n    type: random:RandomPassword\n    options:\n      version: 4.0.0\n', 'Pulumi.yaml:7 random:RandomPassword'],
    ['an explicit provider', 'resources:\n  p:\n    type: pulumi:providers:kubernetes\n    options:\n      version: 4.35.0\n', 'Pulumi.yaml:7 pulumi:providers:kubernetes'],
    ['an invoke', 'variables:\n  k:\n    fn::invoke:\n      function: azure-native:storage:listStorageAccountKeys\n      options:\n        version: 2.90.0\n', 'Pulumi.yaml:8 azure-native:storage:listStorageAccountKeys'],
    ['a version that is no version', 'resources:\n  pw:\n    type: random:RandomPassword\n    options:\n      version: latest\n', 'Pulumi.yaml:7 random:RandomPassword'],
  ])('when %s asks for a version outside its package\'s range, then it is refused at the version\'s line', (_case, program, expected) => {
    // Act / Assert
    expect(refusedOf(project(program))).toEqual([expected]);
  });

  it('when the range allows a version, then a program may ask for it', () => {
    // Arrange
    const policy: PackagePolicy = { packages: { random: '>=4.20.0 <5.0.0' } };
    const program = (version: string) => project(`resources:\n  pw:\n    type: random:RandomPassword\n    options:\n      version: ${version}\n`);

    // Act / Assert
    expect(refusedOf(program('4.21.0'), policy)).toEqual([]);
    expect(refusedOf(program('5.0.0'), policy)).toEqual(['Pulumi.yaml:7 random:RandomPassword']);
  });

  it.each([
    ['a resource', 'resources:\n  p:\n    type: random:RandomPet\n    options:\n      pluginDownloadURL: https://evil.example/plugins\n', 'Pulumi.yaml:7 random:RandomPet'],
    ['an explicit provider', 'resources:\n  p:\n    type: pulumi:providers:kubernetes\n    Options:\n      PluginDownloadURL: github://api.github.com/evil\n', 'Pulumi.yaml:7 pulumi:providers:kubernetes'],
    ['an invoke', 'variables:\n  v:\n    fn::invoke:\n      function: random:index:getThing\n      options:\n        pluginDownloadURL: github://evil\n', 'Pulumi.yaml:8 random:index:getThing'],
  ])('when %s names a pluginDownloadURL, then it is refused even for a listed package', (_case, program, expected) => {
    // Act
    const problems = packageProblems(programFiles(project(program)), DEFAULTS);

    // Assert
    expect(problems.map((p) => `${p.file}:${p.line} ${p.type}`)).toEqual([expected]);
    expect(problems[0]?.reason).toMatch(/downloads a provider plugin/);
  });

  it('when problems are found, then the error is PROVISIONING.PACKAGE_NOT_ALLOWED (forbidden) listing type, file, line and reason', () => {
    // Arrange
    const problems = packageProblems(programFiles(project('resources:\n  run:\n    type: command:local:Command\n')), DEFAULTS);

    // Act
    const error = packageNotAllowed(problems);

    // Assert
    expect(error.code).toBe(PackageErrors.notAllowed);
    expect(error.kind).toBe('forbidden');
    expect(error.message).toContain('Pulumi.yaml:5: command:local:Command');
    expect(error.details.packages).toEqual([{ type: 'command:local:Command', file: 'Pulumi.yaml', line: 5, reason: expect.stringMatching(/package command/) as unknown }]);
  });
});

describe('RuntimeCloud__Provisioning__Packages', () => {
  it('when it is not set, then the default packages are allowed, each at one version', () => {
    // Act
    const { packages } = parseConfig({}).provisioning;

    // Assert
    expect(Object.keys(packages)).toEqual(['azure-native', 'azuread', 'kubernetes', 'random', 'tls']);
  });

  it('when it names ranges, then each package keeps its range', () => {
    // Act / Assert
    expect(parseConfig({ RuntimeCloud__Provisioning__Packages: 'random@>=4.20.0 <5.0.0, aws@^6' }).provisioning.packages).toEqual({ random: '>=4.20.0 <5.0.0', aws: '^6' });
  });

  it.each([
    ['command, even with a range', 'random@4.21.2,command@1.0.0', /command is never allowed/],
    ['pulumi', 'pulumi@3.0.0', /pulumi is never allowed/],
    ['a package without a range', 'random', /name@range/],
    ['a range that is none', 'random@banana', /name@range/],
    ['a name with capitals', 'Random@4.21.2', /package name/],
    ['a package twice', 'random@4.21.2,random@4.21.0', /listed twice/],
  ])('when it names %s, then start-up fails naming the setting', (_case, value, message) => {
    // Act / Assert
    expect(() => parseConfig({ RuntimeCloud__Provisioning__Packages: value })).toThrow(message);
    expect(() => parseConfig({ RuntimeCloud__Provisioning__Packages: value })).toThrow(/RuntimeCloud__Provisioning__Packages/);
  });
});
