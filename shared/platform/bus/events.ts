import type { z } from 'zod';
import { lazySchema } from '../validation/lazy-schema';

/** Event types published on the `runtime-cloud-events` topic. */
export const EVENT_TYPES = [
  'ProvisioningApplied',
  'ProvisioningFailed',
  'SpecificationDeclared',
  'SpecificationApplied',
  'RuntimeDriftDetected',
  'ReconciliationProposed',
  'LeaseExpired',
  'PoolResizeRequested',
  'RunnerJobDispatched',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export const EVENTS_TOPIC = 'runtime-cloud-events';
export const EVENT_SOURCE = '/runtime-cloud';

/**
 * A CloudEvents 1.0 JSON event as published. Changing this shape is a breaking change for every consumer.
 * `id` is also the Service Bus messageId (duplicate detection); `correlationid` (extension) is the run or
 * promotion id and becomes the message's correlationId.
 */
export const cloudEventSchema = lazySchema((z) =>
  z.object({
    specversion: z.literal('1.0'),
    id: z.string().min(1),
    source: z.string().min(1),
    type: z.enum(EVENT_TYPES),
    subject: z.string().optional(),
    time: z.string(),
    datacontenttype: z.literal('application/json'),
    correlationid: z.string().optional(),
    tenant: z.string().optional(),
    data: z.record(z.string(), z.unknown()),
  }),
);
export type CloudEvent = z.infer<ReturnType<typeof cloudEventSchema>>;

/** What a use case hands to the outbox; id and time come from the injected Ids and Clock. */
export interface NewEvent {
  readonly type: EventType;
  readonly subject?: string;
  readonly correlationId?: string;
  readonly tenant?: string;
  readonly data: Readonly<Record<string, unknown>>;
}
