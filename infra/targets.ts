/**
 * The `targets` and `runnerImage` config of the infra program, parsed and checked before any resource is declared.
 * Pure (no Pulumi import): tests/infra/targets.test.ts runs it directly.
 *
 * A target is where an environment's infrastructure lives (docs/architecture.md, "IaC: targets, runner agents
 * and engines"). Only `azure-subscription` targets get Azure runner agents from this program; the agents of
 * `aks-cluster` and `on-prem` targets are customer-hosted and pull their jobs (infra/README.md).
 */
import { createHash } from 'node:crypto';

export const TARGET_KINDS = ['azure-subscription', 'aks-cluster', 'on-prem'] as const;
export type TargetKind = (typeof TARGET_KINDS)[number];

/** Parallel job executions of a pool when `runners.max` is not set. */
export const DEFAULT_MAX_RUNNERS = 2;
/** Upper bound of `runners.max`: each execution can hold a long apply on the target at once. */
export const MAX_RUNNERS = 50;

export interface AzureScope {
  readonly subscriptionId: string;
  readonly resourceGroup: string;
}

interface TargetBase {
  readonly id: string;
  readonly name: string;
  readonly location?: string;
  readonly endpoint?: string;
  /**
   * The target's runner pool: the capacity pool of its runner leases (the host's `runnerPool`), and the base of its
   * tenants' default agent pool ids (`<pool>.<tenant>`).
   */
  readonly pool: string;
  /** Tenants that share one agent pool on this target, as the installation groups them (none by default). */
  readonly runnerPools: readonly RunnerPoolGroup[];
}
/** An explicit group of tenants sharing one agent pool (the host's `runnerPools` entry). */
export interface RunnerPoolGroup {
  readonly id: string;
  readonly tenants: readonly string[];
}
/**
 * An agent pool this program deploys: its agents serve exactly `tenants` on one target. `id` is what the agents'
 * credential names, what the host's claim checks and what the wake-up's `pool` carries; `name` is the short,
 * stable name of its Azure resources (`runner-<name>` is its job, identity and subscription).
 */
export interface AgentPool {
  readonly id: string;
  readonly target: string;
  readonly tenants: readonly string[];
  readonly name: string;
}
export interface AzureTarget extends TargetBase {
  readonly kind: 'azure-subscription';
  readonly scope: AzureScope;
  /** Most job executions of each of its agent pools at once (each Container Apps Job's `maxExecutions`). */
  readonly maxRunners: number;
  /** The tenants whose jobs run here: each gets its own state container and key, and an agent pool. */
  readonly tenants: readonly string[];
  /** One per explicit group, then one per tenant in no group (`agentPoolsOf`). */
  readonly agentPools: readonly AgentPool[];
}
export interface CustomerHostedTarget extends TargetBase {
  readonly kind: 'aks-cluster' | 'on-prem';
  /** Where the customer's agents keep each tenant's state and key: `{tenant}` in both (the host's `backend`). */
  readonly backend: TargetBackend;
  /**
   * How the host's drift scans reach the target's cluster, as the host's `RuntimeCloud__Targets` takes it: an
   * `aks-cluster` target's `server` and `certificateAuthorityData`, or a `kubeconfig` of the target's own.
   */
  readonly kubernetes?: Readonly<Record<string, unknown>>;
  /** The client id of the identity whose Entra token reads an `aks-cluster` target's cluster. */
  readonly observerClientId?: string;
}
export interface TargetBackend {
  readonly url: string;
  readonly secretsProvider?: string;
}
export type Target = AzureTarget | CustomerHostedTarget;

/**
 * Target ids name `observer-<id>` and the target's state (`stateNames`); a target's `pool` is the base of its default
 * agent pool ids. Both keep the rule of a Container Apps job name (lowercase letters, digits and single hyphens,
 * starting with a letter) that they had when they named a target's one job.
 */
