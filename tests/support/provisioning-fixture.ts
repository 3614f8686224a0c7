import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import type { SqlDialect } from '../../shared/platform/sql/dialect';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, type TestDatabase } from './databases';
import { provisioningExample, writeExampleReferences, type ProvisioningExample } from './provisioning';

/** What a provisioning test file works on; the fields are set once its `beforeAll` ran. */
export interface ProvisioningFixture {
  database: TestDatabase;
  example: ProvisioningExample;
  cloud: LocalCloud;
  /** A temporary directory of the file's own, removed after it. */
  root: string;
  /** The example's state dir, inside `root`. */
  stateDir: string;
  readonly clock: ManualClock;
  /** A stack of the example no other test of this file uses. */
  readonly freshStack: (tier: 'development' | 'production') => string;
}

/**
 * A fresh test database of `dialect`, the example repository with `stackCopies` copies of each stack, and the local
 * cloud on that database, made before a file's tests and removed after them. Call it inside the file's `describe`.
 */
export function provisioningFixture(
  dialect: SqlDialect,
  options: { readonly prefix: string; readonly stackCopies: number; readonly stateDirName?: string; readonly references?: boolean },
): ProvisioningFixture {
  let stacks = 0;
  const fixture = {
    clock: new ManualClock('2026-03-01T09:00:00Z'),
    freshStack: (tier: 'development' | 'production') => `${tier}-${++stacks}`,
  } as ProvisioningFixture;
  beforeAll(async () => {
    fixture.database = await createTestDatabase(dialect);
    fixture.root = fs.mkdtempSync(join(tmpdir(), options.prefix));
    fixture.stateDir = join(fixture.root, options.stateDirName ?? 'state');
    fixture.example = await provisioningExample(fixture.root, fixture.stateDir, options.stackCopies);
    if (options.references) writeExampleReferences(fixture.stateDir);
    fixture.cloud = createLocalCloud({ store: fixture.database.store, clock: fixture.clock, ids: randomIds });
  });
  afterAll(async () => {
    await fixture.database?.drop();
    if (fixture.root) fs.rmSync(fixture.root, { recursive: true, force: true });
  });
  return fixture;
}
