import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SqlStore } from '../../shared/platform/sql/database';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { DIALECTS, skipDialect } from '../support/databases';
import { aStackPromotion, outboxEvents, testServiceOptions } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

const ALL = { kind: 'all' } as const;
const TENANTS = ['tenant-a', 'tenant-b'];
const PROMOTIONS = 8;

/**
 * Promotion ids are unique per tenant, not across tenants (issue 31): two tenants sending promotions of the same ids,
 * each delivered twice under new messageIds to two hosts at once, get one run per tenant and id, each with its own
 * messages; none is taken for the other tenant's duplicate. The store decides it (a unique key on tenant and id), so
 * on PostgreSQL the two services have pools of their own on one schema, as two Functions instances on one database.
 */
for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`promotion ids per tenant on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-promotion-ids-', stackCopies: 1 });
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

    it('when two tenants send promotions of the same ids, each twice to two hosts at once, then each tenant has one run per id, and the resends are duplicates of its own run', async () => {
      // Arrange: the same promotion ids, environments and stacks for both tenants.
      const promotions = Array.from({ length: PROMOTIONS }, (_, i) => {
        const base = aStackPromotion(fixture.example.repository, 'development', { environmentId: `env-ids-${i}` });
        return TENANTS.map((tenantId) => ({ ...base, promotionId: `prom-shared-${dialect}-${i}`, tenantId }));
      }).flat();

      // Act: every promotion to both hosts at once, under two messageIds.
      const outcomes = await Promise.all(
        promotions.flatMap((promotion, i) => services.map((service, host) => service.intake({ messageId: `msg-${dialect}-${i}-${host}`, body: promotion }))),
      );

      // Assert
      const runs = new Map<string, string>();
      promotions.forEach((promotion, i) => {
        const pair = outcomes.slice(2 * i, 2 * i + 2);
        expect(pair.map((o) => o.outcome).sort(), `${promotion.tenantId} ${promotion.promotionId}`).toEqual(['accepted', 'duplicate']);
        const [first, other] = pair.map((o) => ('run' in o ? o.run : undefined));
        expect(first?.id).toBe(other?.id);
        expect(first).toMatchObject({ tenant: promotion.tenantId, promotionId: promotion.promotionId });
        runs.set(`${promotion.tenantId}/${promotion.promotionId}`, first?.id ?? '');
      });
      expect(new Set(runs.values()).size).toBe(promotions.length);
      for (const tenant of TENANTS) {
        const page = await services[0]!.listRuns({ kind: 'one', tenant }, { limit: 1000 });
        expect(page.items.filter((r) => r.promotionId.startsWith(`prom-shared-${dialect}-`))).toHaveLength(PROMOTIONS);
      }
      // The first one of each tenant announced itself once; no run answered for the other tenant's id.
      for (const runId of runs.values()) {
        const detail = await services[0]!.getRun(ALL, runId);
        expect(detail.run.state).toBe('queued');
        expect((await outboxEvents(fixture.database.store, runId)).filter((e) => e.type === 'ProvisioningFailed')).toEqual([]);
      }
    });
  });
}
