import { metrics, type Counter, type Histogram, type MeterProvider, type ObservableResult } from '@opentelemetry/api';

/**
 * The host's OpenTelemetry metrics (issue 10). Use cases record through the global `@opentelemetry/api` meter with
 * the functions below and need no SDK: the MeterProvider behind it is set up by `startTelemetry` (telemetry.ts),
 * Azure Monitor when `APPLICATIONINSIGHTS_CONNECTION_STRING` is set, else in process only (GET /runtime-cloud/metrics).
 * Before that, and in code that never starts it, recording does nothing.
 *
 * Names, units and attributes are what dashboards and alerts are built on: renaming one is a breaking change.
 * Attribute values are bounded sets (kinds, pool ids, error codes, run states, modules, topics, and tenants, which
 * are administered), never ids of leases, runs or requests.
 */
export const METRICS = {
  /** The seed's gauge: age in seconds of the oldest unprocessed message per module (`module`). */
  inboxLag: 'connectsoft.factory.runtime_cloud.host.inbox_lag',
  /** Leases granted (`kind`, `pool`); a repeated request answered with its earlier lease is not counted again. */
  leaseGrants: 'connectsoft.factory.runtime_cloud.capacity.lease_grants',
  /** Lease requests refused (`code`: `CAPACITY.QUOTA_EXCEEDED`, `CAPACITY.EXHAUSTED`, …; `kind`). */
  leaseRefusals: 'connectsoft.factory.runtime_cloud.capacity.lease_refusals',
  /** From a lease request's arrival to its grant from a pool's queue (`pool`, `tenant`). */
  leaseQueueWait: 'connectsoft.factory.runtime_cloud.capacity.lease_queue_wait',
  /** Lease requests waiting in a pool's queue (`pool`, `tenant`). */
  leaseQueueDepth: 'connectsoft.factory.runtime_cloud.capacity.lease_queue_depth',
  /** Leases expired by one sweep run. */
  leaseSweepSize: 'connectsoft.factory.runtime_cloud.capacity.lease_sweep_size',
  /** Provisioning runs from intake to their final state (`outcome`: `applied`, `failed`, `rejected`, `canceled`). */
  runDuration: 'connectsoft.factory.runtime_cloud.provisioning.run_duration',
  /** Drift findings of completed scans (`kind`: `missing`, `replaced`, `modified`, `unmanaged`). */
  driftFindings: 'connectsoft.factory.runtime_cloud.inventory.drift_findings',
  /** From an event's commit to the outbox until the bus confirmed it (`topic`). */
  outboxPublishLag: 'connectsoft.factory.runtime_cloud.host.outbox_publish_lag',
  /** Events the bus refused for good, dead-lettered in the outbox (`topic`, `code`: `BUS.MESSAGE_TOO_LARGE`). */
  outboxDeadLetters: 'connectsoft.factory.runtime_cloud.host.outbox_dead_letters',
  /** Runner agents' reports the host did not believe (`code`: `PROVISIONING.APPLY_DIVERGED`, …): security events. */
  agentReportsRefused: 'connectsoft.factory.runtime_cloud.provisioning.agent_reports_refused',
} as const;

/** Per module, the age of its oldest unprocessed message; what an `InboxLagReader` (bus/bus.health.ts) answers. */
export type InboxLagSource = () => Promise<readonly { readonly module: string; readonly lagSeconds: number }[]>;

interface Instruments {
  readonly leaseGrants: Counter;
  readonly leaseRefusals: Counter;
  readonly leaseSweepSize: Histogram;
  readonly leaseQueueWait: Histogram;
  readonly runDuration: Histogram;
  readonly driftFindings: Counter;
  readonly outboxPublishLag: Histogram;
  readonly outboxDeadLetters: Counter;
  readonly agentReportsRefused: Counter;
}

const inboxLagSources = new Set<InboxLagSource>();
let current: { readonly provider: MeterProvider; readonly instruments: Instruments } | undefined;

/**
 * The instruments of the global MeterProvider, defined on first use after it changed: the API hands out no-op
 * instruments while no provider is registered, and keeps them no-op after one is, so they cannot be made once at load.
 */
function instruments(): Instruments {
  const provider = metrics.getMeterProvider();
  if (current?.provider !== provider) current = { provider, instruments: define(provider) };
  return current.instruments;
}

