import { describe, expect, it } from 'vitest';
import { projectProblems, type PolicyProjectFiles } from '../../shared/provisioning/project-policy';

/** The program policy checks the files the local engine reads the program from, with the key spellings it reads. */

const YAML_ONLY = { runtimes: ['yaml'] };
const BASE = 'name: demo\nruntime: yaml\n';
const EVIL = 'variables:\n  page:\n    fn::remoteAsset: https://evil.example\n';

const keysOf = (files: PolicyProjectFiles) => projectProblems(files, YAML_ONLY).map((p) => `${p.file}:${p.key}`);
const withFiles = (project: string, files: Record<string, string>): PolicyProjectFiles => ({ project, stacks: {}, files: { 'Pulumi.yaml': project, ...files } });

describe('projectProblems: the program files', () => {
  it('when the program is a Main.json, then it is checked like a Main.yaml', () => {
    expect(keysOf(withFiles(BASE, { 'Main.json': JSON.stringify({ variables: { page: { 'fn::remoteAsset': 'https://evil.example' } } }) }))).toEqual([
      'Main.json:variables.page.fn::remoteAsset',
    ]);
  });

  it('when main names a folder whose program is its Pulumi.yaml, then that file is checked as the program', () => {
    expect(keysOf(withFiles(`${BASE}main: app\n`, { 'app/Pulumi.yaml': `name: x\n${EVIL}backend: s3://x\n` }))).toEqual([
      'app/Pulumi.yaml:variables.page.fn::remoteAsset',
      'app/Pulumi.yaml:backend',
    ]);
  });

  it('when a section is spelled in another case, then it is checked as that section, as the engine reads it', () => {
    expect(keysOf(withFiles(`${BASE}Resources:\n  p:\n    type: local:x:Y\n    Properties:\n      page:\n        Fn::RemoteAsset: https://evil.example\n`, {}))).toEqual([
      'Pulumi.yaml:Resources.p.Properties.page.Fn::RemoteAsset',
    ]);
    expect(keysOf(withFiles(BASE, { 'Main.yaml': `Variables:\n  f:\n    Fn::FileBase64: /etc/shadow\n` }))).toEqual(['Main.yaml:Variables.f.Fn::FileBase64']);
  });

  it('when a Main.yaml lies in a folder the program is not read from, then it is still checked', () => {
    expect(keysOf(withFiles(BASE, { 'other/Main.yaml': EVIL }))).toEqual(['other/Main.yaml:variables.page.fn::remoteAsset']);
  });

  it('when a program in a main folder reads a file, then its path is read from that folder, as the engine reads it', () => {
    const project = `${BASE}main: src\n`;
    expect(keysOf(withFiles(project, { 'src/Main.yaml': 'variables:\n  a: { fn::readFile: ../README.md }\n' }))).toEqual([]);
    expect(keysOf(withFiles(project, { 'src/Main.yaml': 'variables:\n  a: { fn::readFile: ../../x }\n' }))).toEqual(['src/Main.yaml:variables.a.fn::readFile']);
  });
});
