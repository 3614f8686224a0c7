import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HttpClient } from 'isomorphic-git';
import { LRUCache } from 'lru-cache';
import { AppError, ensureError } from '../errors/app-error';
import { redactUrl } from './repository-url';

/**
 * Desired state from Git: the files of a Pulumi YAML project at exactly one commit, from a local repository or an
 * HTTPS remote. Errors carry stable codes; their kind tells a caller whether retrying can help:
 * `unavailable` (the remote could not be reached) is transient, every other kind means the promotion is wrong.
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
  /** Not an HTTPS URL, a file:// URL or a local path (ssh, plain http, …): permanent. */
  repositoryUnsupported: 'DESIRED_STATE.REPOSITORY_UNSUPPORTED',
  /** The project's files exceed the size limit: permanent. */
  tooLarge: 'DESIRED_STATE.TOO_LARGE',
  /** The remote did not answer, timed out, failed or refused access: transient, worth retrying. */
  remoteUnreachable: 'DESIRED_STATE.REMOTE_UNREACHABLE',
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

export interface LoadDesiredStateOptions {
  /**
   * Where remotes are fetched to, one bare repository per remote URL; commits never change, so a commit found
   * there is read without asking the remote again. Example: `join(stateDir, 'git-cache')`.
   * Default: `runtime-cloud-git-cache` in the OS temporary folder.
   */
  readonly cacheDir?: string;
  /** The HTTP client for remotes. Default: isomorphic-git's Node client with `idleTimeoutMs`. */
  readonly http?: HttpClient;
  /** A remote connection silent this long fails as unreachable (default 30 000), so a hung remote cannot hang a run. */
  readonly idleTimeoutMs?: number;
  /** Most bytes of file content read from the folder (default 5 MiB): a promotion naming a huge folder is refused. */
  readonly maxBytes?: number;
  /**
   * Projects already read, kept by repository, commit and path: a commit never changes, and a run reads its commit
   * at intake, plan and apply. One per host. Example: `desiredStateMemory()`.
   */
  readonly memory?: DesiredStateMemory;
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
 * Reads the Pulumi project at `ref.path` in `ref.repository` at exactly `ref.commit`. Every expected failure is an
 * `AppError` with a code of `DesiredStateErrors`; anything else (a corrupt repository, a full disk) is a bug or an
 * outage and is thrown as it is.
 */
export async function loadDesiredState(ref: DesiredStateRef, options: LoadDesiredStateOptions = {}): Promise<DesiredState> {
  const key = JSON.stringify([ref.repository, ref.commit, normalizePath(ref.path), options.maxBytes ?? DEFAULT_MAX_BYTES]);
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
 * The cache folder of one remote: a hash of the whole URL, credentials included, so that a tenant's credentials
 * never read a commit that was fetched with another's, and no token appears in a folder name.
 */
export function remoteCacheDir(cacheDir: string, url: string): string {
  return join(cacheDir, createHash('sha256').update(url).digest('hex').slice(0, 32));
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

/** Reads from the cache of `url`, fetching into it first when the commit is not there yet. */
async function fromRemote<T>(url: string, commit: string, options: LoadDesiredStateOptions, read: (gitdir: string) => Promise<T>): Promise<T> {
  const gitdir = remoteCacheDir(options.cacheDir ?? join(tmpdir(), 'runtime-cloud-git-cache'), url);
  const http = options.http ?? withIdleTimeout(nodeHttpClient(), options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS);
  // One fetch or read at a time per cache folder in this process: a read must not see a half-written pack.
  return exclusive(gitdir, async () => {
    await initCache(gitdir, url);
    if (!(await hasCommit(gitdir, commit))) await fetchCommit(gitdir, url, commit, http);
    return read(gitdir);
  });
}

/**
 * Fetches `commit` from `url`. First only that commit, depth 1 (servers that allow a sha in `want` send one
 * commit's objects); if the server refuses that, every branch and tag with full history, which finds any commit
 * a branch or tag reaches. A commit neither brings is left missing: `readProject` then reports it not found.
 */
async function fetchCommit(gitdir: string, url: string, commit: string, http: HttpClient): Promise<void> {
  const git = isomorphicGit();
  try {
    await git.fetch({ fs, http, gitdir, url, ref: commit, singleBranch: true, depth: 1, tags: false });
    if (await hasCommit(gitdir, commit)) return;
  } catch (e) {
    const error = ensureError(e);
    // An HTTP status is the remote's answer about the repository itself; fetching more would get the same one.
    if (error instanceof git.Errors.HttpError) throw remoteFailure(url, error);
  }
  // A cache made shallow by earlier fetches would make the server stop at its shallow commits and never send an
  // older commit; the cache holds nothing that cannot be fetched again, so start it afresh.
  if (fs.existsSync(join(gitdir, 'shallow'))) {
    await fs.promises.rm(gitdir, { recursive: true, force: true });
    await initCache(gitdir, url);
  }
  try {
    await git.fetch({ fs, http, gitdir, url, singleBranch: false, tags: true });
  } catch (e) {
    throw remoteFailure(url, ensureError(e));
  }
}

/**
 * A bare repository with the remote `origin`, whose fetch refspec isomorphic-git needs to record what it fetched.
 * The URL is stored without credentials: every fetch passes the full URL itself, and no token lands on disk.
 */
async function initCache(gitdir: string, url: string): Promise<void> {
  const git = isomorphicGit();
  await git.init({ fs, dir: gitdir, bare: true });
  await git.addRemote({ fs, gitdir, remote: 'origin', url: redactUrl(url), force: true });
}

function remoteFailure(url: string, error: Error): AppError {
  const git = isomorphicGit();
  const repository = redactUrl(url);
  const status = error instanceof git.Errors.HttpError ? error.data.statusCode : undefined;
  if (status === 404) {
    return new AppError(DesiredStateErrors.repositoryNotFound, 'not-found', `the remote ${repository} has no such repository (404)`, { repository, status });
  }
  // Refused access (401, 403) counts as transient too: the promotion is not at fault, the host's credentials are,
  // and retries until dead-letter make that visible without rejecting a valid promotion.
  return new AppError(DesiredStateErrors.remoteUnreachable, 'unavailable', `the remote ${repository} could not be read: ${redactMessage(error.message, url)}`, {
    repository,
    ...(status !== undefined ? { status } : {}),
  });
}

function redactMessage(message: string, url: string): string {
  return message.split(url).join(redactUrl(url));
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

/** The Node client with a socket idle timeout (simple-get aborts the request when the socket is silent that long). */
function withIdleTimeout(http: HttpClient, timeout: number): HttpClient {
  return { request: (request) => http.request({ ...request, fetchOptions: { timeout, ...(request.fetchOptions as object | undefined) } }) };
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
