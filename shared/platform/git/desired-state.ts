import type { HttpClient } from 'isomorphic-git';
import { LRUCache } from 'lru-cache';

/**
 * Desired state from Git: the files of a Pulumi YAML project at exactly one commit, from a local repository or an
 * HTTPS remote. Errors carry stable codes; their kind tells a caller whether retrying can help:
 * `unavailable` (the remote could not be reached) is transient, every other kind means the promotion is wrong.
 *
 * Which repositories may be read is not decided here (the source policy of the provisioning module does it before
 * any read); what is decided here (load-desired-state.ts, git-fetch.ts) is how a remote is fetched: into the tenant's own cache folder, with no redirect
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

/** What the installation sets once for every read: where and how remotes are fetched. */
export interface DesiredStateFetchSettings {
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
export interface LoadDesiredStateOptions extends DesiredStateFetchSettings {
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

export type IsomorphicGit = typeof import('isomorphic-git');

let loadedGit: IsomorphicGit | undefined;

/** isomorphic-git, loaded on the first read rather than with this module: a host that never reads Git never loads it. */
export function isomorphicGit(): IsomorphicGit {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (loadedGit ??= require('isomorphic-git') as IsomorphicGit);
}
