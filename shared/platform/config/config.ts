import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { describeFieldProblems, fieldProblems, type FieldProblem } from '../validation/validation';
import { deepFreeze } from '../values/deep-freeze';
import { TIERS, observationScopeSchema, type ProvisioningTarget } from './setting-schemas';
import { settingKeys, settings, settingsSchema, type ModuleName, type Settings } from './settings';

/**
 * The host's configuration: the settings (settings.ts) read from the environment, checked as one, and shaped into
 * the frozen `Config` every module takes its part of. The only place that reads `process.env`.
 */

/** An external service: its base URL (empty: not configured) and the audience of the tokens it accepts. */
export interface PeerSetting {
  readonly endpoint: string;
  readonly audience: string;
}

export interface Config {
  readonly host: { readonly enabledModules: readonly ModuleName[]; readonly serviceName: string };
  readonly iac: {
    /** The engine that plans and applies programs (`RuntimeCloud__IaC__Runner`, an older name for it). */
    readonly engine: 'pulumi' | 'local';
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
  /** How the operator console signs people in: Entra with this app registration, or (`clientId` empty) the local issuer. */
  readonly console: { readonly clientId: string; readonly authority: string; readonly apiScope: string };
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
    /** The gRPC server's port (`RuntimeCloud__Local__GrpcPort`); 0 picks a free one. */
    readonly grpcPort: number;
    /** How many agents the local host starts (`RuntimeCloud__Local__Runners`). */
    readonly agents: number;
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
  readonly capacity: {
    readonly seedFile: string;
    /** The Key Vault key signing lease certificates (versionless URL); empty: none configured. */
    readonly certificateKey: string;
    readonly certificateSeconds: number;
  };
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
  const result = settingsSchema.safeParse(present);
  if (!result.success) {
    throw new ConfigError(fieldProblems(result.error, '(settings)'));
  }
  return deepFreeze(toConfig(result.data));
}

function toConfig(s: Settings): Config {
  return {
    host: { enabledModules: [...new Set(s.RuntimeCloud__Host__EnabledModules)], serviceName: s.OrleansMessaging__ServiceName },
    iac: {
      engine: s.RuntimeCloud__IaC__Runner,
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
    console: {
      clientId: s.RuntimeCloud__Console__ClientId,
      authority: s.RuntimeCloud__Console__Authority || s.RuntimeCloud__Auth__Issuer.replace(/\/v2\.0\/?$/, ''),
      apiScope: s.RuntimeCloud__Console__ApiScope || `${s.RuntimeCloud__Auth__Audience}/.default`,
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
      grpcPort: s.RuntimeCloud__Local__GrpcPort ?? (s.RuntimeCloud__Local__Port === 0 ? 0 : DEFAULT_GRPC_PORT),
      agents: s.RuntimeCloud__Local__Runners,
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
    capacity: { seedFile: s.RuntimeCloud__Capacity__SeedFile, certificateKey: s.RuntimeCloud__Capacity__CertificateKey, certificateSeconds: s.RuntimeCloud__Capacity__CertificateSeconds },
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
/** The local host's gRPC port (seed: grpc 8132). */
const DEFAULT_GRPC_PORT = 8132;

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
