import type { Kysely } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { Clock } from '../time/clock';
import type { BusTables } from './bus.tables';
import { embeddedTopicPublisher, type EventPublisher } from './event-publisher';
import { serviceBusPublisher } from './service-bus-publisher';

/** Service Bus when a connection is configured (Azure), else the embedded topic in the SQL store (local host). */
export function createEventPublisher(serviceBusConnection: string, db: Kysely<BusTables>, dialect: SqlDialect, clock: Clock): EventPublisher {
  return serviceBusConnection ? serviceBusPublisher({ connection: serviceBusConnection }) : embeddedTopicPublisher(db, dialect, clock);
}
