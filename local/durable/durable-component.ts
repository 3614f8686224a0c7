import { randomBytes } from 'node:crypto';
import type { HostComponent, HostContext } from '../host';
import { hostJsonCount, hostJsonSetting, hostJsonText } from '../host-json';
import { durableDb, purgeInstancesBy } from './durable.repository';
import { addDurableRoutes } from './durable-api';
import { durableClientData } from './durable-protocol';
import { DurableRunner, type DurableRunnerOptions } from './durable-runner';
import { parseDurableVersioning, type DurableVersioning } from './durable-versioning';

/**
 * The local host's stand-in for the Durable Task extension: runs `orchestrationTrigger` and `activityTrigger`
 * functions from the SQL store, gives functions that declare `df.input.durableClient()` their client data, and
 * serves the Durable HTTP API subset that client calls.
 */
export class LocalDurableComponent implements HostComponent {
  readonly name = 'durable';
  readonly #options: DurableRunnerOptions;
  #runner: DurableRunner | undefined;
  #retention: NodeJS.Timeout | undefined;
  #purgeExpired: (() => Promise<number>) | undefined;

  constructor(options: DurableRunnerOptions = {}) {
    this.#options = options;
  }

  get runner(): DurableRunner {
    if (!this.#runner) throw new Error('the durable component is not started');
    return this.#runner;
  }

  async start(context: HostContext): Promise<void> {
    // A secret of this process: the client URLs carry it, so only functions (and whoever they hand URLs to) drive instances.
    const key = randomBytes(16).toString('hex');
    const versioning = hostJsonVersioning();
    const runner = new DurableRunner(
      {
        db: context.deps.sql.db,
        dialect: context.deps.sql.dialect,
        clock: context.deps.clock,
        log: context.log,
        registrations: context.functionsWithTrigger,
        invocationContext: (registration, init) => context.invocations.create(registration, init),
      },
      { ...hostJsonLimits(), versioning, leaseMs: context.config.local.durableLeaseMs, ...this.#options },
    );
    this.#runner = runner;
    const hub = hostJsonText('extensions', 'durableTask', 'hubName') || undefined;
    context.invocations.provideExtraInput('durableClient', () => durableClientData(context.baseUrl().origin, key, hub));
    addDurableRoutes(context.http, {
      db: context.deps.sql.db,
      dialect: context.deps.sql.dialect,
      clock: context.deps.clock,
      auth: context.deps.auth,
      key,
      orchestrations: () => context.functionsWithTrigger('orchestrationTrigger').map((r) => r.metadata.name),
      wake: () => runner.wake({ instances: true }),
      origin: () => context.baseUrl().origin,
      workerId: runner.workerId,
      ...(versioning.defaultVersion !== undefined ? { defaultVersion: versioning.defaultVersion } : {}),
    });
    for (const entity of context.functionsWithTrigger('entityTrigger')) {
      context.log('warning', 'durable', `entity function '${entity.metadata.name}' is registered, but durable entities are not supported by the local Durable host: calls to it fail as tasks the orchestrator can catch, and signals to it fail the orchestration`);
    }
    const retentionMs = historyRetentionDays() * DAY_MS;
    this.#purgeExpired = () => purgeInstancesBy(durableDb(context.deps.sql.db), { updatedBefore: context.deps.clock.now().getTime() - retentionMs });
    this.#retention = setInterval(() => void this.purgeExpiredHistory().catch((error: unknown) => context.log('warning', 'durable', 'purging expired durable history failed', error)), RETENTION_SWEEP_MS);
    this.#retention.unref();
    return Promise.resolve();
  }

  /**
   * Work is taken once the host listens: an activity's durable client (and an orchestration's) carries the host's
   * URL, which a host restarting on a store with work in it does not know before.
   */
  listening(): Promise<void> {
    this.#runner?.start();
    return Promise.resolve();
  }

  /**
   * Purges ended instances (with their history) unchanged for longer than the retention, so history does not grow
   * forever; runs hourly, and on demand (tests, with an injected clock). Returns how many were purged.
   */
  purgeExpiredHistory(): Promise<number> {
    if (!this.#purgeExpired) throw new Error('the durable component is not started');
    return this.#purgeExpired();
  }

  async stop(): Promise<void> {
    clearInterval(this.#retention);
    await this.#runner?.stop();
  }
}

/** The concurrency limits of host.json (or its AzureFunctionsJobHost__ overrides), as the Durable extension reads them. */
function hostJsonLimits(): DurableRunnerOptions {
  const orchestrations = hostJsonCount('extensions', 'durableTask', 'maxConcurrentOrchestratorFunctions');
  const activities = hostJsonCount('extensions', 'durableTask', 'maxConcurrentActivityFunctions');
  return { ...(orchestrations ? { maxConcurrentOrchestrations: orchestrations } : {}), ...(activities ? { maxConcurrentActivities: activities } : {}) };
}

/** Orchestration versioning of host.json (or its AzureFunctionsJobHost__ overrides); a value the extension would refuse stops the host. */
function hostJsonVersioning(): DurableVersioning {
  const setting = (name: string) => hostJsonSetting('extensions', 'durableTask', name);
  return parseDurableVersioning({ defaultVersion: hostJsonText('extensions', 'durableTask', 'defaultVersion'), versionMatchStrategy: setting('versionMatchStrategy'), versionFailureStrategy: setting('versionFailureStrategy') });
}

const DAY_MS = 24 * 60 * 60 * 1000;
const RETENTION_SWEEP_MS = 60 * 60 * 1000;

/**
 * Days an ended instance's history is kept: host.json `extensions.durableTask.localHistoryRetentionDays` (or the app
 * setting `AzureFunctionsJobHost__extensions__durableTask__localHistoryRetentionDays`), 30 by default. A setting of
 * the local host only: Azure's task hub keeps history until it is purged.
 */
export function historyRetentionDays(): number {
  const days = hostJsonSetting('extensions', 'durableTask', 'localHistoryRetentionDays');
  return typeof days === 'number' && days > 0 ? days : 30;
}

/** The Durable component with its defaults (15 s leases, 100 ms polling, host.json's concurrency limits). */
export function localDurable(options: DurableRunnerOptions = {}): LocalDurableComponent {
  return new LocalDurableComponent(options);
}
