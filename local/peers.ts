import { join, resolve } from 'node:path';
import type { JSONWebKeySet } from 'jose';
import { configFromEnvironment, type Config } from '../shared/platform/config/config';
import { createSqlStore, type SqlStore } from '../shared/platform/sql/database';
import { systemClock, type Clock } from '../shared/platform/time/clock';
import { ensureLocalKeys } from './auth/local-issuer';
import type { RunningBlobServer } from './azurite/blob-server';
import type { RunningTableServer } from './azurite/table-server';
import { createLocalExternalServices } from './external-services/local-external-services.adapter';
import { startStandIns, STAND_IN_NAMES, type StandInName, type StandIns } from './external-services/stand-in-servers';

/**
 * The services a deployed host reaches over the network and a local host stands in for: Azurite's Table and Blob
 * servers (Table storage, the claim-checked event bodies) and the external services' stand-ins. A local host starts
 * those its settings leave unconfigured in its own process; `runtime-cloud peers` starts them in a process of their
 * own, as they run beside a deployed host, and prints the settings that point hosts at them. The provisioning bench
 * does so, so that the CPU it counts as the host's is the host's alone (docs/benchmarks.md).
 */
export interface Peers {
  /** The settings that point a host at what this started. */
  readonly settings: Readonly<Record<string, string>>;
  /** The external services' stand-ins, where any was started. */
  readonly standIns: StandIns | undefined;
  /** The stand-ins answer from the local implementations over `store` from now on. */
  bind(store: SqlStore, clock: Clock): void;
  close(): Promise<void>;
}

export interface PeersOptions {
  readonly stateDir: string;
  /** Where Azurite keeps its data. */
  readonly azuriteDir: string;
  /** Azurite's data in memory instead (tests). */
  readonly inMemoryTables?: boolean;
  /** The local issuer's keys, which the stand-ins check tokens against. */
  readonly jwks: JSONWebKeySet;
}

/** The setting of each external service's endpoint. */
const PEER_ENDPOINT_SETTINGS: Readonly<Record<StandInName, string>> = {
  governance: 'RuntimeCloud__Governance__Endpoint',
  controlPlane: 'RuntimeCloud__ControlPlane__Endpoint',
  knowledge: 'RuntimeCloud__Knowledge__Endpoint',
  configPlatform: 'RuntimeCloud__ConfigPlatform__Endpoint',
  delivery: 'RuntimeCloud__Delivery__Endpoint',
};

/**
 * Starts what `config` leaves unconfigured: Azurite's Table and Blob servers, the external services' stand-ins. Azurite
 * is loaded only when it is started: a host whose peers run elsewhere does not load it (about 0.4 s of CPU).
 */
export async function startPeers(config: Config, options: PeersOptions): Promise<Peers> {
  const settings: Record<string, string> = {};
  let tables: RunningTableServer | undefined;
  let blobs: RunningBlobServer | undefined;
  let standIns: StandIns | undefined;
  const dataDir = options.inMemoryTables ? {} : { dataDir: options.azuriteDir };
  const close = async () => {
    await standIns?.close();
    await tables?.close();
    await blobs?.close();
  };
  try {
    if (!config.tables.connection) {
      const { startTableServer } = await import('./azurite/table-server.js');
      tables = await startTableServer(dataDir);
      settings.RuntimeCloud__Tables__Connection = tables.connectionString;
    }
    if (!config.outbox.bodiesConnection) {
      const { startBlobServer } = await import('./azurite/blob-server.js');
      blobs = await startBlobServer(dataDir);
      settings.RuntimeCloud__Outbox__Bodies__Connection = blobs.connectionString;
    }
    const unconfigured = STAND_IN_NAMES.filter((name) => !config.peers[name].endpoint);
    if (unconfigured.length > 0) {
      const audiences = Object.fromEntries(STAND_IN_NAMES.map((name) => [name, config.peers[name].audience])) as Record<StandInName, string>;
      standIns = await startStandIns({ issuer: config.auth.issuer, jwks: options.jwks, audiences });
      for (const name of unconfigured) settings[PEER_ENDPOINT_SETTINGS[name]] = standIns.endpoints[name];
    }
  } catch (error) {
    await close();
    throw error;
  }
  return {
    settings,
    standIns,
    bind: (store, clock) => standIns?.bind(createLocalExternalServices({ store, clock, stateDir: options.stateDir })),
    close,
  };
}

export const PEERS_USAGE = `runtime-cloud peers [--state-dir DIR]
  Starts Azurite's Table and Blob servers and the external services' stand-ins in a process of their own, as they
  run beside a deployed host, and prints one line: "peers " and the settings (JSON) that point hosts at them. Hosts
  started with those settings start none of their own. The stand-ins answer from the configured store
  (RuntimeCloud__Store__*), which those hosts must share, and accept the local issuer's tokens of the state dir.
  --state-dir DIR   the hosts' state folder (default .runtime-cloud); Azurite keeps its data in azurite/peers there
  Runs until SIGINT or SIGTERM.
`;

/** `runtime-cloud peers`: runs until `stop` resolves. */
export async function peersMain(options: { stateDir?: string }, stop: Promise<unknown>): Promise<number> {
  const overrides: Record<string, string> = options.stateDir !== undefined ? { RuntimeCloud__Local__StateDir: options.stateDir } : {};
  const config = configFromEnvironment({ defaults: { RuntimeCloud__Store__Dialect: 'sqlite' }, overrides });
  const stateDir = resolve(config.local.stateDir);
  const keys = await ensureLocalKeys(stateDir);
  const peers = await startPeers(config, { stateDir, azuriteDir: join(stateDir, 'azurite', 'peers'), jwks: keys.jwks });
  const store = createSqlStore({ dialect: config.store.dialect, connection: config.store.connection, baseDir: stateDir });
  peers.bind(store, systemClock);
  process.stdout.write(`peers ${JSON.stringify(peers.settings)}\n`);
  await stop;
  await peers.close();
  await store.close();
  return 0;
}
