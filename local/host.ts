import { rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { configFromEnvironment, type Config } from '../shared/platform/config/config';
import type { PeerTokens } from '../shared/platform/contracts/peer-transport';
import { provideRuntime } from '../functions/runtime';
import { createDeps, type Deps, type DepsOverrides } from '../shared/deps';
import { ensureLocalKeys, issueLocalToken, type LocalKeys } from './auth/local-issuer';
import { localLeaseSigningKeys } from './auth/lease-signing-keys';
import type { StandIns } from './external-services/stand-in-servers';
import { startPeers, type Peers } from './peers';
import { installFunctionsCore } from './functions-core/install';
import { hostJsonSetting, useAppHostJson } from './host-json';
import { functionAppEntryPoints } from './function-app';
import { InvocationContexts } from './functions-core/invocation-contexts';
import { functionsWithTrigger, registeredFunctions, type Registration } from './functions-core/registry';
import { inspect } from 'node:util';
import { hostname } from 'node:os';
import { logLine, parseLogLine } from '../shared/platform/logging/log';
import { HttpBinding, type LogHandler } from './http/http-binding';
import { localSourcesSetting } from './local-sources';
import { LOCAL_PACKAGES } from './local-packages';
import { markHostRunning, type HostMark } from './host-marker';
import { localTwin } from './twin';

export interface LocalHostOptions {
  /** Folder of the host's state. Example: `.runtime-cloud`. */
  readonly stateDir?: string;
  /** HTTP port; 0 picks a free one. Example: `8130`. */
  readonly port?: number;
  /** Settings that win over the environment (command-line flags, tests). */
  readonly settings?: Readonly<Record<string, string>>;
  /** Keep Azurite's tables in memory instead of the state dir (tests). */
  readonly inMemoryTables?: boolean;
  readonly depsOverrides?: DepsOverrides;
  readonly log?: LogHandler;
  /**
   * Folder of the Functions v4 Node app to host instead of this project's own (`runtime-cloud start --app DIR`): its
   * package.json `main` (a file or a glob) registers the functions, its host.json configures the host.
   * Example: `./tests/apps/durable-sample`.
   */
  readonly appDir?: string;
}

/**
 * A part of the local host that binds one kind of trigger (timers, Service Bus, Durable) or serves local-only
 * endpoints. Started after the functions are registered and the HTTP server exists; stopped in reverse order.
 */
export interface HostComponent {
  readonly name: string;
  start(context: HostContext): Promise<void>;
  /** Called once the host listens (its URL known): for components that hand the URL to other processes. */
  listening?(): Promise<void>;
  /** Called before the host stops serving HTTP: for components whose other processes call the host. */
  closing?(): Promise<void>;
  /** Stop taking new work; finish or release what is in flight. */
  stop(): Promise<void>;
}

export interface HostContext {
  readonly config: Config;
  readonly deps: Deps;
  readonly keys: LocalKeys;
  readonly http: HttpBinding;
  /** Builds each invocation's context; components provide extra inputs (the Durable client) through it. */
  readonly invocations: InvocationContexts;
  readonly log: LogHandler;
  /** The host's base URL, known once listening (components that hand it out read it lazily). */
  readonly baseUrl: () => URL;
  readonly registrations: readonly Registration[];
  readonly functionsWithTrigger: (type: string) => readonly Registration[];
}

/** Settings the local host uses unless the environment or flags say otherwise: everything embedded. */
const LOCAL_DEFAULTS: Readonly<Record<string, string>> = {
  RuntimeCloud__IaC__Runner: 'local',
  RuntimeCloud__Store__Dialect: 'sqlite',
  RuntimeCloud__Provisioning__Packages: LOCAL_PACKAGES,
};

const LEVELS = ['trace', 'debug', 'information', 'warning', 'error', 'critical'] as const;

/**
 * A log handler that writes one JSON line per entry at `minLevel` and above (warnings and errors to stderr): a
 * function's structured line as it wrote it (functions/log.ts), anything else (the host's own messages, a library's)
 * wrapped as one with the function's name. Credentials are masked either way.
 */
export function jsonLineLog(minLevel: (typeof LEVELS)[number]): LogHandler {
  const min = LEVELS.indexOf(minLevel);
  return (level, category, ...args) => {
    const rank = LEVELS.indexOf(level as (typeof LEVELS)[number]);
    if (rank < min) return;
    const structured = args.length === 1 && typeof args[0] === 'string' ? parseLogLine(args[0]) : undefined;
    const line = structured
      ? logLine(structured, new Date(structured.time))
      : logLine({ level: LEVELS[rank] ?? 'information', function: category, message: args.map(describe).join(' ') }, new Date());
    if (rank >= LEVELS.indexOf('warning')) process.stderr.write(`${line}\n`);
    else process.stdout.write(`${line}\n`);
  };
}

function describe(value: unknown): string {
  if (value instanceof Error) return value.stack ?? value.message;
  return typeof value === 'string' ? value : inspect(value, { depth: 4, breakLength: Infinity });
}

const defaultLog: LogHandler = jsonLineLog('warning');

/**
 * The local Functions host: provides `@azure/functions-core`, loads the function app, and binds every
 * registration to an in-process counterpart of the Azure service behind it.
 */
export class LocalHost {
  readonly #options: LocalHostOptions;
  readonly #components: HostComponent[];
  #peers: Peers | undefined;
  #deps: Deps | undefined;
  #http: HttpBinding | undefined;
  #started: HostComponent[] = [];
  #url: URL | undefined;
  #config: Config | undefined;
  #mark: HostMark | undefined;
  /** Where this host's Azurite keeps its data. */
  #azuriteDir: string | undefined;

  constructor(options: LocalHostOptions, components: readonly HostComponent[] = []) {
    this.#options = options;
    this.#components = [...components];
  }

  get url(): URL {
    if (!this.#url) throw new Error('the local host is not listening');
    return this.#url;
  }

  get deps(): Deps {
    if (!this.#deps) throw new Error('the local host is not started');
    return this.#deps;
  }

  /** The external services' stand-ins this host started (those the settings left unconfigured). */
  get standIns(): StandIns | undefined {
    return this.#peers?.standIns;
  }

  get config(): Config {
    if (!this.#config) throw new Error('the local host is not started');
    return this.#config;
  }

  async start(): Promise<URL> {
    const log = this.#options.log ?? defaultLog;
    const overrides: Record<string, string> = { ...this.#options.settings };
    if (this.#options.stateDir !== undefined) overrides.RuntimeCloud__Local__StateDir = this.#options.stateDir;
    if (this.#options.port !== undefined) overrides.RuntimeCloud__Local__Port = String(this.#options.port);
    const stateDir = resolve(configFromEnvironment({ defaults: LOCAL_DEFAULTS, overrides }).local.stateDir);
    // Defaults that depend on the state dir, known only now; a setting in the environment or the options wins.
    const defaults = { ...LOCAL_DEFAULTS, RuntimeCloud__Provisioning__Sources: localSourcesSetting(stateDir), RuntimeCloud__Provisioning__GitCacheDir: join(stateDir, 'git-cache') };
    let config = configFromEnvironment({ defaults, overrides });
    const keys = await ensureLocalKeys(stateDir);
    // Before the store opens: a restore that checks the marks then finds this host.
    this.#mark = markHostRunning(stateDir);
    // Azurite keeps its metadata in one file per data dir, written whole by its process: two hosts on one state dir
    // would overwrite each other's (and fail renaming it). The first host keeps `azurite/`; one started beside it
    // gets a folder of its own for its life (hosts that share a store share tables through RuntimeCloud__Tables__Connection).
    const azuriteDir = this.#mark.beside === 0 ? join(stateDir, 'azurite') : join(stateDir, 'azurite', 'beside', this.#mark.id);
    this.#azuriteDir = this.#mark.beside === 0 ? undefined : azuriteDir;

    // Azurite and the external services' stand-ins, for whatever the settings leave unconfigured (`runtime-cloud
    // peers` runs them in a process of their own): the host reaches them through the same clients as Azure's services.
    this.#peers = await startPeers(config, { stateDir, azuriteDir, inMemoryTables: this.#options.inMemoryTables, jwks: keys.jwks });
    Object.assign(overrides, this.#peers.settings);
    config = configFromEnvironment({ defaults, overrides });
    this.#config = config;

    // The local host reads repositories on its own disk too (where the source rules allow them: its state dir's).
    // It may also run the engine in process, for tests and the bench baseline (`RuntimeCloud__IaC__Execution`).
    this.#deps = await createDeps(config, { twin: localTwin, jwks: keys.jwks, baseDir: stateDir, localSources: true, inProcessEngine: true, unpinnedReleases: true, peerTokens: localPeerTokens(keys, config.auth.issuer), leaseSigningKeys: localLeaseSigningKeys(stateDir), ...this.#options.depsOverrides });
    this.#peers.bind(this.#deps.sql, this.#deps.clock);
    const recovery = this.#deps.recovery;
    if (recovery) {
      log('warning', 'runtime-cloud-host', `the store was restored (epoch ${recovery.epoch}): ${recovery.environmentsStale} environments are stale until re-scanned; capacity recovers until ${recovery.window.until.toISOString()} (holders re-register their leases, new grants wait)`);
    }

    installFunctionsCore();
    provideRuntime({ config, deps: this.#deps });
    if (this.#options.appDir !== undefined) loadOtherFunctionApp(resolve(this.#options.appDir));
    else await loadFunctionApp();

    const invocations = new InvocationContexts();
    const http = new HttpBinding({ routePrefix: readRoutePrefix(), log, invocations, bodyTimeoutMs: config.local.bodyTimeoutMs });
    this.#http = http;
    for (const registration of functionsWithTrigger('httpTrigger')) http.addFunction(registration);
    addHostStatusRoute(http, Date.now());

    const context: HostContext = {
      config,
      deps: this.#deps,
      keys,
      http,
      invocations,
      log,
      baseUrl: () => this.url,
      registrations: registeredFunctions(),
      functionsWithTrigger,
    };
    for (const component of this.#components) {
      await component.start(context);
      this.#started.push(component);
    }
    this.#url = await http.listen(config.local.port);
    // The Functions host names the app's address in WEBSITE_HOSTNAME (Core Tools: localhost:7071); without it the
    // durable-functions client rewrites every management URL to localhost:7071 (getClient.js). The SDK only checks
    // that it is set, so the first host of a process names it and each host's URLs stay its own.
    process.env.WEBSITE_HOSTNAME ??= this.#url.host;
    for (const component of this.#started) await component.listening?.();
    return this.#url;
  }

  /** Graceful: stop accepting requests, let triggers finish or release in-flight work, then close the stores. */
  async stop(): Promise<void> {
    // Agents' claims wait on the host for work: they answer now, so draining the requests in flight does not wait.
    this.#deps?.provisioning.runners.endClaimWaits();
    for (const component of this.#started) await component.closing?.();
    await this.#http?.close();
    for (const component of this.#started.reverse()) await component.stop();
    this.#started = [];
    await this.#deps?.close();
    await this.#peers?.close();
    if (this.#azuriteDir) rmSync(this.#azuriteDir, { recursive: true, force: true });
    this.#mark?.unmark();
  }
}

/**
 * Loads the function app (functions/index), which registers every function, and the local cloud's job endpoints
 * (local/cloud/job-target-functions.ts), which only the local host serves. It must load after the runtime is
 * provided and `@azure/functions-core` is installed. Under tsx (the CLI, child hosts) TypeScript is `require`-able;
 * under vitest only its own `import()` knows TypeScript.
 */
async function loadFunctionApp(): Promise<void> {
  if (require.extensions['.ts']) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    require('../functions/index');
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    require('./cloud/job-target-functions');
    return;
  }
  await import('../functions/index.js');
  await import('./cloud/job-target-functions.js');
}

/**
 * `GET /admin/host/status`, as the Functions host answers it (Azure asks for the master key; the local host listens
 * on loopback only and answers anyone). `state` is `Running` once functions are loaded.
 */
function addHostStatusRoute(http: HttpBinding, startedAt: number): void {
  http.addRawRoute(['GET'], 'admin/host/status', () =>
    Promise.resolve({
      status: 200,
      body: {
        id: 'runtime-cloud-local',
        state: 'Running',
        version: HOST_VERSION,
        versionDetails: `${HOST_VERSION} (runtime-cloud local host)`,
        platformVersion: '',
        instanceId: 'local',
        computerName: hostname(),
        processUptime: Date.now() - startedAt,
        functionAppContentEditingState: 'NotAllowed',
      },
    }),
  );
}

/** The Functions runtime version the local host stands in for. */
const HOST_VERSION = '4.0.0';

/** Loads another app's functions from its package.json `main`, reading its host.json from then on. */
function loadOtherFunctionApp(appDir: string): void {
  useAppHostJson(appDir);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  for (const file of functionAppEntryPoints(appDir)) require(file);
}

/** `extensions.http.routePrefix` of host.json, as the Functions host applies it (default `api`). */
function readRoutePrefix(): string {
  const prefix = hostJsonSetting('extensions', 'http', 'routePrefix');
  return typeof prefix === 'string' ? prefix : 'api';
}

/** Tokens the local issuer signs for the stand-ins' audiences, each kept for most of its hour. */
function localPeerTokens(keys: LocalKeys, issuer: string): PeerTokens {
  const issued = new Map<string, { token: Promise<string>; until: number }>();
  return (audience) => {
    const known = issued.get(audience);
    if (known && Date.now() < known.until) return known.token;
    const token = issueLocalToken(keys, { issuer, audience, subject: 'runtime-cloud-host', ttlSeconds: 3600 });
    issued.set(audience, { token, until: Date.now() + 50 * 60_000 });
    return token;
  };
}
