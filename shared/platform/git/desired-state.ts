import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GitHttpRequest, GitHttpResponse, HttpClient } from 'isomorphic-git';
import { LRUCache } from 'lru-cache';
import { AppError, ensureError } from '../errors/app-error';
import { describeRepository, redactUrl } from './repository-url';

/**
 * Desired state from Git: the files of a Pulumi YAML project at exactly one commit, from a local repository or an
 * HTTPS remote. Errors carry stable codes; their kind tells a caller whether retrying can help:
 * `unavailable` (the remote could not be reached) is transient, every other kind means the promotion is wrong.
 *
 * Which repositories may be read is not decided here (the source policy of the provisioning module does it before
 * any read); what is decided here is how a remote is fetched: into the tenant's own cache folder, with no redirect
 * followed, bounded by bytes and by a deadline, with the source rule's credential sent only in that fetch's
 * requests, and leaving nothing in the cache when it fails.
 */
export const DesiredStateErrors = {
  /** The commit is not in the repository (or is not a commit): permanent. */
  commitNotFound: 'DESIRED_STATE.COMMIT_NOT_FOUND',
  /** The path is not a folder at that commit: permanent. */
  pathNotFound: 'DESIRED_STATE.PATH_NOT_FOUND',
  /** The folder has no Pulumi.yaml: permanent. */
  notAProject: 'DESIRED_STATE.NOT_A_PROJECT',
  /** A local repository that does not exist, or a remote that answers 404: permanent. */
  repositoryNotFound: 'DESIRED_STATE.REPOSITORY_NOT_FOUND',
  /** Not an HTTPS URL, a file:// URL or a local path (ssh, plain http, …), or a URL with credentials in it: permanent. */
  repositoryUnsupported: 'DESIRED_STATE.REPOSITORY_UNSUPPORTED',
  /** The project's files exceed the size limit: permanent. */
  tooLarge: 'DESIRED_STATE.TOO_LARGE',
  /** The remote did not answer, timed out idle, failed or refused access: transient, worth retrying. */
  remoteUnreachable: 'DESIRED_STATE.REMOTE_UNREACHABLE',
  /**
   * The remote answered with a redirect (any 3xx: to another host, to http:, or on the same host): refused, since the
   * URL the source policy allowed would not be the one fetched, and a same-host redirect can leave the allowed prefix
   * as well. Permanent (`forbidden`): the installation should allow, and the promotion name, the URL the repository
   * lives at.
   */
  redirectRefused: 'DESIRED_STATE.REDIRECT_REFUSED',
  /** A fetch received more than `fetchMaxBytes` (the depth-1 and the full fetch counted together): permanent (`too-large`). */
  fetchTooLarge: 'DESIRED_STATE.FETCH_TOO_LARGE',
  /** A fetch took longer in all than `fetchTimeoutMs`, however steadily bytes came: fails the run (`limit`), not retried. */
  fetchTimeout: 'DESIRED_STATE.FETCH_TIMEOUT',
  /** The credential `resolveCredential` gave is neither a token string nor `{ username, password }`: permanent. */
  credentialInvalid: 'DESIRED_STATE.CREDENTIAL_INVALID',
} as const;

export interface DesiredStateRef {
  /** An HTTPS Git remote, a `file://` URL or a local path (a repository with a work tree, or a bare one). */
  readonly repository: string;
  /** A full 40-hex commit sha. */
  readonly commit: string;
  /** The project folder relative to the repository root; `.` or `` for the root. */
  readonly path: string;
}

export interface DesiredState {
  readonly repository: string;
  readonly commit: string;
  /** The project folder as read: no leading `./`, no trailing `/`, `` for the root. */
  readonly path: string;
  /** Every file under the folder, by its path relative to the folder (`Pulumi.yaml`, `lib/a.yaml`), as UTF-8 text. */
  readonly files: Readonly<Record<string, string>>;
  /** The text of `Pulumi.yaml` (or `Pulumi.yml`). */
  readonly project: string;
  /** The text of each `Pulumi.<stack>.yaml` (or `.yml`) directly in the folder, by stack name. */
  readonly stacks: Readonly<Record<string, string>>;
}

