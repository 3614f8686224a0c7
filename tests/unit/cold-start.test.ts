import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * Issue 10 (cold start): loading the functions must cost little more than loading @azure/functions and
 * durable-functions, so stores, drivers and SDKs load on first use, and then only the configured ones. Timing is
 * left to `npm run bench -- coldstart`; this checks which packages a fresh process has loaded (`require.cache`),
 * from source through tsx, the way the local host loads the functions.
 */
const ROOT = join(__dirname, '..', '..');
const stateDir = mkdtempSync(join(tmpdir(), 'runtime-cloud-cold-start-'));
afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

/** Packages that take tens to hundreds of milliseconds to load, none of which registering a function needs. */
const HEAVY = [
  'tedious',
  'pg',
  '@pulumi/pulumi',
  '@azure/service-bus',
  '@azure/identity',
  '@azure/data-tables',
  'isomorphic-git',
  'kysely',
  'better-sqlite3',
  'yaml',
  'jose',
  // The configuration's schema (semver for version ranges) is parsed on first use, not to register the functions.
  'semver',
  // Telemetry starts with the composition root; only the tiny @opentelemetry/api may load with the functions.
  'applicationinsights',
  '@opentelemetry/sdk-metrics',
  // Request and event schemas are built on first use (lazySchema, shared/platform/validation/lazy-schema.ts): zod
  // alone costs about as much to load as the rest of the functions.
  'zod',
];

interface Loaded {
  /** After loading functions/index (every function registered, in test mode outside a Functions host). */
  readonly atRegistration: string[];
  /** After the first use: the dependencies built from the configuration. */
  readonly afterFirstUse: string[];
}

/**
 * In a fresh process with exactly `settings`: loads functions/index, then runs `firstUse` (a script body with
 * `runtime` = functions/runtime and `root` = the repository) and reports the packages loaded at each point.
 */
async function packagesLoaded(settings: Record<string, string>, firstUse: string): Promise<Loaded> {
  const script = `
    const root = ${JSON.stringify(ROOT)};
    const loaded = () => {
      const packages = new Set();
      // A dot stands for either path separator; the last node_modules names the package.
      for (const file of Object.keys(require.cache)) {
        const match = /.*node_modules.((?:@[^\\\\/]+.)?[^\\\\/]+)/.exec(file);
        if (match) packages.add(match[1].replace(/\\\\/g, '/'));
      }
      return [...packages].sort();
    };
    (async () => {
      const runtime = require(root + '/functions/runtime.ts');
      require(root + '/functions/index.ts');
      const atRegistration = loaded();
      ${firstUse}
      process.stdout.write(JSON.stringify({ atRegistration, afterFirstUse: loaded() }));
    })().catch((error) => { console.error(error); process.exitCode = 1; });`;
  // Only the given settings: a developer's own RuntimeCloud__* variables must not change what is loaded.
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^(RuntimeCloud__|ServiceBusConnection)/.test(key)));
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '-e', script], { cwd: ROOT, env: { ...env, ...settings }, encoding: 'utf8' });
  return JSON.parse(stdout) as Loaded;
}

describe('cold start: what loads when', () => {
  const embedded = packagesLoaded(
    {
      RuntimeCloud__IaC__Runner: 'local',
      RuntimeCloud__Local__StateDir: stateDir,
      // Never contacted: Table storage is opened on first use, and nothing here uses it.
      RuntimeCloud__Tables__Connection: 'DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/devstoreaccount1;',
      RuntimeCloud__Auth__JwksUrl: 'https://login.example.com/keys',
    },
    // As the local host composes it: the product's composition root with the twin (local/twin.ts) injected.
    `const { localTwin } = require(root + '/local/twin.ts');
     const deps = await require(root + '/shared/deps.ts').createDeps(runtime.getConfig(), { twin: localTwin });
     await deps.close();`,
  );
  const azure = packagesLoaded(
    {
      RuntimeCloud__Store__Dialect: 'mssql',
      RuntimeCloud__Store__Connection: 'Server=tcp:example.database.windows.net,1433;Database=runtime-cloud',
      RuntimeCloud__IaC__Runner: 'pulumi',
      RuntimeCloud__Tables__Connection: 'https://example.table.core.windows.net',
      ServiceBusConnection__fullyQualifiedNamespace: 'example.servicebus.windows.net',
    },
    // The configured adapters, created as createDeps does (without its migrations, which would connect). The Pulumi
    // runner loads the Automation API on its first stack operation, not when created.
    `const config = runtime.getConfig();
     const store = require(root + '/shared/platform/sql/database.ts').createSqlStore({ dialect: config.store.dialect, connection: config.store.connection });
     const events = require(root + '/shared/platform/bus/service-bus-publisher.ts').serviceBusPublisher({ connection: config.serviceBus.connection });
     require(root + '/shared/platform/iac/pulumi-runner.ts').pulumiIacRunner();
     await events.close();
     await store.close();`,
  );

  it('when the functions load with the embedded defaults, then no driver, SDK or Git implementation loads with them', async () => {
    const { atRegistration } = await embedded;
    expect(atRegistration.filter((p) => HEAVY.includes(p))).toEqual([]);
    // The check sees packages that are loaded.
    expect(atRegistration).toEqual(expect.arrayContaining(['@azure/functions', 'durable-functions']));
  });

  it('when the embedded defaults are first used, then SQLite loads, and neither the other drivers, Service Bus nor Pulumi', async () => {
    const { afterFirstUse } = await embedded;
    expect(afterFirstUse).toContain('better-sqlite3');
    expect(afterFirstUse.filter((p) => ['tedious', 'pg', 'tarn', '@pulumi/pulumi', '@azure/service-bus', '@azure/identity'].includes(p))).toEqual([]);
  });

  it('when the functions load with Azure settings, then still nothing heavy; the configured driver and bus load when created, and nothing else', async () => {
    const { atRegistration, afterFirstUse } = await azure;
    expect(atRegistration.filter((p) => HEAVY.includes(p))).toEqual([]);
    expect(afterFirstUse).toEqual(expect.arrayContaining(['tedious', '@azure/service-bus', '@azure/identity']));
    expect(afterFirstUse.filter((p) => ['pg', 'better-sqlite3', '@pulumi/pulumi'].includes(p))).toEqual([]);
  });
});
