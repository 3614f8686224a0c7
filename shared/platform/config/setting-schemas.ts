import { validRange } from 'semver';
import { z } from 'zod';
import { sourcePrefixProblem } from '../git/repository-url';

/** The shapes settings are read with: lists, ports, peers, targets, tiers, sources, approval and package rules. */

export const list = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((s) => s.split(',').map((x) => x.trim()).filter((x) => x.length > 0));

export const port = z.coerce.number().int().min(0).max(65535);

/** An external service's base URL: TLS outside loopback (plain HTTP/2 only to this machine). */
export const peerEndpoint = z
  .union([z.literal(''), z.url()])
  .default('')
  .refine((url) => url === '' || url.startsWith('https://') || /^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(\/|$)/.test(url), {
    message: 'an external service is reached over https:// (http:// only on loopback)',
  });

/** A runner job's maximum duration on a target, in minutes. */
export const jobMinutes = z
  .number({ error: 'a maximum job duration is a whole number of minutes' })
  .int('a maximum job duration is a whole number of minutes')
  .min(1, 'a maximum job duration is at least 1 minute')
  .max(24 * 60, 'a maximum job duration is at most 1440 minutes (a day)');

export const targetSchema = z.object({
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
export const observationScopeSchema = z.object({
  azure: z.object({ subscriptionId: z.string().min(1), resourceGroup: z.string().min(1), tags: z.record(z.string(), z.string()).optional() }).optional(),
  kubernetes: z.object({ namespaces: z.array(z.string().min(1)).min(1) }).optional(),
});

export const jsonOf = <T extends z.ZodType>(schema: T, fallback: string) =>
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

export const TIERS = ['development', 'staging', 'production'] as const;

/**
 * `RuntimeCloud__Auth__Clients`: client application id → the tenant that caller acts for. Ids are letters, digits,
 * `.`, `_` and `-` (an Entra app id is a GUID), unique without regard to case as tokens are matched; a tenant is a
 * non-empty string (an empty one would leave the caller unbound).
 */
export const CLIENT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

export const clientTenantsSchema = z
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
export const sourcesSchema = z.record(
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
export const approvalSchema = z
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
export const packagesSchema = z
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
