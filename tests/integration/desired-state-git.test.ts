import * as fs from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as git from 'isomorphic-git';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DesiredStateErrors, desiredStateMemory, type DesiredStateRef } from '../../shared/platform/git/desired-state';
import { loadDesiredState, repositoryLocation } from '../../shared/platform/git/load-desired-state';
import { remoteCacheDir } from '../../shared/platform/git/git-fetch';
import { GitHttpServer } from '../support/git-http-server';
import { TestRepository } from '../support/git-repositories';
import { refusal } from '../support/refusal';

const PROJECT_V1 = 'name: demo\nruntime: yaml\nresources: {}\n';
const PROJECT_V2 = 'name: demo\nruntime: yaml\nresources:\n  bucket:\n    type: local:storage:Bucket\n';
const MISSING_SHA = 'deadbeef'.repeat(5);
/** The tenant every read of this file is for, unless a test is about tenants. */
const TENANT = { tenant: 'acme' } as const;


describe('loadDesiredState from a local repository', () => {
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-desired-state-'));
  let repo: TestRepository;
  let first: string;
  let second: string;

  beforeAll(async () => {
    repo = await TestRepository.init(join(root, 'repo'));
    first = await repo.commit({
      'app/Pulumi.yaml': PROJECT_V1,
      'app/Pulumi.development.yaml': 'config:\n  demo:replicas: 1\n',
      'app/Pulumi.production.yaml': 'config:\n  demo:replicas: 3\n',
      'app/templates/service.json': '{"kind":"service"}',
      'README.md': 'not part of the project\n',
      'docs/guide.md': 'a folder without a project\n',
    });
    // A later commit changes, deletes and adds files: reading `first` must not see any of it.
    second = await repo.commit({
      'app/Pulumi.yaml': PROJECT_V2,
      'app/Pulumi.production.yaml': null,
      'app/Pulumi.staging.yaml': 'config:\n  demo:replicas: 2\n',
      'other/Pulumi.yaml': PROJECT_V1,
    });
  });

  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

  const ref = (overrides: Partial<DesiredStateRef> = {}): DesiredStateRef => ({ repository: repo.dir, commit: first, path: 'app', ...overrides });

  it('when a project is read at an earlier commit, then its files are those of that commit, not of later ones', async () => {
    // Act
    const state = await loadDesiredState(ref(), TENANT);

    // Assert
    expect(state.commit).toBe(first);
    expect(state.path).toBe('app');
    expect(state.project).toBe(PROJECT_V1);
    expect(state.files).toEqual({
      'Pulumi.yaml': PROJECT_V1,
      'Pulumi.development.yaml': 'config:\n  demo:replicas: 1\n',
      'Pulumi.production.yaml': 'config:\n  demo:replicas: 3\n',
      'templates/service.json': '{"kind":"service"}',
    });
    expect(state.stacks).toEqual({ development: 'config:\n  demo:replicas: 1\n', production: 'config:\n  demo:replicas: 3\n' });
  });

  it('when the same project is read at the later commit, then the changes of that commit are there', async () => {
    // Act
    const state = await loadDesiredState(ref({ commit: second }), TENANT);

    // Assert
    expect(state.project).toBe(PROJECT_V2);
    expect(Object.keys(state.stacks).sort()).toEqual(['development', 'staging']);
  });

  it('when a project was read with a memory, then reading it again needs no repository, and another commit is read anew', async () => {
    // Arrange: a repository of its own, so it can be taken away after the first read.
    const own = await TestRepository.init(join(root, 'remembered'));
    const commit = await own.commit({ 'Pulumi.yaml': PROJECT_V1, 'Pulumi.dev.yaml': 'config: {}\n' });
    const memory = desiredStateMemory();
    const first = await loadDesiredState({ repository: own.dir, commit, path: '.' }, { ...TENANT, memory });
    fs.rmSync(own.dir, { recursive: true, force: true });

    // Act
    const again = await loadDesiredState({ repository: own.dir, commit, path: './' }, { ...TENANT, memory });

    // Assert
    expect(again).toBe(first);
    expect(Object.isFrozen(again)).toBe(true);
    await expect(loadDesiredState({ repository: own.dir, commit, path: '.' }, TENANT)).rejects.toMatchObject({ code: DesiredStateErrors.repositoryNotFound });
  });

  it('when a project was read with a memory for one tenant, then another tenant reading the same commit is not served from it', async () => {
    // Arrange
    const own = await TestRepository.init(join(root, 'remembered-by-acme'));
    const commit = await own.commit({ 'Pulumi.yaml': PROJECT_V1 });
    const memory = desiredStateMemory();
    await loadDesiredState({ repository: own.dir, commit, path: '.' }, { tenant: 'acme', memory });
    fs.rmSync(own.dir, { recursive: true, force: true });

    // Act
    const error = await refusal(loadDesiredState({ repository: own.dir, commit, path: '.' }, { tenant: 'globex', memory }));

    // Assert
    expect(error.code).toBe(DesiredStateErrors.repositoryNotFound);
  });

  it('when the repository is a file:// URL and the path has ./ and a trailing slash, then the same project is read', async () => {
    // Act
    const state = await loadDesiredState(ref({ repository: pathToFileURL(repo.dir).href, path: './app/' }), TENANT);

    // Assert
    expect(state.path).toBe('app');
    expect(state.project).toBe(PROJECT_V1);
  });

  it('when the project is at the repository root, then "." reads every file of the commit', async () => {
    // Arrange
    const rootRepo = await TestRepository.init(join(root, 'root-project'));
    const commit = await rootRepo.commit({ 'Pulumi.yaml': PROJECT_V1, 'Pulumi.dev.yaml': 'config: {}\n' });

    // Act
    const state = await loadDesiredState({ repository: rootRepo.dir, commit, path: '.' }, TENANT);

    // Assert
    expect(state.path).toBe('');
    expect(Object.keys(state.files).sort()).toEqual(['Pulumi.dev.yaml', 'Pulumi.yaml']);
    expect(Object.keys(state.stacks)).toEqual(['dev']);
  });

  it('when the repository is bare, then it is read from its git folder', async () => {
    // Act
    const state = await loadDesiredState(ref({ repository: join(repo.dir, '.git') }), TENANT);

    // Assert
    expect(state.project).toBe(PROJECT_V1);
  });

  it('when the commit is not in the repository, then COMMIT_NOT_FOUND, a permanent not-found', async () => {
    // Act
    const error = await refusal(loadDesiredState(ref({ commit: MISSING_SHA }), TENANT));

    // Assert
    expect(error.code).toBe(DesiredStateErrors.commitNotFound);
    expect(error.kind).toBe('not-found');
    expect(error.details).toEqual({ commit: MISSING_SHA });
  });

  it('when the sha names a tree instead of a commit, then COMMIT_NOT_FOUND', async () => {
    // Arrange: the root tree of the first commit is an object of the repository, but not a commit.
    const { commit } = await git.readCommit({ fs, dir: repo.dir, oid: first });

    // Act
    const error = await refusal(loadDesiredState(ref({ commit: commit.tree }), TENANT));

    // Assert
    expect(error.code).toBe(DesiredStateErrors.commitNotFound);
  });

  it.each([
    ['a branch name', () => 'main'],
    ['HEAD', () => 'HEAD'],
    ['a short sha', () => first.slice(0, 7)],
    ['a sha in capitals', () => first.toUpperCase()],
  ])('when the commit is %s instead of a full sha, then COMMIT_NOT_FOUND as a validation error', async (_name, commit) => {
    // Act
    const error = await refusal(loadDesiredState(ref({ commit: commit() }), TENANT));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.commitNotFound, 'validation']);
  });

  it('when the path does not exist at the commit, then PATH_NOT_FOUND, a permanent not-found', async () => {
    // Act
    const error = await refusal(loadDesiredState(ref({ path: 'missing/app' }), TENANT));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.pathNotFound, 'not-found']);
    expect(error.details).toEqual({ commit: first, path: 'missing/app' });
  });

  it('when the path exists only in a later commit, then reading it at the earlier commit is PATH_NOT_FOUND', async () => {
    // Act
    const atSecond = await loadDesiredState(ref({ commit: second, path: 'other' }), TENANT);
    const error = await refusal(loadDesiredState(ref({ path: 'other' }), TENANT));

    // Assert
    expect(atSecond.project).toBe(PROJECT_V1);
    expect(error.code).toBe(DesiredStateErrors.pathNotFound);
  });

  it('when the path names a file, then PATH_NOT_FOUND', async () => {
    // Act
    const error = await refusal(loadDesiredState(ref({ path: 'app/Pulumi.yaml' }), TENANT));

    // Assert
    expect(error.code).toBe(DesiredStateErrors.pathNotFound);
  });

  it('when the folder has no Pulumi.yaml, then NOT_A_PROJECT, a validation error', async () => {
    // Act
    const error = await refusal(loadDesiredState(ref({ path: 'docs' }), TENANT));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.notAProject, 'validation']);
  });

  it('when the files exceed the size limit, then TOO_LARGE', async () => {
    // Act
    const error = await refusal(loadDesiredState(ref(), { ...TENANT, maxBytes: 40 }));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.tooLarge, 'too-large']);
  });

  it('when the local folder is not a Git repository, then REPOSITORY_NOT_FOUND', async () => {
    // Act
    const error = await refusal(loadDesiredState(ref({ repository: join(root, 'nowhere') }), TENANT));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.repositoryNotFound, 'not-found']);
  });
});