const NAME = /^[a-z](?:[a-z0-9]|-(?=[a-z0-9])){0,23}$/;
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Azure's rule for resource group names: 1–90 of letters, digits, `-_.()`, not ending in `.`. */
const RESOURCE_GROUP = /^[-\w.()]{0,89}[-\w()]$/;
const KEYS = ['id', 'kind', 'name', 'location', 'endpoint', 'scope', 'pool', 'runners', 'tenants', 'runnerPools', 'backend', 'kubernetes', 'observerClientId'];
/** The host's explicit pool ids: no `.`, so that none is ever a default pool id `<pool>.<tenant>`. */
const POOL_ID = /^[a-z0-9][a-z0-9-]{0,39}$/;
/** A tenant id as the host takes it (shared/platform/config/targets.ts, `tenantSegmentProblem`). */
const HOST_TENANT = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;
/**
 * A tenant of an Azure target: its state container `state-<tenant>` must be a blob container name (3-63 lowercase
 * letters, digits and single hyphens) and its key `pulumi-<tenant>` a Key Vault key name, so the host's ids narrowed
 * to lowercase letters, digits and single hyphens, at most 57 characters.
 */
const AZURE_TENANT = /^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){0,56}$/;

/** The `targets` config, checked: every problem names the config path and what was given. */
export function parseTargets(raw: unknown): Target[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new Error(`config targets must be a non-empty JSON array of targets (got ${show(raw)})`);
  const targets = raw.map((entry, index) => parseTarget(entry, `targets[${index}]`));
  unique(targets, (t) => t.id, 'id');
  // A pool's agents act with one target's identity: a pool shared by two targets would take jobs it cannot run.
  unique(targets, (t) => t.pool, 'pool');
  unique(targets.filter(isAzureTarget), (t) => scopeId(t.scope).toLowerCase(), 'scope');
  // An agent's credential names one pool, which must mean one target and one set of tenants.
  uniquePools(targets.flatMap((t) => t.runnerPools.map((p) => ({ key: p.id, owner: t.id }))), 'id');
  // Two pools' jobs, identities and subscriptions must not get the same Azure name.
  uniquePools(targets.filter(isAzureTarget).flatMap((t) => t.agentPools.map((p) => ({ key: p.name, owner: p.id }))), 'resource name');
  return targets;
}

function parseTarget(entry: unknown, at: string): Target {
  if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) throw new Error(`config ${at} must be an object (got ${show(entry)})`);
  const t = entry as Record<string, unknown>;
  const unknownKey = Object.keys(t).find((key) => !KEYS.includes(key));
  if (unknownKey) throw new Error(`config ${at}.${unknownKey} is not a target field (known: ${KEYS.join(', ')})`);

  const id = name(t.id, `${at}.id`);
  const kind = t.kind;
  if (kind === 'local-cloud') throw new Error(`config ${at}.kind local-cloud is the local host's own target and has no place in an Azure deployment`);
  if (!TARGET_KINDS.includes(kind as TargetKind)) throw new Error(`config ${at}.kind must be one of ${TARGET_KINDS.join(', ')} (got ${show(kind)})`);
  const base: TargetBase = {
    id,
    name: nonEmpty(t.name, `${at}.name`),
    ...(t.location !== undefined ? { location: nonEmpty(t.location, `${at}.location`) } : {}),
    ...(t.endpoint !== undefined ? { endpoint: nonEmpty(t.endpoint, `${at}.endpoint`) } : {}),
    pool: t.pool === undefined ? id : name(t.pool, `${at}.pool`),
    runnerPools: [],
  };
  if (kind !== 'azure-subscription') {
    // Customer-hosted agents run with the customer's identity and size themselves, and the host derives their
    // tenants' default pools itself: nothing here to scope, scale or list.
    for (const key of ['scope', 'runners', 'tenants']) {
      if (t[key] !== undefined) throw new Error(`config ${at}.${key} applies to azure-subscription targets only (${id} is ${String(kind)})`);
    }
    return {
      ...base,
      runnerPools: parseGroups(t.runnerPools, hostTenant, undefined, `${at}.runnerPools`),
      kind: kind as CustomerHostedTarget['kind'],
      backend: parseBackend(t.backend, `${at}.backend`),
      ...(t.kubernetes !== undefined ? { kubernetes: parseKubernetes(t.kubernetes, kind as CustomerHostedTarget['kind'], `${at}.kubernetes`) } : {}),
      ...(t.observerClientId !== undefined ? { observerClientId: guid(t.observerClientId, `${at}.observerClientId`) } : {}),
    };
  }
  if (t.backend !== undefined) throw new Error(`config ${at}.backend is this program's for an azure-subscription target (its state account and vault): remove it`);
  // An Azure target's observer identity and cluster access are this program's (its observer identity reads ARM).
  for (const key of ['kubernetes', 'observerClientId']) {
    if (t[key] !== undefined) throw new Error(`config ${at}.${key} applies to customer-hosted targets only (${id} is azure-subscription)`);
  }
  const tenants = parseTenants(t.tenants, `${at}.tenants`);
  const runnerPools = parseGroups(t.runnerPools, azureTenant, tenants, `${at}.runnerPools`);
  return {
    ...base,
    runnerPools,
    kind,
    scope: parseScope(t.scope, `${at}.scope`),
    maxRunners: parseRunners(t.runners, `${at}.runners`),
    tenants,
    agentPools: agentPoolsOf(id, base.pool, tenants, runnerPools),
  };
}

