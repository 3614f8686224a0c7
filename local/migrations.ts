import { allMigrations, retiredTwinMigrations } from '../shared/migrations';
import type { MigrationSource } from '../shared/platform/sql/migrations';
import { localCloudMigrations } from './cloud/local-cloud.migrations';
import { durableMigrations } from './durable/durable.migrations';
import { localIacMigrations } from './engine/stack-state.migrations';

/** The local host's store: the product's migrations and the twin's (the Durable task hub, the local cloud, stack states). */
export const localHostMigrations: readonly MigrationSource[] = [...allMigrations.filter((source) => source !== retiredTwinMigrations), durableMigrations, localCloudMigrations, localIacMigrations];
