import * as fs from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { GitHttpRequest, GitHttpResponse, HttpClient } from 'isomorphic-git';
import { AppError, ensureError } from '../errors/app-error';
import { describeRepository, redactUrl } from './repository-url';
import { DesiredStateErrors, isomorphicGit, type IsomorphicGit, type LoadDesiredStateOptions } from './desired-state';

/**
 * Fetching a remote commit into the tenant's own cache folder: no redirect followed, bounded by bytes and by a
 * deadline, the source rule's credential sent only in that fetch's requests, nothing left in the cache on failure,
 * one fetch per cache folder at a time.
 */

const DEFAULT_IDLE_TIMEOUT_MS = 30_000;

const DEFAULT_FETCH_MAX_BYTES = 64 * 1024 * 1024;

const DEFAULT_FETCH_TIMEOUT_MS = 120_000;

/** isomorphic-git's Node HTTP client, loaded with the first remote read. */
function nodeHttpClient(): HttpClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('isomorphic-git/http/node') as typeof import('isomorphic-git/http/node')).default;
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

/** Reads from the tenant's cache of `url`, fetching into it first when the commit is not there yet. */
export async function fromRemote<T>(url: string, commit: string, options: LoadDesiredStateOptions, read: (gitdir: string) => Promise<T>): Promise<T> {
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
