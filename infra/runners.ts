/**
 * Runner agents in Azure: per `azure-subscription` target, an observer identity that can only read it and the
 * target's Pulumi state (a storage account with a container per tenant, a Key Vault with a key per tenant); per agent
 * pool of the target (one per tenant, or one per explicit group of tenants), an identity that can change that target
 * and reach its own tenants' state and nothing else, and a Container Apps Job that Service Bus wakes for the pool.
 * The host never holds a role that can change a target and hands none of its own secrets to a runner
 * (docs/architecture.md, "IaC: targets, runner agents and engines").
 */
import * as pulumi from '@pulumi/pulumi';
import * as azuread from '@pulumi/azuread';
import * as containerapps from '@pulumi/azure-native/app';
import * as keyvault from '@pulumi/azure-native/keyvault';
import * as managedidentity from '@pulumi/azure-native/managedidentity';
import * as servicebus from '@pulumi/azure-native/servicebus';
import * as storage from '@pulumi/azure-native/storage';
import { assignRole, type Role } from './roles';
import { scopeId, stateNames, type AgentPool, type AzureTarget, type RunnerImage, type StateNames } from './targets';


/**
 * How every storage account of this deployment is set: zone-redundant, TLS 1.2, HTTPS only, no public blob access,
 * no shared keys (Entra only). No virtual network (infra/README.md, "Left for later"): reached over the public
 * endpoint, with Entra.
 */
export const ENTRA_ONLY_STORAGE = {
  sku: { name: storage.SkuName.Standard_ZRS },
  kind: storage.Kind.StorageV2,
  minimumTlsVersion: storage.MinimumTlsVersion.TLS1_2,
  // ARM's `supportsHttpsTrafficOnly`.
  enableHttpsTrafficOnly: true,
  allowBlobPublicAccess: false,
  allowSharedKeyAccess: false,
  defaultToOAuthAuthentication: true,
  publicNetworkAccess: storage.PublicNetworkAccess.Enabled,
} as const;
/** The host API's app role a runner agent's token must carry (shared/platform/auth: scope `factory.runner.agent`). */
export const AGENT_ROLE = 'factory.runner.agent';
/** Event type and application property the host sets on a job's wake-up message (one subscription per pool). */
export const RUNNER_EVENT = 'RunnerJobDispatched';
/** An apply can run for hours; the platform stops an execution after this. */
export const REPLICA_TIMEOUT_SECONDS = 4 * 60 * 60;

/** Sends a resource's logs and metrics to the workspace (index.ts `toWorkspace`). */
export type Diagnose = (name: string, resourceUri: pulumi.Input<string>, settings: { logs: boolean; metrics: readonly string[] }) => unknown;

/**
 * The `backend` of a target in the host's RuntimeCloud__Targets: each tenant's state in its own container of the
 * target's state account, its secrets under its own key in the target's vault (`{tenant}` is the job's tenant).
 */
export function targetBackend(names: StateNames): { url: string; secretsProvider: string } {
  return {
    url: `azblob://state-{tenant}?storage_account=${names.account}`,
    secretsProvider: `azurekeyvault://${names.vault}.vault.azure.net/keys/pulumi-{tenant}`,
  };
}

/** The SQL filter of a pool's subscription: its own wake-ups only. Pool ids are `[a-z0-9.-]`, so no quoting issue. */
export function runnerFilter(pool: string): string {
  return `user.type = '${RUNNER_EVENT}' AND user.pool = '${pool}'`;
}

/**
 * The shared Container Apps environment of every pool's job. Its logs go to Azure Monitor and from there, through a
 * diagnostic setting, to the workspace: the `log-analytics` destination would need the workspace's shared key, and
 * the workspace has local auth off.
 */
export function runnerEnvironment(name: string, resourceGroupName: pulumi.Input<string>, diagnose: Diagnose): containerapps.ManagedEnvironment {
  const environment = new containerapps.ManagedEnvironment(name, {
    resourceGroupName,
    appLogsConfiguration: { destination: 'azure-monitor' },
  });
  diagnose('runners', environment.id, { logs: true, metrics: ['AllMetrics'] });
  return environment;
}