/** What a host sets once for every read: where and how remotes are fetched. */
export interface DesiredStateHostOptions {
  /**
   * Where remotes are fetched to: a folder per tenant, in it one bare repository per remote URL; commits never
   * change, so a commit found there is read without asking the remote again. Example: `join(stateDir, 'git-cache')`.
   * Default: `runtime-cloud-git-cache` in the OS temporary folder.
   */
  readonly cacheDir?: string;
  /**
   * The HTTP client for remotes. Default: isomorphic-git's Node client. Whatever the client, every request is sent
   * with `fetchOptions.followRedirects: false` and the idle timeout, and its answers are bounded (below), so a client
   * must hand back a 3xx as it is rather than follow it (the Node client does).
   * Example (trusting a test CA): `{ request: (r) => node.request({ ...r, agent: new https.Agent({ ca }) }) }`.
   */
  readonly http?: HttpClient;
  /** A remote connection silent this long fails as unreachable (default 30 000), so a hung remote cannot hang a run. */
  readonly idleTimeoutMs?: number;
  /** Most bytes of file content read from the folder (default 5 MiB): a promotion naming a huge folder is refused. */
  readonly maxBytes?: number;
  /** Most bytes one fetch may receive, the depth-1 and the full fetch together (default 64 MiB). Example: `config.provisioning.fetchMaxBytes`. */
  readonly fetchMaxBytes?: number;
  /** Longest one fetch may take in all, in ms (default 120 000): a deadline, not an idle timeout. Example: `config.provisioning.fetchTimeoutMs`. */
  readonly fetchTimeoutMs?: number;
  /**
   * Resolves a source rule's `credentialRef` to the credential to fetch with, when a fetch needs it and only then: a
   * token string (sent as the Basic password of the user `x-access-token`, which GitHub, Azure DevOps and GitLab
   * accept with a token) or `{ username, password }`. The credential goes in the Authorization header of that fetch's
   * requests (to the remote's origin only: no redirect is followed) and never to disk, the cache folder's name, an
   * error or a log. Example: `(reference) => services.governance.resolveSecret(reference)`.
   */
  readonly resolveCredential?: (reference: string) => Promise<unknown>;
  /**
   * Projects already read, kept by tenant, repository, commit and path: a commit never changes, and a run reads its
   * commit at intake, plan and apply. One per host. Example: `desiredStateMemory()`.
   */
  readonly memory?: DesiredStateMemory;
}

/** One read: the host's options, and who reads, with which credential. */
export interface LoadDesiredStateOptions extends DesiredStateHostOptions {
  /**
   * The tenant the project is read for: remotes are fetched into that tenant's own cache folder, and a project read
   * for one tenant is never served from memory to another. Required, so no caller shares a cache by forgetting it.
   */
  readonly tenant: string;
  /** The `credentialRef` of the source rule that allowed the repository, when it has one. Example: `broker://git/acme-read`. */
  readonly credentialRef?: string;
}

export type DesiredStateMemory = LRUCache<string, DesiredState>;

/** A bounded memory of read projects, by the bytes of their files (default 64 MiB). */
export function desiredStateMemory(maxBytes = 64 * 1024 * 1024): DesiredStateMemory {
  return new LRUCache<string, DesiredState>({
    maxSize: maxBytes,
    sizeCalculation: (state) => Math.max(1, Object.values(state.files).reduce((sum, text) => sum + text.length, 0)),
  });
}

const DEFAULT_MAX_BYTES = 5 * 1024 * 1024;
const DEFAULT_IDLE_TIMEOUT_MS = 30_000;
const DEFAULT_FETCH_MAX_BYTES = 64 * 1024 * 1024;
const DEFAULT_FETCH_TIMEOUT_MS = 120_000;
const PROJECT_FILE = /^Pulumi\.ya?ml$/;
const STACK_FILE = /^Pulumi\.([A-Za-z0-9_.-]+)\.ya?ml$/;
const FULL_SHA = /^[0-9a-f]{40}$/;

type IsomorphicGit = typeof import('isomorphic-git');
let loadedGit: IsomorphicGit | undefined;

/** isomorphic-git, loaded on the first read rather than with this module: a host that never reads Git never loads it. */
function isomorphicGit(): IsomorphicGit {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (loadedGit ??= require('isomorphic-git') as IsomorphicGit);
}

