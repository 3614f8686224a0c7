import type { TokenCredential } from '@azure/core-auth';
import type { JSONWebKeySet } from 'jose';
import { keyVaultSigningKeys } from './platform/signing/key-vault-signing-keys.adapter';
import type { SigningKeys } from './platform/signing/signing-keys';
import { armCrashPoints } from './platform/faults/crash-points';
import { sql } from 'kysely';
import { createTokenValidator, type TokenValidator } from './platform/auth/token-validator';
import { busDb } from './platform/bus/bus-db';
import { inboxLagChecks, outboxDeadLetterCheck } from './platform/bus/bus.health';
import { blobEventBodies, claimCheckingPublisher, type EventBodyStore } from './platform/bus/event-bodies';
import type { EventPublisher } from './platform/bus/event-publisher';
import { createEventPublisher, createInboxLagReader, type EmbeddedBus } from './platform/bus/publishers';
import { startAfterCommitPublish } from './platform/bus/after-commit-publish';
import type { Config } from './platform/config/config';
import { runnerTargetOf, targetOfEnvironment, type TargetedEnvironment } from './platform/config/targets';
import { AppError } from './platform/errors/app-error';
import type { RunnerLeases } from './provisioning/provisioning.context';
import { engineCheck, gitCacheCheck, targetsCheck } from './platform/health/dependency-checks';
import type { HealthCheck } from './platform/health/health';
import type { IacEngine, IacRunner } from './platform/iac/iac-runner';
import { pulumiIacRunner } from './platform/iac/pulumi-runner';
import { desiredStateMemory } from './platform/git/desired-state';
import { realLocalPath } from './platform/git/load-desired-state';
import { createSqlStore, type SqlStore } from './platform/sql/database';
import { migrateToLatest } from './platform/sql/migrations';
import { createTableStore, type TableStore } from './platform/tables/tables';
import { registerInboxLagGauge, registerQueueDepthGauge } from './platform/telemetry/metrics';
import { startTelemetry } from './platform/telemetry/telemetry';
import { randomIds, systemClock, type Clock, type Ids } from './platform/time/clock';
import { createCapacityService, type CapacityService } from './capacity/capacity.service';
import { createInventoryService, type InventoryService } from './inventory/inventory.service';
import { createArmObserver } from './inventory/arm-observer.adapter';
import { createKubernetesObserver, kubernetesClusters } from './inventory/kubernetes-observer.adapter';
import { createObservedInventory } from './inventory/observed-inventory.repository';
import { observationScopeOn, observersByTarget } from './inventory/target-observers';
import { createPeerExternalServices } from './provisioning/peer-external-services.adapter';
import { tableLastKnownConfig } from './provisioning/last-known-config.repository';
import { hostPeerTokens, type PeerTokens } from './platform/contracts/peer-transport';
import { peerHealthChecks } from './platform/contracts/peer-health';
import { createProvisioningService, type ProvisioningService, type RunTimings } from './provisioning/provisioning.service';
import { parseSourcePolicy } from './provisioning/source-policy';
import { allMigrations } from './migrations';
import type { MigrationSource } from './platform/sql/migrations';
import type { Observer } from './inventory/observer';
import { recoverAfterRestore, type StoreRecovery } from './store-restore';
import { readStoreEpoch } from './platform/sql/store-epoch';

/** Everything the functions run on, built once per host by `createDeps`. */
export interface Deps {
  readonly config: Config;
  readonly clock: Clock;
  readonly ids: Ids;
  readonly sql: SqlStore;
  readonly tables: TableStore;
  readonly auth: TokenValidator;
  /**
   * The IaC engine the host runs itself (in process, or the local engine whose stack state it keeps for its agents);
   * absent where the engine runs in runner jobs only (Azure: the Function App has no Pulumi CLI).
   */
  readonly iac?: IacRunner;
  readonly healthChecks: readonly HealthCheck[];
  /** Where the outbox relay publishes: Service Bus when ServiceBusConnection is set, else the embedded topic. */
  readonly events: EventPublisher;
  /** Where claim-checked events' data is stored; undefined when no Blob storage is configured for it. */
  readonly eventBodies: EventBodyStore | undefined;
  /** Pools, editions, quotas and leases. */
  readonly capacity: CapacityService;
  /** Promotions, runs, approvals, receipts. */
  readonly provisioning: ProvisioningService;
  /** Desired and observed state, drift scans, ignore rules, reconciliation proposals. */
  readonly inventory: InventoryService;
  /** The recovery this host began on start, when the store had been restored (see store-restore.ts). */
  readonly recovery?: StoreRecovery;
  close(): Promise<void>;
}