/** A target's observer identity and its one role: Reader on the target's scope (drift scans read with it). */
export function targetObserver(target: AzureTarget, resourceGroupName: pulumi.Input<string>): managedidentity.UserAssignedIdentity {
  const observer = new managedidentity.UserAssignedIdentity(`observer-${target.id}`, { resourceName: `observer-${target.id}`, resourceGroupName });
  assignRole(`observer-${target.id}-reader`, {
    principalId: observer.principalId,
    scope: scopeId(target.scope),
    role: 'reader',
    subscriptionId: target.scope.subscriptionId,
    description: `drift scans of target ${target.id} read with this identity`,
  });
  return observer;
}

export interface RunnerContext {
  readonly prefix: string;
  readonly stack: string;
  readonly resourceGroupName: pulumi.Input<string>;
  /** The deployment's own subscription (the host's resources are there). */
  readonly subscriptionId: pulumi.Input<string>;
  readonly tenantId: pulumi.Input<string>;
  readonly busName: pulumi.Input<string>;
  readonly topicName: string;
  /** Declares a subscription of the events topic whose `$Default` rule is this SQL filter. */
  readonly subscribe: (name: string, sqlExpression: string) => servicebus.Subscription;
  readonly environment: containerapps.ManagedEnvironment;
  readonly image: RunnerImage;
  /** `https://<function app default host name>`: where agents claim jobs and post results. */
  readonly hostUrl: pulumi.Input<string>;
  /** The host API's token audience: agents get an Entra token for it with their own identity. */
  readonly audience: string;
  /** The host API's service principal and the id of its agent app role (`AGENT_ROLE`). */
  readonly api: { readonly objectId: pulumi.Input<string>; readonly agentRoleId: pulumi.Input<string> };
  readonly diagnose: Diagnose;
}

/** An agent pool as deployed: its identity (the host's `RuntimeCloud__Runners__Agents` maps its client id to the pool) and its job. */
export interface DeployedPool {
  readonly pool: AgentPool;
  readonly identity: managedidentity.UserAssignedIdentity;
  readonly job: containerapps.Job;
}

/**
 * What one target's runners need: its state (a container and a key per tenant) and per agent pool an identity, a
 * subscription and a job. A pool's identity reaches its own tenants' state only, never another tenant's, and no
 * runner identity holds a role on the host's store, bus or storage (infra/README.md, "Targets and runner agents").
 */
export function targetRunners(target: AzureTarget, ctx: RunnerContext): DeployedPool[] {
  const state = targetState(target, ctx);
  return target.agentPools.map((pool) => agentPool(target, pool, state, ctx));
}

/**
 * One agent pool: its identity's roles are Contributor on the target's scope, data roles on its own tenants'
 * containers and keys (at their own scope: nothing at the account or the vault), and AcrPull. Its wake-ups are read
 * by a second identity of its own that can only receive from the pool's subscription: the scale rule counts them
 * with it, and each execution takes (and settles) one with it, so that a wake-up starts one execution and not one
 * per polling interval for the message's lifetime. The identity a tenant's program runs with has no role on the bus.
 */
