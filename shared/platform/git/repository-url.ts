import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Repository strings as the host reads them. Pure (no I/O): views load it without the Git client, the source policy
 * matches with it, and configuration validates source prefixes with it.
 */

/** The URL without user name and password, for messages and logs. */
export function redactUrl(repository: string): string {
  if (!URL.canParse(repository)) return repository;
  const url = new URL(repository);
  if (!url.username && !url.password) return repository;
  url.username = '';
  url.password = '';
  return url.href;
}

/**
 * A repository string in a form safe to show in a reason, an error or a log: credentials taken out (also from a
 * string that is no valid URL), control characters dropped, at most 200 characters.
 */
export function describeRepository(repository: string): string {
  const printable = repository.replace(/[\u0000-\u001f\u007f]/g, '');
  const shown = URL.canParse(printable) ? redactUrl(printable) : printable.replace(/\/\/[^/]*@/, '//').replace(/^[^/\\]*@/, '');
  return shown.length > 200 ? `${shown.slice(0, 197)}...` : shown;
}

/**
 * Where a repository string points, normalized so that two strings naming the same place read the same and a string
 * cannot name one place to a check and another to the fetch:
 * - `https`: the origin (scheme, lower-case host, port unless 443) and the path as segments, dot segments resolved
 *   and percent-escapes decoded; `href` is the URL to fetch (the same place, written one way).
 * - `file`: an absolute local path, `..` resolved (symlinks are not: that needs the disk, see the source policy).
 *   A `file://` URL, or a bare path (`/srv/repo`, or one relative to the working directory).
 * - `refused`: `credentials` for a URL with a user name or password (never echoed), `unsupported` for anything else
 *   the host does not fetch (plain http, ssh, scp-like `user@host:path`, a query, a path segment that decodes to a
 *   separator or a dot segment, control characters), with a reason a human can read.
 */
export type RepositoryAddress =
  | { readonly kind: 'https'; readonly origin: string; readonly segments: readonly string[]; readonly href: string }
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'refused'; readonly why: 'credentials' | 'unsupported'; readonly reason: string };

const SCHEME = /^[a-z][a-z0-9+.-]*:/i;
/** `user@host:path`, which git reads as ssh: an `@` before the first `:`, and no `/` before either. */
const SCP_LIKE = /^[^/\\]*@[^/\\]*:/;
/** `scheme://user[:password]@`: an `@` in the authority, before any path, query or fragment. */
const USERINFO = /^[a-z][a-z0-9+.-]*:\/\/[^/?#\\]*@/i;
const CONTROL = /[\u0000-\u001f\u007f]/;

export function repositoryAddress(repository: string): RepositoryAddress {
  const shown = describeRepository(repository);
  const unsupported = (why: string): RepositoryAddress => ({ kind: 'refused', why: 'unsupported', reason: `the repository ${shown} ${why}` });
  // The URL parser drops tabs and newlines silently: a string holding them would be checked as one place and could
  // be read as another by a client that parses differently.
  if (CONTROL.test(repository)) return unsupported('has control characters');
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(repository) && SCP_LIKE.test(repository)) {
    return unsupported('is an ssh address (user@host:path); only https: repositories are fetched');
  }
  if (!SCHEME.test(repository)) return { kind: 'file', path: withoutTrailingSeparator(resolve(repository)) };
  // Userinfo is looked for in the text too: a URL the parser rejects (or a file: URL, which has no userinfo to it)
  // may still carry credentials that must not be stored.
  const parsed = URL.canParse(repository) ? new URL(repository) : undefined;
  if (parsed?.username || parsed?.password || USERINFO.test(repository)) {
    return {
      kind: 'refused',
      why: 'credentials',
      reason: `the repository ${shown} carries a user name or password in its URL; credentials come from the source rule's credentialRef, never from a promotion`,
    };
  }
  if (!parsed) return unsupported('is not a valid URL');
  const url = parsed;
  if (url.protocol !== 'https:' && url.protocol !== 'file:') {
    return unsupported(`uses ${url.protocol}, which is not accepted; only https: repositories are fetched (and file: where the host allows local sources)`);
  }
  if (url.search || url.hash || repository.includes('?') || repository.includes('#')) return unsupported('has a query or a fragment');
  // A backslash is a path separator to the URL parser (for https and file) but not to every other reader.
  if (repository.includes('\\')) return unsupported('has a backslash');
  if (url.protocol === 'file:') {
    let path: string;
    try {
      path = fileURLToPath(url);
    } catch {
      return unsupported('is a file URL that names no local folder (a host, or an encoded separator)');
    }
    return { kind: 'file', path: withoutTrailingSeparator(resolve(path)) };
  }
  const raw = url.pathname.split('/').slice(1);
  if (raw.at(-1) === '') raw.pop();
  const segments: string[] = [];
  for (const segment of raw) {
    if (segment === '') return unsupported('has an empty path segment (//)');
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return unsupported('has a malformed percent-escape');
    }
    // A server that decodes `%2F` or `%2E%2E` before resolving the path would read `org/..%2Fevil` as `evil`.
    if (/[/\\\0]/.test(decoded) || decoded === '.' || decoded === '..') return unsupported('has a path segment that decodes to a separator or a dot segment');
    segments.push(decoded);
  }
  return { kind: 'https', origin: url.origin, segments, href: `${url.origin}/${raw.join('/')}` };
}

/**
 * Why `prefix` cannot be a source prefix, or undefined when it can: an `https:` or `file:` URL (a bare path would
 * depend on the working directory), with no credentials (they go in `credentialRef`), query or fragment.
 */
export function sourcePrefixProblem(prefix: string): string | undefined {
  if (!/^(https|file):\/\//i.test(prefix)) return 'must be an https:// or file:// URL';
  const address = repositoryAddress(prefix);
  if (address.kind === 'refused') return address.why === 'credentials' ? 'must not carry credentials (use credentialRef)' : address.reason.replace(/^the repository \S+ /, '');
  return undefined;
}

function withoutTrailingSeparator(path: string): string {
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}
