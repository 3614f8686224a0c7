import { outboxMigrations } from './platform/bus/outbox';
import type { MigrationSource } from './platform/sql/migrations';

/** Every migration source of the product, platform first. A module adds its source here. */
export const allMigrations: readonly MigrationSource[] = [outboxMigrations];
