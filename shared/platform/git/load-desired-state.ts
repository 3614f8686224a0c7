import * as fs from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppError, ensureError } from '../errors/app-error';
import { redactUrl } from './repository-url';
import { DesiredStateErrors, isomorphicGit, type DesiredState, type DesiredStateRef, type LoadDesiredStateOptions } from './desired-state';
import { fromRemote } from './git-fetch';

/**
 * Reading a desired state: the commit's project folder from a local repository, or from a remote fetched first
 * (git-fetch.ts), bounded by bytes, remembered by tenant, repository, commit and path.
 */

const DEFAULT_MAX_BYTES = 5 * 1024 * 1024;

const PROJECT_FILE = /^Pulumi\.ya?ml$/;

const STACK_FILE = /^Pulumi\.([A-Za-z0-9_.-]+)\.ya?ml$/;

const FULL_SHA = /^[0-9a-f]{40}$/;

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
