import * as fs from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { CloudEvent } from '../../shared/platform/bus/events';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { LOCAL_SERVICES, createLocalExternalServices, type LocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { refusal } from '../support/refusal';
import { aStackPromotion, writeExampleReferences, type ProvisioningExample, outboxEvents, testServiceOptions } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

const ALL = { kind: 'all' } as const;

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`provisioning with its external services on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-external-', stackCopies: 20, stateDirName: 'example-state' });
    const { clock, freshStack } = fixture;
    let database: TestDatabase;
    let example: ProvisioningExample;
    let cloud: LocalCloud;
    let root: string;
    let dirs = 0;

    beforeAll(() => {
      ({ database, example, cloud, root } = fixture);
    });

    let current: LocalExternalServices | undefined;
    afterEach(async () => {
      for (const name of LOCAL_SERVICES) await current?.setReachable(name, true);
    });

    /** A provisioning service with local external services over a state dir of its own (references, policies, …). */
    function host(files: { governance?: unknown; controlPlane?: unknown } = {}) {
      const stateDir = join(root, `state-${++dirs}`);
      writeExampleReferences(stateDir);
      if (files.governance) fs.writeFileSync(join(stateDir, 'governance.json'), JSON.stringify(files.governance));
      if (files.controlPlane) fs.writeFileSync(join(stateDir, 'control-plane.json'), JSON.stringify(files.controlPlane));
      const { store } = database;
      const services = createLocalExternalServices({ store, clock, stateDir });
      current = services;
      const service: ProvisioningService = createProvisioningService({ ...testServiceOptions(store, clock, cloud, root), services, knowsTenant: () => Promise.resolve(true) });
      return { service, services, stateDir };
    }

    let messages = 0;
    async function accepted(service: ProvisioningService, tier: 'development' | 'production', environmentId?: string) {
      const result = await service.intake({
        messageId: `msg-${dialect}-${++messages}`,
        body: aStackPromotion(example.repository, tier, { stack: freshStack(tier), ...(environmentId ? { environmentId } : {}) }),
      });
      if (result.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(result)}`);
      return result.run;
    }
    const eventsOf = (runId: string): Promise<CloudEvent[]> => outboxEvents(database.store, runId);
    const resourcesOf = async (stack: string) => (await cloud.list('local')).filter((r) => r.urn.startsWith(`urn:pulumi:${stack}::`));

    /** Plans, approves (as `by`) and applies a production run. */
    async function throughApproval(service: ProvisioningService, runId: string, by = 'operator-1') {
      await service.plan(runId);
      await service.approve(ALL, runId, { planDigest: (await service.getRun(ALL, runId)).run.planDigest ?? '', by });
      return service.apply(runId);
    }

    it("when the ControlPlaneApi does not answer a promotion, then its message is delivered again; on its last delivery the promotion is rejected with CONTROL_PLANE_UNAVAILABLE and one ProvisioningFailed, never dead-lettered unannounced", async () => {
      // Arrange
      const { service, services } = host();
      await services.setReachable('control-plane', false);
      const promotion = aStackPromotion(example.repository, 'development', { stack: freshStack('development') });
      const messageId = `msg-${dialect}-${++messages}`;

      // Act
      const early = await refusal(service.intake({ messageId, body: promotion, lastDelivery: false }));
      const last = await service.intake({ messageId, body: promotion, lastDelivery: true });

      // Assert
      expect(early).toMatchObject({ code: 'PROVISIONING.CONTROL_PLANE_UNAVAILABLE', kind: 'unavailable' });
      expect(last).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.CONTROL_PLANE_UNAVAILABLE' });
      if (last.outcome !== 'rejected' || !last.run) throw new Error('expected a rejected run');
      expect(last.reason).toContain("on the message's last delivery");
      const failed = (await eventsOf(last.run.id)).filter((e) => e.type === 'ProvisioningFailed');
      expect(failed).toHaveLength(1);
      expect(failed[0]?.data).toMatchObject({ code: 'PROVISIONING.CONTROL_PLANE_UNAVAILABLE', state: 'rejected', trigger: 'promotion' });
      // A redelivery after all (the settle was lost) repeats the rejection, no second run or event.
      expect(await service.intake({ messageId, body: promotion, lastDelivery: true })).toMatchObject({ outcome: 'duplicate' });
      expect((await eventsOf(last.run.id)).filter((e) => e.type === 'ProvisioningFailed')).toHaveLength(1);
    });

    it('when a policy denies the plan, then the run fails with POLICY_DENIED and the reason, one ProvisioningFailed, and nothing is applied', async () => {
      // Arrange
      const { service } = host({ governance: { policies: [{ id: 'no-dev-databases', tiers: ['development'], denyTypes: ['local:compute:Service'], reason: 'development runs no services of its own' }] } });
      const run = await accepted(service, 'development');

      // Act
      const step = await service.plan(run.id);

      // Assert
      expect(step).toEqual({ outcome: 'ended', state: 'failed' });
      const failed = (await service.getRun(ALL, run.id)).run;
      expect(failed.error?.code).toBe('PROVISIONING.POLICY_DENIED');
      expect(failed.error?.message).toContain('development runs no services of its own');
      const events = await eventsOf(run.id);
      expect(events.filter((e) => e.type === 'ProvisioningFailed')).toHaveLength(1);
      expect(await resourcesOf(run.stack)).toEqual([]);
    });

    it('when a policy allows the plan, then the plan receipt records the decision and the run applies', async () => {
      // Arrange
      const { service } = host({ governance: { policies: [{ id: 'no-deletes', denyOps: ['delete'], reason: 'nothing is deleted by a promotion' }] } });
      const run = await accepted(service, 'development');

      // Act
      await service.plan(run.id);
      await service.apply(run.id);

      // Assert
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.state).toBe('applied');
      expect(detail.planReceipt?.policy).toEqual({ decision: 'allow', policies: ['no-deletes'] });
    });

    it('when the GovernanceHost does not answer at plan, then the step throws GOVERNANCE_UNAVAILABLE (retried), nothing is recorded, and a run that gives up fails with that code', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      await services.setReachable('governance', false);

      // Act
      const thrown = await refusal(service.plan(run.id));
      const again = await refusal(service.plan(run.id));
      const ended = await service.failRun(run.id, `Activity failed: ${thrown.message}`);

      // Assert
      expect(thrown).toMatchObject({ code: 'PROVISIONING.GOVERNANCE_UNAVAILABLE', kind: 'unavailable' });
      expect(again).toMatchObject({ code: 'PROVISIONING.GOVERNANCE_UNAVAILABLE' });
      expect(ended).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error?.code).toBe('PROVISIONING.GOVERNANCE_UNAVAILABLE');
      expect(detail.planReceipt).toBeUndefined();
      expect((await eventsOf(run.id)).map((e) => e.type)).toEqual(['ProvisioningFailed']);
      expect(await resourcesOf(run.stack)).toEqual([]);
    });

    it('when the GovernanceHost does not answer for a secret at apply, then the step throws before any change; once it answers, the apply goes on', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      await service.plan(run.id);
      await services.setReachable('governance', false);

      // Act
      const thrown = await refusal(service.apply(run.id));
      const before = await resourcesOf(run.stack);
      await services.setReachable('governance', true);
      const retried = await service.apply(run.id);

      // Assert
      expect(thrown).toMatchObject({ code: 'PROVISIONING.GOVERNANCE_UNAVAILABLE' });
      expect(before).toEqual([]);
      expect(retried).toEqual({ outcome: 'ended', state: 'applied' });
    });

    it('when someone the control plane does not list approves, then 403 APPROVER_NOT_ALLOWED; a listed approver applies', async () => {
      // Arrange
      const { service } = host({ controlPlane: { environments: [{ id: 'env-approvers', approvers: ['alice'] }] } });
      const run = await accepted(service, 'production', 'env-approvers');
      await service.plan(run.id);
      const planDigest = (await service.getRun(ALL, run.id)).run.planDigest ?? '';

      // Act
      const refused = await refusal(service.approve(ALL, run.id, { planDigest, by: 'mallory' }));
      const approved = await service.approve(ALL, run.id, { planDigest, by: 'alice' });

      // Assert
      expect(refused).toMatchObject({ code: 'PROVISIONING.APPROVER_NOT_ALLOWED', kind: 'forbidden' });
      expect(approved.state).toBe('applying');
    });

    it('when the control plane does not know the environment, then the promotion is recorded rejected with UNKNOWN_ENVIRONMENT', async () => {
      // Arrange
      const { service } = host({ controlPlane: { environments: [{ id: 'env-known' }] } });

      // Act
      const result = await service.intake({ messageId: `msg-${dialect}-${++messages}`, body: aStackPromotion(example.repository, 'development', { stack: freshStack('development'), environmentId: 'env-unknown' }) });

      // Assert
      expect(result).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.UNKNOWN_ENVIRONMENT' });
    });

    it("when a promotion's tier disagrees with the control plane's, then it is a rejected run TIER_MISMATCH with its event; the control plane's tier, or the message's where it has none, is accepted (two tenants, one environment id)", async () => {
      // Arrange: one environment id, production for tenant-a and development for tenant-b; env-no-tier has no tier.
      const { service } = host({
        controlPlane: {
          environments: [
            { tenant: 'tenant-a', id: 'env-tier', tier: 'production' },
            { tenant: 'tenant-b', id: 'env-tier', tier: 'development' },
            { id: 'env-no-tier' },
          ],
        },
      });
      const promote = (tenantId: string, tier: 'development' | 'production', environmentId: string) =>
        service.intake({
          messageId: `msg-${dialect}-${++messages}`,
          body: aStackPromotion(example.repository, tier, { stack: freshStack(tier), environmentId, overrides: { tenantId } }),
        });

      // Act
      const downgraded = await promote('tenant-a', 'development', 'env-tier');
      const upgraded = await promote('tenant-b', 'production', 'env-tier');
      const asListedA = await promote('tenant-a', 'production', 'env-tier');
      const asListedB = await promote('tenant-b', 'development', 'env-tier');
      const unlisted = await promote('tenant-a', 'development', 'env-no-tier');

      // Assert
      for (const refused of [downgraded, upgraded]) {
        expect(refused).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.TIER_MISMATCH' });
        if (refused.outcome !== 'rejected' || !refused.run) throw new Error('expected a rejected run');
        expect((await eventsOf(refused.run.id)).filter((e) => e.type === 'ProvisioningFailed')).toHaveLength(1);
      }
      expect(downgraded).toMatchObject({ reason: expect.stringContaining('the control plane has as production') });
      expect(asListedA).toMatchObject({ outcome: 'accepted', run: { tenant: 'tenant-a', environment: { tier: 'production' } } });
      expect(asListedB).toMatchObject({ outcome: 'accepted', run: { tenant: 'tenant-b', environment: { tier: 'development' } } });
      expect(unlisted).toMatchObject({ outcome: 'accepted', run: { environment: { tier: 'development' } } });
    });

    it('when a run plans and applies, then both receipts are artifacts at the KnowledgeHost, their ids on the run, and the apply has audit evidence with its approver', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'production');

      // Act
      await throughApproval(service, run.id, 'operator-7');

      // Assert
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.state).toBe('applied');
      expect(detail.artifacts.map((a) => a.kind).sort()).toEqual(['apply-receipt', 'audit-evidence', 'plan-receipt']);
      const planArtifact = detail.artifacts.find((a) => a.kind === 'plan-receipt');
      const applyArtifact = detail.artifacts.find((a) => a.kind === 'apply-receipt');
      expect((await services.artifact(planArtifact?.id ?? ''))?.content).toEqual(detail.planReceipt);
      expect((await services.artifact(applyArtifact?.id ?? ''))?.content).toEqual(detail.applyReceipt);
      const evidence = await services.evidenceOf(run.id);
      expect(evidence).toEqual([
        expect.objectContaining({ runId: run.id, planDigest: detail.run.planDigest, approvedBy: 'operator-7', result: 'applied', applyReceiptArtifact: applyArtifact?.id }),
      ]);
    });

    it('when the KnowledgeHost does not answer after an apply, then the run stays applied and a retried step stores the receipt and evidence once', async () => {
      // Arrange
      const { service, services } = host();
      const run = await accepted(service, 'development');
      await service.plan(run.id);
      await services.setReachable('knowledge', false);

      // Act
      const thrown = await refusal(service.apply(run.id));
      const between = await service.getRun(ALL, run.id);
      await services.setReachable('knowledge', true);
      await service.apply(run.id);
      await service.apply(run.id);

      // Assert
      expect(thrown).toMatchObject({ code: 'PROVISIONING.KNOWLEDGE_UNAVAILABLE' });
      expect(between.run.state).toBe('applied');
      expect(between.artifacts.map((a) => a.kind)).toEqual(['plan-receipt']);
      const after = await service.getRun(ALL, run.id);
      expect(after.artifacts.map((a) => a.kind).sort()).toEqual(['apply-receipt', 'audit-evidence', 'plan-receipt']);
      expect(await services.evidenceOf(run.id)).toHaveLength(1);
    });

    it('when the Config Platform does not answer and a last known value exists, then the run applies with it and the receipt says it degraded', async () => {
      // Arrange: a first apply leaves the last known value of the feature flags.
      const { service, services } = host();
      await throughApproval(service, (await accepted(service, 'production')).id);
      const run = await accepted(service, 'production');
      await services.setReachable('config-platform', false);

      // Act
      await throughApproval(service, run.id);

      // Assert
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.state).toBe('applied');
      expect(detail.applyReceipt?.degraded).toEqual([{ ref: 'platform://app/feature-flags', reason: expect.stringContaining('PROVISIONING.CONFIG_UNAVAILABLE'), lastKnownAt: '2026-03-01T09:00:00.000Z' }]);
      expect(JSON.stringify(await resourcesOf(run.stack))).toContain('flag-token-91c2aa');
      expect(JSON.stringify(detail)).not.toContain('flag-token-91c2aa');
    });

    it('when the Config Platform does not answer and no last known value exists, then the apply fails with CONFIG_UNAVAILABLE before any change', async () => {
      // Arrange
      const { service, services, stateDir } = host();
      const run = await accepted(service, 'production');
      await services.setReachable('config-platform', false);

      // Act
      const step = await throughApproval(service, run.id);

      // Assert
      expect(step).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error?.code).toBe('PROVISIONING.CONFIG_UNAVAILABLE');
      expect(detail.applyReceipt?.result.resources.every((r) => r.status === 'skipped')).toBe(true);
      expect(await resourcesOf(run.stack)).toEqual([]);
      expect(fs.existsSync(join(stateDir, 'config-last-known.json'))).toBe(false);
      expect((await services.evidenceOf(run.id))[0]).toMatchObject({ result: 'failed', errorCode: 'PROVISIONING.CONFIG_UNAVAILABLE' });
    });
  });
}