/** isomorphic-git's Node HTTP client, loaded with the first remote read. */
function nodeHttpClient(): HttpClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('isomorphic-git/http/node') as typeof import('isomorphic-git/http/node')).default;
}

/**
 * Reads the Pulumi project at `ref.path` in `ref.repository` at exactly `ref.commit`, for `options.tenant`. Every
 * expected failure is an `AppError` with a code of `DesiredStateErrors`; anything else (a corrupt repository, a full
 * disk) is a bug or an outage and is thrown as it is.
 */
export async function loadDesiredState(ref: DesiredStateRef, options: LoadDesiredStateOptions): Promise<DesiredState> {
  const key = JSON.stringify([options.tenant, ref.repository, ref.commit, normalizePath(ref.path), options.maxBytes ?? DEFAULT_MAX_BYTES]);
  const known = options.memory?.get(key);
  if (known) return known;
  const read = Object.freeze(await readDesiredState(ref, options));
  options.memory?.set(key, read);
  return read;
}

async function readDesiredState(ref: DesiredStateRef, options: LoadDesiredStateOptions): Promise<DesiredState> {
  if (!FULL_SHA.test(ref.commit)) {
    throw new AppError(DesiredStateErrors.commitNotFound, 'validation', 'the commit must be a full 40-character hex sha', { commit: ref.commit });
  }
  const path = normalizePath(ref.path);
  const location = repositoryLocation(ref.repository);
  const read = (gitdir: string) => readProject(gitdir, ref.commit, path, options.maxBytes ?? DEFAULT_MAX_BYTES);
  const content =
    location.kind === 'local'
      ? await read(await localGitdir(location.dir))
      : await fromRemote(location.url, ref.commit, options, read);
  return { repository: ref.repository, commit: ref.commit, path, ...content };
}

export type RepositoryLocation = { readonly kind: 'local'; readonly dir: string } | { readonly kind: 'remote'; readonly url: string };

/** Where a repository string points: an HTTPS remote, or a local folder (from a path or a `file://` URL). */
export function repositoryLocation(repository: string): RepositoryLocation {
  const unsupported = (why: string) =>
    new AppError(DesiredStateErrors.repositoryUnsupported, 'validation', `the repository ${why}`, { repository: redactUrl(repository) });
  if (/^https:\/\//i.test(repository)) {
    if (!URL.canParse(repository)) throw unsupported('is not a valid URL');
    // Credentials come from a source rule's credentialRef, at fetch time; one in the URL would be stored with the run.
    const url = new URL(repository);
    if (url.username || url.password) throw unsupported('carries credentials in its URL; they come from a source rule\'s credentialRef');
    return { kind: 'remote', url: repository };
  }
  if (/^file:\/\//i.test(repository)) {
    try {
      return { kind: 'local', dir: fileURLToPath(repository) };
    } catch {
      throw unsupported('is a file URL that does not name a local folder');
    }
  }
  // Other schemes (http, ssh, git) and scp-like `user@host:path`: plain http would expose credentials, and
  // isomorphic-git speaks only HTTP(S).
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(repository) || /^[^/\\]+@[^/\\]+:/.test(repository)) {
    throw unsupported('must be an https:// URL, a file:// URL or a local path');
  }
  return { kind: 'local', dir: resolve(repository) };
}

/**
 * The cache folder of one remote for one tenant: `<cacheDir>/<tenant hash>/<URL hash>`. Hashes, so that neither a
 * tenant id nor a URL can name another folder (`..`), and two tenants whose ids differ only in case do not share a
 * folder on a file system that ignores case.
 */
export function remoteCacheDir(cacheDir: string, tenant: string, url: string): string {
  return join(tenantCacheDir(cacheDir, tenant), hashed(url));
}

function tenantCacheDir(cacheDir: string, tenant: string): string {
  return join(cacheDir, hashed(`tenant:${tenant}`));
}

function hashed(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 32);
}

/**
 * `path` with every symlink resolved; for a path that does not exist, its nearest existing ancestor resolved and the
 * rest kept as it is (what does not exist is no symlink). The source policy's `realPath` on a host with local sources.
 */
