import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { validRange } from 'semver';
import { z } from 'zod';
import { sourcePrefixProblem } from '../git/repository-url';
import { describeFieldProblems, fieldProblems, type FieldProblem } from '../validation/validation';
import { deepFreeze } from '../values/deep-freeze';
import { MODULES, type ModuleName } from './modules';

/**
 * Every setting of RuntimeCloudHost, in Azure app-settings form (`Section__Sub__Key`), so the same names work
 * as Function App settings, in `local.settings.json` and as environment variables of the local host.
 * This module is the only place that reads `process.env` (with modules.ts, for the one setting that registering the
 * functions reads); `local.settings.sample.json` lists exactly these keys.
 */
export { MODULES, type ModuleName };

const list = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((s) => s.split(',').map((x) => x.trim()).filter((x) => x.length > 0));

const port = z.coerce.number().int().min(0).max(65535);

/** An external service's base URL: TLS outside loopback (plain HTTP/2 only to this machine). */
const peerEndpoint = z
  .union([z.literal(''), z.url()])
  .default('')
  .refine((url) => url === '' || url.startsWith('https://') || /^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(\/|$)/.test(url), {
    message: 'an external service is reached over https:// (http:// only on loopback)',
  });

/** A runner job's maximum duration on a target, in minutes. */
const jobMinutes = z
  .number({ error: 'a maximum job duration is a whole number of minutes' })
  .int('a maximum job duration is a whole number of minutes')
  .min(1, 'a maximum job duration is at least 1 minute')
  .max(24 * 60, 'a maximum job duration is at most 1440 minutes (a day)');

