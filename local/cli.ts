import { parseArgs } from 'node:util';
import { resolve } from 'node:path';
import { configFromEnvironment, ConfigError } from '../shared/platform/config/config';
import { settingKeys } from '../shared/platform/config/settings';
import { rotateLeaseSigningKey } from './auth/lease-signing-keys';
import { ensureLocalKeys, issueLocalToken } from './auth/local-issuer';
import { consoleBuilt } from './console-build';

const USAGE = `runtime-cloud: the local RuntimeCloudHost

Usage:
  runtime-cloud start [--port N] [--grpc-port N] [--state-dir DIR] [--app DIR]
      Runs the whole host on embedded defaults (SQLite, in-process Azurite, embedded queue and topic,
      local Durable runner, local token issuer). Default ports 8130 (HTTP) and 8132 (gRPC), state dir .runtime-cloud/. On a state dir
      without them, it makes the example repository desired-state.git and references.json (the example's
      secret and config references; see docs/walkthrough.md).
  runtime-cloud peers [--state-dir DIR]
      Runs Azurite and the external services' stand-ins in a process of their own and prints the settings that point
      hosts at them (as they run beside a deployed host; the provisioning bench uses it).
  runtime-cloud token [--tenant T] [--client APP_ID] [--role R]... [--scope S]... [--subject ID] [--user OID [--directory TID]] [--ttl SECONDS] [--runner-pool P] [--state-dir DIR]
      Prints a bearer token signed by the local issuer (and nothing else).
  runtime-cloud example promotion <development|production> [--state-dir DIR]
      Prints a PromotionApproved message (JSON, a fresh promotionId each time) for the example desired state
      (infra/examples/desired-state), committed to the Git repository <state dir>/desired-state.git when new or changed.
  runtime-cloud runner --pool P --host URL [--agent ID] [--engine local|pulumi] [--one-job]
      Runs a runner agent for pool P against the host at URL: it claims the pool's plan and apply jobs one at a time
      with the pool credential in RuntimeCloud__Runner__Credential (local host: \`runtime-cloud token --runner-pool P\`).
      With nothing to claim for RuntimeCloud__Runner__IdleSeconds (default 60; 0: never) it exits 0; when its claims
      keep failing it backs off, then gives up and exits 1. The local host starts RuntimeCloud__Local__Runners of them itself.
  runtime-cloud backup [--state-dir DIR] [--to FILE]
      Backs the embedded (SQLite) store up while the host runs (SQLite's online backup); prints the file.
  runtime-cloud restore --from FILE [--state-dir DIR]
      Replaces the embedded store by a backup (refused while a host runs on the state dir) and raises the store's
      epoch; the next host to start marks every environment stale and opens capacity's recovery window.
  runtime-cloud restored [--note TEXT] [--state-dir DIR]
      Records that the configured store (PostgreSQL, Azure SQL) was restored by the database's own means (Azure SQL
      point-in-time restore, pg_restore): raises its epoch, for the next host to start on it to recover.
  runtime-cloud lease-keys rotate [--state-dir DIR]
      Adds a new key to the local host's lease certificate key ring (a running host signs with it from its next
      certificate on and keeps publishing the previous two); prints its kid.
  runtime-cloud openapi
      Prints the OpenAPI 3.1 document of the HTTP API (every module enabled); the repository keeps it as openapi.json.
  runtime-cloud <command> --help

Settings (environment variables, Azure app-settings form):
  ${settingKeys.join('\n  ')}
`;

const START_USAGE = `runtime-cloud start [--port N] [--grpc-port N] [--state-dir DIR] [--app DIR]
  --app DIR         host another Functions v4 Node app: the functions its package.json "main" (a file or a glob)
                    registers, with its host.json (routePrefix "api" unless it says otherwise)
  --port N          HTTP port (default 8130, or RuntimeCloud__Local__Port)
  --grpc-port N     gRPC port of the LeaseService (default 8132, or RuntimeCloud__Local__GrpcPort; a free one when
                    --port is 0)
  --state-dir DIR   state folder (default .runtime-cloud, or RuntimeCloud__Local__StateDir); on first start it gets
                    the example repository desired-state.git and references.json
`;

