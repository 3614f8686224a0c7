import type { Twin } from '../shared/deps';
import { createLocalCloud } from './cloud/local-cloud';
import { createLocalCloudObserver } from './cloud/local-cloud-observer.adapter';
import { localIacRunner } from './engine/local-engine';
import { embeddedTopicPublisher, sqlInboxLag } from './bus/embedded-bus';
import { localHostMigrations } from './migrations';

/**
 * The local twin as the local host hands it to the composition root (shared/deps.ts `DepsOverrides.twin`): the local
 * engine over the host's store, the local cloud's observer, the embedded topic and queues, and the twin's schema. The deployed host has none.
 */
export const localTwin: Twin = {
  migrations: localHostMigrations,
  engine: ({ store, clock, ids }) => localIacRunner({ store, clock, ids }),
  observer: ({ store, clock, ids }) => createLocalCloudObserver({ cloud: createLocalCloud({ store, clock, ids }) }),
  bus: { publisher: embeddedTopicPublisher, inboxLag: sqlInboxLag },
};
