import { beforeAll, describe, expect, it } from 'vitest';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { DEFAULT_APPROVAL_POLICY, type EnvironmentApprovalRule } from '../../shared/provisioning/run';
import { DIALECTS, skipDialect } from '../support/databases';
import { refusal } from '../support/refusal';
import { aStackPromotion, testServiceOptions } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

const ALL = { kind: 'all' } as const;
const REQUESTER = 'release-manager';

/**
 * Four eyes (issue 16, rule 4): where an environment needs a second person (default: the production tier;
 * `secondPersonTiers`, and `secondPerson` per environment), whoever asked for a run (its `requestedBy`, or an operator
 * who asked for a fresh plan of it) cannot approve it: 403 `PROVISIONING.SELF_APPROVAL`, recorded on the run.
 */
for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`four eyes on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-four-eyes-', stackCopies: 6, references: true });
    const rules: Record<string, EnvironmentApprovalRule> = {};
    const expiring: Record<string, number> = {};
    let service: ProvisioningService;
    let messages = 0;

    beforeAll(() => {
      const { database, clock, cloud, root } = fixture;
      service = createProvisioningService({
        ...testServiceOptions(database.store, clock, cloud, root),
        approval: { ...DEFAULT_APPROVAL_POLICY, byEnvironment: rules },
        planExpiry: { defaultMs: 24 * 3600_000, byEnvironment: expiring },
      });
    });

    /** A run of `tier` requested by REQUESTER, planned and waiting for its approval. */
    async function awaitingApproval(tier: 'development' | 'production', environment: { id: string; rule?: EnvironmentApprovalRule; expiryMs?: number }) {
      if (environment.rule) rules[environment.id] = environment.rule;
      if (environment.expiryMs) expiring[environment.id] = environment.expiryMs;
      const promotion = aStackPromotion(fixture.example.repository, tier, { stack: fixture.freshStack(tier), environmentId: environment.id, overrides: { requestedBy: REQUESTER } });
      const intake = await service.intake({ messageId: `msg-${dialect}-${++messages}`, body: promotion });
      if (intake.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(intake)}`);
      expect(await service.plan(intake.run.id)).toMatchObject({ outcome: 'awaiting-approval' });
      return (await service.getRun(ALL, intake.run.id)).run;
    }
    const approveAs = async (runId: string, by: string) => {
      const planDigest = (await service.getRun(ALL, runId)).run.planDigest ?? '';
      return service.approve(ALL, runId, { planDigest, by });
    };

    it('when the requester of a production run approves it, then 403 SELF_APPROVAL is answered and recorded, and another person\'s approval applies it', async () => {
      // Arrange
      const run = await awaitingApproval('production', { id: 'env-four-eyes-prod' });

      // Act
      const refused = await refusal(approveAs(run.id, REQUESTER));

      // Assert
      expect(refused).toMatchObject({ code: 'PROVISIONING.SELF_APPROVAL', kind: 'forbidden', details: { runId: run.id, by: REQUESTER } });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.state).toBe('awaiting-approval');
      expect(detail.decision).toBeUndefined();
      expect(detail.refusedApprovals).toEqual([{ by: REQUESTER, planDigest: run.planDigest, code: 'PROVISIONING.SELF_APPROVAL', reason: refused.message, at: expect.any(Date) }]);
      expect(await approveAs(run.id, 'second-approver')).toMatchObject({ state: 'applying' });
      expect(await service.apply(run.id)).toEqual({ outcome: 'ended', state: 'applied' });
      expect((await service.getRun(ALL, run.id)).decision).toMatchObject({ decision: 'approved', by: 'second-approver' });
    });

    it('when an operator replans a stale production run, then neither they nor the requester may approve the fresh plan', async () => {
      // Arrange: a plan that expires after a minute, left to go stale, then replanned by op-replan.
      const run = await awaitingApproval('production', { id: 'env-four-eyes-replan', expiryMs: 60_000 });
      fixture.clock.advance(61_000);
      expect(await service.afterApproval(run.id, false)).toMatchObject({ outcome: 'stale' });
      await service.replan(ALL, run.id, 'op-replan');
      expect(await service.plan(run.id)).toMatchObject({ outcome: 'awaiting-approval' });

      // Act
      const byReplanner = await refusal(approveAs(run.id, 'op-replan'));
      const byRequester = await refusal(approveAs(run.id, REQUESTER));

      // Assert
      expect([byReplanner.code, byRequester.code]).toEqual(['PROVISIONING.SELF_APPROVAL', 'PROVISIONING.SELF_APPROVAL']);
      expect((await service.getRun(ALL, run.id)).refusedApprovals.map((r) => r.by)).toEqual(['op-replan', REQUESTER]);
      expect(await approveAs(run.id, 'third-person')).toMatchObject({ state: 'applying' });
    });

    it('when an environment says otherwise, then it holds over the tier: a requester approves where secondPerson is false, and is refused in development where it is true', async () => {
      // Arrange
      const relaxed = await awaitingApproval('production', { id: 'env-four-eyes-relaxed', rule: { secondPerson: false } });
      const strict = await awaitingApproval('development', { id: 'env-four-eyes-strict', rule: { always: true, secondPerson: true } });

      // Act
      const approved = await approveAs(relaxed.id, REQUESTER);
      const refused = await refusal(approveAs(strict.id, REQUESTER));

      // Assert
      expect(approved.state).toBe('applying');
      expect(refused.code).toBe('PROVISIONING.SELF_APPROVAL');
    });

    it('when the requester of a development run approves it (its plan needs approval, the tier no second person), then the approval counts', async () => {
      // Arrange: every development plan of this environment needs approval, by its rule.
      const run = await awaitingApproval('development', { id: 'env-four-eyes-dev', rule: { always: true } });

      // Act
      const approved = await approveAs(run.id, REQUESTER);

      // Assert
      expect(approved.state).toBe('applying');
      expect((await service.getRun(ALL, run.id)).refusedApprovals).toEqual([]);
    });
  });
}
