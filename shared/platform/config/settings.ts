import { MODULES, type ModuleName } from './modules';
import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { OBSERVER_OF_KIND, TARGET_OBSERVERS, approvalSchema, clientTenantsSchema, jsonOf, list, observationScopeSchema, packagesSchema, peerEndpoint, port, sourcesSchema, targetSchema } from './setting-schemas';

/**
 * Every setting of RuntimeCloudHost, in Azure app-settings form (`Section__Sub__Key`), so the same names work
 * as Function App settings, in `local.settings.json` and as environment variables of the local host.
 * `local.settings.sample.json` lists exactly these keys; config.ts reads them (the only place that reads
 * `process.env`, with modules.ts for the one setting registering the functions reads) into a `Config`.
 */
export { MODULES, type ModuleName };

/** Documented settings: key → schema with its default. Descriptions are shown by `runtime-cloud --help`. */
export const settings = {
  /** Modules composed into this host (seed: RuntimeCloud:Host:EnabledModules). Example: `capacity,inventory`. */
  RuntimeCloud__Host__EnabledModules: list(MODULES.join(',')).pipe(z.array(z.enum(MODULES))),
  /** IaC runner: `pulumi` (Automation API, production) or `local` (the embedded engine). */
  RuntimeCloud__IaC__Runner: z.enum(['pulumi', 'local']).default('pulumi'),
  /** Messaging profile service name (seed: OrleansMessaging:ServiceName). */
  OrleansMessaging__ServiceName: z.string().min(1).default('runtime-cloud'),
  /** SQL dialect of the runtime-cloud store: `sqlite` (embedded), `postgres` or `mssql` (Azure SQL). */
  RuntimeCloud__Store__Dialect: z.enum(['sqlite', 'postgres', 'mssql']).default('sqlite'),
  /**
   * The store's connection: a file path for sqlite (relative to the state dir), a `postgres://` URL, or for mssql
   * `Server=tcp:x.database.windows.net;Database=runtimecloud` (Entra token auth through @azure/identity).
   */
  RuntimeCloud__Store__Connection: z.string().default('runtime-cloud.sqlite'),
  /** Table storage connection string; empty on the local host, which starts Azurite's Table server in-process. */
  RuntimeCloud__Tables__Connection: z.string().default(''),
  /** Expected `iss` of bearer tokens. */
  RuntimeCloud__Auth__Issuer: z.string().min(1).default('https://runtime-cloud.local/issuer'),
  /** Expected `aud` of bearer tokens. */
  RuntimeCloud__Auth__Audience: z.string().min(1).default('api://runtime-cloud'),
  /** JWKS URL of the identity platform; empty on the local host, which trusts the keys in its state dir. */
  RuntimeCloud__Auth__JwksUrl: z.union([z.literal(''), z.url()]).default(''),
  /**
   * Callers that act for one tenant, as JSON: client application id (the token's `azp`, or `appid` in v1 tokens) →
   * tenant. Such a caller's token acts for that tenant only, as a `tenant` claim makes it (Entra issues none); a
   * token of a listed client whose `tenant` claim names another tenant is refused. Empty: none.
   * Example: `{"7f3e1c2a-0000-4000-8000-000000000001":"contoso"}`.
   */
  RuntimeCloud__Auth__Clients: jsonOf(clientTenantsSchema, '{}'),
  /**
   * The operator console's app registration in Entra ID (a single-page application signing in with the
   * authorization code flow and PKCE): its application (client) id. Empty: the console offers the local host's
   * "sign in as" (only the local host has it). Example: `5b7d…-…`.
   */
  RuntimeCloud__Console__ClientId: z.union([z.literal(''), z.uuid()]).default(''),
  /**
   * Where the console signs people in: the directory's authority, `https://login.microsoftonline.com/<directory-id>`
   * (the console's content security policy allows that host only). Empty: the issuer's, `RuntimeCloud__Auth__Issuer`
   * without its `/v2.0`.
   */
  RuntimeCloud__Console__Authority: z.union([z.literal(''), z.string().regex(/^https:\/\/login\.microsoftonline\.com\/[\w.-]+\/?$/, 'an authority is https://login.microsoftonline.com/<directory-id>')]).default(''),
  /**
   * The scope the console asks a person's token for: the host's API, delegated. Empty: `<RuntimeCloud__Auth__Audience>/.default`.
   * Example: `api://runtime-cloud/.default`.
   */
  RuntimeCloud__Console__ApiScope: z.string().default(''),
  /**
   * Where plans and applies run: `runner-jobs` (runner agents of the target's pool; the default) or `in-process`
   * (the engine inside the host: only tests and the bench baseline; a host outside the local host refuses it).
   */
  RuntimeCloud__IaC__Execution: z.enum(['runner-jobs', 'in-process']).default('runner-jobs'),
  /** How long a runner job's lease holds without a heartbeat, in seconds. */
  RuntimeCloud__Runners__LeaseSeconds: z.coerce.number().int().min(5).max(3600).default(60),
  /** How long a job waits for an agent of its pool before its run fails `PROVISIONING.RUNNER_UNAVAILABLE`, in seconds. */
  RuntimeCloud__Runners__ClaimTimeoutSeconds: z.coerce.number().int().min(1).max(7 * 24 * 3600).default(3600),
  /**
   * Runner agents that sign in with Entra, as JSON: client application id → the agent pool it serves (a group of a
   * target's `runnerPools`, or a tenant's own `<runnerPool>.<tenant>`; Entra issues no pool claim, the local issuer's
   * agent tokens carry `runner_pool`). Example: `{"3c1d…":"prod-we-runner.contoso"}`.
   */
  RuntimeCloud__Runners__Agents: jsonOf(clientTenantsSchema, '{}'),
  /** How many runner agents the local host starts as child processes. */
  RuntimeCloud__Local__Runners: z.coerce.number().int().min(0).max(16).default(2),
  /** Provisioning targets of this installation, as JSON. */
  RuntimeCloud__Targets: jsonOf(
    z.array(targetSchema).min(1).superRefine((targets, ctx) => {
      // An agent pool names one target: its identity holds roles on that target's scope only.
      const capacity = new Set<string>();
      const groups = new Set<string>();
      for (const [i, target] of targets.entries()) {
        const pool = target.runnerPool ?? `${target.id}-runner`;
        if (capacity.has(pool)) ctx.addIssue({ code: 'custom', path: [i, 'runnerPool'], message: `runner pool ${pool} is another target's: each target's agent pools are named after its own` });
        capacity.add(pool);
        for (const [j, group] of (target.runnerPools ?? []).entries()) {
          if (groups.has(group.id)) ctx.addIssue({ code: 'custom', path: [i, 'runnerPools', j, 'id'], message: `runner pool ${group.id} is named twice` });
          groups.add(group.id);
        }
      }
    }),
    JSON.stringify([{ id: 'local', kind: 'local-cloud', name: 'Local cloud', location: 'local' }]),
  ),
  /**
   * The external services' endpoints (contracts/README.md): the GovernanceHost, ControlPlaneApi, KnowledgeHost and DeliveryHost
   * speak gRPC (HTTP/2), the Config Platform HTTP. `https://` outside loopback; `http://127.0.0.1:<port>` (h2c) only
   * on loopback, where the local host starts its stand-ins and fills these in. Empty: not configured (every call
   * fails as a service that does not answer, and health says so). Example: `https://governance.factory.internal`.
   */
  RuntimeCloud__Governance__Endpoint: peerEndpoint,
  RuntimeCloud__ControlPlane__Endpoint: peerEndpoint,
  RuntimeCloud__Knowledge__Endpoint: peerEndpoint,
  RuntimeCloud__ConfigPlatform__Endpoint: peerEndpoint,
  RuntimeCloud__Delivery__Endpoint: peerEndpoint,
  /**
   * The token audience of each external service: the host asks Entra for `<audience>/.default` with its managed
   * identity (the local host signs its own). Example: `api://connectsoft-governance`.
   */
  RuntimeCloud__Governance__Audience: z.string().min(1).default('api://connectsoft-governance'),
  RuntimeCloud__ControlPlane__Audience: z.string().min(1).default('api://connectsoft-control-plane'),
  RuntimeCloud__Knowledge__Audience: z.string().min(1).default('api://connectsoft-knowledge'),
  RuntimeCloud__ConfigPlatform__Audience: z.string().min(1).default('api://connectsoft-config-platform'),
  RuntimeCloud__Delivery__Audience: z.string().min(1).default('api://connectsoft-delivery'),
  /** How long one call to an external service may take, in milliseconds (its deadline). */
  RuntimeCloud__Peers__DeadlineMs: z.coerce.number().int().min(100).max(60_000).default(5000),
  /** The client id of the user-assigned identity the host calls external services with; empty: the default credential. */
  RuntimeCloud__Peers__ClientId: z.string().default(''),
  /**
   * How long a message the local host's Service Bus receives stays locked to its receiver, in seconds (on Azure a
   * property of the queue, set by infra). A host that dies holding a message leaves it locked this long. Example: `60`.
   */
  RuntimeCloud__Local__QueueLockSeconds: z.coerce.number().int().min(1).max(300).default(60),
  /**
   * How long the local Durable runner's hold of an orchestration or activity lasts without renewal, in seconds: a
   * host that dies leaves its work to another (or to itself restarted) after this long. Example: `15`.
   */
  RuntimeCloud__Local__DurableLeaseSeconds: z.coerce.number().int().min(1).max(300).default(15),
  /**
   * Fault injection for the crash tests (issue 19; never set in a deployment): the crash points at which this
   * process kills itself with SIGKILL, comma-separated, each crashing once (see shared/platform/faults/crash-points.ts).
   * Empty: none. Example: `apply:engine-applied,durable:episode-decided:provisioningRun#2`.
   */
  RuntimeCloud__Faults__CrashAt: list(''),
  /** The crash points of the local host's runner agents (as `RuntimeCloud__Faults__CrashAt`). Example: `agent:applied`. */
  RuntimeCloud__Faults__AgentCrashAt: list(''),
  /**
   * The folder where a crash point marks that it fired, so that each fires once across restarts (and across the
   * host's agents). Required when a crash point is set. Example: `/tmp/crash-markers`.
   */
  RuntimeCloud__Faults__CrashMarkers: z.string().default(''),
  /** Folder of the local host's state (SQLite file, Azurite data, token keys). */
  RuntimeCloud__Local__StateDir: z.string().min(1).default('.runtime-cloud'),
  /** Port of the local host's HTTP server (seed: https 8130). */
  RuntimeCloud__Local__Port: port.default(8130),
  /**
   * Port of the local host's gRPC server (LeaseService: gRPC, gRPC-Web and Connect; seed: grpc 8132). Unset: 8132, or a
   * free port when the HTTP port is 0 (tests, hosts started beside others). `0` picks a free one. Example: `8132`.
   */
  RuntimeCloud__Local__GrpcPort: port.optional(),
  /**
   * How long the local host waits for a request's whole body, in milliseconds; a client still sending then (a slow
   * or stalled upload) is answered 408 `REQUEST.BODY_TIMEOUT` and disconnected. Example: `30000`.
   */
  RuntimeCloud__Local__BodyTimeoutMs: z.coerce.number().int().min(10).max(300_000).default(30_000),
  /**
   * Capacity seed file (editions, pools, tenants upserted at start-up), relative to the working directory; empty on
   * the local host means its bundled `local/capacity-seed.json`, `none` seeds nothing. Example: `config/capacity.json`.
   */
  RuntimeCloud__Capacity__SeedFile: z.string().default(''),
  /**
   * The Azure Key Vault key (P-256, versionless URL) that signs lease certificates; each enabled version is published
   * in the lease JWKS, a new version signs once it has been listed for 5 minutes (a rotation). Empty: no certificates
   * (the local host signs with a key ring in its state dir). Example: `https://kv-rch-prod.vault.azure.net/keys/lease-certificates`.
   */
  RuntimeCloud__Capacity__CertificateKey: z
    .string()
    .regex(/^$|^https:\/\/[^/]+\/keys\/[0-9a-zA-Z-]{1,127}$/, 'a versionless Key Vault key URL: https://<vault>/keys/<name>')
    .default(''),
  /** The longest a lease certificate is valid, in seconds; never past its lease's expiry. Example: `300`. */
  RuntimeCloud__Capacity__CertificateSeconds: z.coerce.number().int().min(10).max(3600).default(300),
  /**
   * How long a provisioning plan may wait for its approval before it goes stale, in seconds, as JSON: `default`
   * for every environment, other keys an environment's id or name. Empty: 24 hours everywhere.
   * Example: `{"default":86400,"production":14400}`.
   */
  RuntimeCloud__Provisioning__PlanExpirySeconds: jsonOf(z.record(z.string().min(1), z.number().int().positive()), '{}'),
  /**
   * When a provisioning plan needs approval, as JSON: `default` with `tiers` (every plan of these tiers),
   * `onDeleteOrReplace` (any plan with a delete or replace step) and `secondPersonTiers` (tiers whose plans the
   * person who asked for the run may not approve themselves), other keys an environment's id or name with `always`
   * (true: every plan there; false: none by its tier), `onDeleteOrReplace` and `secondPerson`. Empty: production
   * plans and plans that delete or replace, everywhere; a second person for production.
   * Example: `{"default":{"tiers":["production"],"onDeleteOrReplace":true,"secondPersonTiers":["production"]},"env-dev-1":{"always":true,"secondPerson":true},"sandbox":{"onDeleteOrReplace":false}}`.
   */
  RuntimeCloud__Provisioning__Approval: jsonOf(approvalSchema, '{}'),
  /**
   * Which repositories each tenant may promote from, as JSON: by tenant id, or `*` for every tenant, a list of
   * `{ "prefix", "credentialRef"? }`. A prefix is an `https://` URL (or a `file://` one, on a host that allows local
   * sources) and names whole path segments: `https://git.example.com/org/` allows `…/org/app.git`, not
   * `…/org-evil/app.git`. `credentialRef` (https: only) is a Secret Broker reference of the credential to fetch with,
   * resolved at fetch time and never stored. Empty: nothing is allowed (the local host: its example repository and
   * `file://<state dir>/repos/`, for every tenant).
   * Example: `{"*":[{"prefix":"https://git.example.com/shared/"}],"acme":[{"prefix":"https://git.example.com/acme/","credentialRef":"broker://git/acme-read"}]}`.
   */
  RuntimeCloud__Provisioning__Sources: jsonOf(sourcesSchema, '{}'),
  /** Most bytes one fetch of a remote repository may receive (the depth-1 fetch and the full fetch together). Example: `67108864` (64 MiB). */
  RuntimeCloud__Provisioning__FetchMaxBytes: z.coerce.number().int().min(1024).default(64 * 1024 * 1024),
  /** Longest one fetch of a remote repository may take in all, in seconds, however steadily bytes arrive. Example: `120`. */
  RuntimeCloud__Provisioning__FetchTimeoutSeconds: z.coerce.number().int().min(1).max(3600).default(120),
  /**
   * The folder remote repositories are fetched into (a folder per tenant in it), an absolute path: a relative one would
   * resolve against the working directory, which in Azure is the app's folder, read-only when the app runs from a
   * package. Empty: `runtime-cloud-git-cache` in the OS temporary folder, which is writable and local to each instance
   * (the local host: `<state dir>/git-cache`). Example: `/tmp/runtime-cloud-git-cache`.
   */
  RuntimeCloud__Provisioning__GitCacheDir: z
    .string()
    .default('')
    .refine((dir) => dir === '' || isAbsolute(dir), { message: "must be an absolute path: a relative one would land in the app's folder" }),
  /**
   * Pulumi runtimes a project may name in `runtime`, comma-separated. Example: `yaml` (the default; the local engine
   * evaluates YAML only).
   */
  RuntimeCloud__Provisioning__Runtimes: list('yaml').pipe(z.array(z.string().regex(/^[a-z][a-z0-9-]*$/, 'must be a runtime name such as yaml or nodejs'))),
  /**
   * The Pulumi packages a tenant's program may use, each with the versions it may ask for (`options.version`), as
   * `name@range` (a semver range), comma-separated: anything else is refused before a runner job, and so are
   * `command` and a `pluginDownloadURL` whatever this says (docs/security.md, "Packages are the installation's"). The runner image must carry a
   * version of each in its range. Example: `azure-native@3.28.0,random@>=4.21.0 <5.0.0` (default: the runner image's
   * azure-native, azuread, kubernetes, random and tls; the local host adds `local` and `std`).
   */
  RuntimeCloud__Provisioning__Packages: packagesSchema,
  /**
   * Retired: each target is observed as its kind says (`OBSERVER_OF_KIND`). Still accepted when it names the observer
   * of every target (an installation of one kind of target, as this setting served it); otherwise start-up fails
   * naming the targets it disagrees with. Leave it unset. Example: `azure-resource-manager`.
   */
  RuntimeCloud__Inventory__Observer: z.enum(TARGET_OBSERVERS).optional(),
  /**
   * How often each environment is scanned for drift, in seconds, as JSON: `default` for every environment, other
   * keys an environment's id or name. Empty: every 5 minutes. An environment not scanned within twice its interval
   * shows drift status unknown. Example: `{"default":300,"production":60}`.
   */
  RuntimeCloud__Inventory__ScanIntervalSeconds: jsonOf(z.record(z.string().min(1), z.number().int().min(60, { message: 'the drift scan timer runs every minute: an interval is 60 seconds at the least' })), '{}'),
  /** How many environments one host observes at once (targets' rate limits). Example: `8`. */
  RuntimeCloud__Inventory__ScanConcurrency: z.coerce.number().int().min(1).max(256).default(8),
  /** How long one observation may take before it counts as failed (the observation goes stale). */
  RuntimeCloud__Inventory__ObserveTimeoutSeconds: z.coerce.number().int().min(1).max(3600).default(30),
  /**
   * Where each environment's resources live for the Azure and Kubernetes observers, as JSON by `<tenant>/<environment
   * id>` (environment ids are unique per tenant only, so an id alone could hand one tenant's scope to another's scan).
   * Example: `{"contoso/env-prod-1":{"azure":{"subscriptionId":"…","resourceGroup":"rg-app-prod"},"kubernetes":{"namespaces":["app"]}}}`.
   */
  RuntimeCloud__Inventory__Scopes: jsonOf(
    z.record(z.string().regex(/^.+\/[^/]+$/, 'a key is <tenant>/<environment id>'), observationScopeSchema),
    '{}',
  ),
  /**
   * When an event written with a state change is published: `after-commit` (the default: by the invocation that
   * committed it, right after the commit, with the outbox relay's 2 s timer as the fallback for what that misses) or
   * `relay` (by the relay's timer only). Example: `relay`.
   */
  RuntimeCloud__Outbox__Publish: z.enum(['after-commit', 'relay']).default('after-commit'),
  /**
   * How long a relay's claim of outbox lanes holds, in seconds: a host that dies mid-publish leaves its lanes' events
   * to another relay after this long. Default (0): the publisher's budget, claim-check stores included, plus a margin
   * (60 s on the local host, about 291 s with Service Bus), so a claim outlasts a publish with every retry it may make.
   * Shorter only where a republish is harmless and fast (the crash tests; the embedded topic keeps one copy per
   * messageId). Example: `2`.
   */
  RuntimeCloud__Outbox__ClaimSeconds: z.coerce.number().int().min(0).max(600).default(0),
  /**
   * Where event bodies over `RuntimeCloud__Outbox__ClaimCheckBytes` are stored (claim check, event-bodies.ts): a Blob
   * storage connection string, or an account URL (`https://acct.blob.core.windows.net`, the host's managed identity).
   * Empty on the local host, which starts Azurite's Blob server in-process. Example: `https://rcevents.blob.core.windows.net`.
   */
  RuntimeCloud__Outbox__Bodies__Connection: z.string().default(''),
  /**
   * An event whose CloudEvent JSON is larger than this many bytes is published as a claim check: its data stored in
   * Blob storage, the message carrying its reference and digest (Service Bus Standard takes 256 KiB a message,
   * properties included). Example: `196608`.
   */
  RuntimeCloud__Outbox__ClaimCheckBytes: z.coerce.number().int().min(1024).max(1_000_000).default(196_608),
  /** Service Bus connection string used by the Functions triggers and the event relay (Azure only). */
  ServiceBusConnection: z.string().default(''),
  /** Service Bus namespace for identity-based connections (`ns.servicebus.windows.net`), as the Functions extension reads it. */
  ServiceBusConnection__fullyQualifiedNamespace: z.string().default(''),
  /** Functions host storage (Durable task hub, timers); Azure only. */
  AzureWebJobsStorage: z.string().default(''),
  /**
   * Application Insights connection string: when set, metrics go to Azure Monitor (applicationinsights v3 over
   * OpenTelemetry); empty, nothing is sent and metrics are only served at GET /runtime-cloud/metrics.
   */
  APPLICATIONINSIGHTS_CONNECTION_STRING: z.string().default(''),
  /** Functions language worker; always `node`. */
  FUNCTIONS_WORKER_RUNTIME: z.literal('node').default('node'),
} as const;

export type SettingKey = keyof typeof settings;

export const settingKeys = Object.keys(settings) as SettingKey[];

export const settingsSchema = z.object(settings).superRefine((s, ctx) => {
  const retired = s.RuntimeCloud__Inventory__Observer;
  const others = s.RuntimeCloud__Targets.filter((t) => OBSERVER_OF_KIND[t.kind] !== retired);
  if (retired === undefined || others.length === 0) return;
  ctx.addIssue({
    code: 'custom',
    path: ['RuntimeCloud__Inventory__Observer'],
    message: `is retired: each target is observed as its kind says, and ${others.map((t) => `${t.id} (${t.kind}) by ${OBSERVER_OF_KIND[t.kind]}`).join(', ')}; remove the setting`,
  });
});

export type Settings = z.infer<typeof settingsSchema>;