function agentPool(target: AzureTarget, pool: AgentPool, state: TargetState, ctx: RunnerContext): DeployedPool {
  const name = `runner-${pool.name}`;
  const wakeupName = `wakeup-${pool.name}`;
  const runner = new managedidentity.UserAssignedIdentity(name, { resourceName: name, resourceGroupName: ctx.resourceGroupName });
  const wakeups = new managedidentity.UserAssignedIdentity(wakeupName, { resourceName: wakeupName, resourceGroupName: ctx.resourceGroupName });
  const subscription = ctx.subscribe(name, runnerFilter(pool.id));

  /** Role assignments of one identity, named after it. */
  const grantsOf =
    (identity: managedidentity.UserAssignedIdentity, identityName: string) =>
    (suffix: string, role: Role, scope: pulumi.Input<string>, subscriptionId: pulumi.Input<string>, description: string) =>
      assignRole(`${identityName}-${suffix}`, { principalId: identity.principalId, scope, role, subscriptionId, description });
  const grant = grantsOf(runner, name);
  const grants = [
    grant('target', 'contributor', scopeId(target.scope), target.scope.subscriptionId, `plans and applies of pool ${pool.id} on target ${target.id}`),
    ...pool.tenants.flatMap((tenant) => {
      const { container, key } = state.tenants.get(tenant)!;
      return [
        grant(`state.${tenant}`, 'storageBlobDataContributor', pulumi.interpolate`${state.account.id}/blobServices/default/containers/${container.name}`, ctx.subscriptionId, `Pulumi state of tenant ${tenant} on target ${target.id}`),
        grant(`key.${tenant}`, 'keyVaultCryptoUser', pulumi.interpolate`${state.vault.id}/keys/${key.name}`, ctx.subscriptionId, `Pulumi secrets key of tenant ${tenant} on target ${target.id}`),
      ];
    }),
    grant('image', 'acrPull', ctx.image.registryId, ctx.image.registrySubscriptionId, 'pulls the runner image'),
    // Not an Azure role: the host API's app role, so the agent's token is one of a runner agent's.
    new azuread.AppRoleAssignment(`${name}-agent-role`, { appRoleId: ctx.api.agentRoleId, principalObjectId: runner.principalId, resourceObjectId: ctx.api.objectId }),
    // The scale rule reads the subscription's message count, and the agent takes its wake-up, with this identity.
    grantsOf(wakeups, wakeupName)('receive', 'serviceBusDataReceiver', subscription.id, ctx.subscriptionId, `wake-ups of pool ${pool.id}`),
  ];

  const env: Record<string, pulumi.Input<string>> = {
    RuntimeCloud__Runner__HostUrl: ctx.hostUrl,
    RuntimeCloud__Runner__Pool: pool.id,
    RuntimeCloud__Runner__Audience: ctx.audience,
    // DefaultAzureCredential in the agent, and the `pulumi` CLI's Azure providers, pick the runner identity by it.
    AZURE_CLIENT_ID: runner.clientId,
    RuntimeCloud__Runner__Engine: 'pulumi',
    // An execution claims one job and exits; the next wake-up starts a fresh container with a fresh working directory,
    // so nothing a program leaves behind meets the next job. Each job names its tenant's state container and key (the
    // host's RuntimeCloud__Targets, `targetBackend`).
    RuntimeCloud__Runner__OneJob: 'true',
    // The wake-up that started the execution: taken from the pool's own subscription with the wake-up identity, and
    // completed once the claim answered (runner/wakeups.ts); with none, or no job, within a minute the execution ends.
    RuntimeCloud__Runner__Wakeups__Namespace: pulumi.interpolate`${ctx.busName}.servicebus.windows.net`,
    RuntimeCloud__Runner__Wakeups__Topic: ctx.topicName,
    RuntimeCloud__Runner__Wakeups__Subscription: subscription.name,
    RuntimeCloud__Runner__Wakeups__ClientId: wakeups.clientId,
  };

  const job = new containerapps.Job(
    name,
    {
      jobName: name,
      resourceGroupName: ctx.resourceGroupName,
      environmentId: ctx.environment.id,
      // The scale rule's identity must be one of the job's; it can receive this pool's wake-ups and nothing else.
      identity: { type: containerapps.ManagedServiceIdentityType.UserAssigned, userAssignedIdentities: [runner.id, wakeups.id] },
      configuration: {
        triggerType: containerapps.TriggerType.Event,
        replicaTimeout: REPLICA_TIMEOUT_SECONDS,
        // The platform never retries an execution: an apply must not run twice, the host decides what follows.
        replicaRetryLimit: 0,
        eventTriggerConfig: {
          parallelism: 1,
          replicaCompletionCount: 1,
          scale: {
            minExecutions: 0,
            maxExecutions: target.maxRunners,
            pollingInterval: 30,
            rules: [
              {
                name: 'runner-wakeups',
                type: 'azure-servicebus',
                metadata: { namespace: ctx.busName, topicName: ctx.topicName, subscriptionName: subscription.name, messageCount: '1' },
                identity: wakeups.id,
              },
            ],
          },
        },
        registries: [{ server: ctx.image.server, identity: runner.id }],
      },
      template: {
        containers: [
          {
            name: 'runner',
            image: ctx.image.image,
            resources: { cpu: 1, memory: '2Gi' },
            env: Object.entries(env).map(([name, value]) => ({ name, value })),
          },
        ],
      },
    },
    // The first execution pulls the image, reads the subscription and finds its tenants' state with these roles.
    { dependsOn: grants },
  );
  return { pool, identity: runner, job };
}

