import { EVENTS_TOPIC } from '../../shared/platform/bus/events';
import type { OutgoingMessage } from '../../shared/platform/bus/queue';

/**
 * The event types each of the host's subscriptions of the events topic takes, by the `type` application property
 * the outbox relay sets on every message. Infra deploys them as the subscriptions' SQL filters (infra/index.ts,
 * checked against this list in tests/infra/deployment.test.ts); the embedded topic applies them as Service Bus does,
 * so a module is not handed events it only throws away.
 */
export const EVENT_SUBSCRIPTION_TYPES: Readonly<Record<string, readonly string[]>> = {
  provisioning: ['PoolResizeRequested'],
  inventory: ['SpecificationApplied', 'ProvisioningApplied', 'ProvisioningFailed'],
};

/** Whether the subscription's filter passes the message: a subscription without one here passes all ($Default). */
export function subscriptionTakes(topic: string, subscription: string, message: Pick<OutgoingMessage, 'applicationProperties'>): boolean {
  const types = topic === EVENTS_TOPIC ? EVENT_SUBSCRIPTION_TYPES[subscription] : undefined;
  if (!types) return true;
  const type = message.applicationProperties?.type;
  return typeof type === 'string' && types.includes(type);
}
