import type { Kysely } from 'kysely';
import type { SqlDialect } from '../sql/dialect';
import type { Clock } from '../time/clock';
import type { InboxLagReader } from './bus.health';
import type { BusTables } from './bus.tables';
import type { EventPublisher } from './event-publisher';
import { serviceBusInboxLag } from './service-bus-inbox-lag';
import { serviceBusPublisher } from './service-bus-publisher';

/** A bus in the SQL store (the local host's embedded topic and queues: local/bus/embedded-bus.ts). */
export interface EmbeddedBus {
  publisher(db: Kysely<BusTables>, dialect: SqlDialect, clock: Clock): EventPublisher;
  inboxLag(db: Kysely<BusTables>, clock: Clock): InboxLagReader;
}

const NO_BUS = 'ServiceBusConnection is required: only the local host has an embedded bus';

/** Service Bus when a connection is configured (Azure), else the embedded bus the local host supplies. */
export function createEventPublisher(serviceBusConnection: string, db: Kysely<BusTables>, dialect: SqlDialect, clock: Clock, embedded?: EmbeddedBus): EventPublisher {
  if (serviceBusConnection) return serviceBusPublisher({ connection: serviceBusConnection });
  if (!embedded) throw new Error(NO_BUS);
  return embedded.publisher(db, dialect, clock);
}

/** Inbox lag from the Service Bus queues when a connection is configured (Azure), else from the embedded bus. */
export function createInboxLagReader(serviceBusConnection: string, db: Kysely<BusTables>, clock: Clock, embedded?: EmbeddedBus): InboxLagReader {
  if (serviceBusConnection) return serviceBusInboxLag({ connection: serviceBusConnection, db, clock });
  if (!embedded) throw new Error(NO_BUS);
  return embedded.inboxLag(db, clock);
}