const targetSchema = z.object({
  id: z.string().min(1),
  kind: z.enum(['local-cloud', 'azure-subscription', 'aks-cluster', 'on-prem']),
  name: z.string().min(1),
  location: z.string().optional(),
  endpoint: z.string().optional(),
  /**
   * The target's capacity pool of kind `runner` (each claimed job holds a lease of it, within its tenant's quota), and
   * the base of its agent pools' ids: a tenant in no `runnerPools` group has its own agent pool `<runnerPool>.<tenant>`.
   * Default `<id>-runner`.
   */
  runnerPool: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/, 'a runner pool is 1 to 200 letters, digits, ".", "_" and "-"').optional(),
  /**
   * Tenants that share one agent pool on this target, where the installation groups them explicitly (every other
   * tenant has a pool of its own): the pool's agents claim only these tenants' jobs. A tenant is in at most one group
   * of a target; pool ids are unique across all targets and have no `.`, so they never meet a tenant's own pool.
   * Example: `[{"id":"contoso-fabrikam","tenants":["contoso","fabrikam"]}]`.
   */
  runnerPools: z
    .array(
      z
        .object({
          id: z.string().regex(/^[a-z0-9][a-z0-9-]{0,39}$/, 'a runner pool id is 1 to 40 lowercase letters, digits and "-", starting with a letter or digit'),
          tenants: z.array(z.string().min(1)).min(1),
        })
        .strict(),
    )
    .optional(),
  /**
   * How long one runner job of each kind may run on this target, in minutes from its claim (defaults: plan 30, apply
   * 120): the host takes a job past it for lost even while its agent beats (a plan is dispatched again, at most 3
   * times; an apply follows the rules of a lost apply). Example: `{"plan":45,"apply":240}`.
   */
  jobMaxMinutes: z.object({ plan: jobMinutes.optional(), apply: jobMinutes.optional() }).strict().optional(),
  /** An Azure target's scope: where its runners' identity may write and its observer identity reads. */
  scope: z.object({ subscriptionId: z.string().min(1), resourceGroup: z.string().min(1) }).optional(),
  /**
   * Client id of the target's read-only observer identity (drift scans of this target read with it): for an
   * `azure-subscription` target the identity reading ARM, for an `aks-cluster` target the one whose Microsoft Entra
   * token reads the cluster (it needs a read role there, e.g. Azure Kubernetes Service RBAC Reader).
   */
  observerClientId: z.string().min(1).optional(),
  /**
   * How drift scans reach this target's Kubernetes cluster (the `kubernetes` observer); a target without it is not
   * observed (no kubeconfig of the host serves every target). On an `aks-cluster` target, `server` (default: the
   * target's `endpoint`) is the API server and `certificateAuthorityData` its CA certificate (base64 PEM, as a
   * kubeconfig's `certificate-authority-data`), read with a Microsoft Entra token for the AKS AAD server
   * (`6dae42f8-4368-4678-94ff-3960e28e3630/.default`) of `observerClientId`, or of the host's default credential
   * without one. `kubeconfig` instead names a kubeconfig file for this target alone (an on-prem cluster, or an AKS
   * cluster read with a local account), with its `context` (default: the file's current context).
   * Example: `{"server":"https://aks-prod-we-1a2b3c4d.hcp.westeurope.azmk8s.io:443","certificateAuthorityData":"LS0tLS1CRUdJTi…"}`
   * or `{"kubeconfig":{"path":"/mnt/secrets/dc-observer.kubeconfig","context":"dc-reader"}}`.
   */
  kubernetes: z
    .object({
      server: z.url({ protocol: /^https$/ }).optional(),
      certificateAuthorityData: z.base64().min(1).optional(),
      kubeconfig: z.object({ path: z.string().min(1), context: z.string().min(1).optional() }).strict().optional(),
    })
    .strict()
    .optional(),
  /**
   * Which environments live here: the first target with a rule matching an environment's tenant, id and tier
   * (each optional, all given must match) is its target; an environment no rule matches is on the first target.
   * Example: `[{"tier":"production"},{"tenant":"contoso","environment":"env-prod-eu"}]`.
   */
  environments: z
    .array(z.object({ tenant: z.string().min(1).optional(), environment: z.string().min(1).optional(), tier: z.enum(['development', 'staging', 'production']).optional() }).strict())
    .optional(),
  /**
   * Where the runners of a target that is not a local cloud keep each tenant's Pulumi state (`url`, a Pulumi backend
   * URL) and which key encrypts its secrets (`secretsProvider`); `{tenant}` in either is the job's tenant, and each
   * must name it, so no two tenants share a state location or a key. The host hands both to the agent in the job.
   * Example: `{"url":"azblob://state-{tenant}?storage_account=stprod","secretsProvider":"azurekeyvault://kv-prod.vault.azure.net/keys/pulumi-{tenant}"}`.
   */
  backend: z
    .object({
      url: z.string().includes('{tenant}', { message: 'must name {tenant}: each tenant keeps its state apart' }),
      secretsProvider: z.string().includes('{tenant}', { message: 'must name {tenant}: each tenant has its own key' }).optional(),
    })
    .strict()
    .optional(),
})
  .superRefine((target, ctx) => {
    const grouped = new Set<string>();
    for (const [i, group] of (target.runnerPools ?? []).entries()) {
      for (const tenant of group.tenants) {
        if (grouped.has(tenant)) ctx.addIssue({ code: 'custom', path: ['runnerPools', i, 'tenants'], message: `tenant ${tenant} is in more than one runner pool of this target` });
        grouped.add(tenant);
      }
    }
  })
  .refine((target) => target.kind === 'local-cloud' || target.backend !== undefined, {
    message: "a target that is not a local cloud needs its runners' state backend (`backend.url`)",
    path: ['backend'],
  })
  .refine((target) => !target.kubernetes || target.kind === 'aks-cluster' || target.kind === 'on-prem', {
    message: 'applies to aks-cluster and on-prem targets only',
    path: ['kubernetes'],
  })
  .refine((target) => !(target.kubernetes?.server || target.kubernetes?.certificateAuthorityData) || (target.kind === 'aks-cluster' && !target.kubernetes.kubeconfig), {
    message: 'server and certificateAuthorityData are for an aks-cluster target read with an Entra token; a target read with a kubeconfig takes its cluster from the file',
    path: ['kubernetes'],
  });
