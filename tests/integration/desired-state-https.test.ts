import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { Agent } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as git from 'isomorphic-git';
import nodeHttp from 'isomorphic-git/http/node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DesiredStateErrors, type LoadDesiredStateOptions } from '../../shared/platform/git/desired-state';
import { loadDesiredState } from '../../shared/platform/git/load-desired-state';
import { remoteCacheDir } from '../../shared/platform/git/git-fetch';
import { GitHttpServer, listenGit, type GitListener } from '../support/git-http-server';
import { TestRepository } from '../support/git-repositories';
import { selfSignedCertificate } from '../support/self-signed-certificate';
import { refusal } from '../support/refusal';

/**
 * Fetching over real HTTPS: a Git server on 127.0.0.1 behind node:https with a certificate made at test time, read
 * with isomorphic-git's own Node client (simple-get, TLS, sockets). The only thing injected is trust in the test
 * certificate (an https.Agent with it as `ca`, through the `http` option); redirects, limits and credentials are the
 * production code's. Each test has its own cache folder and checks what is left in it.
 */
const PROJECT = 'name: demo\nruntime: yaml\nresources: {}\n';
const certificate = selfSignedCertificate();
const agent = new Agent({ ca: certificate.cert });
const trustingTestCa: git.HttpClient = { request: (request) => nodeHttp.request({ ...request, agent }) };


/** Every file under `dir` (relative paths), or [] when it does not exist. */
function filesUnder(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name).slice(dir.length + 1));
}

/** What a failed fetch may leave in a cache: an empty repository's skeleton, but no pack and no temporary folder. */
function expectNothingFetched(cacheDir: string): void {
  const files = filesUnder(cacheDir);
  expect(files.filter((file) => file.endsWith('.pack') || file.endsWith('.idx'))).toEqual([]);
  expect(files.filter((file) => file.includes('.incoming-'))).toEqual([]);
}

