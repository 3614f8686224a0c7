import type { Kysely, Transaction } from 'kysely';
import { affectedRows, Prepared } from '../sql/prepared';
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
  const [sameKey] = (await sameKeyQuery.run(trx, { module: message.module, businessKey: message.businessKey })).rows;
  const result = await insertInboundQuery.run(trx, {
    module: message.module,
    messageId: message.messageId,
    businessKey: message.businessKey,
    now,
    // A resend of a known business key is settled on arrival; it must not count as lag.
    processedAt: sameKey ? now : null,
    outcome: sameKey ? 'duplicate-business-key' : null,
  });
  if (affectedRows(result) === 0) return { isNew: false, duplicateOf: 'message-id' };
  if (sameKey) return { isNew: false, duplicateOf: 'business-key' };
  return { isNew: true };
}

// Every inbound message runs these: built and compiled once (prepared.ts).
const sameKeyQuery = new Prepared<BusTables, 'module' | 'businessKey', { message_id: string }>((db, _dialect, p) =>
  db.selectFrom('inbox').select('message_id').where('module', '=', p('module')).where('business_key', '=', p('businessKey')),
);

// INSERT … SELECT … WHERE NOT EXISTS is the one conditional insert all three dialects share (T-SQL has no ON
// CONFLICT). Two deliveries racing past the check meet the primary key; the loser fails and is redelivered.
const insertInboundQuery = new Prepared<BusTables, 'module' | 'messageId' | 'businessKey' | 'now' | 'processedAt' | 'outcome', never>((db, _dialect, p) =>
  db
    .insertInto('inbox')
    .columns(['module', 'message_id', 'business_key', 'received_at', 'processed_at', 'outcome'])
    .expression(
      db
        .selectNoFrom((eb) => [
          eb.val(p('module')).as('module'),
          eb.val(p('messageId')).as('message_id'),
          eb.val(p('businessKey')).as('business_key'),
          eb.val(p('now')).as('received_at'),
          eb.val(p('processedAt')).as('processed_at'),
          eb.val(p('outcome')).as('outcome'),
        ])
        .where((eb) => eb.not(eb.exists(db.selectFrom('inbox').select('message_id').where('module', '=', p('module')).where('message_id', '=', p('messageId'))))),
    ),
);

const markProcessedQuery = new Prepared<BusTables, 'now' | 'outcome' | 'module' | 'messageId', never>((db, _dialect, p) =>
  db.updateTable('inbox').set({ processed_at: p('now'), outcome: p('outcome') }).where('module', '=', p('module')).where('message_id', '=', p('messageId')).where('processed_at', 'is', null),
);

/** Marks an inbound message as processed with what came of it (`applied`, `rejected`, …). */
export async function markInboundProcessed(
  trx: Db,
  message: Pick<InboundMessage, 'module' | 'messageId'> & { readonly outcome: string },
  clock: Clock,
): Promise<void> {
  await markProcessedQuery.run(trx, { now: clock.now().getTime(), outcome: message.outcome, module: message.module, messageId: message.messageId });
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