export function realLocalPath(path: string): string {
  const rest: string[] = [];
  for (let existing = resolve(path); ; ) {
    try {
      return join(fs.realpathSync.native(existing), ...rest);
    } catch (e) {
      const error = ensureError(e) as NodeJS.ErrnoException;
      const parent = dirname(existing);
      if ((error.code !== 'ENOENT' && error.code !== 'ENOTDIR') || parent === existing) throw error;
      rest.unshift(basename(existing));
      existing = parent;
    }
  }
}

/** The credential of a `credentialRef` as the secret store holds it: a token, or `{ username, password }`. */
export function gitCredential(secret: unknown): { readonly username: string; readonly password: string } {
  if (typeof secret === 'string' && secret !== '') return { username: 'x-access-token', password: secret };
  if (typeof secret === 'object' && secret !== null) {
    const { username, password } = secret as Record<string, unknown>;
    if (typeof username === 'string' && typeof password === 'string' && password !== '') return { username, password };
  }
  // Nothing of the value in the message: it is a secret, whatever its shape.
  throw new AppError(DesiredStateErrors.credentialInvalid, 'validation', 'the credential of the source rule is neither a token nor { username, password }');
}

function normalizePath(path: string): string {
  return path
    .split('/')
    .filter((segment) => segment !== '' && segment !== '.')
    .join('/');
}

async function localGitdir(dir: string): Promise<string> {
  const isDirectory = (p: string) => fs.promises.stat(p).then((s) => s.isDirectory(), () => false);
  if (await isDirectory(join(dir, '.git'))) return join(dir, '.git');
  // A bare repository: the folder itself holds HEAD and objects/.
  if ((await isDirectory(join(dir, 'objects'))) && fs.existsSync(join(dir, 'HEAD'))) return dir;
  throw new AppError(DesiredStateErrors.repositoryNotFound, 'not-found', 'the repository is not a Git repository on this host', { repository: dir });
}

async function readProject(gitdir: string, commit: string, path: string, maxBytes: number): Promise<Pick<DesiredState, 'files' | 'project' | 'stacks'>> {
  const git = isomorphicGit();
  const cache = {};
  try {
    await git.readCommit({ fs, gitdir, oid: commit, cache });
  } catch (e) {
    const error = ensureError(e);
    if (error instanceof git.Errors.NotFoundError || error instanceof git.Errors.ObjectTypeError) {
      throw new AppError(DesiredStateErrors.commitNotFound, 'not-found', `commit ${commit} is not in the repository`, { commit });
    }
    throw error;
  }
  let folder: string;
  try {
    folder = (await git.readTree({ fs, gitdir, oid: commit, ...(path ? { filepath: path } : {}), cache })).oid;
  } catch (e) {
    const error = ensureError(e);
    if (error instanceof git.Errors.NotFoundError || error instanceof git.Errors.ObjectTypeError) {
      throw new AppError(DesiredStateErrors.pathNotFound, 'not-found', `${path || '(root)'} is not a folder at commit ${commit}`, { commit, path });
    }
    throw error;
  }

  const files: Record<string, string> = {};
  let bytes = 0;
  const walk = async (tree: string, prefix: string): Promise<void> => {
    for (const entry of (await git.readTree({ fs, gitdir, oid: tree, cache })).tree) {
      const name = prefix + entry.path;
      if (entry.type === 'tree') {
        await walk(entry.oid, `${name}/`);
      } else if (entry.type === 'blob') {
        const { blob } = await git.readBlob({ fs, gitdir, oid: entry.oid, cache });
        bytes += blob.byteLength;
        if (bytes > maxBytes) {
          throw new AppError(DesiredStateErrors.tooLarge, 'too-large', `the files under ${path || '(root)'} exceed ${maxBytes} bytes`, { commit, path, maxBytes });
        }
        files[name] = Buffer.from(blob).toString('utf8');
      }
      // A `commit` entry is a submodule: its files live in another repository and are not part of this project.
    }
  };
  await walk(folder, '');

  const projectFile = Object.keys(files)
    .filter((name) => PROJECT_FILE.test(name))
    .sort()[0];
  if (projectFile === undefined) {
    throw new AppError(DesiredStateErrors.notAProject, 'validation', `${path || '(root)'} at commit ${commit} has no Pulumi.yaml`, { commit, path });
  }
  const stacks: Record<string, string> = {};
  // Sorted so that `Pulumi.<stack>.yaml` wins over `.yml` when both exist, as it does for Pulumi.
  for (const name of Object.keys(files).sort().reverse()) {
    const stack = STACK_FILE.exec(name)?.[1];
    if (stack !== undefined) stacks[stack] = files[name]!;
  }
  return { files, project: files[projectFile]!, stacks };
}