function define(provider: MeterProvider): Instruments {
  const meter = provider.getMeter('runtime-cloud');
  meter
    .createObservableGauge(METRICS.inboxLag, { unit: 's', description: 'Age of the oldest unprocessed message per module (inbox and its queues)' })
    .addCallback(observeInboxLag);
  meter
    .createObservableGauge(METRICS.leaseQueueDepth, { unit: '{request}', description: "Lease requests waiting in a pool's queue" })
    .addCallback(observeQueueDepth);
  return {
    leaseGrants: meter.createCounter(METRICS.leaseGrants, { unit: '{lease}', description: 'Capacity leases granted' }),
    leaseRefusals: meter.createCounter(METRICS.leaseRefusals, { unit: '{lease}', description: 'Capacity lease requests refused, by error code' }),
    leaseSweepSize: meter.createHistogram(METRICS.leaseSweepSize, {
      unit: '{lease}',
      description: 'Leases expired by one sweep',
      advice: { explicitBucketBoundaries: [0, 1, 5, 10, 50, 100, 500, 1000, 5000] },
    }),
    leaseQueueWait: meter.createHistogram(METRICS.leaseQueueWait, {
      unit: 's',
      description: "From a lease request's arrival to its grant from a pool's queue",
      advice: { explicitBucketBoundaries: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900] },
    }),
    runDuration: meter.createHistogram(METRICS.runDuration, {
      unit: 's',
      description: 'Provisioning runs from intake to their final state, by outcome',
      // Runs wait for policy checks and approvals: seconds to a day.
      advice: { explicitBucketBoundaries: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400] },
    }),
    driftFindings: meter.createCounter(METRICS.driftFindings, { unit: '{finding}', description: 'Drift findings of completed scans, by kind' }),
    outboxPublishLag: meter.createHistogram(METRICS.outboxPublishLag, {
      unit: 's',
      description: 'From an event written to the outbox to its publication confirmed by the bus',
      advice: { explicitBucketBoundaries: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600] },
    }),
    outboxDeadLetters: meter.createCounter(METRICS.outboxDeadLetters, { unit: '{event}', description: 'Events the bus refused for good, dead-lettered in the outbox, by code' }),
    agentReportsRefused: meter.createCounter(METRICS.agentReportsRefused, { unit: '{report}', description: 'Runner agent reports the host did not believe, by code' }),
  };
}

async function observeInboxLag(result: ObservableResult): Promise<void> {
  await Promise.all(
    [...inboxLagSources].map(async (source) => {
      // A store that does not answer leaves its modules out of this collection; the health check reports it.
      const lags = await source().catch(() => []);
      for (const { module, lagSeconds } of lags) result.observe(lagSeconds, { module });
    }),
  );
}

/** Defines the instruments on the provider just registered, so they are exported before anything is recorded. */
export function defineInstruments(): void {
  instruments();
}

/**
 * Observes the inbox lag gauge from `source` at each collection, until the returned function is called (when the
 * store behind it closes). One source per host; two hosts in one process (tests) report the same modules twice, and
 * the later observation wins.
 */
export function registerInboxLagGauge(source: InboxLagSource): () => void {
  inboxLagSources.add(source);
  instruments();
  return () => {
    inboxLagSources.delete(source);
  };
}

export function recordLeaseGrant(kind: string, pool: string): void {
  instruments().leaseGrants.add(1, { kind, pool });
}

export function recordLeaseRefusal(code: string, kind: string): void {
  instruments().leaseRefusals.add(1, { code, kind });
}

export function recordQueueWait(pool: string, tenant: string, seconds: number): void {
  instruments().leaseQueueWait.record(Math.max(0, seconds), { pool, tenant });
}

/** Per pool and tenant, the lease requests waiting; what a `QueueDepthSource` answers. */
export type QueueDepthSource = () => Promise<readonly { readonly pool: string; readonly tenant: string; readonly waiting: number }[]>;

const queueDepthSources = new Set<QueueDepthSource>();

/** Observes the queue depth gauge from `source` at each collection, until the returned function is called. */
export function registerQueueDepthGauge(source: QueueDepthSource): () => void {
  queueDepthSources.add(source);
  return () => {
    queueDepthSources.delete(source);
  };
}

async function observeQueueDepth(result: ObservableResult): Promise<void> {
  for (const source of queueDepthSources) {
    const depths = await source().catch(() => []);
    for (const { pool, tenant, waiting } of depths) result.observe(waiting, { pool, tenant });
  }
}

export function recordSweep(expired: number): void {
  instruments().leaseSweepSize.record(expired);
}

/** A run that reached a final state; `durationMs` from its creation. */
export function recordRunEnded(outcome: string, durationMs: number): void {
  instruments().runDuration.record(Math.max(0, durationMs) / 1000, { outcome });
}

/** The findings of one completed scan, counted by kind. */
export function recordDriftFindings(findings: readonly { readonly kind: string }[]): void {
  const counts = new Map<string, number>();
  for (const { kind } of findings) counts.set(kind, (counts.get(kind) ?? 0) + 1);
  for (const [kind, count] of counts) instruments().driftFindings.add(count, { kind });
}

export function recordOutboxPublishLag(topic: string, seconds: number): void {
  instruments().outboxPublishLag.record(Math.max(0, seconds), { topic });
}

/** An event the bus refused for good, dead-lettered in the outbox (outbox-relay.service.ts). */
export function recordOutboxDeadLetter(topic: string, code: string): void {
  instruments().outboxDeadLetters.add(1, { topic, code });
}

/** A runner agent's report the host did not believe (a security event, security-events.ts). */
export function recordAgentReportRefused(code: string): void {
  instruments().agentReportsRefused.add(1, { code });
}