/** An Azure target's `tenants`: required, each once, each able to name a blob container and a key. */
function parseTenants(raw: unknown, at: string): string[] {
  if (!Array.isArray(raw) || raw.length === 0) {
    throw new Error(`config ${at} is required for an azure-subscription target: the tenants its runners serve, e.g. ["contoso"] (got ${show(raw)})`);
  }
  const tenants = raw.map((tenant, index) => azureTenant(tenant, `${at}[${index}]`));
  const twice = tenants.find((tenant, index) => tenants.indexOf(tenant) !== index);
  if (twice !== undefined) throw new Error(`config ${at} names ${twice} twice`);
  return tenants;
}

function azureTenant(raw: unknown, at: string): string {
  if (typeof raw !== 'string' || !AZURE_TENANT.test(raw)) {
    throw new Error(`config ${at} must be a tenant id that can name its state container state-<tenant> and key pulumi-<tenant>: 1-57 lowercase letters, digits and single hyphens (got ${show(raw)})`);
  }
  return raw;
}

function hostTenant(raw: unknown, at: string): string {
  if (typeof raw !== 'string' || !HOST_TENANT.test(raw)) throw new Error(`config ${at} must be a tenant id: 1-63 letters, digits, "_" and "-", starting with a letter or digit (got ${show(raw)})`);
  return raw;
}

/**
 * `runnerPools`: groups of tenants sharing one agent pool, each tenant in one group at most; on an Azure target each
 * must be one of its `tenants` (a tenant named only here would have no state).
 */
function parseGroups(raw: unknown, tenantOf: (raw: unknown, at: string) => string, served: readonly string[] | undefined, at: string): RunnerPoolGroup[] {
  if (raw === undefined) return [];
  if (!Array.isArray(raw)) throw new Error(`config ${at} must be an array of { "id": "<pool id>", "tenants": ["<tenant>", ...] } (got ${show(raw)})`);
  const grouped = new Map<string, string>();
  return raw.map((entry, index) => {
    const here = `${at}[${index}]`;
    if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) throw new Error(`config ${here} must be { "id": "<pool id>", "tenants": ["<tenant>", ...] } (got ${show(entry)})`);
    const { id, tenants, ...rest } = entry as Record<string, unknown>;
    const extra = Object.keys(rest)[0];
    if (extra) throw new Error(`config ${here}.${extra} is not a runner pool field (known: id, tenants)`);
    if (typeof id !== 'string' || !POOL_ID.test(id)) throw new Error(`config ${here}.id must be 1-40 lowercase letters, digits and hyphens, starting with a letter or digit (got ${show(id)})`);
    if (!Array.isArray(tenants) || tenants.length === 0) throw new Error(`config ${here}.tenants must be a non-empty array of tenant ids (got ${show(tenants)})`);
    const members = tenants.map((raw, i) => {
      const tenantAt = `${here}.tenants[${i}]`;
      const tenant = tenantOf(raw, tenantAt);
      if (served && !served.includes(tenant)) throw new Error(`config ${tenantAt} ${tenant} is not one of the target's tenants (${served.join(', ')})`);
      const other = grouped.get(tenant);
      if (other !== undefined) throw new Error(`config ${tenantAt} ${tenant} is already in runner pool ${other}: a tenant is in one pool of a target`);
      grouped.set(tenant, id);
      return tenant;
    });
    return { id, tenants: members };
  });
}

