/**
 * Runner agents in Azure: per `azure-subscription` target, a runner identity that can change that target and nothing
 * else, an observer identity that can only read it, the target's Pulumi state (a storage account, and a Key Vault in
 * which the agents make each tenant's key),
 * and a Container Apps Job that Service Bus wakes for the target's pool. The host never holds a role that can change
 * a target and hands none of its own secrets to a runner (../shared/ARCHITECTURE.md, "Runner jobs").
 */
import * as pulumi from '@pulumi/pulumi';
import * as containerapps from '@pulumi/azure-native/app';
import * as keyvault from '@pulumi/azure-native/keyvault';
import * as managedidentity from '@pulumi/azure-native/managedidentity';
import * as servicebus from '@pulumi/azure-native/servicebus';
import * as storage from '@pulumi/azure-native/storage';
import { assignRole } from './roles';
import { scopeId, stateNames, type AzureTarget, type RunnerImage, type StateNames } from './targets';


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

/** The SQL filter of a pool's subscription: its own wake-ups only. Pool ids are `[a-z0-9-]`, so no quoting issue. */
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

export interface TargetIdentities {
  /** Changes the target: assigned to the target's job only, never to the Function App. */
  readonly runner: managedidentity.UserAssignedIdentity;
  /** Reads the target for drift scans: assigned to the Function App, Reader only. */
  readonly observer: managedidentity.UserAssignedIdentity;
}

/** A target's two identities, and the observer's one role: Reader on the target's scope. */
export function targetIdentities(target: AzureTarget, resourceGroupName: pulumi.Input<string>): TargetIdentities {
  const runner = new managedidentity.UserAssignedIdentity(`runner-${target.id}`, { resourceName: `runner-${target.id}`, resourceGroupName });
  const observer = new managedidentity.UserAssignedIdentity(`observer-${target.id}`, { resourceName: `observer-${target.id}`, resourceGroupName });
  assignRole(`observer-${target.id}-reader`, {
    principalId: observer.principalId,
    scope: scopeId(target.scope),
    role: 'reader',
    subscriptionId: target.scope.subscriptionId,
    description: `drift scans of target ${target.id} read with this identity`,
  });
  return { runner, observer };
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
  readonly diagnose: Diagnose;
}

/**
 * What one target's runners need: state, the pool's subscription, the runner identity's roles and the job. The runner
 * identity's only role on any target is Contributor on its own target's scope; its other roles are data-plane roles
 * on its own state, its own subscription and the registry.
 */
export function targetRunners(target: AzureTarget, { runner }: TargetIdentities, ctx: RunnerContext): containerapps.Job {
  const { account, vault } = targetState(target, ctx);
  const subscription = ctx.subscribe(`runner-${target.pool}`, runnerFilter(target.pool));

  const grant = (role: Parameters<typeof assignRole>[1]['role'], suffix: string, scope: pulumi.Input<string>, subscriptionId: pulumi.Input<string>, description: string) =>
    assignRole(`runner-${target.id}-${suffix}`, { principalId: runner.principalId, scope, role, subscriptionId, description });
  const grants = [
    grant('contributor', 'target', scopeId(target.scope), target.scope.subscriptionId, `plans and applies on target ${target.id}`),
    grant('storageBlobDataContributor', 'state', account.id, ctx.subscriptionId, `Pulumi state of target ${target.id} (a container per tenant)`),
    // The agents make each tenant's key (`pulumi-<tenant>`) before its first job, and encrypt with it.
    grant('keyVaultCryptoOfficer', 'secrets', vault.id, ctx.subscriptionId, `Pulumi secrets keys of target ${target.id} (a key per tenant)`),
    // The scale rule reads the subscription's message count with this identity, and the agent takes its wake-up.
    grant('serviceBusDataReceiver', 'wakeups', subscription.id, ctx.subscriptionId, `wake-ups of pool ${target.pool}`),
    grant('acrPull', 'image', ctx.image.registryId, ctx.image.registrySubscriptionId, 'pulls the runner image'),
  ];

  const env: Record<string, pulumi.Input<string>> = {
    RuntimeCloud__Runner__HostUrl: ctx.hostUrl,
    RuntimeCloud__Runner__Pool: target.pool,
    RuntimeCloud__Runner__Audience: ctx.audience,
    // DefaultAzureCredential in the agent, and the `pulumi` CLI's Azure providers, pick the runner identity by it.
    AZURE_CLIENT_ID: runner.clientId,
    RuntimeCloud__Runner__Engine: 'pulumi',
    // An execution claims one job and exits; the next wake-up starts a fresh container with a fresh working directory.
    // Each job names its tenant's state container and key (the host's RuntimeCloud__Targets, `targetBackend`).
    RuntimeCloud__Runner__OneJob: 'true',
  };

  return new containerapps.Job(
    `runner-${target.id}`,
    {
      jobName: `runner-${target.id}`,
      resourceGroupName: ctx.resourceGroupName,
      environmentId: ctx.environment.id,
      identity: { type: containerapps.ManagedServiceIdentityType.UserAssigned, userAssignedIdentities: [runner.id] },
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
                identity: runner.id,
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
    // The first execution pulls the image and reads the subscription with these roles.
    { dependsOn: grants },
  );
}

/**
 * A target's Pulumi state: a storage account for the Azure Blob backend (Entra only, versioned, soft delete; a
 * container per tenant) and a Key Vault (RBAC, purge protection) for the `azurekeyvault://` secrets provider (a key
 * per tenant). The agents make both per tenant, as tenants come after this program ran.
 */
function targetState(target: AzureTarget, ctx: RunnerContext) {
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
  return { account, vault };
}
