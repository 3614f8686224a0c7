import type { Transaction } from 'kysely';
import { z } from 'zod';
import type { BusTables } from '../platform/bus/bus.tables';
import { openEvent } from '../platform/bus/event-bodies';
import { cloudEventSchema } from '../platform/bus/events';
import { markInboundProcessed, recordInbound } from '../platform/bus/inbox.repository';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { describeFieldProblems, fieldProblems } from '../platform/validation/validation';
import { desiredStateOf, runOutcomeOf, type EnvironmentKey } from './environment';
import type { InventoryContext } from './inventory.context';
import { findRejection, insertRejection, type InventoryRejection } from './inventory.repository';
import type { InventoryTables } from './inventory.tables';
import { recordDesiredState, recordRunOutcome } from './specification.service';

/** The inbox module name of inventory's messages. */
export const INVENTORY_MODULE = 'inventory';

/** Why inventory refuses a message of its subscription; each a rejection that redelivery cannot change. */
export const IntakeErrors = {
  invalidEvent: 'INVENTORY.INVALID_EVENT',
  unsupportedVersion: 'INVENTORY.UNSUPPORTED_EVENT_VERSION',
  invalidSpecification: 'INVENTORY.INVALID_SPECIFICATION',
  invalidRunOutcome: 'INVENTORY.INVALID_RUN_OUTCOME',
  unknownTenant: 'INVENTORY.UNKNOWN_TENANT',
} as const;

/** The event types inventory reads (Azure's subscription rule lets only these through). */
const INVENTORY_TYPES: readonly string[] = ['SpecificationApplied', 'ProvisioningApplied', 'ProvisioningFailed'];

/** A CloudEvent of the topic of any type: types this host does not know are not inventory's, not malformed. */
const envelopeSchema = cloudEventSchema().extend({ type: z.string().min(1) });

export type IntakeResult =
  /** A desired state recorded (or an older one that changed nothing): scan the environment. */
  | { readonly outcome: 'specification'; readonly recorded: 'recorded' | 'outdated'; readonly environment: EnvironmentKey }
  /** A run's end, noted on its environment (`noted` false: inventory has no such environment, or a later end is noted). */
  | { readonly outcome: 'run'; readonly noted: boolean }
  /** A ProvisioningFailed of a message rejected before any run existed: no environment to note it on. */
  | { readonly outcome: 'no-run' }
  /** An event of another type (Azure's subscription rule filters these out; the local host's does not). */
  | { readonly outcome: 'not-for-inventory'; readonly type: string }
  /** Recorded as a rejection with its reason (inventory_rejections, and the inbox says `rejected`). */
  | { readonly outcome: 'rejected'; readonly code: string; readonly reason: string };

/** A message of inventory's subscription: the body as the trigger gives it (parsed JSON, text or bytes). */
export interface IntakeMessage {
  readonly messageId: string;
  readonly body: unknown;
}

/**
 * Takes a message of inventory's subscription in: a `SpecificationApplied` records the environment's desired state,
 * a run's terminal event its last run; a message that cannot be (not JSON, not a CloudEvent 1.0, data that is not
 * the type's, a tenant this host does not know) is recorded as a rejection with its code and reason, in the same
 * inbox the provisioning intake records its messages in. Both are recorded by messageId, so a redelivery records
 * nothing twice; what the message does is idempotent (a desired state no newer than the recorded one changes
 * nothing), so a delivery that failed half way is simply done again. A store fault throws.
 */
