import type { Kysely } from 'kysely';
import type { HealthCheck } from '../health/health';
import type { Clock } from '../time/clock';
import type { BusTables } from './bus.tables';
import { inboxLag } from './inbox.repository';
import { PROMOTIONS_QUEUE } from './queue';

/** The seed's gauge: age in seconds of the oldest unprocessed event per module. */
export const INBOX_LAG_METRIC = 'connectsoft.factory.runtime_cloud.host.inbox_lag';

/** Queues each module consumes (the embedded ones are in the store; in Azure these stay empty). */
export const MODULE_QUEUES: Readonly<Record<string, readonly string[]>> = { provisioning: [PROMOTIONS_QUEUE] };

/** Lag above this degrades the host: messages are arriving faster than the module settles them, or it is stuck. */
export const INBOX_LAG_DEGRADED_SECONDS = 300;

/** One health check per enabled module, `inbox-lag:<module>`; never critical (the host still serves reads). */
export function inboxLagChecks(db: Kysely<BusTables>, modules: readonly string[], clock: Clock): HealthCheck[] {
  return modules.map((module) => ({
    name: `inbox-lag:${module}`,
    critical: false,
    async run() {
      const [lag] = await inboxLag(db, [module], MODULE_QUEUES, clock.now().getTime());
      const lagSeconds = Math.round((lag?.lagSeconds ?? 0) * 10) / 10;
      const details = {
        metric: INBOX_LAG_METRIC,
        module,
        lagSeconds,
        unprocessed: lag?.unprocessed ?? 0,
        waitingInQueues: lag?.waitingInQueues ?? 0,
      };
      return lagSeconds > INBOX_LAG_DEGRADED_SECONDS
        ? { status: 'degraded' as const, details, error: `oldest unprocessed message is ${lagSeconds} s old` }
        : { details };
    },
  }));
}
