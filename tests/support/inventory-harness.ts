import { afterAll, beforeAll } from 'vitest';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import type { SqlDialect } from '../../shared/platform/sql/dialect';
import { ManualClock } from '../../shared/platform/time/clock';
import type { InventoryService } from '../../shared/inventory/inventory.service';
import { createTestDatabase, skipDialect, type TestDatabase } from './databases';
import { inventoryOver } from './inventory';

// Apart from ./inventory (which the drift bench imports): vitest's hooks load only inside vitest.

/** What `inventoryOnDialect` sets up for a describe block; its members are there once the block's tests run. */
export interface InventoryHarness {
  readonly server: RunningTableServer;
  readonly database: TestDatabase;
  readonly clock: ManualClock;
  readonly inventory: InventoryService;
  readonly cloud: LocalCloud;
}

/**
 * An inventory service for the tests of one describe block on `dialect` (`inventoryOver` with `overrides`): a Table
 * server, a test database and a clock at 2026-06-01, made before the block's tests and removed after them.
 */
export function inventoryOnDialect(dialect: SqlDialect, overrides: Parameters<typeof inventoryOver>[3] = {}): InventoryHarness {
  const harness = {} as { -readonly [K in keyof InventoryHarness]: InventoryHarness[K] };
  beforeAll(async () => {
    if (skipDialect(dialect)) return;
    harness.server = await startTableServer();
    harness.database = await createTestDatabase(dialect);
    harness.clock = new ManualClock('2026-06-01T00:00:00Z');
    Object.assign(harness, inventoryOver(harness.database.store, harness.server.connectionString, harness.clock, overrides));
  });
  afterAll(async () => {
    await harness.database?.drop();
    await harness.server?.close();
  });
  return harness;
}