/**
 * The agent pools of an Azure target, as the host derives them from the same config: one per explicit group, and
 * for each tenant in no group its own pool `<pool>.<tenant>`.
 */
export function agentPoolsOf(target: string, pool: string, tenants: readonly string[], groups: readonly RunnerPoolGroup[]): AgentPool[] {
  const grouped = new Set(groups.flatMap((g) => g.tenants));
  return [
    ...groups.map((g) => ({ id: g.id, tenants: g.tenants })),
    ...tenants.filter((tenant) => !grouped.has(tenant)).map((tenant) => ({ id: `${pool}.${tenant}`, tenants: [tenant] })),
  ].map((p) => ({ ...p, target, name: poolResourceName(p.id) }));
}

/**
 * The short name of an agent pool's Azure resources: the pool id made a job name (`.` to `-`, cut to 16) and an
 * 8-character hash of the whole id, so that `runner-<name>` is a valid Container Apps job name (at most 32) and two
 * pool ids cut to the same stem still differ. Stable: it is derived from the id alone.
 */
export function poolResourceName(poolId: string): string {
  const hash = createHash('sha256').update(poolId).digest('hex').slice(0, 8);
  const stem = poolId.toLowerCase().replace(/[^a-z0-9]+/g, '-').slice(0, 16).replace(/^-+|-+$/g, '');
  return stem ? `${stem}-${hash}` : hash;
}

function parseScope(raw: unknown, at: string): AzureScope {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new Error(`config ${at} is required for an azure-subscription target: { "subscriptionId": "<guid>", "resourceGroup": "<name>" } (got ${show(raw)})`);
  }
  const { subscriptionId, resourceGroup, ...rest } = raw as Record<string, unknown>;
  const extra = Object.keys(rest)[0];
  if (extra) throw new Error(`config ${at}.${extra} is not a scope field (known: subscriptionId, resourceGroup)`);
  if (typeof subscriptionId !== 'string' || !GUID.test(subscriptionId)) throw new Error(`config ${at}.subscriptionId must be a subscription id (a GUID) (got ${show(subscriptionId)})`);
  if (typeof resourceGroup !== 'string' || !RESOURCE_GROUP.test(resourceGroup)) {
    throw new Error(`config ${at}.resourceGroup must be a resource group name: 1-90 letters, digits, -_.(), not ending in "." (got ${show(resourceGroup)})`);
  }
  return { subscriptionId: subscriptionId.toLowerCase(), resourceGroup };
}

/** A customer-hosted target's `backend`: a state backend URL and an optional secrets provider, each naming `{tenant}`. */
function parseBackend(raw: unknown, at: string): TargetBackend {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new Error(`config ${at} is required for a customer-hosted target: { "url": "<Pulumi backend URL with {tenant}>", "secretsProvider": "<optional, with {tenant}>" } (got ${show(raw)})`);
  }
  const { url, secretsProvider, ...rest } = raw as Record<string, unknown>;
  const extra = Object.keys(rest)[0];
  if (extra) throw new Error(`config ${at}.${extra} is not a backend field (known: url, secretsProvider)`);
  const perTenant = (value: unknown, field: string) => {
    if (typeof value !== 'string' || !value.includes('{tenant}')) throw new Error(`config ${at}.${field} must name {tenant}, so that no two tenants share it (got ${show(value)})`);
    return value;
  };
  return { url: perTenant(url, 'url'), ...(secretsProvider !== undefined ? { secretsProvider: perTenant(secretsProvider, 'secretsProvider') } : {}) };
}

