import { beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS, skipDialect } from '../support/databases';
import { applyToCloud, specificationApplied, type TestResource } from '../support/inventory';
import { inventoryOnDialect } from '../support/inventory-harness';

/**
 * Each environment is scanned at its own interval, down to 60 s (issue 18): the timer runs every minute, and its claim
 * and the staleness of the drift status use the environment's interval, not the default. On an injected clock.
 */
const ALL = { kind: 'all' } as const;
const RESOURCES: readonly TestResource[] = [{ name: 'assets', type: 'local:storage:Bucket', properties: { name: 'demo-assets' } }];
const MINUTE = 60_000;

describe.each(DIALECTS)('drift scan cadence on %s', (dialect) => {
  // `production` (by name) every minute; everything else at the 5-minute default.
  const harness = inventoryOnDialect(dialect, { scanInterval: { defaultMs: 5 * MINUTE, byEnvironment: { production: MINUTE } } });
  beforeAll(async () => {
    if (skipDialect(dialect)) return;
    for (const [id, name] of [['env-prod', 'production'], ['env-dev', 'development']] as const) {
      await applyToCloud(harness.cloud, `stack-${id}`, RESOURCES);
      await harness.inventory.recordSpecification({ id: `event-${id}`, time: harness.clock.now().toISOString(), data: specificationApplied({ id, stack: `stack-${id}`, name }, RESOURCES) });
    }
  });

  /** The environments the timer's round scanned, by id. */
  const round = async () => (await harness.inventory.scanDue()).map((r) => r.environmentId).sort();

  it.skipIf(skipDialect(dialect))('when the timer runs every minute for five minutes, then the 60-second environment is scanned each minute and the default one once', async () => {
    // Act
    const rounds: string[][] = [];
    for (let minute = 0; minute <= 5; minute++) {
      rounds.push(await round());
      harness.clock.advance(MINUTE);
    }

    // Assert
    expect(rounds).toEqual([['env-dev', 'env-prod'], ['env-prod'], ['env-prod'], ['env-prod'], ['env-prod'], ['env-dev', 'env-prod']]);
  });

  it.skipIf(skipDialect(dialect))('when neither is scanned for two minutes and a second, then the 60-second environment is unknown and the default one still in sync', async () => {
    // Arrange
    await round();

    // Act
    harness.clock.advance(2 * MINUTE + 1000);

    // Assert
    expect((await harness.inventory.getEnvironment(ALL, 'env-prod')).drift.status).toBe('unknown');
    expect((await harness.inventory.getEnvironment(ALL, 'env-dev')).drift.status).toBe('in-sync');
  });
});
