import { sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { AppError } from '../platform/errors/app-error';
import { describeRepository, repositoryAddress, sourcePrefixProblem } from '../platform/git/repository-url';

/**
 * Which repositories a tenant may promote from: the installation says (`RuntimeCloud__Provisioning__Sources`), never
 * the promotion. Pure: the one thing that needs the disk (resolving symlinks of local paths) is passed in by the host.
 *
 * A rule's prefix names whole path segments of a normalized address: `https://git.example.com/org/` allows
 * `https://git.example.com/org/app.git`, not `https://git.example.com/org-evil/app.git`, nor another host or port
 * (`https://git.example.com.evil.io/org/`), nor a path that leaves the prefix through `..` or escapes. A local prefix
 * (`file:///state/repos/`) is compared on real paths, so neither `..` nor a symlink leads out of it.
 */
export const SourceErrors = {
  /** No rule of the tenant or of `*` allows the repository, or the host does not fetch its kind (http, ssh, file where local sources are off). */
  notAllowed: 'PROVISIONING.SOURCE_NOT_ALLOWED',
  /** The repository URL carries a user name or password: refused whatever the rules say, and never stored. */
  credentialsInline: 'PROVISIONING.SOURCE_CREDENTIALS_INLINE',
} as const;
export type SourceErrorCode = (typeof SourceErrors)[keyof typeof SourceErrors];

/** One rule of the setting. Example: `{ "prefix": "https://git.example.com/org/", "credentialRef": "broker://git/org-read" }`. */
export interface SourceRule {
  readonly prefix: string;
  /** A Secret Broker reference of the credential to fetch with; resolved at fetch time only, never stored. https: prefixes only. */
  readonly credentialRef?: string;
}

/** The setting as configuration holds it: rules by tenant id, or `*` for every tenant. */
export type SourceRules = Readonly<Record<string, readonly SourceRule[]>>;

interface CompiledRule {
  readonly rule: SourceRule;
  readonly address: { readonly kind: 'https'; readonly origin: string; readonly segments: readonly string[] } | { readonly kind: 'file'; readonly path: string };
}

/** The rules, parsed once. */
export interface SourcePolicy {
  readonly byTenant: ReadonlyMap<string, readonly CompiledRule[]>;
}

/** What the host lets a promotion name besides https: remotes. Not read from the environment: the host says. */
export type LocalSourceAccess =
  | { readonly localSources: false }
  | {
      readonly localSources: true;
      /**
       * The path with every symlink resolved (for a path that does not exist, its nearest existing ancestor resolved
       * and the rest kept). Example: `realLocalPath` of `shared/platform/git/desired-state.ts`.
       */
      readonly realPath: (path: string) => string;
    };

export type SourceCheck =
  | {
      readonly allowed: true;
      /** The repository normalized (for a local one, the file URL of its real path): what to fetch and to store. */
      readonly repository: string;
      /** The prefix of the rule that allowed it. */
      readonly prefix: string;
      readonly credentialRef?: string;
    }
  | SourceRefusal;

export interface SourceRefusal {
  readonly allowed: false;
  readonly code: SourceErrorCode;
  /** For a human, naming the repository without its credentials. */
  readonly reason: string;
}

/**
 * The policy of `rules` (the setting as configuration parsed it). Throws on a prefix configuration would have
 * refused, so a policy built past configuration holds only prefixes it understands.
 */
export function parseSourcePolicy(rules: SourceRules): SourcePolicy {
  const byTenant = new Map<string, CompiledRule[]>();
  for (const [tenant, list] of Object.entries(rules)) {
    byTenant.set(
      tenant,
      list.map((rule) => {
        const problem = sourcePrefixProblem(rule.prefix);
        const address = repositoryAddress(rule.prefix);
        if (problem !== undefined || address.kind === 'refused') throw new Error(`source prefix ${describeRepository(rule.prefix)} of ${tenant} ${problem ?? 'is refused'}`);
        if (address.kind === 'file' && rule.credentialRef !== undefined) throw new Error(`source prefix ${rule.prefix} of ${tenant}: credentialRef applies to https: prefixes only`);
        return { rule, address: address.kind === 'https' ? { kind: 'https', origin: address.origin, segments: address.segments } : address };
      }),
    );
  }
  return { byTenant };
}

/**
 * Whether `tenant` may promote from `repository`. The most specific matching rule wins (the longest prefix); on a
 * tie the tenant's own rule wins over a `*` rule, then the first listed. Order of checks: credentials in the URL
 * (refused whatever the rules say), then what the host fetches at all, then the rules.
 */
export function checkSource(policy: SourcePolicy, tenant: string, repository: string, options: LocalSourceAccess): SourceCheck {
  const address = repositoryAddress(repository);
  if (address.kind === 'refused') {
    return { allowed: false, code: address.why === 'credentials' ? SourceErrors.credentialsInline : SourceErrors.notAllowed, reason: address.reason };
  }
  const shown = describeRepository(repository);
  if (address.kind === 'file' && !options.localSources) {
    return { allowed: false, code: SourceErrors.notAllowed, reason: `the repository ${shown} is local (a file: URL or a path); this host fetches https: repositories only` };
  }
  const candidates = [...(policy.byTenant.get(tenant) ?? []), ...(tenant === '*' ? [] : (policy.byTenant.get('*') ?? []))];
  const real = address.kind === 'file' && options.localSources ? options.realPath(address.path) : undefined;
  let best: { rule: SourceRule; length: number } | undefined;
  for (const { rule, address: prefix } of candidates) {
    let length: number | undefined;
    if (address.kind === 'https' && prefix.kind === 'https') {
      if (prefix.origin === address.origin && startsWith(address.segments, prefix.segments)) length = prefix.segments.length;
    } else if (real !== undefined && prefix.kind === 'file' && options.localSources) {
      const prefixSegments = pathSegments(options.realPath(prefix.path));
      if (startsWith(pathSegments(real), prefixSegments)) length = prefixSegments.length;
    }
    if (length !== undefined && (best === undefined || length > best.length)) best = { rule, length };
  }
  if (best === undefined) {
    return { allowed: false, code: SourceErrors.notAllowed, reason: `the repository ${shown} is not under a source prefix allowed for tenant ${tenant}` };
  }
  return {
    allowed: true,
    repository: address.kind === 'https' ? address.href : pathToFileURL(real ?? address.path).href,
    prefix: best.rule.prefix,
    ...(best.rule.credentialRef !== undefined ? { credentialRef: best.rule.credentialRef } : {}),
  };
}

/** The AppError of a refused source, for the run's `ProvisioningFailed`: its code, its reason, nothing secret. */
export function sourceRefusedError(refusal: SourceRefusal, tenant: string): AppError {
  return new AppError(refusal.code, 'forbidden', refusal.reason, { tenant });
}

function startsWith(segments: readonly string[], prefix: readonly string[]): boolean {
  return prefix.length <= segments.length && prefix.every((segment, i) => segments[i] === segment);
}

function pathSegments(path: string): string[] {
  return path.split(sep).filter((segment) => segment !== '');
}