/**
 * A customer-hosted target's cluster access for drift scans: `server` (https) and `certificateAuthorityData` on an
 * `aks-cluster`, or `kubeconfig: {path, context?}`; the host checks the rest of its shape when it starts.
 */
function parseKubernetes(raw: unknown, kind: CustomerHostedTarget['kind'], at: string): Readonly<Record<string, unknown>> {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`config ${at} must be an object (got ${show(raw)})`);
  const { server, certificateAuthorityData, kubeconfig, ...rest } = raw as Record<string, unknown>;
  const extra = Object.keys(rest)[0];
  if (extra) throw new Error(`config ${at}.${extra} is not a kubernetes field (known: server, certificateAuthorityData, kubeconfig)`);
  if (server !== undefined && (typeof server !== 'string' || !server.startsWith('https://'))) throw new Error(`config ${at}.server must be an https:// URL (got ${show(server)})`);
  if ((server !== undefined || certificateAuthorityData !== undefined) && (kind !== 'aks-cluster' || kubeconfig !== undefined)) {
    throw new Error(`config ${at}: server and certificateAuthorityData are for an aks-cluster target read with its Entra token, without a kubeconfig`);
  }
  if (kubeconfig !== undefined && (kubeconfig === null || typeof kubeconfig !== 'object' || typeof (kubeconfig as { path?: unknown }).path !== 'string')) {
    throw new Error(`config ${at}.kubeconfig must be { "path": "<file>", "context": "<optional>" } (got ${show(kubeconfig)})`);
  }
  return raw as Record<string, unknown>;
}

function guid(raw: unknown, at: string): string {
  if (typeof raw !== 'string' || !GUID.test(raw)) throw new Error(`config ${at} must be a client id (a GUID) (got ${show(raw)})`);
  return raw;
}

function parseRunners(raw: unknown, at: string): number {
  if (raw === undefined) return DEFAULT_MAX_RUNNERS;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`config ${at} must be an object such as { "max": 4 } (got ${show(raw)})`);
  const { max, ...rest } = raw as Record<string, unknown>;
  const extra = Object.keys(rest)[0];
  if (extra) throw new Error(`config ${at}.${extra} is not a runners field (known: max)`);
  if (max === undefined) return DEFAULT_MAX_RUNNERS;
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > MAX_RUNNERS) {
    throw new Error(`config ${at}.max must be a whole number from 1 to ${MAX_RUNNERS} (got ${show(max)})`);
  }
  return max;
}

export interface RunnerImage {
  readonly image: string;
  /** `<registry>.azurecr.io`: the registry the job pulls from with the runner identity. */
  readonly server: string;
  /** The registry's resource id, for AcrPull. */
  readonly registryId: string;
  /** The registry's subscription (its role definitions are named there). */
  readonly registrySubscriptionId: string;
}

/**
 * `runnerImage` (an Azure Container Registry image with a tag or digest) and `runnerRegistryId` (that registry's
 * resource id), required as soon as one Azure target exists. `latest` and untagged images are refused: an agent that
 * applies infrastructure runs a known build.
 */
