import type { InvocationContext } from '@azure/functions';
import { cloudEventSchema, EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { logOf } from '../log';

/**
 * Inventory's subscription to the events topic. In Azure it carries a rule that lets only `SpecificationApplied`,
 * `ProvisioningApplied` and `ProvisioningFailed` through; the local host's embedded subscription takes every event,
 * so the handler reads the type and ignores the others.
 */
export const INVENTORY_SUBSCRIPTION = 'inventory';

/**
 * `SpecificationApplied` records the environment's desired state and scans it at once (so an apply shows in sync
 * or drifted without waiting for the timer); a run's terminal event records the environment's last run. A message
 * that is not a CloudEvent, or a `SpecificationApplied` without a readable desired state, is logged with the reason
 * and completed: delivering it again could not make it readable. A store fault throws, so the message is delivered
 * again and dead-lettered after the max delivery count.
 */
export async function inventoryIntake(message: unknown, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const log = logOf(context);
  let body = message;
  if (typeof body === 'string' || body instanceof Uint8Array) {
    try {
      body = JSON.parse(typeof body === 'string' ? body : new TextDecoder().decode(body)) as unknown;
    } catch {
      log.warn('a message of the events topic is not JSON; ignored');
      return;
    }
  }
  const event = cloudEventSchema.safeParse(body);
  if (!event.success) {
    log.warn(`a message of the events topic is not a CloudEvent (${event.error.issues[0]?.message ?? ''}); ignored`);
    return;
  }
  switch (event.data.type) {
    case 'SpecificationApplied': {
      const recorded = await deps.inventory.recordSpecification(event.data);
      if (recorded.outcome === 'invalid') {
        log.warn(`SpecificationApplied has no readable desired state: ${recorded.reason}`, { eventId: event.data.id });
        return;
      }
      if (recorded.outcome === 'outdated') return;
      try {
        const scan = await deps.inventory.scan(recorded.environment, { kind: 'applied' });
        log.info(`scanned after its apply: ${scan.outcome}${scan.driftStatus ? ` (${scan.driftStatus})` : ''}`, { environmentId: recorded.environment.id, scanId: scan.scanId, eventId: event.data.id });
      } catch (thrown) {
        // The desired state is recorded and the environment is due: the timer scans it.
        log.warn('could not be scanned after its apply; the timer scans it', { environmentId: recorded.environment.id, eventId: event.data.id }, thrown);
      }
      return;
    }
    case 'ProvisioningApplied':
    case 'ProvisioningFailed':
      await deps.inventory.recordRunOutcome(event.data.data);
      return;
    default:
      return;
  }
}

moduleApp('inventory').serviceBusTopic('inventoryIntake', {
  topicName: EVENTS_TOPIC,
  subscriptionName: INVENTORY_SUBSCRIPTION,
  connection: 'ServiceBusConnection',
  handler: inventoryIntake,
});