export type ProvisioningTarget = z.infer<typeof targetSchema>;

/** What reads a target's resources for drift scans. */
export const TARGET_OBSERVERS = ['local-cloud', 'azure-resource-manager', 'kubernetes'] as const;
export type TargetObserver = (typeof TARGET_OBSERVERS)[number];

/**
 * The observer of each kind of target, so one installation scans targets of every kind: a local cloud is read in
 * its own store, an Azure subscription through Azure Resource Manager, an AKS cluster and an on-prem target through
 * the Kubernetes API of the target's `kubernetes` settings.
 */
export const OBSERVER_OF_KIND: Readonly<Record<ProvisioningTarget['kind'], TargetObserver>> = {
  'local-cloud': 'local-cloud',
  'azure-subscription': 'azure-resource-manager',
  'aks-cluster': 'kubernetes',
  'on-prem': 'kubernetes',
};

/** Where an environment's resources live for the Azure and Kubernetes observers. */
const observationScopeSchema = z.object({
  azure: z.object({ subscriptionId: z.string().min(1), resourceGroup: z.string().min(1), tags: z.record(z.string(), z.string()).optional() }).optional(),
  kubernetes: z.object({ namespaces: z.array(z.string().min(1)).min(1) }).optional(),
});

const jsonOf = <T extends z.ZodType>(schema: T, fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((s, ctx) => {
      try {
        return JSON.parse(s) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'must be JSON' });
        return z.NEVER;
      }
    })
    .pipe(schema);

const TIERS = ['development', 'staging', 'production'] as const;

/**
 * `RuntimeCloud__Auth__Clients`: client application id → the tenant that caller acts for. Ids are letters, digits,
 * `.`, `_` and `-` (an Entra app id is a GUID), unique without regard to case as tokens are matched; a tenant is a
 * non-empty string (an empty one would leave the caller unbound).
 */
const CLIENT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
const clientTenantsSchema = z
  .unknown()
  .superRefine((raw, ctx) => {
    // Checked on the parsed JSON itself: a record schema drops a `__proto__` key without a word.
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return;
    const seen = new Set<string>();
    for (const client of Object.keys(raw)) {
      if (!CLIENT_ID.test(client)) ctx.addIssue({ code: 'custom', path: [client], message: 'a client id is letters, digits, ".", "_" and "-"' });
      else if (seen.has(client.toLowerCase())) ctx.addIssue({ code: 'custom', path: [client], message: 'listed twice (client ids are matched without regard to case)' });
      seen.add(client.toLowerCase());
    }
  })
  .pipe(z.record(z.string(), z.string().min(1).max(200)));

/** `RuntimeCloud__Provisioning__Sources`: by tenant id or `*`, the repository prefixes it may promote from. */
const sourcesSchema = z.record(
  z.string().min(1),
  z.array(
    z
      .strictObject({
        prefix: z.string().superRefine((prefix, ctx) => {
          const problem = sourcePrefixProblem(prefix);
          if (problem !== undefined) ctx.addIssue({ code: 'custom', message: `prefix ${problem}` });
        }),
        credentialRef: z.string().min(1).optional(),
      })
      .refine((rule) => rule.credentialRef === undefined || /^https:/i.test(rule.prefix), { message: 'credentialRef applies to https: prefixes only' }),
  ),
);

/**
 * `RuntimeCloud__Provisioning__Approval`: `default` says which tiers, whether destroys, and which tiers need a second
 * person; environments override.
 */
const approvalSchema = z
  .object({
    default: z
      .strictObject({ tiers: z.array(z.enum(TIERS)).optional(), onDeleteOrReplace: z.boolean().optional(), secondPersonTiers: z.array(z.enum(TIERS)).optional() })
      .optional(),
  })
  .catchall(z.strictObject({ always: z.boolean().optional(), onDeleteOrReplace: z.boolean().optional(), secondPerson: z.boolean().optional() }));

