import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LocalCloud } from '../../shared/platform/cloud/local-cloud';
import { createLocalExternalServices, type LocalExternalServices } from '../../shared/provisioning/local-external-services.adapter';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { refusal } from '../support/refusal';
import { aStackPromotion, outboxEvents, testServiceOptions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

/**
 * The DeliveryHost at intake (issue 32, part 7): a promotion's release is what the DeliveryHost says it is, never
 * what the message says; a promotion whose desired state (repository, commit, path) is not its release's is a
 * rejected run with `PROVISIONING.RELEASE_MISMATCH`, one the DeliveryHost did not make `PROVISIONING.RELEASE_UNKNOWN`.
 * Releases are per tenant. The local DeliveryHost's releases come from `<state dir>/delivery.json`.
 */
const OTHER_TENANT = 'other-team';

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`promotions checked against their DeliveryHost release on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-delivery-', stackCopies: 12, stateDirName: 'example-state' });
    const { clock, freshStack } = fixture;
    let database: TestDatabase;
    let example: ProvisioningExample;
    let cloud: LocalCloud;
    let root: string;
    /** The example's first commit, and a second one (another state of the same repository). */
    let first: string;
    let second: string;
    let dirs = 0;
    let messages = 0;

    beforeAll(async () => {
      ({ database, example, cloud, root } = fixture);
      first = example.repository.commit;
      fs.writeFileSync(join(example.source, 'NOTES.md'), 'a second state of the desired state\n');
      second = (await example.commit()).commit;
    });

    let current: LocalExternalServices | undefined;
    afterEach(async () => {
      await current?.setReachable('delivery', true);
    });

    /** A provisioning service whose local DeliveryHost made `releases` (no file at all when undefined). */
    function host(releases?: readonly Record<string, string>[]) {
      const stateDir = join(root, `state-${++dirs}`);
      writeExampleReferences(stateDir);
      if (releases) fs.writeFileSync(join(stateDir, 'delivery.json'), JSON.stringify({ releases }));
      const services = createLocalExternalServices({ store: database.store, clock, stateDir });
      current = services;
      const service: ProvisioningService = createProvisioningService({ ...testServiceOptions(database.store, clock, cloud, root), services, knowsTenant: () => Promise.resolve(true) });
      return { service, services };
    }

    /** A release of the example's project at `commit`, as delivery.json lists it. */
    const release = (version: string, commit: string, extra: Record<string, string> = {}) => ({ name: 'demo-app', version, repository: example.repository.url, commit, path: 'app', ...extra });

    /** A development promotion of release `version` naming `commit`, for `tenant`, onto a stack and environment of its own. */
    function promotion(version: string, commit: string, tenant = 'demo-team'): PromotionApproved {
      const base = aStackPromotion(example.repository, 'development', { stack: freshStack('development') });
      return { ...base, promotionId: `prm-${dialect}-${++messages}`, tenantId: tenant, release: { name: 'demo-app', version }, desiredState: { ...base.desiredState, commit } };
    }
    const intake = (service: ProvisioningService, body: PromotionApproved, lastDelivery?: boolean) =>
      service.intake({ messageId: `msg-${dialect}-${++messages}`, body, ...(lastDelivery !== undefined ? { lastDelivery } : {}) });

    it('when the promotion names its release\'s desired state, then it is accepted', async () => {
      const { service } = host([release('2.0.0', first)]);

      const result = await intake(service, promotion('2.0.0', first));

      expect(result).toMatchObject({ outcome: 'accepted', run: { state: 'queued', release: { name: 'demo-app', version: '2.0.0' } } });
    });

    it('when the promotion names another commit than its release, then it is a rejected run with RELEASE_MISMATCH, naming the field, and one ProvisioningFailed', async () => {
      const { service } = host([release('2.0.0', first)]);

      const result = await intake(service, promotion('2.0.0', second));

      expect(result).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH' });
      if (result.outcome !== 'rejected' || !result.run) throw new Error('expected a rejected run');
      expect(result.reason).toContain(`commit ${second} where the release has ${first}`);
      expect(result.run).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.RELEASE_MISMATCH' } });
      const failed = (await outboxEvents(database.store, result.run.id)).filter((e) => e.type === 'ProvisioningFailed');
      expect(failed.map((e) => e.data)).toEqual([expect.objectContaining({ state: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH' })]);
    });

    it('when the promotion names another path or repository than its release, then it is refused with RELEASE_MISMATCH', async () => {
      const { service } = host([release('2.1.0', first, { path: 'pools' }), release('2.2.0', first, { repository: 'https://git.example.com/team/elsewhere.git' })]);

      const path = await intake(service, promotion('2.1.0', first));
      const repository = await intake(service, promotion('2.2.0', first));

      expect(path).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH', reason: expect.stringContaining('path app where the release has pools') });
      expect(repository).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH', reason: expect.stringContaining('where the release has https://git.example.com/team/elsewhere.git') });
    });

    it('when the DeliveryHost made no such release, then the promotion is refused with RELEASE_UNKNOWN', async () => {
      const { service } = host([release('2.0.0', first)]);

      const result = await intake(service, promotion('9.9.9', first));

      expect(result).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_UNKNOWN', run: { state: 'rejected' } });
    });

    it('when two tenants have a release of the same name and version, then each tenant\'s promotion is checked against its own', async () => {
      const { service } = host([release('3.0.0', first, { tenant: 'demo-team' }), release('3.0.0', second, { tenant: OTHER_TENANT })]);

      const ownA = await intake(service, promotion('3.0.0', first));
      const othersA = await intake(service, promotion('3.0.0', second));
      const ownB = await intake(service, promotion('3.0.0', second, OTHER_TENANT));
      const othersB = await intake(service, promotion('3.0.0', first, OTHER_TENANT));

      expect(ownA.outcome).toBe('accepted');
      expect(othersA).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH' });
      expect(ownB.outcome).toBe('accepted');
      expect(othersB).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH' });
    });

    it('when the local DeliveryHost has no delivery.json, then it pins no release and a promotion is checked by the rest of intake only', async () => {
      const { service } = host();

      const result = await intake(service, promotion('4.0.0', second));

      expect(result.outcome).toBe('accepted');
    });

    it('when the DeliveryHost does not answer, then the message is delivered again; on its last delivery the promotion is rejected with DELIVERY_UNAVAILABLE', async () => {
      const { service, services } = host([release('2.0.0', first)]);
      await services.setReachable('delivery', false);
      const body = promotion('2.0.0', first);
      const messageId = `msg-${dialect}-${++messages}`;

      const early = await refusal(service.intake({ messageId, body, lastDelivery: false }));
      const last = await service.intake({ messageId, body, lastDelivery: true });

      expect(early).toMatchObject({ code: 'PROVISIONING.DELIVERY_UNAVAILABLE', kind: 'unavailable' });
      expect(last).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.DELIVERY_UNAVAILABLE' });
    });
  });
}