export function parseRunnerImage(image: string | undefined, registryId: string | undefined, targets: readonly Target[]): RunnerImage | undefined {
  if (!targets.some(isAzureTarget)) return undefined;
  if (!image) throw new Error('config runnerImage is required when a target of kind azure-subscription exists: the runner agents\' image, e.g. <acr>.azurecr.io/runtime-cloud-runner:<tag>');
  const parts = /^([a-z0-9]{5,50})\.azurecr\.io\/([a-z0-9][a-z0-9._/-]*)(?::([\w][\w.-]{0,127})|@(sha256:[0-9a-f]{64}))$/.exec(image);
  if (!parts) throw new Error(`config runnerImage must be an Azure Container Registry image with a tag or digest, e.g. <acr>.azurecr.io/runtime-cloud-runner:<tag> (got ${show(image)})`);
  if (parts[3] === 'latest') throw new Error(`config runnerImage must name a fixed build, not :latest (got ${show(image)})`);
  const registryName = parts[1]!;
  if (!registryId) throw new Error(`config runnerRegistryId is required with runnerImage: the resource id of the registry ${registryName}, for the runners' AcrPull`);
  const id = /^\/subscriptions\/([0-9a-f-]{36})\/resourceGroups\/[^/]+\/providers\/Microsoft\.ContainerRegistry\/registries\/([^/]+)$/i.exec(registryId);
  if (!id || !GUID.test(id[1]!)) throw new Error(`config runnerRegistryId must be a container registry's resource id, /subscriptions/<guid>/resourceGroups/<rg>/providers/Microsoft.ContainerRegistry/registries/<name> (got ${show(registryId)})`);
  if (id[2]!.toLowerCase() !== registryName) throw new Error(`config runnerRegistryId names the registry ${id[2]!}, but runnerImage comes from ${registryName}`);
  return { image, server: `${registryName}.azurecr.io`, registryId, registrySubscriptionId: id[1]!.toLowerCase() };
}

/** Whether this target's runners are deployed here (as opposed to customer-hosted). */
export function isAzureTarget(target: Target): target is AzureTarget {
  return target.kind === 'azure-subscription';
}

/** The ARM id of a target's scope. */
export function scopeId(scope: AzureScope): string {
  return `/subscriptions/${scope.subscriptionId}/resourceGroups/${scope.resourceGroup}`;
}

export interface StateNames {
  /** Storage account of the target's Pulumi state (3–24 lowercase letters and digits, globally unique). */
  readonly account: string;
  /** Key Vault holding each tenant's secrets-provider key (3–24 letters, digits, single hyphens, globally unique). */
  readonly vault: string;
}

/**
 * Names of a target's state account and vault: readable (prefix and target id) and a short hash of the prefix,
 * stack, target id and target subscription, so that two installations (or stacks) do not ask for the same global
 * name. Deterministic, because the runner is configured with them and the vault's name stays reserved for the soft
 * delete period after a delete.
 */
