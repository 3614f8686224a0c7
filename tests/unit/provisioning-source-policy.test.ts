import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { realLocalPath } from '../../shared/platform/git/load-desired-state';
import { checkSource, parseSourcePolicy, SourceErrors, sourceRefusedError, type LocalSourceAccess, type SourceRules } from '../../shared/provisioning/source-policy';

/**
 * The source policy against real folders and symlinks in a temporary folder (real paths need a disk); every other
 * case is pure. The rules mirror an installation: the local host's defaults for every tenant, an https prefix for
 * every tenant, and acme's own prefixes with credentials.
 */
const root = fs.realpathSync(fs.mkdtempSync(join(tmpdir(), 'rch-source-policy-')));
const state = join(root, 'state');
for (const dir of ['state/desired-state.git', 'state/repos/mine', 'state/repos-evil/x', 'other/repo']) fs.mkdirSync(join(root, dir), { recursive: true });
fs.symlinkSync(join(root, 'other/repo'), join(state, 'repos/escape'));
fs.symlinkSync(join(state, 'repos/mine'), join(state, 'repos/alias'));
// The state dir reached through a symlink: prefixes written with it must still match real paths.
fs.symlinkSync(state, join(root, 'linked-state'));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const fileUrl = (path: string) => pathToFileURL(path).href;
const rules: SourceRules = {
  '*': [{ prefix: fileUrl(join(state, 'desired-state.git')) }, { prefix: `${fileUrl(join(root, 'linked-state/repos'))}/` }, { prefix: 'https://git.example.com/shared/' }],
  acme: [
    { prefix: 'https://git.example.com/org/', credentialRef: 'broker://git/org' },
    { prefix: 'https://git.example.com/org/special', credentialRef: 'broker://git/special' },
    { prefix: 'https://git.example.com/shared/', credentialRef: 'broker://git/acme-shared' },
  ],
};
const policy = parseSourcePolicy(rules);
const local: LocalSourceAccess = { localSources: true, realPath: realLocalPath };
const remoteOnly: LocalSourceAccess = { localSources: false };

describe('checkSource: https repositories', () => {
  it('when the repository is under a prefix of the tenant, then it is allowed with that rule\'s credentialRef and its URL normalized', () => {
    // Act
    const check = checkSource(policy, 'acme', 'https://GIT.example.com:443/org/./app.git', remoteOnly);

    // Assert
    expect(check).toEqual({ allowed: true, repository: 'https://git.example.com/org/app.git', prefix: 'https://git.example.com/org/', credentialRef: 'broker://git/org' });
  });

  it.each([
    ['a path that only starts like the prefix', 'https://git.example.com/org-evil/x.git'],
    ['a host that only starts like the prefix\'s', 'https://git.example.com.evil.io/org/x.git'],
    ['another port', 'https://git.example.com:8443/org/x.git'],
    ['.. leaving the prefix', 'https://git.example.com/org/../evil/x.git'],
    ['an encoded .. leaving the prefix', 'https://git.example.com/org/%2e%2e/evil/x.git'],
    ['an encoded slash', 'https://git.example.com/org/..%2Fevil/x.git'],
    ['a backslash, which the URL parser reads as a slash', 'https://git.example.com/org\\x.git'],
    ['an empty segment', 'https://git.example.com/org//x.git'],
    ['a query', 'https://git.example.com/org/x.git?/../../evil'],
    ['a fragment', 'https://git.example.com/org/x.git#frag'],
    ['a newline the URL parser would drop', 'https://git.example.com/org/x\n.git'],
    ['the prefix\'s parent', 'https://git.example.com/'],
  ])('when the repository has %s, then SOURCE_NOT_ALLOWED', (_case, repository) => {
    // Act
    const check = checkSource(policy, 'acme', repository, remoteOnly);

    // Assert
    expect(check).toMatchObject({ allowed: false, code: SourceErrors.notAllowed });
  });

  it.each([
    ['a user and password', 'https://deploy:hunter2-secret@git.example.com/org/app.git'],
    ['a token as user name', 'https://ghp_hunter2secret@git.example.com/org/app.git'],
    ['credentials on plain http', 'http://deploy:hunter2-secret@git.example.com/org/app.git'],
    ['credentials on a local URL', 'file://deploy:hunter2-secret@localhost/srv/repo'],
  ])('when the URL carries %s, then SOURCE_CREDENTIALS_INLINE whatever the rules, and the reason does not show them', (_case, repository) => {
    // Act
    const check = checkSource(policy, 'acme', repository, local);

    // Assert
    expect(check).toMatchObject({ allowed: false, code: SourceErrors.credentialsInline });
    expect(JSON.stringify(check)).not.toMatch(/hunter2|deploy|ghp_/);
  });

  it.each([
    ['http:', 'http://git.example.com/org/app.git', 'uses http:, which is not accepted'],
    ['ssh:', 'ssh://git.example.com/org/app.git', 'uses ssh:, which is not accepted'],
    ['git:', 'git://git.example.com/org/app.git', 'uses git:, which is not accepted'],
    ['an scp-like ssh address', 'git@git.example.com:org/app.git', 'ssh address'],
  ])('when the repository uses %s, then SOURCE_NOT_ALLOWED naming it, even under an allowed host', (_case, repository, named) => {
    // Act
    const check = checkSource(policy, 'acme', repository, local);

    // Assert
    expect(check).toMatchObject({ allowed: false, code: SourceErrors.notAllowed });
    expect(check.allowed === false && check.reason).toContain(named);
  });

  it('when the tenant has no rule of its own, then the * rules apply, and another tenant\'s rules do not', () => {
    // Act
    const shared = checkSource(policy, 'globex', 'https://git.example.com/shared/lib.git', remoteOnly);
    const acmes = checkSource(policy, 'globex', 'https://git.example.com/org/app.git', remoteOnly);

    // Assert
    expect(shared).toEqual({ allowed: true, repository: 'https://git.example.com/shared/lib.git', prefix: 'https://git.example.com/shared/' });
    expect(acmes).toMatchObject({ allowed: false, code: SourceErrors.notAllowed });
    expect(acmes.allowed === false && acmes.reason).toBe('the repository https://git.example.com/org/app.git is not under a source prefix allowed for tenant globex');
  });

  it('when rules of the tenant and of * both match, then the longest prefix wins, and on a tie the tenant\'s own', () => {
    // Act
    const special = checkSource(policy, 'acme', 'https://git.example.com/org/special/app.git', remoteOnly);
    const tie = checkSource(policy, 'acme', 'https://git.example.com/shared/lib.git', remoteOnly);

    // Assert
    expect(special).toMatchObject({ allowed: true, credentialRef: 'broker://git/special' });
    expect(tie).toMatchObject({ allowed: true, credentialRef: 'broker://git/acme-shared' });
  });

  it('when the installation allows nothing, then every repository is SOURCE_NOT_ALLOWED', () => {
    // Act
    const check = checkSource(parseSourcePolicy({}), 'acme', 'https://git.example.com/org/app.git', local);

    // Assert
    expect(check).toMatchObject({ allowed: false, code: SourceErrors.notAllowed });
  });
});