/** Reads from the tenant's cache of `url`, fetching into it first when the commit is not there yet. */
async function fromRemote<T>(url: string, commit: string, options: LoadDesiredStateOptions, read: (gitdir: string) => Promise<T>): Promise<T> {
  // The type requires a tenant; a caller out of TypeScript's sight must not fall back to a folder shared by all.
  if (typeof options.tenant !== 'string' || options.tenant === '') throw new Error('loadDesiredState needs the tenant to read a remote for');
  const cacheDir = options.cacheDir ?? join(tmpdir(), 'runtime-cloud-git-cache');
  const gitdir = remoteCacheDir(cacheDir, options.tenant, url);
  // One fetch or read at a time per cache folder in this process.
  return exclusive(gitdir, async () => {
    await isomorphicGit().init({ fs, dir: gitdir, bare: true });
    if (!(await hasCommit(gitdir, commit))) await fetchCommit(tenantCacheDir(cacheDir, options.tenant), gitdir, url, commit, options);
    return read(gitdir);
  });
}

type FetchHow = Pick<Parameters<IsomorphicGit['fetch']>[0], 'ref' | 'singleBranch' | 'depth' | 'tags'>;

/**
 * Fetches `commit` from `url` into the cache `gitdir`. First only that commit, depth 1 (servers that allow a sha in
 * `want` send one commit's objects); if the server refuses that, every branch and tag with full history, which finds
 * any commit a branch or tag reaches. A commit neither brings is left missing: `readProject` then reports it not
 * found. Both fetches share one budget of bytes and one deadline (`FetchSession`); a fetch that fails leaves nothing
 * in the cache (`fetchInto`).
 */
async function fetchCommit(tenantDir: string, gitdir: string, url: string, commit: string, options: LoadDesiredStateOptions): Promise<void> {
  const git = isomorphicGit();
  const session = new FetchSession(url, {
    maxBytes: options.fetchMaxBytes ?? DEFAULT_FETCH_MAX_BYTES,
    timeoutMs: options.fetchTimeoutMs ?? DEFAULT_FETCH_TIMEOUT_MS,
    idleTimeoutMs: options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
  });
  try {
    const { headers, secrets } = await authorization(session, options);
    const http = session.client(options.http ?? nodeHttpClient());
    const attempt = (how: FetchHow) => fetchInto(tenantDir, gitdir, url, commit, how, http, headers, session);
    try {
      if (await attempt({ ref: commit, singleBranch: true, depth: 1, tags: false })) return;
    } catch (e) {
      const error = ensureError(e);
      if (error instanceof AppError) throw error;
      // An HTTP status is the remote's answer about the repository itself; fetching more would get the same one.
      if (error instanceof git.Errors.HttpError) throw remoteFailure(url, error, secrets);
    }
    try {
      await attempt({ singleBranch: false, tags: true });
    } catch (e) {
      const error = ensureError(e);
      if (error instanceof AppError) throw error;
      throw remoteFailure(url, error, secrets);
    }
  } finally {
    session.close();
  }
}

/**
 * One fetch, into a fresh bare repository beside the cache; when it brought the commit, its packs are moved into the
 * cache (each pack before its index: readers find packs by their index, so no index shows without its pack). The
 * fresh repository is removed whatever happens, so a fetch that fails, is cut off or brings other commits leaves
 * nothing in the cache; and a fetch never tells the server about the cache's commits or shallow state (each asks for
 * what it needs from nothing). isomorphic-git writes what a fetch brings as one pack and its index, no loose objects.
 */