/**
 * HTTPS remotes, tested without the internet: where a repository string points, the cache folder per URL, reading
 * a commit that is already in the cache without any request, and the failures a remote can produce (connection
 * refused, a silent server, HTTP statuses), all on 127.0.0.1 or through an injected HTTP client. Fetches go through
 * isomorphic-git's real protocol code against `GitHttpServer`, a Git server in memory; no test reaches a real Git
 * host, so TLS and a real server's refusals are not exercised.
 */
describe('loadDesiredState from an HTTPS remote (offline)', () => {
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-desired-state-remote-'));
  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

  /** An HTTP client that records every request and answers with `statusCode`, or throws when none is given. */
  function recordingHttp(statusCode?: number): git.HttpClient & { urls: string[] } {
    const urls: string[] = [];
    return {
      urls,
      async request({ url }) {
        urls.push(url);
        if (statusCode === undefined) throw new Error('no network in this test');
        return { url, statusCode, statusMessage: 'status', headers: {}, body: (async function* () {})() };
      },
    };
  }

  it.each([
    ['https://git.example.com/team/repo.git', { kind: 'remote', url: 'https://git.example.com/team/repo.git' }],
    ['file:///srv/git/repo', { kind: 'local', dir: '/srv/git/repo' }],
    ['/srv/git/repo', { kind: 'local', dir: '/srv/git/repo' }],
    ['relative/repo', { kind: 'local', dir: resolve('relative/repo') }],
  ])('when the repository is %s, then it is read from %o', (repository, expected) => {
    // Act
    const location = repositoryLocation(repository);

    // Assert
    expect(location).toEqual(expected);
  });

  it.each(['http://git.example.com/repo.git', 'ssh://git@git.example.com/repo.git', 'git@github.com:team/repo.git', 'git://git.example.com/repo', 'https://'])(
    'when the repository is %s, then REPOSITORY_UNSUPPORTED, a validation error',
    async (repository) => {
      // Act
      const error = await refusal(loadDesiredState({ repository, commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: root, http: recordingHttp() }));

      // Assert
      expect([error.code, error.kind]).toEqual([DesiredStateErrors.repositoryUnsupported, 'validation']);
    },
  );

  it('when two tenants read the same URL, then each has its own cache folder, and neither folder shows the tenant or the URL', () => {
    // Act
    const first = remoteCacheDir(root, 'acme', 'https://git.example.com/repo.git');
    const again = remoteCacheDir(root, 'acme', 'https://git.example.com/repo.git');
    const other = remoteCacheDir(root, 'globex', 'https://git.example.com/repo.git');
    const otherCase = remoteCacheDir(root, 'ACME', 'https://git.example.com/repo.git');
    const escaping = remoteCacheDir(root, '../acme', 'https://git.example.com/repo.git');

    // Assert
    expect(again).toBe(first);
    expect(new Set([first, other, otherCase, escaping]).size).toBe(4);
    for (const dir of [first, other, escaping]) {
      expect(dir.startsWith(`${root}/`)).toBe(true);
      expect(dir.slice(root.length)).not.toMatch(/acme|globex|example/);
    }
  });

  it('when the URL carries credentials, then REPOSITORY_UNSUPPORTED before any request, and the error does not show them', async () => {
    // Arrange
    const http = recordingHttp();

    // Act
    const error = await refusal(
      loadDesiredState({ repository: 'https://deploy:s3cret-token@git.example.com/team/repo.git', commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: root, http }),
    );

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.repositoryUnsupported, 'validation']);
    expect(JSON.stringify({ message: error.message, details: error.details })).not.toContain('s3cret');
    expect(http.urls).toEqual([]);
  });

  it('when the commit is already in the cache of the remote, then it is read without any request', async () => {
    // Arrange: a cache folder holding what a fetch of the remote would have brought.
    const url = 'https://git.example.com/team/cached.git';
    const origin = await TestRepository.init(join(root, 'origin'));
    const commit = await origin.commit({ 'app/Pulumi.yaml': PROJECT_V1 });
    fs.cpSync(join(origin.dir, '.git'), remoteCacheDir(join(root, 'cache'), TENANT.tenant, url), { recursive: true });
    const http = recordingHttp();

    // Act
    const state = await loadDesiredState({ repository: url, commit, path: 'app' }, { ...TENANT, cacheDir: join(root, 'cache'), http });

    // Assert
    expect(state.project).toBe(PROJECT_V1);
    expect(http.urls).toEqual([]);
  });

  it('when the commit is not in the cache, then the remote is asked for it', async () => {
    // Arrange
    const http = recordingHttp();

    // Act
    await refusal(loadDesiredState({ repository: 'https://git.example.com/team/repo.git', commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: root, http }));

    // Assert
    expect(http.urls[0]).toBe('https://git.example.com/team/repo.git/info/refs?service=git-upload-pack');
  });

  it('when the remote answers 404, then REPOSITORY_NOT_FOUND, a permanent not-found', async () => {
    // Act
    const error = await refusal(
      loadDesiredState({ repository: 'https://git.example.com/team/gone.git', commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: root, http: recordingHttp(404) }),
    );

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.repositoryNotFound, 'not-found']);
  });

  it.each([503, 500, 401, 403])('when the remote answers %i, then REMOTE_UNREACHABLE, a transient failure', async (status) => {
    // Act
    const error = await refusal(
      loadDesiredState({ repository: 'https://git.example.com/team/repo.git', commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: root, http: recordingHttp(status) }),
    );

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.remoteUnreachable, 'unavailable']);
    expect(error.details).toMatchObject({ status });
  });

  it('when nothing listens at the remote, then REMOTE_UNREACHABLE, and the credential of the source rule appears nowhere in the error', async () => {
    // Arrange: a port that was free a moment ago, on this machine.
    const port = await new Promise<number>((done) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as { port: number };
        probe.close(() => done(port));
      });
    });
    const repository = `https://127.0.0.1:${port}/team/repo.git`;

    // Act
    const error = await refusal(
      loadDesiredState(
        { repository, commit: MISSING_SHA, path: 'app' },
        { ...TENANT, cacheDir: root, credentialRef: 'broker://git/deploy', resolveCredential: async () => ({ username: 'deploy', password: 's3cret-token' }) },
      ),
    );

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.remoteUnreachable, 'unavailable']);
    expect(JSON.stringify({ message: error.message, details: error.details })).not.toMatch(/s3cret|ZGVwbG95OnMzY3JldC10b2tlbg/);
    expect(error.details).toEqual({ repository });
  });

  describe('a remote that accepts connections and never answers', () => {
    let server: Server;
    const sockets: Socket[] = [];
    let port: number;

    beforeAll(async () => {
      server = createServer((socket) => sockets.push(socket));
      port = await new Promise<number>((done) => server.listen(0, '127.0.0.1', () => done((server.address() as { port: number }).port)));
    });

    afterAll(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((done) => server.close(done));
    });

    it('when the connection stays silent past the idle timeout, then REMOTE_UNREACHABLE instead of waiting forever', async () => {
      // Arrange
      const started = Date.now();

      // Act
      const error = await refusal(
        loadDesiredState({ repository: `https://127.0.0.1:${port}/team/repo.git`, commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: root, idleTimeoutMs: 300 }),
      );

      // Assert: both fetch attempts time out, so it takes about two idle timeouts, far below the test timeout.
      expect([error.code, error.kind]).toEqual([DesiredStateErrors.remoteUnreachable, 'unavailable']);
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });
});

