import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SqlStore } from '../../shared/platform/sql/database';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { DIALECTS, skipDialect } from '../support/databases';
import { aStackPromotion, outboxEvents, testServiceOptions } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

const ENVIRONMENTS = 12;

/**
 * An environment is bound to one stack by its first run (issue 16): when two hosts take in the first promotions of an
 * environment at the same moment, naming different stacks, exactly one binds it and the other is a rejected run with
 * `PROVISIONING.STACK_MISMATCH`; neither is lost, none fails with an error. On PostgreSQL the two services have pools
 * of their own on one schema, as two Functions instances on one Azure SQL.
 */
for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`environment bindings taken in at once on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-binding-', stackCopies: 2 });
    const services: ProvisioningService[] = [];
    let second: SqlStore;

    beforeAll(() => {
      const { database, clock, cloud, root } = fixture;
      second = database.connectAgain();
      for (const store of [database.store, second]) services.push(createProvisioningService({ ...testServiceOptions(store, clock, cloud, root), knowsTenant: () => Promise.resolve(true) }));
    });
    afterAll(async () => {
      await second?.close();
    });

    it('when the first promotions of 12 environments, each naming another stack, reach two hosts at once, then each environment has one accepted run and one STACK_MISMATCH, each with its one event', async () => {
      // Arrange
      const pairs = Array.from({ length: ENVIRONMENTS }, (_, i) =>
        (['development-1', 'development-2'] as const).map((stack) => aStackPromotion(fixture.example.repository, 'development', { stack, environmentId: `env-binding-${i}` })),
      );

      // Act
      const outcomes = await Promise.all(
        pairs.flatMap((pair, i) => pair.map((promotion, j) => services[j]!.intake({ messageId: `msg-${dialect}-${i}-${j}`, body: promotion }))),
      );

      // Assert
      for (let i = 0; i < ENVIRONMENTS; i++) {
        const pair = outcomes.slice(2 * i, 2 * i + 2);
        expect(pair.map((o) => o.outcome).sort(), `environment ${i}`).toEqual(['accepted', 'rejected']);
        const refused = pair.find((o) => o.outcome === 'rejected');
        expect(refused).toMatchObject({ code: 'PROVISIONING.STACK_MISMATCH' });
        for (const outcome of pair) {
          const run = 'run' in outcome ? outcome.run : undefined;
          const events = await outboxEvents(fixture.database.store, run?.id ?? '');
          expect(events.filter((e) => e.type === 'ProvisioningFailed')).toHaveLength(outcome.outcome === 'rejected' ? 1 : 0);
        }
      }
    });
  });
}
