import type { InvocationContext } from '@azure/functions';
import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { logOf } from '../log';

/**
 * Inventory's subscription to the events topic. In Azure it carries a rule that lets only `SpecificationApplied`,
 * `ProvisioningApplied` and `ProvisioningFailed` through; the local host's embedded subscription takes every event,
 * so the service reads the type and ignores the others.
 */
export const INVENTORY_SUBSCRIPTION = 'inventory';

/**
 * `SpecificationApplied` records the environment's desired state and scans it at once (so an apply shows in sync
 * or drifted without waiting for the timer); a run's terminal event records the environment's last run. A message
 * that can never be taken in (not JSON, not a CloudEvent 1.0, data that is not its type's, an unknown tenant) is
 * recorded as a rejection with its code and reason, by messageId, and completed, as the provisioning intake does
 * with a promotion it rejects: delivering it again could not change it. (Completed, not dead-lettered: a Node
 * function's trigger can only dead-letter through the Service Bus SDK binding, which this app does not use; a throw
 * would deliver it ten times and dead-letter it as `MaxDeliveryCountExceeded`, naming no reason.) A store fault
 * throws, so the message is delivered again, and dead-lettered after the max delivery count.
 */
export async function inventoryIntake(message: unknown, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const messageId = typeof context.triggerMetadata?.messageId === 'string' ? context.triggerMetadata.messageId : `invocation:${context.invocationId}`;
  const log = logOf(context, { messageId });
  const result = await deps.inventory.intake({ messageId, body: message });
  switch (result.outcome) {
    case 'rejected':
      log.warn(`message rejected (${result.code}): ${result.reason}`);
      return;
    case 'specification': {
      if (result.recorded === 'outdated') return;
      try {
        const scan = await deps.inventory.scan(result.environment, { kind: 'applied' });
        log.info(`scanned after its apply: ${scan.outcome}${scan.driftStatus ? ` (${scan.driftStatus})` : ''}`, { environmentId: result.environment.id, scanId: scan.scanId });
      } catch (thrown) {
        // The desired state is recorded and the environment is due: the timer scans it.
        log.warn('could not be scanned after its apply; the timer scans it', { environmentId: result.environment.id }, thrown);
      }
      return;
    }
    case 'run':
    case 'no-run':
    case 'not-for-inventory':
      return;
  }
}

moduleApp('inventory').serviceBusTopic('inventoryIntake', {
  topicName: EVENTS_TOPIC,
  subscriptionName: INVENTORY_SUBSCRIPTION,
  connection: 'ServiceBusConnection',
  handler: inventoryIntake,
});