describe('loadDesiredState fetching from a Git server (in memory, through an injected HTTP client)', () => {
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-desired-state-fetch-'));
  const url = 'https://git.example.com/team/desired-state.git';
  let origin: TestRepository;
  let older: string;

  beforeAll(async () => {
    origin = await TestRepository.init(join(root, 'origin'));
    older = await origin.commit({ 'app/Pulumi.yaml': PROJECT_V1, 'app/Pulumi.development.yaml': 'config: {}\n' });
    // A later commit on the branch, so `older` is no branch tip.
    await origin.commit({ 'app/Pulumi.yaml': PROJECT_V2 });
  });

  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

  let caches = 0;
  const freshCache = () => join(root, `cache-${++caches}`);

  it('when a commit behind the branch tip is asked for, then only that commit is fetched (depth 1) and a second read asks nothing', async () => {
    // Arrange
    const server = new GitHttpServer(origin.dir);
    const cacheDir = freshCache();

    // Act
    const state = await loadDesiredState({ repository: url, commit: older, path: 'app' }, { ...TENANT, cacheDir, http: server });
    const fetches = server.requests.length;
    const again = await loadDesiredState({ repository: url, commit: older, path: 'app' }, { ...TENANT, cacheDir, http: server });

    // Assert
    expect(state.project).toBe(PROJECT_V1);
    expect(again.files).toEqual(state.files);
    expect(server.requests.filter((r) => r.method === 'POST')).toEqual([{ method: 'POST', url: `${url}/git-upload-pack`, depth: 1 }]);
    expect(server.requests).toHaveLength(fetches);
  });

  it('when the server refuses a commit that is no branch tip, then every branch is fetched and the commit is found', async () => {
    // Arrange
    const server = new GitHttpServer(origin.dir);
    server.allowShaWant = false;

    // Act
    const state = await loadDesiredState({ repository: url, commit: older, path: 'app' }, { ...TENANT, cacheDir: freshCache(), http: server });

    // Assert
    expect(state.project).toBe(PROJECT_V1);
    expect(server.requests.filter((r) => r.method === 'POST').map((r) => r.depth)).toEqual([1, undefined]);
  });

  it('when the commit is on no branch of the remote, then COMMIT_NOT_FOUND once the remote was searched', async () => {
    // Arrange
    const server = new GitHttpServer(origin.dir);
    server.allowShaWant = false;

    // Act
    const error = await refusal(loadDesiredState({ repository: url, commit: MISSING_SHA, path: 'app' }, { ...TENANT, cacheDir: freshCache(), http: server }));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.commitNotFound, 'not-found']);
    expect(server.requests.filter((r) => r.method === 'POST')).toHaveLength(2);
  });

  it('when a fetch breaks off while the cache is shallow from an earlier fetch, then a commit behind the shallow one is still found', async () => {
    // Arrange: a full fetch of the first commit, then the tip fetched at depth 1 over a commit the cache lacks.
    const growing = await TestRepository.init(join(root, 'growing'));
    const server = new GitHttpServer(growing.dir);
    const cacheDir = freshCache();
    const c1 = await growing.commit({ 'app/Pulumi.yaml': 'name: one\nruntime: yaml\n' });
    server.allowShaWant = false;
    await loadDesiredState({ repository: url, commit: c1, path: 'app' }, { ...TENANT, cacheDir, http: server });
    const c2 = await growing.commit({ 'app/Pulumi.yaml': 'name: two\nruntime: yaml\n' });
    const c3 = await growing.commit({ 'app/Pulumi.yaml': 'name: three\nruntime: yaml\n' });
    server.allowShaWant = true;
    await loadDesiredState({ repository: url, commit: c3, path: 'app' }, { ...TENANT, cacheDir, http: server });
    // The fetch by sha breaks off; the fallback fetch of every branch must not stop at the shallow tip.
    server.failUploadPacks = 1;

    // Act
    const state = await loadDesiredState({ repository: url, commit: c2, path: 'app' }, { ...TENANT, cacheDir, http: server });

    // Assert
    expect(state.project).toBe('name: two\nruntime: yaml\n');
  });

  it('when the connection drops on every fetch, then REMOTE_UNREACHABLE, a transient failure', async () => {
    // Arrange
    const server = new GitHttpServer(origin.dir);
    server.failUploadPacks = 2;

    // Act
    const error = await refusal(loadDesiredState({ repository: url, commit: older, path: 'app' }, { ...TENANT, cacheDir: freshCache(), http: server }));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.remoteUnreachable, 'unavailable']);
  });
});
