import type { Migration } from 'kysely';
import { capacityMigrations } from './capacity/capacity.migrations';
import { inventoryMigrations } from './inventory/inventory.migrations';
import { busMigrations } from './platform/bus/bus.migrations';
import { outboxMigrations } from './platform/bus/outbox';
import type { MigrationSource } from './platform/sql/migrations';
import { storeEpochMigrations } from './platform/sql/store-epoch';
import { provisioningMigrations } from './provisioning/provisioning.migrations';

/**
 * The local twin's migrations (local/migrations.ts) that ran in the product's store before the twin left it: a store
 * migrated then has them on record, and Kysely refuses to migrate a store whose record names a migration it is not
 * given. Here they change nothing; the local host runs the real ones in their place.
 */
export const TWIN_MIGRATION_NAMES = [
  '20261130-05-platform-durable-task-hub',
  '20261204-05-platform-durable-parents',
  '20261205-05-platform-durable-versions',
  '20261130-30-local-cloud-tables',
  '20261130-31-local-iac-stacks',
  '20261130-32-local-cloud-resources-by-urn',
  '20261201-10-local-iac-stacks-by-tenant',
  '20261201-11-local-cloud-resources-by-tenant',
] as const;

const noChange: Migration = { up: async () => undefined };
export const retiredTwinMigrations: MigrationSource = () => Object.fromEntries(TWIN_MIGRATION_NAMES.map((name) => [name, noChange]));

/** Every migration source of the product, platform first. A module adds its source here. */
export const allMigrations: readonly MigrationSource[] = [outboxMigrations, busMigrations, storeEpochMigrations, capacityMigrations, provisioningMigrations, inventoryMigrations, retiredTwinMigrations];