/**
 * The local twin (local/twin.ts): what the local host runs where the deployed host has Azure. The Function App has
 * none, so it never loads the twin: with a `local` engine or a `local-cloud` target but no twin, the host refuses to
 * start.
 */
export interface Twin {
  /** The twin's schema, run with the product's (the local host's store: local/migrations.ts). */
  readonly migrations: readonly MigrationSource[];
  /** The local engine over the host's store (`RuntimeCloud__IaC__Runner=local`). */
  engine(parts: TwinParts): IacEngine;
  /** The observer of `local-cloud` targets. */
  observer(parts: TwinParts): Observer;
  /** The embedded topic and queues, where no Service Bus is configured. */
  readonly bus: EmbeddedBus;
}

export interface TwinParts {
  readonly store: SqlStore;
  readonly clock: Clock;
  readonly ids: Ids;
}

/** What a host may supply instead of the production defaults. */
export interface DepsOverrides {
  /** The local twin: the local host's. Default none (the deployed host). */
  readonly twin?: Twin;
  readonly clock?: Clock;
  readonly ids?: Ids;
  /** Trusted token keys (the local host's own issuer); production uses the JWKS URL from config. */
  readonly jwks?: JSONWebKeySet;
  /** Folder a relative SQLite path is resolved against. */
  readonly baseDir?: string;
  /** PostgreSQL schema to use (tests). */
  readonly postgresSchema?: string;
  /** A store made, and migrated, by the caller instead of the configured one (tests: the T-SQL shadow). Closed with the deps. */
  readonly store?: SqlStore;
  /**
   * Whether promotions may name local repositories (`file:` URLs and paths), where the source rules allow them: the
   * local host's own. Default false: https: repositories only. Example: `true`.
   */
  readonly localSources?: boolean;
  /**
   * Whether a release the DeliveryHost answers without its desired state may be promoted as its message names it:
   * the local host's, whose stand-in pins no release without `delivery.json`. Default false: refused
   * (`PROVISIONING.RELEASE_NOT_PINNED`). Example: `true`.
   */
  readonly unpinnedReleases?: boolean;
  /** Whether `RuntimeCloud__IaC__Execution=in-process` may run the engine here: the local host's (tests, bench). */
  readonly inProcessEngine?: boolean;
  /** Durations of provisioning runs (tests). Example: `{ lockRetryMs: 60_000 }`. */
  readonly provisioningTimings?: Partial<RunTimings>;
  /**
   * Bearer tokens for the external services' audiences: the local host signs its own for its stand-ins. Default:
   * Entra tokens of the host's identity (`RuntimeCloud__Peers__ClientId`, else the default credential chain).
   */
  readonly peerTokens?: PeerTokens;
  /**
   * The keys that sign lease certificates: the local host's key ring. Default: the Key Vault key
   * `RuntimeCloud__Capacity__CertificateKey`, else no certificates.
   */
  readonly leaseSigningKeys?: SigningKeys;
}

