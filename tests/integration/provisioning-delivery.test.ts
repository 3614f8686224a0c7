import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import type { SqlStore } from '../../shared/platform/sql/database';
import { inTransaction } from '../../shared/platform/sql/transaction';
import { enqueueDeliveryReports, findReport } from '../../shared/provisioning/delivery-reports.repository';
import type { ExternalServices, OutcomeReport } from '../../shared/provisioning/external-services.client';
import { createLocalExternalServices, type LocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { refusal } from '../support/refusal';
import { aStackPromotion, outboxEvents, testServiceOptions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

/**
 * The DeliveryHost at intake (issue 32, part 7): a promotion's release is what the DeliveryHost says it is, never
 * what the message says; a promotion whose desired state (repository, commit, path) is not its release's is a
 * rejected run with `PROVISIONING.RELEASE_MISMATCH`, one the DeliveryHost did not make `PROVISIONING.RELEASE_UNKNOWN`.
 * Releases are per tenant. The local DeliveryHost's releases come from `<state dir>/delivery.json`. Every promotion run
 * that ends is reported to the DeliveryHost once, sent until acknowledged.
 */
const ALL = { kind: 'all' } as const;
const OTHER_TENANT = 'other-team';

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`promotions checked against their DeliveryHost release on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-delivery-', stackCopies: 14, stateDirName: 'example-state' });
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

    /**
     * A provisioning service whose local DeliveryHost made `releases` (no file at all when undefined); `reported` lists
     * the run of every report it is sent, as the DeliveryHost receives them.
     */
    function host(releases?: readonly Record<string, string>[], store: SqlStore = database.store, unpinnedReleases: 'refuse' | 'allow' = 'allow') {
      const stateDir = join(root, `state-${++dirs}`);
      writeExampleReferences(stateDir);
      if (releases) fs.writeFileSync(join(stateDir, 'delivery.json'), JSON.stringify({ releases }));
      const services = createLocalExternalServices({ store, clock, stateDir });
      current = services;
      const reported: string[] = [];
      const counted: ExternalServices = {
        ...services,
        delivery: {
          resolveRelease: (tenant, named) => services.delivery.resolveRelease(tenant, named),
          reportOutcome: (report) => services.delivery.reportOutcome(report).then((id) => (reported.push(report.runId), id)),
        },
      };
      const service: ProvisioningService = createProvisioningService({ ...testServiceOptions(store, clock, cloud, root), services: counted, knowsTenant: () => Promise.resolve(true), unpinnedReleases });
      return { service, services, reported };
    }
    const reportOf = async (services: LocalExternalServices, tenant: string, runId: string): Promise<OutcomeReport[]> => [...(await services.reportsOf(tenant, runId))];
    const rowOf = (tenant: string, runId: string) => findReport(provisioningDb(database.store.db), tenant, runId);

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

    it('when the DeliveryHost answers a release without its desired state, then a host that promotes pinned releases only (every host but the local one) refuses it with RELEASE_NOT_PINNED', async () => {
      const strict = host(undefined, database.store, 'refuse');
      const local = host(undefined, database.store, 'allow');

      const refused = await intake(strict.service, promotion('4.0.0', first));
      const taken = await intake(local.service, promotion('4.0.0', first));

      expect(refused).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.RELEASE_NOT_PINNED', run: { state: 'rejected' } });
      expect(taken).toMatchObject({ outcome: 'accepted' });
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

    it('when a promotion run is applied, then the DeliveryHost is told once: applied, with its plan and apply receipts\' digests', async () => {
      const { service, services, reported } = host([release('5.0.0', first)]);
      const accepted = await intake(service, promotion('5.0.0', first));
      if (accepted.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(accepted)}`);
      const runId = accepted.run.id;
      await service.plan(runId);
      await service.apply(runId);

      await service.sendDeliveryReports();
      await service.sendDeliveryReports();

      const detail = await service.getRun(ALL, runId);
      expect(detail.run.state).toBe('applied');
      expect(reported.filter((id) => id === runId)).toHaveLength(1);
      const [report, ...more] = await reportOf(services, 'demo-team', runId);
      expect(more).toEqual([]);
      expect(report).toMatchObject({
        tenant: 'demo-team',
        runId,
        promotionId: accepted.run.promotionId,
        release: { name: 'demo-app', version: '5.0.0' },
        outcome: 'applied',
        state: 'applied',
        finishedAt: detail.run.finishedAt?.toISOString(),
      });
      expect(report?.code).toBeUndefined();
      expect(report?.receipts.map((r) => r.kind)).toEqual(['plan-receipt', 'apply-receipt']);
      for (const receipt of report?.receipts ?? []) expect(receipt.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(await rowOf('demo-team', runId)).toMatchObject({ attempts: 1, acknowledgedAt: clock.now().getTime(), reportId: expect.stringMatching(/^rpt-/) });
    });

    it('when a promotion is refused at intake, then the DeliveryHost is told it failed, with the code and the reason, and no receipts', async () => {
      const { service, services } = host([release('6.0.0', first)]);
      const refused = await intake(service, promotion('6.0.0', second));
      if (refused.outcome !== 'rejected' || !refused.run) throw new Error('expected a rejected run');

      await service.sendDeliveryReports();

      expect(await reportOf(services, 'demo-team', refused.run.id)).toEqual([
        expect.objectContaining({ outcome: 'failed', state: 'rejected', code: 'PROVISIONING.RELEASE_MISMATCH', reason: refused.reason, receipts: [] }),
      ]);
    });

    it('when the DeliveryHost does not answer, then the report waits out its back-off and is sent once it answers, once', async () => {
      const { service, services, reported } = host([release('7.0.0', first)]);
      const refused = await intake(service, promotion('7.0.0', second));
      if (refused.outcome !== 'rejected' || !refused.run) throw new Error('expected a rejected run');
      const runId = refused.run.id;
      await services.setReachable('delivery', false);

      await service.sendDeliveryReports();
      const waiting = await rowOf('demo-team', runId);
      await services.setReachable('delivery', true);
      await service.sendDeliveryReports();
      const stillWaiting = await rowOf('demo-team', runId);
      clock.advance(5_000);
      await service.sendDeliveryReports();
      await service.sendDeliveryReports();

      expect(waiting).toMatchObject({ attempts: 1, acknowledgedAt: undefined, lastError: expect.stringContaining('PROVISIONING.DELIVERY_UNAVAILABLE'), nextAttemptAt: clock.now().getTime() });
      expect(stillWaiting?.acknowledgedAt).toBeUndefined();
      expect(reported.filter((id) => id === runId)).toHaveLength(1);
      expect(await reportOf(services, 'demo-team', runId)).toHaveLength(1);
      expect(await rowOf('demo-team', runId)).toMatchObject({ attempts: 2, lastError: undefined });
    });

    it('when the DeliveryHost took a report in but its answer was lost, then the report is sent again and the DeliveryHost keeps the one report, under its one id', async () => {
      const { service, services } = host([release('7.5.0', first)]);
      const refused = await intake(service, promotion('7.5.0', second));
      if (refused.outcome !== 'rejected' || !refused.run) throw new Error('expected a rejected run');
      const runId = refused.run.id;
      // The first send reaches the DeliveryHost, and its answer is lost on the way back.
      const answered: string[] = [];
      const lossy = createProvisioningService({
        ...testServiceOptions(database.store, clock, cloud, root),
        services: {
          ...services,
          delivery: { ...services.delivery, reportOutcome: (report) => services.delivery.reportOutcome(report).then((id) => (answered.push(id), Promise.reject(new Error('the answer was lost')))) },
        },
        knowsTenant: () => Promise.resolve(true),
      });

      await lossy.sendDeliveryReports();
      const lost = await rowOf('demo-team', runId);
      clock.advance(5_000);
      await service.sendDeliveryReports();

      expect(lost).toMatchObject({ attempts: 1, acknowledgedAt: undefined, lastError: 'the answer was lost' });
      const kept = await reportOf(services, 'demo-team', runId);
      expect(kept).toHaveLength(1);
      expect(answered).toHaveLength(1);
      expect(await rowOf('demo-team', runId)).toMatchObject({ attempts: 2, reportId: answered[0] });
    });

    it('when an operator cancels a queued promotion run, then its report is made with that end, not before', async () => {
      const { service } = host();
      const accepted = await intake(service, promotion('8.0.0', first));
      if (accepted.outcome !== 'accepted') throw new Error('expected an accepted run');

      // A promotion run's report is made with its terminal event: none before it ends.
      expect(await rowOf('demo-team', accepted.run.id)).toBeUndefined();
      await service.cancel(ALL, accepted.run.id, 'operator');
      expect(await rowOf('demo-team', accepted.run.id)).toMatchObject({ attempts: 0 });
    });
  });

  describe.skipIf(skipDialect(dialect))(`which runs are reported on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-delivery-which-', stackCopies: 1 });

    it('when runs of a pool resize or a reconciliation end, then only the promotion\'s run is reported, and a second terminal event of it adds no second report', async () => {
      const ended = (runId: string, trigger: string) => ({ type: 'ProvisioningFailed' as const, tenant: 'demo-team', correlationId: runId, data: { runId, trigger, state: 'failed' } });
      const db = provisioningDb(fixture.database.store.db);

      await inTransaction(db, (trx) => enqueueDeliveryReports(trx, [ended('run-resize', 'pool-resize'), ended('run-reconcile', 'reconciliation'), ended('run-promoted', 'promotion')], 1000));
      await inTransaction(db, (trx) => enqueueDeliveryReports(trx, [ended('run-promoted', 'promotion')], 2000));

      expect(await findReport(db, 'demo-team', 'run-resize')).toBeUndefined();
      expect(await findReport(db, 'demo-team', 'run-reconcile')).toBeUndefined();
      expect(await findReport(db, 'demo-team', 'run-promoted')).toMatchObject({ attempts: 0, nextAttemptAt: 1000 });
    });
  });

  describe.skipIf(skipDialect(dialect))(`promotion reports sent by two hosts at once on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-delivery-hosts-', stackCopies: 1, stateDirName: 'example-state' });
    let second: SqlStore;
    afterAll(async () => {
      await second?.close();
    });

    it('when two hosts send the pending reports at once, then the DeliveryHost is sent each run\'s report exactly once', async () => {
      // Arrange: 12 refused promotions (each a run that ended), and two hosts on the one database.
      const { database, clock, cloud, root, example } = fixture;
      second = database.connectAgain();
      const stateDir = join(root, 'state-hosts');
      writeExampleReferences(stateDir);
      fs.writeFileSync(join(stateDir, 'delivery.json'), JSON.stringify({ releases: [] }));
      const reported: string[] = [];
      const services = [database.store, second].map((store) => {
        const local = createLocalExternalServices({ store, clock, stateDir });
        const counted: ExternalServices = { ...local, delivery: { ...local.delivery, reportOutcome: (report) => local.delivery.reportOutcome(report).then((id) => (reported.push(report.runId), id)) } };
        return createProvisioningService({ ...testServiceOptions(store, clock, cloud, root), services: counted, knowsTenant: () => Promise.resolve(true) });
      });
      const runs: string[] = [];
      for (let i = 0; i < 12; i++) {
        const result = await services[0]!.intake({ messageId: `msg-hosts-${dialect}-${i}`, body: { ...aStackPromotion(example.repository, 'development', { environmentId: `env-hosts-${i}` }), promotionId: `prm-hosts-${dialect}-${i}` } });
        if (result.outcome !== 'rejected' || !result.run) throw new Error(`expected a refused promotion: ${JSON.stringify(result)}`);
        runs.push(result.run.id);
      }

      // Act
      const passes = await Promise.all([...services, ...services].map((service) => service.sendDeliveryReports()));

      // Assert
      expect([...reported].sort()).toEqual([...runs].sort());
      expect(passes.reduce((sum, pass) => sum + pass.sent, 0)).toBe(runs.length);
    });
  });
}