/**
 * The Pulumi packages tenants may use by default, each at the version the runner image carries
 * (infra/runner/Dockerfile pins the same versions; a unit test keeps the two together).
 */
export const DEFAULT_PACKAGES = 'azure-native@3.28.0,azuread@6.9.1,kubernetes@4.34.2,random@4.21.2,tls@5.6.1';

/** Packages a list may never name, and why: the installation's configuration cannot allow them either. */
const NEVER_ALLOWED_PACKAGES: Readonly<Record<string, string>> = {
  command: 'a command resource runs a shell on the runner at preview, before policy and approval',
  pulumi: "the pulumi package's builtins are judged by the host itself (package-policy.ts)",
};

/**
 * `RuntimeCloud__Provisioning__Packages`: `name@range`, comma-separated, into name → semver range. Every package
 * names a range: the versions a program may ask for must be the versions the runner image carries.
 */
const packagesSchema = z
  .string()
  .default(DEFAULT_PACKAGES)
  .transform((text, ctx) => {
    const packages: Record<string, string> = {};
    for (const item of text.split(',').map((x) => x.trim()).filter((x) => x.length > 0)) {
      const at = item.indexOf('@');
      const name = at < 0 ? item : item.slice(0, at).trim();
      const range = at < 0 ? '' : item.slice(at + 1).trim();
      const never = Object.hasOwn(NEVER_ALLOWED_PACKAGES, name.toLowerCase()) ? NEVER_ALLOWED_PACKAGES[name.toLowerCase()] : undefined;
      if (never !== undefined) ctx.addIssue({ code: 'custom', message: `${name} is never allowed: ${never}` });
      else if (!/^[a-z][a-z0-9-]*$/.test(name)) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(name)} must be a package name such as azure-native` });
      else if (range === '' || validRange(range) === null) ctx.addIssue({ code: 'custom', message: `${item} must be name@range with a semver range, such as random@4.21.2 or random@^4.21.0` });
      else if (Object.hasOwn(packages, name)) ctx.addIssue({ code: 'custom', message: `${name} is listed twice` });
      else packages[name] = range;
    }
    return packages;
  });

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
   * `command` and a `pluginDownloadURL` whatever this says (README, "Security"). The runner image must carry a
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

const schema = z.object(settings).superRefine((s, ctx) => {
  const retired = s.RuntimeCloud__Inventory__Observer;
  const others = s.RuntimeCloud__Targets.filter((t) => OBSERVER_OF_KIND[t.kind] !== retired);
  if (retired === undefined || others.length === 0) return;
  ctx.addIssue({
    code: 'custom',
    path: ['RuntimeCloud__Inventory__Observer'],
    message: `is retired: each target is observed as its kind says, and ${others.map((t) => `${t.id} (${t.kind}) by ${OBSERVER_OF_KIND[t.kind]}`).join(', ')}; remove the setting`,
  });
});
type Settings = z.infer<typeof schema>;

/** An external service: its base URL (empty: not configured) and the audience of the tokens it accepts. */
export interface PeerSetting {
  readonly endpoint: string;
  readonly audience: string;
}

export interface Config {
  readonly host: { readonly enabledModules: readonly ModuleName[]; readonly serviceName: string };
  readonly iac: {
    readonly runner: 'pulumi' | 'local';
    readonly execution: 'runner-jobs' | 'in-process';
    readonly leaseMs: number;
    readonly claimTimeoutMs: number;
    /** Client application id → the runner pool that agent serves. */
    readonly agents: Readonly<Record<string, string>>;
  };
  readonly store: { readonly dialect: 'sqlite' | 'postgres' | 'mssql'; readonly connection: string };
  readonly tables: { readonly connection: string };
  readonly auth: {
    readonly issuer: string;
    readonly audience: string;
    readonly jwksUrl: string;
    /** Client application id → the tenant that caller acts for. */
    readonly clients: Readonly<Record<string, string>>;
  };
  readonly targets: readonly ProvisioningTarget[];
  /** The external services (empty endpoint: not configured), each with its token audience. */
  readonly peers: {
    readonly governance: PeerSetting;
    readonly controlPlane: PeerSetting;
    readonly knowledge: PeerSetting;
    readonly configPlatform: PeerSetting;
    readonly delivery: PeerSetting;
    readonly deadlineMs: number;
    readonly clientId: string;
  };
  readonly local: {
    readonly stateDir: string;
    readonly port: number;
    readonly runners: number;
    readonly bodyTimeoutMs: number;
    readonly queueLockMs: number;
    readonly durableLeaseMs: number;
  };
  /** Crash points (tests only): the host's, its agents', and where they mark that they fired. */
  readonly faults: { readonly crashAt: readonly string[]; readonly agentCrashAt: readonly string[]; readonly markers: string };
  readonly serviceBus: { readonly connection: string };
  /** When outbox events are published: right after their commit (relay as fallback), or by the relay only. */
  readonly outbox: {
    readonly publish: 'after-commit' | 'relay';
    /** Undefined: the relay's default (RelayOptions.leaseMs). */
    readonly claimMs?: number;
    /** Blob storage of claim-checked event bodies; empty: the local host's Azurite. */
    readonly bodiesConnection: string;
    readonly claimCheckBytes: number;
  };
  readonly telemetry: { readonly connectionString: string };
  readonly capacity: { readonly seedFile: string };
  readonly inventory: {
    /** Scan interval in ms: `defaultMs`, and by environment id or name. */
    readonly scanInterval: { readonly defaultMs: number; readonly byEnvironment: Readonly<Record<string, number>> };
    readonly scanConcurrency: number;
    readonly observeTimeoutMs: number;
    /** Azure and Kubernetes scopes by `<tenant>/<environment id>`. */
    readonly scopes: Readonly<Record<string, z.infer<typeof observationScopeSchema>>>;
  };
  readonly provisioning: {
    /** Plan expiry in ms: `defaultMs`, and by environment id or name. */
    readonly planExpiry: { readonly defaultMs: number; readonly byEnvironment: Readonly<Record<string, number>> };
    /**
     * When a plan needs approval, and whose approval counts: `tiers`, `onDeleteOrReplace` and `secondPersonTiers` by
     * default, overridden by environment id or name.
     */
    readonly approval: {
      readonly tiers: readonly (typeof TIERS)[number][];
      readonly onDeleteOrReplace: boolean;
      readonly secondPersonTiers: readonly (typeof TIERS)[number][];
      readonly byEnvironment: Readonly<Record<string, { readonly always?: boolean; readonly onDeleteOrReplace?: boolean; readonly secondPerson?: boolean }>>;
    };
    /** Source rules by tenant id or `*` (see `RuntimeCloud__Provisioning__Sources`). */
    readonly sources: Readonly<Record<string, readonly { readonly prefix: string; readonly credentialRef?: string }[]>>;
    readonly fetchMaxBytes: number;
    readonly fetchTimeoutMs: number;
    /** Where remote repositories are fetched to: an absolute, writable folder of this instance. */
    readonly gitCacheDir: string;
    /** Runtimes a project may name. */
    readonly runtimes: readonly string[];
    /** Pulumi packages a program may use: name → the semver range of the versions it may ask for. */
    readonly packages: Readonly<Record<string, string>>;
  };
}

export class ConfigError extends Error {
  /** `field` starts with the setting's key. Example: `RuntimeCloud__Targets.0.kind`. */
  constructor(readonly problems: readonly FieldProblem[]) {
    super(`Invalid configuration: ${describeFieldProblems(problems)}`);
    this.name = 'ConfigError';
  }
}

/** Parses settings from an environment-like record; throws ConfigError naming every invalid key. */
export function parseConfig(env: Readonly<Record<string, string | undefined>>): Config {
  const present: Record<string, string> = {};
  for (const key of settingKeys) {
    const value = env[key];
    if (value !== undefined && value !== '') present[key] = value;
  }
  const result = schema.safeParse(present);
  if (!result.success) {
    throw new ConfigError(fieldProblems(result.error, '(settings)'));
  }
  return deepFreeze(toConfig(result.data));
}

function toConfig(s: Settings): Config {
  return {
    host: { enabledModules: [...new Set(s.RuntimeCloud__Host__EnabledModules)], serviceName: s.OrleansMessaging__ServiceName },
    iac: {
      runner: s.RuntimeCloud__IaC__Runner,
      execution: s.RuntimeCloud__IaC__Execution,
      leaseMs: s.RuntimeCloud__Runners__LeaseSeconds * 1000,
      claimTimeoutMs: s.RuntimeCloud__Runners__ClaimTimeoutSeconds * 1000,
      agents: s.RuntimeCloud__Runners__Agents,
    },
    store: { dialect: s.RuntimeCloud__Store__Dialect, connection: s.RuntimeCloud__Store__Connection },
    tables: { connection: s.RuntimeCloud__Tables__Connection },
    auth: {
      issuer: s.RuntimeCloud__Auth__Issuer,
      audience: s.RuntimeCloud__Auth__Audience,
      jwksUrl: s.RuntimeCloud__Auth__JwksUrl,
      clients: s.RuntimeCloud__Auth__Clients,
    },
    targets: s.RuntimeCloud__Targets,
    peers: {
      governance: { endpoint: s.RuntimeCloud__Governance__Endpoint, audience: s.RuntimeCloud__Governance__Audience },
      controlPlane: { endpoint: s.RuntimeCloud__ControlPlane__Endpoint, audience: s.RuntimeCloud__ControlPlane__Audience },
      knowledge: { endpoint: s.RuntimeCloud__Knowledge__Endpoint, audience: s.RuntimeCloud__Knowledge__Audience },
      configPlatform: { endpoint: s.RuntimeCloud__ConfigPlatform__Endpoint, audience: s.RuntimeCloud__ConfigPlatform__Audience },
      delivery: { endpoint: s.RuntimeCloud__Delivery__Endpoint, audience: s.RuntimeCloud__Delivery__Audience },
      deadlineMs: s.RuntimeCloud__Peers__DeadlineMs,
      clientId: s.RuntimeCloud__Peers__ClientId,
    },
    local: {
      stateDir: s.RuntimeCloud__Local__StateDir,
      port: s.RuntimeCloud__Local__Port,
      runners: s.RuntimeCloud__Local__Runners,
      bodyTimeoutMs: s.RuntimeCloud__Local__BodyTimeoutMs,
      queueLockMs: s.RuntimeCloud__Local__QueueLockSeconds * 1000,
      durableLeaseMs: s.RuntimeCloud__Local__DurableLeaseSeconds * 1000,
    },
    faults: { crashAt: s.RuntimeCloud__Faults__CrashAt, agentCrashAt: s.RuntimeCloud__Faults__AgentCrashAt, markers: s.RuntimeCloud__Faults__CrashMarkers },
    serviceBus: { connection: s.ServiceBusConnection || s.ServiceBusConnection__fullyQualifiedNamespace },
    outbox: {
      publish: s.RuntimeCloud__Outbox__Publish,
      ...(s.RuntimeCloud__Outbox__ClaimSeconds > 0 ? { claimMs: s.RuntimeCloud__Outbox__ClaimSeconds * 1000 } : {}),
      bodiesConnection: s.RuntimeCloud__Outbox__Bodies__Connection,
      claimCheckBytes: s.RuntimeCloud__Outbox__ClaimCheckBytes,
    },
    telemetry: { connectionString: s.APPLICATIONINSIGHTS_CONNECTION_STRING },
    capacity: { seedFile: s.RuntimeCloud__Capacity__SeedFile },
    inventory: {
      scanInterval: secondsByEnvironment(s.RuntimeCloud__Inventory__ScanIntervalSeconds, DEFAULT_SCAN_INTERVAL_SECONDS),
      scanConcurrency: s.RuntimeCloud__Inventory__ScanConcurrency,
      observeTimeoutMs: s.RuntimeCloud__Inventory__ObserveTimeoutSeconds * 1000,
      scopes: s.RuntimeCloud__Inventory__Scopes,
    },
    provisioning: {
      planExpiry: secondsByEnvironment(s.RuntimeCloud__Provisioning__PlanExpirySeconds, DEFAULT_PLAN_EXPIRY_SECONDS),
      approval: approval(s.RuntimeCloud__Provisioning__Approval),
      sources: s.RuntimeCloud__Provisioning__Sources,
      fetchMaxBytes: s.RuntimeCloud__Provisioning__FetchMaxBytes,
      fetchTimeoutMs: s.RuntimeCloud__Provisioning__FetchTimeoutSeconds * 1000,
      gitCacheDir: s.RuntimeCloud__Provisioning__GitCacheDir || join(tmpdir(), 'runtime-cloud-git-cache'),
      runtimes: [...new Set(s.RuntimeCloud__Provisioning__Runtimes)],
      packages: s.RuntimeCloud__Provisioning__Packages,
    },
  };
}

const DEFAULT_PLAN_EXPIRY_SECONDS = 24 * 60 * 60;
const DEFAULT_SCAN_INTERVAL_SECONDS = 5 * 60;

/** `{"default":s,"<environment>":s}` in seconds → milliseconds, the default filled in. */
function secondsByEnvironment(seconds: Readonly<Record<string, number>>, defaultSeconds: number): { defaultMs: number; byEnvironment: Record<string, number> } {
  const { default: fallback, ...byEnvironment } = seconds;
  return {
    defaultMs: (fallback ?? defaultSeconds) * 1000,
    byEnvironment: Object.fromEntries(Object.entries(byEnvironment).map(([environment, s]) => [environment, s * 1000])),
  };
}

function approval(rules: Settings['RuntimeCloud__Provisioning__Approval']): Config['provisioning']['approval'] {
  const { default: fallback, ...byEnvironment } = rules;
  return {
    tiers: fallback?.tiers ?? ['production'],
    onDeleteOrReplace: fallback?.onDeleteOrReplace ?? true,
    secondPersonTiers: fallback?.secondPersonTiers ?? ['production'],
    byEnvironment: Object.fromEntries(
      Object.entries(byEnvironment).map(([environment, rule]) => [
        environment,
        {
          ...(rule.always !== undefined ? { always: rule.always } : {}),
          ...(rule.onDeleteOrReplace !== undefined ? { onDeleteOrReplace: rule.onDeleteOrReplace } : {}),
          ...(rule.secondPerson !== undefined ? { secondPerson: rule.secondPerson } : {}),
        },
      ]),
    ),
  };
}

/**
 * Only `RuntimeCloud__Host__EnabledModules` of the process environment: what registering the functions needs,
 * without parsing (and failing on) the rest before the first invocation.
 */
export function enabledModulesFromEnvironment(): readonly ModuleName[] {
  const value = process.env.RuntimeCloud__Host__EnabledModules;
  const parsed = settings.RuntimeCloud__Host__EnabledModules.safeParse(value === '' ? undefined : value);
  if (!parsed.success) throw new ConfigError(fieldProblems(parsed.error, 'RuntimeCloud__Host__EnabledModules'));
  return [...new Set(parsed.data)];
}

/**
 * The process environment's configuration; with `enabledModulesFromEnvironment`, the only reads of `process.env` in the product.
 * Precedence: `overrides` (command-line flags) over the environment over `defaults` (a host's embedded defaults).
 */
export function configFromEnvironment(
  options: { defaults?: Readonly<Record<string, string>>; overrides?: Readonly<Record<string, string>> } = {},
): Config {
  return parseConfig({ ...options.defaults, ...process.env, ...options.overrides });
}