/** The composition root: builds the stores and adapters from config and brings the SQL schema up to date. */
export async function createDeps(config: Config, overrides: DepsOverrides = {}): Promise<Deps> {
  const clock = overrides.clock ?? systemClock;
  const ids = overrides.ids ?? randomIds;
  // Metrics to Azure Monitor when APPLICATIONINSIGHTS_CONNECTION_STRING is set; served at GET /runtime-cloud/metrics.
  await startTelemetry(config.telemetry);
  armCrashPoints({ points: config.faults.crashAt, markers: config.faults.markers });
  const store =
    overrides.store ??
    createSqlStore({
      dialect: config.store.dialect,
      connection: config.store.connection,
      baseDir: overrides.baseDir ?? config.local.stateDir,
      ...(overrides.postgresSchema ? { postgresSchema: overrides.postgresSchema } : {}),
    });
  let recovery: StoreRecovery | undefined;
  try {
    if (!overrides.store) await migrateToLatest(store.db, store.dialect, overrides.twin ? overrides.twin.migrations : allMigrations);
    recovery = await recoverAfterRestore(store, clock);
  } catch (error) {
    await store.close();
    throw error;
  }
  const tables = createTableStore(config.tables.connection);
  const jwks = overrides.jwks ?? (config.auth.jwksUrl ? new URL(config.auth.jwksUrl) : undefined);
  if (!jwks) throw new Error('RuntimeCloud__Auth__JwksUrl is required outside the local host');
  const auth = createTokenValidator({ issuer: config.auth.issuer, audience: config.auth.audience, keys: jwks, clients: config.auth.clients, agents: config.iac.agents, clock });
  // The engine inside the host is only the tests' and the bench's baseline: tenant programs run in runner jobs.
  if (config.iac.execution === 'in-process' && !overrides.inProcessEngine) {
    await store.close();
    throw new Error('RuntimeCloud__IaC__Execution=in-process would evaluate tenant programs inside the host: only the local host may, for tests and the bench');
  }
  // The engine the host runs itself: the embedded one against the local cloud (in process, or as the keeper of its
  // agents' stack state), or the Pulumi Automation API in process (tests). In Azure the Pulumi engine runs in runner
  // jobs only: the Function App has no CLI, and the runner pools' health covers the engine.
  const twin = overrides.twin;
  if (!twin && (config.iac.engine === 'local' || config.targets.some((t) => t.kind === 'local-cloud'))) {
    await store.close();
    throw new Error('RuntimeCloud__IaC__Runner=local and local-cloud targets are the local host\'s: the deployed host runs Pulumi against Azure and Kubernetes targets');
  }
  const engine: IacEngine | undefined =
    config.iac.engine === 'local' && twin ? twin.engine({ store, clock, ids }) : config.iac.execution === 'in-process' ? pulumiIacRunner() : undefined;
  const peerTokens = overrides.peerTokens ?? hostPeerTokens(config.peers.clientId);
  const leaseSigningKeys =
    overrides.leaseSigningKeys ??
    (config.capacity.certificateKey ? keyVaultSigningKeys({ keyUrl: config.capacity.certificateKey, credential: hostCredential(config.peers.clientId), clock }) : undefined);
  const certificates = leaseSigningKeys ? { keys: leaseSigningKeys, issuer: config.auth.audience, lifetimeSeconds: config.capacity.certificateSeconds } : undefined;
  const capacity = createCapacityService({ store, clock, ids, ...(certificates ? { certificates } : {}) });
  const targetOf = (environment: TargetedEnvironment) => targetOfEnvironment(config.targets, environment);
  // Tenants are administered by the capacity module (seed file, PUT /tenants); provisioning and inventory only read them.
  const knowsTenant = (tenant: string) => capacity.knowsTenant(tenant);
  const provisioning = createProvisioningService({
    store,
    clock,
    ids,
    engine: config.iac.execution === 'in-process' ? engine : undefined,
    targets: { ids: config.targets.map((t) => t.id), byRules: (environment) => targetOf(environment).id },
    ...(config.iac.execution === 'runner-jobs'
      ? {
          runners: {
            targets: config.targets.map(runnerTargetOf),
            leases: runnerLeases(capacity),
            leaseTtlMs: config.iac.leaseMs,
            claimTimeoutMs: config.iac.claimTimeoutMs,
          },
        }
      : {}),
    // The GovernanceHost, ControlPlaneApi, KnowledgeHost and Config Platform over their contracts, at the configured
    // endpoints (the local host's stand-ins on loopback, or Azure's services). One without an endpoint fails every
    // call as a service that does not answer, so no run passes a policy, an approval or a receipt unchecked.
    services: createPeerExternalServices({ ...config.peers, tokens: peerTokens, lastKnownConfig: tableLastKnownConfig(tables) }),
    knowsTenant,
    // A run reads its commit at intake, plan and apply; a commit never changes, so each is read from Git once.
    desiredState: { cacheDir: config.provisioning.gitCacheDir, memory: desiredStateMemory(), fetchMaxBytes: config.provisioning.fetchMaxBytes, fetchTimeoutMs: config.provisioning.fetchTimeoutMs },
    // Repositories the installation allows, per tenant; local (file:) repositories only where the host says so.
    sources: { policy: parseSourcePolicy(config.provisioning.sources), local: overrides.localSources ? { localSources: true, realPath: realLocalPath } : { localSources: false } },
    projects: { runtimes: config.provisioning.runtimes },
    packages: { packages: config.provisioning.packages },
    planExpiry: config.provisioning.planExpiry,
    approval: config.provisioning.approval,
    unpinnedReleases: overrides.unpinnedReleases ? 'allow' : 'refuse',
    ...(overrides.provisioningTimings ? { timings: overrides.provisioningTimings } : {}),
  });

  // Event bodies over the threshold go to Blob storage, the message carrying their reference and digest (claim check).
  const eventBodies = config.outbox.bodiesConnection ? blobEventBodies(config.outbox.bodiesConnection) : undefined;
  const publisher = createEventPublisher(config.serviceBus.connection, busDb(store.db), store.dialect, clock, twin?.bus);
  const events = eventBodies ? claimCheckingPublisher(publisher, { store: eventBodies, thresholdBytes: config.outbox.claimCheckBytes }) : publisher;
  // Events go out right after the commit that wrote them; the relay's timer is the fallback (outbox-relay.service.ts).
  const afterCommitPublish = config.outbox.publish === 'after-commit' ? startAfterCommitPublish(busDb(store.db), events, { dialect: store.dialect, clock, ids, ...(config.outbox.claimMs ? { leaseMs: config.outbox.claimMs } : {}) }) : undefined;
  // In Azure the queues are Service Bus queues the Functions trigger consumes: their lag is read from the namespace.
  const inboxLagReader = createInboxLagReader(config.serviceBus.connection, busDb(store.db), clock, twin?.bus);

  const inventory = createInventoryService({
    store,
    tables: createObservedInventory(tables),
    // Each target read as its kind says; the Azure and Kubernetes adapters load their SDKs on first use, never at start.
    observers: observersByTarget(config.targets, {
      'local-cloud': () => {
        if (!twin) throw new Error('local-cloud targets are the local host\'s');
        return twin.observer({ store, clock, ids });
      },
      'azure-resource-manager': () => createArmObserver(),
      // Each target's own cluster and credential; a target without one is not observed.
      kubernetes: () => createKubernetesObserver({ clusters: kubernetesClusters(config.targets) }),
    }),
    clock,
    ids,
    scanInterval: config.inventory.scanInterval,
    scanConcurrency: config.inventory.scanConcurrency,
    observeTimeoutMs: config.inventory.observeTimeoutMs,
    // The environment's target as provisioning bound it (else as the rules give it); the Azure and Kubernetes
    // scopes are configured by tenant and environment, never by an environment id another tenant may use.
    // A bound target no longer configured keeps its id: no observer reads it, and the scan says so.
    scopeOf: async (environment) => {
      const bound = await provisioning.boundTarget(environment.tenant, environment.id);
      const target = config.targets.find((t) => t.id === bound) ?? targetOf({ tenant: environment.tenant, environment: environment.id, tier: environment.tier });
      return { ...observationScopeOn(target, environment, config.inventory.scopes), target: bound ?? target.id };
    },
    // A scan while a run applies to the stack would see it half applied: it is skipped, with the run named.
    applyingRun: (stack) => provisioning.applyingRun(stack),
    knowsTenant,
    ...(eventBodies ? { eventBodies } : {}),
  });

  const healthChecks: HealthCheck[] = [
    {
      name: 'runtime-cloud-store',
      critical: true,
      async run() {
        await sql`select 1 as ok`.execute(store.db);
        return { details: { dialect: store.dialect } };
      },
    },
    { name: 'table-storage', critical: true, run: () => tables.ping() },
    {
      // The seed detects a lost store by readiness: after a restore, the host is degraded until capacity has recovered.
      name: 'store-recovery',
      critical: false,
      async run() {
        const { epoch, restoredAt, recovery: window } = await readStoreEpoch(store.db);
        const details = { epoch, ...(restoredAt ? { restoredAt: restoredAt.toISOString() } : {}), ...(window ? { recoveringUntil: window.until.toISOString() } : {}) };
        if (window && clock.now() < window.until) {
          return { status: 'degraded', error: `the store was restored from a backup: capacity recovers until ${window.until.toISOString()}`, details };
        }
        return { details };
      },
    },
    ...(engine ? [engineCheck(engine)] : []),
    gitCacheCheck(config.provisioning.gitCacheDir),
    targetsCheck(config.targets),
    {
      // Each target's runner pool: event-driven pools have no agent while idle, so only jobs waiting with no agent
      // online to claim them are a problem.
      name: 'runner-pools',
      critical: false,
      async run() {
        if (config.iac.execution !== 'runner-jobs') return { details: { execution: config.iac.execution } };
        const pools = await provisioning.runners.pools();
        const stuck = pools.filter((p) => p.jobsWaiting > 0 && p.agentsOnline === 0);
        return stuck.length > 0 ? { status: 'degraded', error: `jobs wait with no agent online: ${stuck.map((p) => p.pool).join(', ')}`, details: { pools } } : { details: { pools } };
      },
    },
    ...peerHealthChecks(config.peers, peerTokens),
    ...inboxLagChecks(inboxLagReader, config.host.enabledModules),
    outboxDeadLetterCheck(busDb(store.db), clock),
  ];
  const stopInboxLagGauge = registerInboxLagGauge(() => inboxLagReader.read(config.host.enabledModules));
  const stopQueueDepthGauge = registerQueueDepthGauge(() => capacity.queueDepth());

  return {
    config,
    clock,
    ids,
    sql: store,
    tables,
    auth,
    ...(engine ? { iac: engine } : {}),
    healthChecks,
    capacity,
    provisioning,
    inventory,
    events,
    eventBodies,
    ...(recovery ? { recovery } : {}),
    async close() {
      stopInboxLagGauge();
      stopQueueDepthGauge();
      capacity.close();
      await inboxLagReader.close();
      await afterCommitPublish?.stop();
      await events.close();
      await store.close();
    },
  };
}

