import type { InvocationContext, Timer } from '@azure/functions';
import { hostApp } from '../app';
import { getDeps } from '../runtime';
import { logOf } from '../log';

/**
 * Publishes the outbox: every event written with a state change goes to the `runtime-cloud-events` topic (Service
 * Bus in Azure, the embedded topic on the local host, as `deps.events` decides). With
 * `RuntimeCloud__Outbox__Publish=after-commit` (the default) the invocation that committed an event publishes it
 * right away, and this timer is the fallback for what that missed; with `relay`, the timer publishes everything.
 * Both take the same lane claims (outbox-relay.repository.ts), so two of them never publish one lane at once, and
 * a republish after a crash carries the same messageId.
 */
export async function outboxRelay(_timer: Timer, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  // The relay and its SQL load on the first tick, with the composition root that uses them too, not when the
  // functions register (docs/benchmarks.md, "Cold start").
  const [{ busDb }, { relayOutbox }] = await Promise.all([import('../../shared/platform/bus/bus-db.js'), import('../../shared/platform/bus/outbox-relay.service.js')]);
  const result = await relayOutbox(busDb(deps.sql.db), deps.events, {
    dialect: deps.sql.dialect,
    clock: deps.clock,
    ids: deps.ids,
    ...(deps.config.outbox.claimMs ? { leaseMs: deps.config.outbox.claimMs } : {}),
  });
  // Refused by the bus for good: dead-lettered in the outbox (metric and health check `outbox-dead-letters`).
  for (const dead of result.deadLettered ?? []) logOf(context).error(`event ${dead.eventId} dead-lettered in the outbox (${dead.code}): ${dead.reason}`);
  if (result.failed) {
    // Left pending: the next tick retries after the back-off; the error is kept on the rows (outbox.last_error).
    logOf(context).warn(`${result.failed.events} event(s) not published via ${deps.events.name}: ${result.failed.error}`);
  } else if (result.published > 0) {
    logOf(context).info(`published ${result.published} event(s) via ${deps.events.name}`);
  }
}

/** Every two seconds: events reach consumers within a few seconds of the change that caused them. */
export const OUTBOX_RELAY_SCHEDULE = '*/2 * * * * *';

hostApp.timer('outboxRelay', { schedule: OUTBOX_RELAY_SCHEDULE, handler: outboxRelay });