async function fetchInto(
  tenantDir: string,
  gitdir: string,
  url: string,
  commit: string,
  how: FetchHow,
  http: HttpClient,
  headers: Record<string, string>,
  session: FetchSession,
): Promise<boolean> {
  const git = isomorphicGit();
  await fs.promises.mkdir(tenantDir, { recursive: true });
  const incoming = await fs.promises.mkdtemp(join(tenantDir, '.incoming-'));
  try {
    await git.init({ fs, dir: incoming, bare: true });
    // isomorphic-git records what it fetched under the remote's refs, for which it needs the remote.
    await git.addRemote({ fs, gitdir: incoming, remote: 'origin', url });
    try {
      await git.fetch({ fs, http, gitdir: incoming, url, headers, ...how });
    } catch (e) {
      // The limit that cut the fetch off, rather than isomorphic-git's account of a broken stream.
      session.throwIfFailed();
      throw e;
    }
    // A limit passed while isomorphic-git was not reading (while it wrote the pack) fails the fetch all the same.
    session.throwIfFailed();
    if (!(await hasCommit(incoming, commit))) return false;
    const from = join(incoming, 'objects', 'pack');
    const to = join(gitdir, 'objects', 'pack');
    await fs.promises.mkdir(to, { recursive: true });
    const names = await fs.promises.readdir(from);
    for (const suffix of ['.pack', '.idx']) {
      for (const name of names.filter((n) => n.endsWith(suffix))) await fs.promises.rename(join(from, name), join(to, name));
    }
    return true;
  } finally {
    await fs.promises.rm(incoming, { recursive: true, force: true });
  }
}

/** The Authorization header of the source rule's credential (none without a credentialRef), and the strings never to show. */
async function authorization(session: FetchSession, options: LoadDesiredStateOptions): Promise<{ headers: Record<string, string>; secrets: string[] }> {
  if (options.credentialRef === undefined) return { headers: {}, secrets: [] };
  if (!options.resolveCredential) throw new Error('a credentialRef needs resolveCredential in the options of loadDesiredState');
  const { username, password } = gitCredential(await session.race(options.resolveCredential(options.credentialRef)));
  const encoded = Buffer.from(`${username}:${password}`).toString('base64');
  return { headers: { Authorization: `Basic ${encoded}` }, secrets: [password, encoded] };
}

/**
 * The bounds of one fetch, over every request it makes: the bytes received (every response body counted), a deadline
 * for the whole fetch, the idle timeout per connection, and no redirect. The first limit passed fails every pending
 * and later request of the session with its AppError and aborts the connections; the fetch's caller throws it
 * (isomorphic-git may wrap, or keep to itself, an error of its HTTP client).
 */
class FetchSession {
  #bytes = 0;
  #failure: AppError | undefined;
  readonly #controller = new AbortController();
  readonly #stopped: Promise<never>;
  readonly #stop: (error: AppError) => void;
  readonly #timer: NodeJS.Timeout;

