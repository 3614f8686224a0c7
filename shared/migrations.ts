import { capacityMigrations } from './capacity/capacity.migrations';
import { inventoryMigrations } from './inventory/inventory.migrations';
import { busMigrations } from './platform/bus/bus.migrations';
import { outboxMigrations } from './platform/bus/outbox';
import { localCloudMigrations } from '../local/cloud/local-cloud.migrations';
import { durableMigrations } from '../local/durable/durable.migrations';
import { localIacMigrations } from '../local/engine/stack-state.migrations';
import type { MigrationSource } from './platform/sql/migrations';
import { storeEpochMigrations } from './platform/sql/store-epoch';
import { provisioningMigrations } from './provisioning/provisioning.migrations';

/** Every migration source of the product, platform first. A module adds its source here. */
export const allMigrations: readonly MigrationSource[] = [outboxMigrations, busMigrations, storeEpochMigrations, capacityMigrations, durableMigrations, provisioningMigrations, localCloudMigrations, localIacMigrations, inventoryMigrations];