const TOKEN_USAGE = `runtime-cloud token [--tenant T] [--client APP_ID] [--role R]... [--scope S]... [--subject ID] [--user OID [--directory TID]] [--ttl SECONDS] [--state-dir DIR]
  --tenant T        bind the token to tenant T (a tenant claim)
  --client APP_ID   the client application id (azp claim), as Entra issues it; a client listed in
                    RuntimeCloud__Auth__Clients acts for its tenant only, and with --tenant naming another is refused
  --role R          Observer | Operator | PlatformAdmin (repeatable)
  --scope S         factory.health.read | factory.meta.read | factory.runtime.read | factory.capacity.lease |
                    factory.provisioning.operate | factory.runtime.admin (repeatable)
  --subject ID      the token's subject (default local-developer)
  --user OID        a person's delegated token (scopes in scp, oid OID), as Entra issues one to an app acting for
                    a signed-in user; without it the token is an application's own (idtyp app, scopes in roles),
                    and only such a token may name a tenant with a service scope
  --directory TID   with --user: the person's directory (tid claim)
  --ttl SECONDS     lifetime (default 3600)
  --runner-pool P   a runner agent's pool credential for pool P (scope factory.runner.agent, claim runner_pool)
  --state-dir DIR   where the local issuer's key lives (default .runtime-cloud)
`;

const EXAMPLE_USAGE = `runtime-cloud example promotion <development|production> [--state-dir DIR]
  development | production   the environment (and stack) the example is promoted to
  --state-dir DIR            where the example repository desired-state.git is kept (default .runtime-cloud)
`;

const BACKUP_USAGE = `runtime-cloud backup [--state-dir DIR] [--to FILE]
  --state-dir DIR   the state folder whose store is backed up (default .runtime-cloud, or RuntimeCloud__Local__StateDir)
  --to FILE         the backup file, which must not exist (default <state dir>/backups/runtime-cloud-<time>.sqlite)
  A PostgreSQL or Azure SQL store is backed up by the database's own means (pg_dump; Azure SQL's automatic backups).
`;

const RESTORE_USAGE = `runtime-cloud restore --from FILE [--state-dir DIR]
  --from FILE       a file \`runtime-cloud backup\` wrote
  --state-dir DIR   the state folder whose store is replaced (default .runtime-cloud); no host may run on it
  The replaced store is kept beside it (<store>.before-restore-<time>). The next host to start on the state dir marks
  every environment stale until re-scanned and opens capacity's recovery window (one longest lease TTL): holders
  re-register the leases the backup does not know, new grants wait (503 CAPACITY.RECOVERING).
`;