  constructor(
    private readonly url: string,
    private readonly limits: { readonly maxBytes: number; readonly timeoutMs: number; readonly idleTimeoutMs: number },
  ) {
    let stop: (error: AppError) => void = () => undefined;
    this.#stopped = new Promise<never>((_, reject) => {
      stop = reject;
    });
    this.#stopped.catch(() => undefined);
    this.#stop = stop;
    const repository = describeRepository(url);
    const seconds = limits.timeoutMs / 1000;
    this.#timer = setTimeout(
      () => this.fail(new AppError(DesiredStateErrors.fetchTimeout, 'limit', `the fetch from ${repository} took longer than ${seconds} s`, { repository, timeoutSeconds: seconds })),
      limits.timeoutMs,
    );
  }

  fail(error: AppError): AppError {
    if (!this.#failure) {
      this.#failure = error;
      this.#stop(error);
      this.#controller.abort(error);
    }
    return this.#failure;
  }

  throwIfFailed(): void {
    if (this.#failure) throw this.#failure;
  }

  /** `work`, or the session's failure as soon as a limit is passed. */
  race<T>(work: Promise<T>): Promise<T> {
    this.throwIfFailed();
    return Promise.race([work, this.#stopped]);
  }

  close(): void {
    clearTimeout(this.#timer);
  }

  client(inner: HttpClient): HttpClient {
    return {
      request: async (request: GitHttpRequest): Promise<GitHttpResponse> => {
        const response = await this.race(
          inner.request({
            ...request,
            signal: this.#controller.signal,
            // simple-get's socket timeout; and a 3xx comes back as it is, for the check below.
            fetchOptions: { ...(request.fetchOptions as object | undefined), timeout: this.limits.idleTimeoutMs, followRedirects: false },
          }),
        );
        if (response.statusCode >= 300 && response.statusCode < 400) {
          void Promise.resolve(response.body?.return?.()).catch(() => undefined);
          throw this.fail(redirectRefused(this.url, request.url, response.headers?.location));
        }
        return response.body ? { ...response, body: this.#counted(response.body) } : response;
      },
    };
  }

  async *#counted(body: AsyncIterableIterator<Uint8Array>): AsyncIterableIterator<Uint8Array> {
    try {
      for (;;) {
        const next = await this.race(body.next());
        if (next.done) return;
        this.#bytes += next.value.byteLength;
        if (this.#bytes > this.limits.maxBytes) {
          const repository = describeRepository(this.url);
          throw this.fail(
            new AppError(DesiredStateErrors.fetchTooLarge, 'too-large', `the fetch from ${repository} received more than ${this.limits.maxBytes} bytes`, {
              repository,
              maxBytes: this.limits.maxBytes,
            }),
          );
        }
        yield next.value;
      }
    } finally {
      // Not awaited: a body stuck on a silent server would hold its return as long.
      void Promise.resolve(body.return?.()).catch(() => undefined);
    }
  }
}

function redirectRefused(url: string, requested: string, location: string | undefined): AppError {
  const repository = describeRepository(url);
  const target = location !== undefined && URL.canParse(location, requested) ? new URL(location, requested) : undefined;
  // Where it pointed, without credentials, query or fragment (a signed URL's token is no business of a log).
  const shown = target ? describeRepository(`${target.protocol}//${target.host}${target.pathname}`) : 'nowhere usable';
  return new AppError(
    DesiredStateErrors.redirectRefused,
    'forbidden',
    `the remote ${repository} answered with a redirect to ${shown}; redirects are not followed, so allow and promote the URL the repository lives at`,
    { repository, location: shown },
  );
}

function remoteFailure(url: string, error: Error, secrets: readonly string[]): AppError {
  const git = isomorphicGit();
  const repository = redactUrl(url);
  const status = error instanceof git.Errors.HttpError ? error.data.statusCode : undefined;
  if (status === 404) {
    return new AppError(DesiredStateErrors.repositoryNotFound, 'not-found', `the remote ${repository} has no such repository (404)`, { repository, status });
  }
  // Refused access (401, 403) counts as transient too: the promotion is not at fault, the host's credentials are,
  // and retries until dead-letter make that visible without rejecting a valid promotion.
  return new AppError(DesiredStateErrors.remoteUnreachable, 'unavailable', `the remote ${repository} could not be read: ${redactMessage(error.message, url, secrets)}`, {
    repository,
    ...(status !== undefined ? { status } : {}),
  });
}

/** The message without the URL's credentials or the fetch's credential (a server may echo a header back), and short. */
function redactMessage(message: string, url: string, secrets: readonly string[]): string {
  let redacted = message.split(url).join(redactUrl(url));
  for (const secret of secrets) redacted = redacted.split(secret).join('***');
  return redacted.length > 300 ? `${redacted.slice(0, 297)}...` : redacted;
}

async function hasCommit(gitdir: string, commit: string): Promise<boolean> {
  const git = isomorphicGit();
  try {
    await git.readCommit({ fs, gitdir, oid: commit });
    return true;
  } catch {
    return false;
  }
}


const queues = new Map<string, Promise<unknown>>();

async function exclusive<T>(key: string, work: () => Promise<T>): Promise<T> {
  const previous = queues.get(key) ?? Promise.resolve();
  const current = previous.then(work, work);
  const settled = current.catch(() => undefined);
  queues.set(key, settled);
  try {
    return await current;
  } finally {
    if (queues.get(key) === settled) queues.delete(key);
  }
}
