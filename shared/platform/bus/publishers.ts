import type { Kysely } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { Clock } from '../time/clock';
import { sqlInboxLag, type InboxLagReader } from './bus.health';
import type { BusTables } from './bus.tables';
import { embeddedTopicPublisher, type EventPublisher } from './event-publisher';
import { serviceBusInboxLag } from './service-bus-inbox-lag';
import { serviceBusPublisher } from './service-bus-publisher';

/** Service Bus when a connection is configured (Azure), else the embedded topic in the SQL store (local host). */
export function createEventPublisher(serviceBusConnection: string, db: Kysely<BusTables>, dialect: SqlDialect, clock: Clock): EventPublisher {
  return serviceBusConnection ? serviceBusPublisher({ connection: serviceBusConnection }) : embeddedTopicPublisher(db, dialect, clock);
}

/** Inbox lag from the Service Bus queues when a connection is configured (Azure), else from the SQL store (local host). */
export function createInboxLagReader(serviceBusConnection: string, db: Kysely<BusTables>, clock: Clock): InboxLagReader {
  return serviceBusConnection ? serviceBusInboxLag({ connection: serviceBusConnection, db, clock }) : sqlInboxLag(db, clock);
}