const RESTORED_USAGE = `runtime-cloud restored [--note TEXT] [--state-dir DIR]
  Records a restore of the configured store (RuntimeCloud__Store__Dialect and __Connection) done by the database's
  own means, such as an Azure SQL point-in-time restore: the store's epoch is raised (fencing tokens stay
  increasing) and its recovery is pending, for the first host to start on it. Run it before any host uses the store.
  --note TEXT       what was restored, kept with the record (default "restored by the database's own means")
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(USAGE);
    return command ? 0 : 2;
  }
  if (command === 'start') return start(rest);
  if (command === 'token') return token(rest);
  if (command === 'peers') return peers(rest);
  if (command === 'example') return example(rest);
  if (command === 'openapi') return openapi();
  if (command === 'lease-keys') return leaseKeys(rest);
  if (command === 'runner') return runner(rest);
  if (command === 'backup' || command === 'restore' || command === 'restored') return storeCommand(command, rest);
  process.stderr.write(`unknown command ${command}\n\n${USAGE}`);
  return 2;
}

/** Azurite and the stand-ins in this process (local/peers.ts), until SIGINT or SIGTERM. */
async function peers(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { 'state-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  const stop = new Promise((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { peersMain, PEERS_USAGE } = require('./peers') as typeof import('./peers');
  if (values.help) {
    process.stdout.write(PEERS_USAGE);
    return 0;
  }
  return peersMain(values['state-dir'] !== undefined ? { stateDir: values['state-dir'] } : {}, stop);
}

/** Registers the functions as a host would (without starting one) and prints the document of their HTTP routes. */
async function openapi(): Promise<number> {
  const { installFunctionsCore } = await import('./functions-core/install.js');
  installFunctionsCore();
  await import('../functions/index.js');
  const { registeredHttpRoutes } = await import('../functions/app.js');
  const { openApiDocument, API_VERSION } = await import('../functions/http/openapi.js');
  process.stdout.write(`${JSON.stringify(openApiDocument(registeredHttpRoutes(), API_VERSION), null, 2)}\n`);
  return 0;
}

/** A runner agent in this process, configured by flags over its RuntimeCloud__Runner__* environment. */
async function runner(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { pool: { type: 'string' }, host: { type: 'string' }, agent: { type: 'string' }, engine: { type: 'string' }, 'one-job': { type: 'boolean' } },
  });
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (values.pool !== undefined) env.RuntimeCloud__Runner__Pool = values.pool;
  if (values.host !== undefined) env.RuntimeCloud__Runner__HostUrl = values.host;
  if (values.agent !== undefined) env.RuntimeCloud__Runner__Agent = values.agent;
  if (values.engine !== undefined) env.RuntimeCloud__Runner__Engine = values.engine;
  if (values['one-job']) env.RuntimeCloud__Runner__OneJob = 'true';
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { localAgentMain } = require('./runner-agent') as typeof import('./runner-agent');
  return localAgentMain(env);
}

/** backup, restore and restored (local/store-backup.ts): refusals print one line and exit 1. */
async function storeCommand(command: 'backup' | 'restore' | 'restored', args: string[]): Promise<number> {
  const usage = { backup: BACKUP_USAGE, restore: RESTORE_USAGE, restored: RESTORED_USAGE }[command];
  let values: { 'state-dir'?: string; to?: string; from?: string; note?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args,
      options: { 'state-dir': { type: 'string' }, to: { type: 'string' }, from: { type: 'string' }, note: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    }));
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n\n${usage}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(usage);
    return 0;
  }
  if (command === 'restore' && !values.from) {
    process.stderr.write(`restore needs --from FILE\n\n${usage}`);
    return 2;
  }
  const config = configFromEnvironment({
    defaults: { RuntimeCloud__Store__Dialect: 'sqlite' },
    overrides: values['state-dir'] !== undefined ? { RuntimeCloud__Local__StateDir: values['state-dir'] } : {},
  });
  const stateDir = resolve(config.local.stateDir);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const store = require('./store-backup') as typeof import('./store-backup');
  try {
    if (command === 'backup') {
      process.stdout.write(`${await store.backupStore(config, stateDir, values.to, new Date())}\n`);
    } else if (command === 'restore') {
      const report = await store.restoreStore(config, stateDir, values.from ?? '', new Date());
      const kept = report.previous !== undefined ? `; the replaced store is kept as ${report.previous}` : '';
      process.stdout.write(`restored ${report.store} from ${resolve(values.from ?? '')}: store epoch ${report.epoch}${kept}\n`);
    } else {
      const epoch = await store.recordStoreRestored(config, stateDir, values.note ?? "restored by the database's own means", new Date());
      process.stdout.write(`recorded the restore: store epoch ${epoch}; the next host to start recovers\n`);
    }
    return 0;
  } catch (error) {
    if (!(error instanceof store.StoreCommandError)) throw error;
    process.stderr.write(`runtime-cloud ${command}: ${error.message}\n`);
    return 1;
  }
}

async function start(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { port: { type: 'string' }, 'grpc-port': { type: 'string' }, 'state-dir': { type: 'string' }, app: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    process.stdout.write(START_USAGE);
    return 0;
  }
  // Signals are caught from the first moment, so one that arrives during start-up still stops the host cleanly.
  const stopRequested = new Promise<string>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
  // Loaded here, not at the top: `token` and `--help` should not pay for loading the whole host.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { LocalHost, jsonLineLog } = require('./host') as typeof import('./host');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { localComponents } = require('./components') as typeof import('./components');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { LeaseGrpcServer } = require('./grpc/lease-grpc-server') as typeof import('./grpc/lease-grpc-server');
  const components = localComponents(values.app === undefined ? 'runtime-cloud' : 'other');
  const host = new LocalHost(
    {
      ...(values.port !== undefined ? { port: Number(values.port) } : {}),
      ...(values['state-dir'] !== undefined ? { stateDir: values['state-dir'] } : {}),
      ...(values['grpc-port'] !== undefined ? { settings: { RuntimeCloud__Local__GrpcPort: values['grpc-port'] } } : {}),
      ...(values.app !== undefined ? { appDir: values.app } : {}),
      log: jsonLineLog('information'),
    },
    components,
  );
  const url = await host.start();
  process.stdout.write(`runtime-cloud listening on ${url.origin} (state in ${resolve(host.config.local.stateDir)})\n`);
  const grpc = components.find((c): c is InstanceType<typeof LeaseGrpcServer> => c instanceof LeaseGrpcServer && c.serving);
  if (grpc) process.stdout.write(`the LeaseService (gRPC, gRPC-Web, Connect): ${grpc.url.origin}\n`);
  process.stdout.write(`the operator console: ${url.origin}/runtime-cloud/console/${consoleBuilt() ? '' : ' (not built: npm run build)'}\n`);
  const signal = await stopRequested;
  process.stdout.write(`${signal}: stopping\n`);
  await host.stop();
  return 0;
}

async function token(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      tenant: { type: 'string' },
      client: { type: 'string' },
      role: { type: 'string', multiple: true },
      scope: { type: 'string', multiple: true },
      subject: { type: 'string' },
      user: { type: 'string' },
      directory: { type: 'string' },
      ttl: { type: 'string' },
      'runner-pool': { type: 'string' },
      'state-dir': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(TOKEN_USAGE);
    return 0;
  }
  if (values.directory !== undefined && values.user === undefined) {
    process.stderr.write(`--directory goes with --user\n\n${TOKEN_USAGE}`);
    return 2;
  }
  if (values.client === '') {
    process.stderr.write(`--client needs an application id\n\n${TOKEN_USAGE}`);
    return 2;
  }
  const config = configFromEnvironment({
    overrides: values['state-dir'] !== undefined ? { RuntimeCloud__Local__StateDir: values['state-dir'] } : {},
  });
  const keys = await ensureLocalKeys(resolve(config.local.stateDir));
  const jwt = await issueLocalToken(keys, {
    issuer: config.auth.issuer,
    audience: config.auth.audience,
    ...(values.subject !== undefined ? { subject: values.subject } : {}),
    ...(values.tenant !== undefined ? { tenant: values.tenant } : {}),
    ...(values.client !== undefined ? { client: values.client } : {}),
    ...(values.user !== undefined ? { user: { oid: values.user, ...(values.directory !== undefined ? { tid: values.directory } : {}) } } : {}),
    roles: values.role ?? [],
    // A runner agent's pool credential: the agent scope, bound to the pool.
    scopes: values['runner-pool'] !== undefined ? [...(values.scope ?? []), 'factory.runner.agent'] : (values.scope ?? []),
    ...(values['runner-pool'] !== undefined ? { runnerPool: values['runner-pool'] } : {}),
    ...(values.ttl !== undefined ? { ttlSeconds: Number(values.ttl) } : {}),
  });
  process.stdout.write(`${jwt}\n`);
  return 0;
}

async function example(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { 'state-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    process.stdout.write(EXAMPLE_USAGE);
    return 0;
  }
  // Loaded here, not at the top: the other commands should not pay for loading isomorphic-git.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { EXAMPLE_ENVIRONMENTS, ensureExampleRepository, examplePromotion } = require('./example-repository') as typeof import('./example-repository');
  const [what, environment, ...extra] = positionals;
  const known = EXAMPLE_ENVIRONMENTS.find((e) => e === environment);
  if (what !== 'promotion' || known === undefined || extra.length > 0) {
    process.stderr.write(`unknown example ${positionals.join(' ') || '(none)'}\n\n${EXAMPLE_USAGE}`);
    return 2;
  }
  const config = configFromEnvironment({
    overrides: values['state-dir'] !== undefined ? { RuntimeCloud__Local__StateDir: values['state-dir'] } : {},
  });
  const repository = await ensureExampleRepository(resolve(config.local.stateDir));
  process.stdout.write(`${JSON.stringify(examplePromotion(known, repository), null, 2)}\n`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof ConfigError) process.stderr.write(`${error.message}\n`);
    else process.stderr.write(`runtime-cloud: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);

const LEASE_KEYS_USAGE = `runtime-cloud lease-keys rotate [--state-dir DIR]
  --state-dir DIR   the state folder whose key ring <state dir>/keys/lease-certificates.json is rotated (default .runtime-cloud)
  Certificates of the previous key verify until they expire; the ring keeps the last three keys.
`;

function leaseKeys(args: string[]): number {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { 'state-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    process.stdout.write(LEASE_KEYS_USAGE);
    return 0;
  }
  if (positionals.join(' ') !== 'rotate') {
    process.stderr.write(`lease-keys takes one action: rotate\n\n${LEASE_KEYS_USAGE}`);
    return 2;
  }
  const config = configFromEnvironment({ overrides: values['state-dir'] !== undefined ? { RuntimeCloud__Local__StateDir: values['state-dir'] } : {} });
  process.stdout.write(`${rotateLeaseSigningKey(resolve(config.local.stateDir))}\n`);
  return 0;
}