describe('loadDesiredState from an HTTPS Git server (real TLS and sockets)', () => {
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-desired-state-https-'));
  const listeners: GitListener[] = [];
  let origin: TestRepository;
  let small: string;
  let big: string;
  let caches = 0;
  const freshCache = () => join(root, `cache-${++caches}`);

  const listen = async (options: Parameters<typeof listenGit>[1] = {}, server = new GitHttpServer(origin.dir)) => {
    const listener = await listenGit(server, { tls: certificate, ...options });
    listeners.push(listener);
    return listener;
  };
  const options = (cacheDir: string, more: Partial<LoadDesiredStateOptions> = {}): LoadDesiredStateOptions => ({
    tenant: 'acme',
    cacheDir,
    http: trustingTestCa,
    ...more,
  });

  beforeAll(async () => {
    origin = await TestRepository.init(join(root, 'origin'));
    small = await origin.commit({ 'app/Pulumi.yaml': PROJECT });
    // 4 MiB of hex text, about 2 MiB once compressed in a pack: over the limits below, far under the defaults.
    big = await origin.commit({ 'assets/big.txt': randomBytes(2 * 1024 * 1024).toString('hex') });
  });

  afterAll(async () => {
    for (const listener of listeners) await listener.close();
    agent.destroy();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('when the server answers over HTTPS, then the commit is fetched and read', async () => {
    // Arrange
    const listener = await listen();

    // Act
    const state = await loadDesiredState({ repository: `${listener.origin}/team/repo.git`, commit: small, path: 'app' }, options(freshCache()));

    // Assert
    expect(state.project).toBe(PROJECT);
    expect(listener.received.map((r) => r.method)).toEqual(['GET', 'POST']);
  });

  it('when the server redirects to another host, then REDIRECT_REFUSED (not retried) and the other host is never asked', async () => {
    // Arrange: another host (localhost, not 127.0.0.1) that would serve the repository.
    const elsewhere = await listen({ host: 'localhost' });
    const redirecting = await listen({ redirectTo: elsewhere.origin });
    const cacheDir = freshCache();

    // Act
    const error = await refusal(loadDesiredState({ repository: `${redirecting.origin}/team/repo.git`, commit: small, path: 'app' }, options(cacheDir)));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.redirectRefused, 'forbidden']);
    expect(error.details).toMatchObject({ location: `${elsewhere.origin}/team/repo.git/info/refs` });
    expect(elsewhere.received).toEqual([]);
    expect(redirecting.received).toHaveLength(1);
    expectNothingFetched(cacheDir);
  });

  it('when the server redirects to plain http, then REDIRECT_REFUSED and the http server is never asked', async () => {
    // Arrange
    const plain = await listenGit(new GitHttpServer(origin.dir));
    listeners.push(plain);
    const redirecting = await listen({ redirectTo: plain.origin });

    // Act
    const error = await refusal(loadDesiredState({ repository: `${redirecting.origin}/team/repo.git`, commit: small, path: 'app' }, options(freshCache())));

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.redirectRefused, 'forbidden']);
    expect(error.message).toContain('http://127.0.0.1');
    expect(plain.received).toEqual([]);
  });

  it('when the server redirects on its own host, then REDIRECT_REFUSED too: the URL fetched must be the one allowed', async () => {
    // Arrange: a same-origin redirect to another path (which could be another organization's repository).
    const target = await listen();
    const redirecting = await listen({ redirectTo: `${target.origin}/other-org` });

    // Act
    const error = await refusal(loadDesiredState({ repository: `${redirecting.origin}/team/repo.git`, commit: small, path: 'app' }, options(freshCache())));

    // Assert
    expect(error.code).toBe(DesiredStateErrors.redirectRefused);
    expect(target.received).toEqual([]);
  });

  it('when the commit brings more bytes than the fetch may receive, then FETCH_TOO_LARGE, nothing is left in the cache, and a small commit still fetches', async () => {
    // Arrange
    const listener = await listen();
    const cacheDir = freshCache();
    const limited = options(cacheDir, { fetchMaxBytes: 512 * 1024 });

    // Act
    const error = await refusal(loadDesiredState({ repository: `${listener.origin}/team/repo.git`, commit: big, path: 'assets' }, limited));
    const afterFailure = filesUnder(cacheDir);
    const state = await loadDesiredState({ repository: `${listener.origin}/team/repo.git`, commit: small, path: 'app' }, limited);

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.fetchTooLarge, 'too-large']);
    expect(error.details).toMatchObject({ maxBytes: 512 * 1024 });
    expect(afterFailure.filter((file) => file.endsWith('.pack') || file.includes('.incoming-'))).toEqual([]);
    expect(state.project).toBe(PROJECT);
  });

  it('when the server refuses the sha and the full-history fetch is too large, then FETCH_TOO_LARGE: the fallback fetch is bounded too', async () => {
    // Arrange: no sha in want, so the fallback fetch of every branch brings the big commit's history.
    const server = new GitHttpServer(origin.dir);
    server.allowShaWant = false;
    const listener = await listen({}, server);
    const cacheDir = freshCache();

    // Act
    const error = await refusal(
      loadDesiredState({ repository: `${listener.origin}/team/repo.git`, commit: small, path: 'app' }, options(cacheDir, { fetchMaxBytes: 512 * 1024 })),
    );

    // Assert
    expect(error.code).toBe(DesiredStateErrors.fetchTooLarge);
    expect(server.requests.filter((r) => r.method === 'POST').map((r) => r.depth)).toEqual([1, undefined]);
    expectNothingFetched(cacheDir);
  });

  it('when the depth-1 fetch and the fallback fetch each fit the limit but not together, then FETCH_TOO_LARGE: they share one budget', async () => {
    // Arrange: a repository whose branch advertisement is large (300 branches), so each of the two fetches receives
    // about one advertisement's bytes; the limit is one and a half of them.
    const branchy = await TestRepository.init(join(root, 'branchy'));
    const commit = await branchy.commit({ 'app/Pulumi.yaml': PROJECT });
    // A later commit, which every branch points at: `commit` is no tip, so the server refuses it by sha.
    const later = await branchy.commit({ 'README.md': 'later\n' });
    fs.mkdirSync(join(branchy.dir, '.git/refs/heads/feature'));
    for (let i = 0; i < 300; i++) fs.writeFileSync(join(branchy.dir, `.git/refs/heads/feature/branch-with-a-long-name-${i}`), `${later}\n`);
    const server = new GitHttpServer(branchy.dir);
    server.allowShaWant = false;
    const advertisement = await new GitHttpServer(branchy.dir).request({ url: 'https://x/r/info/refs?service=git-upload-pack' });
    let advertised = 0;
    for await (const part of advertisement.body!) advertised += part.byteLength;
    const listener = await listen({}, server);
    const limit = Math.floor(advertised * 1.5);

    // Act
    const error = await refusal(
      loadDesiredState({ repository: `${listener.origin}/team/branchy.git`, commit, path: 'app' }, options(freshCache(), { fetchMaxBytes: limit })),
    );
    const unbounded = await loadDesiredState({ repository: `${listener.origin}/team/branchy.git`, commit, path: 'app' }, options(freshCache(), { fetchMaxBytes: limit * 2 }));

    // Assert
    expect(error.code).toBe(DesiredStateErrors.fetchTooLarge);
    expect(unbounded.project).toBe(PROJECT);
    // The first load was cut off in the fallback fetch's advertisement, which alone was within the limit.
    expect(server.requests.map((r) => r.method)).toEqual(['GET', 'POST', 'GET', 'GET', 'POST', 'GET', 'POST']);
  });

  it('when the server sends steadily but slowly past the deadline, then FETCH_TIMEOUT at the deadline (not retried), and nothing is left in the cache', async () => {
    // Arrange: 16 bytes every 25 ms is never idle, and takes seconds for the pack.
    const listener = await listen({ trickle: { bytes: 16, everyMs: 25 } });
    const cacheDir = freshCache();
    const started = Date.now();

    // Act
    const error = await refusal(
      loadDesiredState({ repository: `${listener.origin}/team/repo.git`, commit: small, path: 'app' }, options(cacheDir, { fetchTimeoutMs: 600, idleTimeoutMs: 5_000 })),
    );

    // Assert
    expect([error.code, error.kind]).toEqual([DesiredStateErrors.fetchTimeout, 'limit']);
    expect(Date.now() - started).toBeLessThan(2_000);
    expectNothingFetched(cacheDir);
  });

  describe('a server that requires Basic authentication', () => {
    const username = 'deploy';
    const password = 's3cret-pass-7f3a9c';
    const encoded = Buffer.from(`${username}:${password}`).toString('base64');

    it('when the source rule has a credentialRef, then the credential the callback resolves is sent, and it is nowhere on disk afterwards', async () => {
      // Arrange
      const listener = await listen({ basicAuth: { username, password } });
      const cacheDir = freshCache();
      const resolved: string[] = [];
      const resolveCredential = async (reference: string) => {
        resolved.push(reference);
        return { username, password };
      };

      // Act
      const state = await loadDesiredState(
        { repository: `${listener.origin}/team/private.git`, commit: small, path: 'app' },
        options(cacheDir, { credentialRef: 'broker://git/deploy', resolveCredential }),
      );

      // Assert
      expect(state.project).toBe(PROJECT);
      expect(resolved).toEqual(['broker://git/deploy']);
      expect(listener.received.map((r) => r.authorization)).toEqual([`Basic ${encoded}`, `Basic ${encoded}`]);
      const onDisk = filesUnder(cacheDir).map((file) => `${file}\n${fs.readFileSync(join(cacheDir, file)).toString('latin1')}`);
      expect(onDisk.length).toBeGreaterThan(0);
      expect(onDisk.filter((text) => text.includes(password) || text.includes(encoded) || text.includes(username))).toEqual([]);
    });

    it('when the callback gives a token, then it is sent as the password of x-access-token', async () => {
      // Arrange
      const listener = await listen({ basicAuth: { username: 'x-access-token', password } });

      // Act
      const state = await loadDesiredState(
        { repository: `${listener.origin}/team/private.git`, commit: small, path: 'app' },
        options(freshCache(), { credentialRef: 'broker://git/token', resolveCredential: async () => password }),
      );

      // Assert
      expect(state.project).toBe(PROJECT);
    });

    it('when no credential is given, then REMOTE_UNREACHABLE with status 401 (the server really requires one)', async () => {
      // Arrange
      const listener = await listen({ basicAuth: { username, password } });

      // Act
      const error = await refusal(loadDesiredState({ repository: `${listener.origin}/team/private.git`, commit: small, path: 'app' }, options(freshCache())));

      // Assert
      expect(error.code).toBe(DesiredStateErrors.remoteUnreachable);
      expect(error.details).toMatchObject({ status: 401 });
    });

    it('when the credential is wrong, then the error shows neither it nor its header', async () => {
      // Arrange
      const listener = await listen({ basicAuth: { username, password } });

      // Act
      const error = await refusal(
        loadDesiredState(
          { repository: `${listener.origin}/team/private.git`, commit: small, path: 'app' },
          options(freshCache(), { credentialRef: 'broker://git/deploy', resolveCredential: async () => ({ username, password: 'wrong-pass-1234' }) }),
        ),
      );

      // Assert
      expect(error.details).toMatchObject({ status: 401 });
      expect(JSON.stringify({ message: error.message, details: error.details })).not.toMatch(/wrong-pass-1234|ZGVwbG95Ondyb25nLXBhc3MtMTIzNA/);
    });

    it('when the secret store holds something that is no credential, then CREDENTIAL_INVALID without the value', async () => {
      // Arrange
      const listener = await listen({ basicAuth: { username, password } });

      // Act
      const error = await refusal(
        loadDesiredState(
          { repository: `${listener.origin}/team/private.git`, commit: small, path: 'app' },
          options(freshCache(), { credentialRef: 'broker://git/deploy', resolveCredential: async () => ({ user: 'deploy', secret: 'not-the-shape-99' }) }),
        ),
      );

      // Assert
      expect([error.code, error.kind]).toEqual([DesiredStateErrors.credentialInvalid, 'validation']);
      expect(error.message).not.toContain('not-the-shape-99');
      expect(listener.received).toEqual([]);
    });
  });

  it('when two tenants read the same URL, then each fetches into its own cache folder: the second is not served from the first', async () => {
    // Arrange
    const listener = await listen();
    const cacheDir = freshCache();
    const repository = `${listener.origin}/team/repo.git`;

    // Act
    await loadDesiredState({ repository, commit: small, path: 'app' }, options(cacheDir, { tenant: 'acme' }));
    const afterFirst = listener.received.length;
    await loadDesiredState({ repository, commit: small, path: 'app' }, options(cacheDir, { tenant: 'globex' }));
    const afterSecond = listener.received.length;
    await loadDesiredState({ repository, commit: small, path: 'app' }, options(cacheDir, { tenant: 'acme' }));

    // Assert
    const acme = remoteCacheDir(cacheDir, 'acme', repository);
    const globex = remoteCacheDir(cacheDir, 'globex', repository);
    expect(acme).not.toBe(globex);
    expect(filesUnder(acme).some((file) => file.endsWith('.pack'))).toBe(true);
    expect(filesUnder(globex).some((file) => file.endsWith('.pack'))).toBe(true);
    expect([afterFirst, afterSecond - afterFirst, listener.received.length - afterSecond]).toEqual([2, 2, 0]);
  });
});
