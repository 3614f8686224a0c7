import type { Kysely, Transaction } from 'kysely';
import type { Clock } from '../time/clock';
import type { BusTables } from './bus.tables';

/**
 * The inbox: every inbound message is recorded by messageId and business key, in the transaction of the change
 * it causes and before anything else happens, so a redelivered message (same messageId) or a resent one (same
 * business key under a new messageId) is recognised and acts only once.
 */
type Db = Kysely<BusTables> | Transaction<BusTables>;

export interface InboundMessage {
  /** The module that consumes it. Example: `provisioning`. */
  readonly module: string;
  readonly messageId: string;
  /** What makes two messages the same request. Example: the promotion id. */
  readonly businessKey: string;
}

export type InboundRecord =
  | { readonly isNew: true }
  | { readonly isNew: false; readonly duplicateOf: 'message-id' | 'business-key' };

/** Records an inbound message; `isNew` is false when it (or its business key) was recorded before. */
export async function recordInbound(trx: Db, message: InboundMessage, clock: Clock): Promise<InboundRecord> {
  const now = clock.now().getTime();
  const sameKey = await trx
    .selectFrom('inbox')
    .select('message_id')
    .where('module', '=', message.module)
    .where('business_key', '=', message.businessKey)
    .executeTakeFirst();
  // INSERT … SELECT … WHERE NOT EXISTS is the one conditional insert all three dialects share (T-SQL has no
  // ON CONFLICT). Two deliveries racing past the check meet the primary key; the loser fails and is redelivered.
  const result = await trx
    .insertInto('inbox')
    .columns(['module', 'message_id', 'business_key', 'received_at', 'processed_at', 'outcome'])
    .expression(
      trx
        .selectNoFrom((eb) => [
          eb.val(message.module).as('module'),
          eb.val(message.messageId).as('message_id'),
          eb.val(message.businessKey).as('business_key'),
          eb.val(now).as('received_at'),
          // A resend of a known business key is settled on arrival; it must not count as lag.
          eb.val(sameKey ? now : null).as('processed_at'),
          eb.val(sameKey ? 'duplicate-business-key' : null).as('outcome'),
        ])
        .where((eb) =>
          eb.not(
            eb.exists(
              trx
                .selectFrom('inbox')
                .select('message_id')
                .where('module', '=', message.module)
                .where('message_id', '=', message.messageId),
            ),
          ),
        ),
    )
    .executeTakeFirst();
  if (Number(result.numInsertedOrUpdatedRows ?? 0) === 0) return { isNew: false, duplicateOf: 'message-id' };
  if (sameKey) return { isNew: false, duplicateOf: 'business-key' };
  return { isNew: true };
}

/** Marks an inbound message as processed with what came of it (`applied`, `rejected`, …). */
export async function markInboundProcessed(
  trx: Db,
  message: Pick<InboundMessage, 'module' | 'messageId'> & { readonly outcome: string },
  clock: Clock,
): Promise<void> {
  await trx
    .updateTable('inbox')
    .set({ processed_at: clock.now().getTime(), outcome: message.outcome })
    .where('module', '=', message.module)
    .where('message_id', '=', message.messageId)
    .where('processed_at', 'is', null)
    .execute();
}

export interface ModuleLag {
  readonly module: string;
  /** Age in seconds of the oldest unprocessed inbox entry or waiting queue message; 0 when there is none. */
  readonly lagSeconds: number;
  readonly unprocessed: number;
  /** Messages waiting in the module's queues; undefined where they cannot be counted (Service Bus: Manage rights). */
  readonly waitingInQueues?: number;
}

/**
 * Lag per module (metric `connectsoft.factory.runtime_cloud.host.inbox_lag`): the oldest unprocessed inbox entry
 * or message still waiting in one of the module's queues.
 */
export async function inboxLag(
  db: Db,
  modules: readonly string[],
  queuesOf: Readonly<Record<string, readonly string[]>>,
  now: number,
  /** The oldest waiting message and the count per queue, where the host can read its queues (the embedded ones). */
  queueAges: (queues: readonly string[]) => Promise<ReadonlyMap<string, { enqueuedAt: number; count: number }>> = () => Promise.resolve(new Map()),
): Promise<ModuleLag[]> {
  if (modules.length === 0) return [];
  const inbox = await db
    .selectFrom('inbox')
    .select((eb) => ['module', eb.fn.min<number>('received_at').as('oldest'), eb.fn.countAll<number>().as('count')])
    .where('module', 'in', [...modules])
    .where('processed_at', 'is', null)
    .groupBy('module')
    .execute();
  const byModule = new Map(inbox.map((r) => [r.module, { oldest: Number(r.oldest), count: Number(r.count) }]));
  const queues = await queueAges(modules.flatMap((m) => queuesOf[m] ?? []));
  return modules.map((module) => {
    const entries = byModule.get(module);
    let oldest = entries?.oldest ?? now;
    let waiting = 0;
    for (const queue of queuesOf[module] ?? []) {
      const q = queues.get(queue);
      if (!q) continue;
      oldest = Math.min(oldest, q.enqueuedAt);
      waiting += q.count;
    }
    return { module, lagSeconds: Math.max(0, (now - oldest) / 1000), unprocessed: entries?.count ?? 0, waitingInQueues: waiting };
  });
}