/**
 * The host's own Entra identity for Azure SDK clients: the user-assigned identity `clientId`, else the default chain.
 * `@azure/identity` loads with the first token asked for, not at start.
 */
function hostCredential(clientId: string): TokenCredential {
  let credential: TokenCredential | undefined;
  return {
    getToken(scopes, options) {
      if (!credential) {
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const identity = require('@azure/identity') as typeof import('@azure/identity');
        credential = clientId ? new identity.ManagedIdentityCredential({ clientId }) : new identity.DefaultAzureCredential();
      }
      return credential.getToken(scopes, options);
    },
  };
}

/**
 * Runner jobs' capacity leases (kind `runner`, of the target's runner pool) from the capacity module: a tenant's
 * edition bounds how many of its plans and applies run at once. A refused grant (quota, pool full) leaves the job
 * queued for a later claim.
 */
export function runnerLeases(capacity: CapacityService): RunnerLeases {
  const tenantOnly = (tenant: string) => ({ kind: 'one', tenant }) as const;
  return {
    async acquire({ tenant, pool, holder, ttlMs, idempotencyKey }) {
      try {
        const { lease } = await capacity.acquire({ tenant, kind: 'runner', units: 1, ttlSeconds: Math.ceil(ttlMs / 1000), holder, idempotencyKey, pool });
        return { id: lease.id, fencingToken: lease.fencingToken };
      } catch (thrown) {
        if (thrown instanceof AppError && thrown.kind !== 'unavailable' && thrown.kind !== 'internal') return { refused: thrown.message };
        throw thrown;
      }
    },
    async renew(tenant, lease, ttlMs) {
      try {
        await capacity.renew(tenantOnly(tenant), lease.id, lease.fencingToken, Math.ceil(ttlMs / 1000));
        return true;
      } catch (thrown) {
        if (thrown instanceof AppError && thrown.kind !== 'unavailable' && thrown.kind !== 'internal') return false;
        throw thrown;
      }
    },
    async release(tenant, lease) {
      try {
        await capacity.release(tenantOnly(tenant), lease.id, lease.fencingToken);
      } catch (thrown) {
        // A lease that lapsed or was swept is released already.
        if (!(thrown instanceof AppError) || thrown.kind === 'unavailable' || thrown.kind === 'internal') throw thrown;
      }
    },
  };
}
