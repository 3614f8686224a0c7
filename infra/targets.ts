/**
 * The `targets` and `runnerImage` config of the infra program, parsed and checked before any resource is declared.
 * Pure (no Pulumi import): tests/infra/targets.test.ts runs it directly.
 *
 * A target is where an environment's infrastructure lives (../shared/ARCHITECTURE.md, "IaC: targets, runner agents
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
  /** The runner pool whose agents take this target's jobs; one pool per target. */
  readonly pool: string;
}
export interface AzureTarget extends TargetBase {
  readonly kind: 'azure-subscription';
  readonly scope: AzureScope;
  /** Most job executions of the pool at once (the Container Apps Job's `maxExecutions`). */
  readonly maxRunners: number;
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
 * Container Apps job and managed identity names are `runner-<id>` (a job name: lowercase letters, digits and single
 * hyphens, starting with a letter, at most 32 characters), and the pool names the Service Bus subscription
 * `runner-<pool>`: both ids follow that rule with room for the `runner-` prefix.
 */
const NAME = /^[a-z](?:[a-z0-9]|-(?=[a-z0-9])){0,23}$/;
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Azure's rule for resource group names: 1–90 of letters, digits, `-_.()`, not ending in `.`. */
const RESOURCE_GROUP = /^[-\w.()]{0,89}[-\w()]$/;
const KEYS = ['id', 'kind', 'name', 'location', 'endpoint', 'scope', 'pool', 'runners', 'backend', 'kubernetes', 'observerClientId'];

/** The `targets` config, checked: every problem names the config path and what was given. */
export function parseTargets(raw: unknown): Target[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new Error(`config targets must be a non-empty JSON array of targets (got ${show(raw)})`);
  const targets = raw.map((entry, index) => parseTarget(entry, `targets[${index}]`));
  unique(targets, (t) => t.id, 'id');
  // A pool's agents act with one target's identity: a pool shared by two targets would take jobs it cannot run.
  unique(targets, (t) => t.pool, 'pool');
  unique(targets.filter(isAzureTarget), (t) => scopeId(t.scope).toLowerCase(), 'scope');
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
  };
  if (kind !== 'azure-subscription') {
    // Customer-hosted agents run with the customer's identity and size themselves: nothing here to scope or scale.
    for (const key of ['scope', 'runners']) {
      if (t[key] !== undefined) throw new Error(`config ${at}.${key} applies to azure-subscription targets only (${id} is ${String(kind)})`);
    }
    return {
      ...base,
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
  return { ...base, kind, scope: parseScope(t.scope, `${at}.scope`), maxRunners: parseRunners(t.runners, `${at}.runners`) };
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

function show(value: unknown): string {
  return value === undefined ? 'nothing' : JSON.stringify(value);
}
