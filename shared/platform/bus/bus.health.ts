import type { Kysely } from 'kysely';
import type { HealthCheck } from '../health/health';
import type { Clock } from '../time/clock';
import type { ModuleLag } from './inbox.repository';
import type { OutboxTables } from './outbox';
import { deadLettersSince } from './outbox-relay.repository';
import { PROMOTIONS_QUEUE } from './queue';
import { METRICS } from '../telemetry/metrics';

/** The seed's gauge: age in seconds of the oldest unprocessed event per module. */
export const INBOX_LAG_METRIC = 'connectsoft.factory.runtime_cloud.host.inbox_lag';

/** Queues each module consumes: the embedded ones in the store (local host), Service Bus queues in Azure. */
export const MODULE_QUEUES: Readonly<Record<string, readonly string[]>> = { provisioning: [PROMOTIONS_QUEUE] };

/** Lag above this degrades the host: messages are arriving faster than the module settles them, or it is stuck. */
export const INBOX_LAG_DEGRADED_SECONDS = 300;

/**
 * Where a host reads its inbox lag: the oldest unprocessed inbox entry or message waiting in a module's queues. The
 * local host reads both from the SQL store; a host on Service Bus reads the queues from the namespace
 * (service-bus-inbox-lag.ts), as its embedded queue tables stay empty there.
 */
export interface InboxLagReader {
  /** Where the queues are read: `sql-store` or `service-bus`. */
  readonly source: string;
  /** Lag per module, in the order asked; rejects when the store or the bus does not answer (never a lag of 0). */
  read(modules: readonly string[]): Promise<readonly ModuleLag[]>;
  close(): Promise<void>;
}

/** One health check per enabled module, `inbox-lag:<module>`; never critical (the host still serves reads). */
export function inboxLagChecks(reader: InboxLagReader, modules: readonly string[]): HealthCheck[] {
  return modules.map((module) => ({
    name: `inbox-lag:${module}`,
    critical: false,
    async run() {
      const [lag] = await reader.read([module]);
      const lagSeconds = Math.round((lag?.lagSeconds ?? 0) * 10) / 10;
      const details = {
        metric: INBOX_LAG_METRIC,
        module,
        source: reader.source,
        lagSeconds,
        unprocessed: lag?.unprocessed ?? 0,
        ...(lag?.waitingInQueues !== undefined ? { waitingInQueues: lag.waitingInQueues } : {}),
      };
      return lagSeconds > INBOX_LAG_DEGRADED_SECONDS
        ? { status: 'degraded' as const, details, error: `oldest unprocessed message is ${lagSeconds} s old` }
        : { details };
    },
  }));
}

/** How long an event dead-lettered in the outbox keeps the host degraded: a day, so someone looks at it. */
export const DEAD_LETTER_DEGRADED_MS = 24 * 60 * 60_000;

/**
 * `outbox-dead-letters`: degraded while an event the bus refused for good was dead-lettered in the outbox within the
 * last day (outbox-relay.service.ts), naming the latest and why; never critical (the rest of the events flow on).
 */
export function outboxDeadLetterCheck(db: Kysely<OutboxTables>, clock: Clock): HealthCheck {
  return {
    name: 'outbox-dead-letters',
    critical: false,
    async run() {
      const since = clock.now().getTime() - DEAD_LETTER_DEGRADED_MS;
      const { count, latest } = await deadLettersSince(db, since);
      const details = { metric: METRICS.outboxDeadLetters, sinceHours: DEAD_LETTER_DEGRADED_MS / 3_600_000, count, ...(latest ? { latest: { eventId: latest.eventId, at: new Date(latest.at).toISOString(), reason: latest.reason } } : {}) };
      return latest ? { status: 'degraded' as const, details, error: `${count} event(s) refused by the bus were dead-lettered in the outbox; the latest, ${latest.eventId}: ${latest.reason}` } : { details };
    },
  };
}
