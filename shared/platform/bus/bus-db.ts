import type { Kysely } from 'kysely';
import type { AnyDb } from '../sql/database';
import type { BusTables } from './bus.tables';
import type { OutboxTables } from './outbox';

/** The store's Kysely instance seen through the bus's own tables (the platform store knows no table types). */
export function busDb(db: AnyDb): Kysely<BusTables & OutboxTables> {
  return db as Kysely<BusTables & OutboxTables>;
}
