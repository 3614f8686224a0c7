import type { Kysely, Transaction } from 'kysely';
import type { BusTables } from '../platform/bus/bus.tables';
import type { ProvisioningTables } from './provisioning.tables';
import { type ProvisioningDb } from './stack-lock.repository';

/** Messages of the provisioning subscription that were not promotions, recorded with why; and the inbox's typing. */
type Executor = ProvisioningDb | Transaction<ProvisioningTables>;

export interface Rejection {
  readonly messageId: string;
  readonly promotionId?: string;
  readonly tenantId?: string;
  readonly code: string;
  readonly reason: string;
  readonly problems: readonly { field: string; message: string }[];
  readonly receivedAt: Date;
}

/** Records a message that was not a promotion; false when this message was recorded before (a redelivery). */
export async function insertRejection(trx: Executor, rejection: Rejection): Promise<boolean> {
  const known = await trx.selectFrom('provisioning_rejections').select('message_id').where('message_id', '=', rejection.messageId).executeTakeFirst();
  if (known) return false;
  await trx
    .insertInto('provisioning_rejections')
    .values({
      message_id: rejection.messageId,
      promotion_id: rejection.promotionId ?? null,
      tenant_id: rejection.tenantId ?? null,
      code: rejection.code,
      reason: rejection.reason,
      problems: JSON.stringify(rejection.problems),
      received_at: rejection.receivedAt.getTime(),
    })
    .execute();
  return true;
}

export async function findRejection(db: Executor, messageId: string): Promise<Rejection | undefined> {
  const row = await db.selectFrom('provisioning_rejections').selectAll().where('message_id', '=', messageId).executeTakeFirst();
  if (!row) return undefined;
  return {
    messageId: row.message_id,
    ...(row.promotion_id !== null ? { promotionId: row.promotion_id } : {}),
    ...(row.tenant_id !== null ? { tenantId: row.tenant_id } : {}),
    code: row.code,
    reason: row.reason,
    problems: JSON.parse(row.problems) as Rejection['problems'],
    receivedAt: new Date(Number(row.received_at)),
  };
}

/**
 * The same connection (or transaction) typed for the platform's inbox functions: the inbox is one of the
 * provisioning tables, the embedded queue's tables are not, so the types need a cast.
 */
export function inboxOf(db: Executor): Kysely<BusTables> {
  return db as unknown as Kysely<BusTables>;
}