describe('checkSource: local repositories', () => {
  it.each([
    ['the example repository as a file URL', () => fileUrl(join(state, 'desired-state.git')), join(state, 'desired-state.git')],
    ['a repository under repos/', () => fileUrl(join(state, 'repos/mine')), join(state, 'repos/mine')],
    ['a bare absolute path', () => join(state, 'repos/mine'), join(state, 'repos/mine')],
    ['a bare relative path', () => relative(process.cwd(), join(state, 'repos/mine')) || '.', join(state, 'repos/mine')],
    ['a symlink that stays under repos/', () => join(state, 'repos/alias'), join(state, 'repos/mine')],
    ['a repository that does not exist yet under repos/', () => join(state, 'repos/later'), join(state, 'repos/later')],
    ['the state dir through its symlink', () => join(root, 'linked-state/repos/mine'), join(state, 'repos/mine')],
  ])('when the repository is %s and local sources are on, then it is allowed as the file URL of its real path', (_case, repository, real) => {
    // Act
    const check = checkSource(policy, 'acme', repository(), local);

    // Assert
    expect(check).toMatchObject({ allowed: true, repository: fileUrl(real) });
  });

  it.each([
    ['.. out of repos/', () => `${fileUrl(join(state, 'repos'))}/../../other/repo`],
    ['.. in a bare path', () => `${join(state, 'repos/mine')}/../../../other/repo`],
    ['a symlink out of repos/', () => join(state, 'repos/escape')],
    ['a folder that only starts like repos', () => join(state, 'repos-evil/x')],
    ['another repository on the disk', () => join(root, 'other/repo')],
    ['the state dir itself', () => state],
    ['a file URL naming a host', () => 'file://fileserver/share/repo'],
  ])('when the repository is %s, then SOURCE_NOT_ALLOWED', (_case, repository) => {
    // Act
    const check = checkSource(policy, 'acme', repository(), local);

    // Assert
    expect(check).toMatchObject({ allowed: false, code: SourceErrors.notAllowed });
  });

  it.each([
    ['a file URL', () => fileUrl(join(state, 'desired-state.git'))],
    ['a bare path', () => join(state, 'repos/mine')],
  ])('when the repository is %s and the host allows no local sources, then SOURCE_NOT_ALLOWED whatever the rules', (_case, repository) => {
    // Act
    const check = checkSource(policy, 'acme', repository(), remoteOnly);

    // Assert
    expect(check).toMatchObject({ allowed: false, code: SourceErrors.notAllowed });
    expect(check.allowed === false && check.reason).toContain('https: repositories only');
  });
});

describe('the source policy\'s rules and errors', () => {
  it.each([
    ['plain http', 'http://git.example.com/org/'],
    ['a bare path', '/srv/repos/'],
    ['credentials', 'https://u:p@git.example.com/org/'],
  ])('when a prefix is %s, then the policy cannot be built', (_case, prefix) => {
    // Act / Assert
    expect(() => parseSourcePolicy({ acme: [{ prefix }] })).toThrow(/source prefix/);
  });

  it('when a refusal becomes an error, then it keeps its code and reason, as forbidden', () => {
    // Arrange
    const refusal = checkSource(policy, 'acme', 'https://deploy:hunter2@git.example.com/org/app.git', local);
    if (refusal.allowed) throw new Error('expected a refusal');

    // Act
    const error = sourceRefusedError(refusal, 'acme');

    // Assert
    expect([error.code, error.kind, error.message]).toEqual([SourceErrors.credentialsInline, 'forbidden', refusal.reason]);
    expect(error.details).toEqual({ tenant: 'acme' });
    expect(error.message).toContain('https://git.example.com/org/app.git');
  });
});