export function stateNames(prefix: string, stack: string, target: AzureTarget): StateNames {
  const hash = createHash('sha256').update(`${prefix}/${stack}/${target.id}/${target.scope.subscriptionId}`).digest('hex').slice(0, 8);
  const letters = `${prefix}${target.id}`.toLowerCase().replace(/[^a-z0-9]/g, '');
  const dashed = `${prefix}-${target.id}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .replace(/-+/g, '-')
    .replace(/^[^a-z]+/, '');
  const vaultStem = dashed.slice(0, 24 - '-kv-'.length - hash.length).replace(/-+$/, '');
  return {
    account: `${letters.slice(0, 24 - 'st'.length - hash.length)}st${hash}`,
    vault: `${vaultStem || 'state'}-kv-${hash}`,
  };
}

function name(raw: unknown, at: string): string {
  if (typeof raw !== 'string' || !NAME.test(raw)) {
    throw new Error(`config ${at} must be 1-24 lowercase letters, digits and single hyphens, starting with a letter and not ending in a hyphen (got ${show(raw)})`);
  }
  return raw;
}

function nonEmpty(raw: unknown, at: string): string {
  if (typeof raw !== 'string' || raw.trim() === '') throw new Error(`config ${at} must be a non-empty string (got ${show(raw)})`);
  return raw;
}

function unique<T extends Target>(targets: readonly T[], key: (t: T) => string, what: string): void {
  const seen = new Map<string, string>();
  for (const t of targets) {
    const other = seen.get(key(t));
    if (other !== undefined) throw new Error(`config targets ${other} and ${t.id} have the same ${what} ${key(t)}: each target needs its own`);
    seen.set(key(t), t.id);
  }
}

function uniquePools(entries: readonly { key: string; owner: string }[], what: string): void {
  const seen = new Map<string, string>();
  for (const { key, owner } of entries) {
    const other = seen.get(key);
    if (other !== undefined) throw new Error(`config runner pools of ${other} and ${owner} have the same ${what} ${key}: each pool needs its own`);
    seen.set(key, owner);
  }
}

function show(value: unknown): string {
  return value === undefined ? 'nothing' : JSON.stringify(value);
}

/** A source rule of `RuntimeCloud__Provisioning__Sources`: a repository prefix, and the credential it is read with. */
export interface SourceRule {
  readonly prefix: string;
  readonly credentialRef?: string;
}

/**
 * The `sources` config: by tenant id or `*`, the repository prefixes its promotions may name. Only `https://`
 * prefixes that end at a path segment (`https://dev.azure.com/contoso/platform/` or a whole repository URL): a bare
 * host or a prefix cut inside a name would let a tenant name a repository nobody listed. The host checks the rules
 * again as it starts; this fails the deployment before anything is declared.
 */
export function parseSources(raw: unknown): Record<string, SourceRule[]> {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw) || Object.keys(raw).length === 0) {
    throw new Error(`config sources must be a JSON object of tenant id (or "*") → repository prefixes; without it every promotion is refused (got ${show(raw)})`);
  }
  return Object.fromEntries(
    Object.entries(raw as Record<string, unknown>).map(([tenant, rules]) => {
      const at = `sources[${JSON.stringify(tenant)}]`;
      if (tenant !== '*' && !HOST_TENANT.test(tenant)) throw new Error(`config ${at}: ${show(tenant)} is not a tenant id or "*"`);
      if (!Array.isArray(rules) || rules.length === 0) throw new Error(`config ${at} must be a non-empty array of {prefix, credentialRef?} (got ${show(rules)})`);
      return [tenant, rules.map((rule, i) => parseSourceRule(rule, `${at}[${i}]`))];
    }),
  );
}

function parseSourceRule(rule: unknown, at: string): SourceRule {
  const { prefix, credentialRef, ...rest } = (rule ?? {}) as Record<string, unknown>;
  if (Object.keys(rest).length > 0 || typeof prefix !== 'string') throw new Error(`config ${at} must be {prefix, credentialRef?} (got ${show(rule)})`);
  let url: URL | undefined;
  try {
    url = new URL(prefix);
  } catch {
    url = undefined;
  }
  if (url?.protocol !== 'https:' || url.pathname.length <= 1 || url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    throw new Error(`config ${at}.prefix must be an https:// repository URL or a path prefix ending in "/", with no credentials, query or fragment (got ${show(prefix)})`);
  }
  if (credentialRef !== undefined && (typeof credentialRef !== 'string' || credentialRef.length === 0)) throw new Error(`config ${at}.credentialRef must be a non-empty string (got ${show(credentialRef)})`);
  return { prefix, ...(credentialRef !== undefined ? { credentialRef } : {}) };
}

/** The `clients` config: client application id (a GUID) → the tenant that client acts for. */
export function parseClients(raw: unknown): Record<string, string> {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`config clients must be a JSON object of client id → tenant id (got ${show(raw)})`);
  for (const [client, tenant] of Object.entries(raw as Record<string, unknown>)) {
    if (!GUID.test(client)) throw new Error(`config clients: ${show(client)} is not a client (application) id`);
    if (typeof tenant !== 'string' || !HOST_TENANT.test(tenant)) throw new Error(`config clients[${JSON.stringify(client)}] must be a tenant id (got ${show(tenant)})`);
  }
  return raw as Record<string, string>;
}
