import { z } from 'zod';
import { cloudEventSchema } from '../platform/bus/events';
import { fieldProblems, type FieldProblem } from '../platform/validation/validation';
import { parseQualifiedStackName, type StackRef } from '../platform/iac/stack-ref';

/**
 * `PoolResizeRequested` as provisioning reads it from the events topic (pure model). The capacity module publishes
 * it when a pool with an `iacStack` changes size; provisioning turns it into a run on that stack with the new size
 * as config. Only the members read here are checked; the capacity module may add others.
 */
export const POOL_RESIZE_REQUESTED = 'PoolResizeRequested';

export interface PoolResizeRequested {
  /** The event id: the business key of the run (one run per event). */
  readonly eventId: string;
  readonly pool: string;
  /** The pool's stack, named `tenant/project/stack`. */
  readonly iacStack: StackRef;
  readonly fromCapacity: number;
  readonly toCapacity: number;
}

const capacity = z.number().int().nonnegative();

const poolResizeDataSchema = z.object({
  pool: z.string().min(1).max(200),
  iacStack: z
    .string()
    .min(1)
    .max(200)
    .transform((name, ctx) => parseQualifiedStackName(name) ?? (ctx.addIssue({ code: 'custom', message: 'a stack is named tenant/project/stack' }), z.NEVER)),
  fromCapacity: capacity,
  toCapacity: capacity,
});

export type PoolResizeParse =
  | { readonly outcome: 'valid'; readonly resize: PoolResizeRequested }
  /** Another event of the topic: not for provisioning. */
  | { readonly outcome: 'other'; readonly type: string }
  | { readonly outcome: 'invalid'; readonly problems: readonly FieldProblem[]; readonly pool?: string };

/** Reads a message of the events topic: a CloudEvent, as parsed JSON, JSON text or bytes. Never throws. */
export function parsePoolResize(body: unknown): PoolResizeParse {
  let value = body;
  if (typeof value === 'string' || value instanceof Uint8Array) {
    try {
      value = JSON.parse(typeof value === 'string' ? value : new TextDecoder().decode(value)) as unknown;
    } catch {
      return { outcome: 'invalid', problems: [{ field: '(message)', message: 'the message body is not valid JSON' }] };
    }
  }
  const event = cloudEventSchema().safeParse(value);
  if (!event.success) return { outcome: 'invalid', problems: fieldProblems(event.error, '(message)') };
  if (event.data.type !== POOL_RESIZE_REQUESTED) return { outcome: 'other', type: event.data.type };
  const data = poolResizeDataSchema.safeParse(event.data.data);
  if (!data.success) {
    const pool = event.data.data.pool;
    return { outcome: 'invalid', problems: fieldProblems(data.error, 'data'), ...(typeof pool === 'string' && pool.length > 0 ? { pool: pool.slice(0, 200) } : {}) };
  }
  return { outcome: 'valid', resize: { eventId: event.data.id, ...data.data } };
}

/** The business key of a pool-resize run, stored where a promotion's run keeps its promotionId. */
export function poolResizeKey(eventId: string): string {
  return `pool-resize:${eventId}`;
}