interface TargetState {
  readonly account: storage.StorageAccount;
  readonly vault: keyvault.Vault;
  /** Each tenant's state container and secrets key. */
  readonly tenants: ReadonlyMap<string, { readonly container: storage.BlobContainer; readonly key: keyvault.Key }>;
}

/**
 * A target's Pulumi state: a storage account for the Azure Blob backend (Entra only, versioned, soft delete) with a
 * container per tenant, and a Key Vault (RBAC, purge protection) for the `azurekeyvault://` secrets provider with a
 * key per tenant. Made here, so that the agents need no right to make either and each pool's roles can name them.
 */
function targetState(target: AzureTarget, ctx: RunnerContext): TargetState {
  const names = stateNames(ctx.prefix, ctx.stack, target);
  const account = new storage.StorageAccount(`state-${target.id}`, { accountName: names.account, resourceGroupName: ctx.resourceGroupName, ...ENTRA_ONLY_STORAGE });
  // A state file overwritten or deleted by mistake can be restored.
  new storage.BlobServiceProperties(`state-${target.id}-blobs`, {
    accountName: account.name,
    resourceGroupName: ctx.resourceGroupName,
    blobServicesName: 'default',
    isVersioningEnabled: true,
    deleteRetentionPolicy: { enabled: true, days: 30 },
    containerDeleteRetentionPolicy: { enabled: true, days: 30 },
  });
  const vault = new keyvault.Vault(`state-${target.id}-kv`, {
    vaultName: names.vault,
    resourceGroupName: ctx.resourceGroupName,
    properties: {
      tenantId: ctx.tenantId,
      sku: { family: keyvault.SkuFamily.A, name: keyvault.SkuName.Standard },
      enableRbacAuthorization: true,
      enableSoftDelete: true,
      softDeleteRetentionInDays: 90,
      // Losing this key loses every secret in the target's state: it cannot be purged before its retention ends.
      enablePurgeProtection: true,
      publicNetworkAccess: 'Enabled',
    },
  });
  ctx.diagnose(`state-${target.id}`, account.id, { logs: false, metrics: ['Transaction'] });
  ctx.diagnose(`state-${target.id}-blobServices`, pulumi.interpolate`${account.id}/blobServices/default`, { logs: true, metrics: ['Transaction'] });
  ctx.diagnose(`state-${target.id}-kv`, vault.id, { logs: true, metrics: ['AllMetrics'] });
  // A tenant dropped from the config loses its pool and roles, not its state: the container and key stay in Azure.
  // Logical names join target and tenant with `.`, which neither contains, so no two pairs make the same name.
  const kept = { retainOnDelete: true };
  const tenants = new Map(
    target.tenants.map((tenant) => {
      const container = new storage.BlobContainer(
        `state-${target.id}.${tenant}`,
        { accountName: account.name, resourceGroupName: ctx.resourceGroupName, containerName: `state-${tenant}`, publicAccess: storage.PublicAccess.None },
        kept,
      );
      // As the agent would make it (runner/state-backend.ts): RSA 3072, encrypt and decrypt only.
      const key = new keyvault.Key(
        `state-${target.id}.${tenant}`,
        { resourceGroupName: ctx.resourceGroupName, vaultName: vault.name, keyName: `pulumi-${tenant}`, properties: { kty: keyvault.JsonWebKeyType.RSA, keySize: 3072, keyOps: ['encrypt', 'decrypt'] } },
        kept,
      );
      return [tenant, { container, key }] as const;
    }),
  );
  return { account, vault, tenants };
}