export async function intake(ctx: InventoryContext, message: IntakeMessage): Promise<IntakeResult> {
  const refuse = (refusal: Refusal) => rejectMessage(ctx, message, refusal);
  // A claim-checked event's data comes back from the event body store, digest checked (event-bodies.ts).
  const opened = await openEvent(message.body, ctx.eventBodies);
  if ('refused' in opened) return refuse({ ...opened.refused, problems: [{ field: 'dataref', message: opened.refused.reason }] });
  const body = opened.event;
  if (typeof body === 'string') return refuse({ code: IntakeErrors.invalidEvent, reason: 'the message is not JSON', problems: [] });
  const specversion = typeof body === 'object' && body !== null ? (body as Record<string, unknown>).specversion : undefined;
  if (specversion !== undefined && specversion !== '1.0') {
    return refuse({ code: IntakeErrors.unsupportedVersion, reason: `CloudEvents specversion ${JSON.stringify(specversion)} is not read here; events are CloudEvents 1.0`, problems: [{ field: 'specversion', message: 'must be "1.0"' }] });
  }
  const envelope = envelopeSchema.safeParse(body);
  if (!envelope.success) {
    const problems = fieldProblems(envelope.error, '(message)');
    return refuse({ code: IntakeErrors.invalidEvent, reason: `the message is not a CloudEvent 1.0: ${describeFieldProblems(problems)}`, problems });
  }
  const event = envelope.data;
  if (!INVENTORY_TYPES.includes(event.type)) return { outcome: 'not-for-inventory', type: event.type };
  const about = { eventId: event.id, eventType: event.type };

  if (event.type === 'SpecificationApplied') {
    const parsed = desiredStateOf(event.data);
    if ('problems' in parsed) return refuse({ ...about, code: IntakeErrors.invalidSpecification, reason: `the SpecificationApplied has no readable desired state: ${describeFieldProblems(parsed.problems)}`, problems: parsed.problems });
    const tenant = parsed.ok.tenant;
    if (!(await ctx.knowsTenant(tenant))) return refuse({ ...about, tenantId: tenant, code: IntakeErrors.unknownTenant, reason: `the tenant ${tenant} is not known to this host`, problems: [{ field: 'tenantId', message: 'unknown tenant' }] });
    const recorded = await recordDesiredState(ctx, parsed.ok, event.time);
    await recordTakenIn(ctx, message.messageId, event.id, `specification-${recorded.outcome}`);
    return { outcome: 'specification', recorded: recorded.outcome, environment: recorded.environment };
  }

  const run = runOutcomeOf(event.data);
  if ('problems' in run) return refuse({ ...about, code: IntakeErrors.invalidRunOutcome, reason: `the ${event.type} names no run's end: ${describeFieldProblems(run.problems)}`, problems: run.problems });
  if ('none' in run) {
    await recordTakenIn(ctx, message.messageId, event.id, 'no-run');
    return { outcome: 'no-run' };
  }
  const noted = await recordRunOutcome(ctx, run.ok);
  await recordTakenIn(ctx, message.messageId, event.id, noted ? 'run-noted' : 'run-unchanged');
  return { outcome: 'run', noted };
}

/** The rejection recorded for a message of inventory's subscription, by its messageId. */
export function getRejection(ctx: InventoryContext, messageId: string): Promise<InventoryRejection | undefined> {
  return retryingContention(() => findRejection(ctx.db, messageId));
}

type Refusal = Omit<InventoryRejection, 'messageId' | 'receivedAt'>;

/**
 * The rejection and its inbox entry, in one transaction. The inbox entry is keyed by the message (`invalid:<id>`):
 * a malformed message must not shadow a valid one of the same event. A redelivery finds its rejection recorded.
 */
async function rejectMessage(ctx: InventoryContext, message: IntakeMessage, refusal: Refusal): Promise<IntakeResult> {
  await inTransaction(ctx.db, async (trx) => {
    if (!(await insertRejection(trx, { ...refusal, messageId: message.messageId, receivedAt: ctx.clock.now() }))) return;
    await processedInInbox(ctx, trx, { messageId: message.messageId, businessKey: `invalid:${message.messageId}`, outcome: 'rejected' });
  });
  return { outcome: 'rejected', code: refusal.code, reason: refusal.reason };
}

/** A message taken in: its inbox entry, keyed by its event, with what came of it. */
async function recordTakenIn(ctx: InventoryContext, messageId: string, eventId: string, outcome: string): Promise<void> {
  await inTransaction(ctx.db, (trx) => processedInInbox(ctx, trx, { messageId, businessKey: eventId, outcome }));
}

async function processedInInbox(ctx: InventoryContext, trx: Transaction<InventoryTables>, entry: { messageId: string; businessKey: string; outcome: string }): Promise<void> {
  // The inbox is the platform's table, in the same store: the transaction is the same, its row type is the bus's.
  const db = trx as unknown as Transaction<BusTables>;
  await recordInbound(db, { module: INVENTORY_MODULE, messageId: entry.messageId, businessKey: entry.businessKey }, ctx.clock);
  await markInboundProcessed(db, { module: INVENTORY_MODULE, messageId: entry.messageId, outcome: entry.outcome }, ctx.clock);
}
