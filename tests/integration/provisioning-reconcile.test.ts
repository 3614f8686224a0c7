import { beforeAll, describe, expect, it } from 'vitest';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { randomIds } from '../../shared/platform/time/clock';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import type { ReconcileRequest } from '../../shared/provisioning/reconciliation';
import type { Run } from '../../shared/provisioning/run';
import { acquireStackLock, provisioningDb, releaseStackLock } from '../../shared/provisioning/stack-lock.repository';
import { DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { refusal } from '../support/refusal';
import {
  addPoolProject,
  aPoolPromotion,
  aPoolResizeEvent,
  aStackPromotion,
  EXAMPLE_PROJECT,
  EXAMPLE_SECRETS,
  exampleStack,
  POOL_PROJECT,
  type ProvisioningExample,
  outboxEvents,
  qualifiedExampleStack,
  testServiceOptions,
} from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

const ALL = { kind: 'all' } as const;

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`reconciliation runs on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-reconcile-', stackCopies: 12, references: true });
    const { clock, freshStack } = fixture;
    let database: TestDatabase;
    let example: ProvisioningExample;
    let service: ProvisioningService;
    let cloud: LocalCloud;

    beforeAll(() => {
      ({ database, example, cloud } = fixture);
      service = createProvisioningService(testServiceOptions(database.store, clock, cloud, fixture.root));
    });

    const db = () => provisioningDb(database.store.db);
    const eventsOf = (runId: string) => outboxEvents(database.store, runId);
    const resourcesOf = async (stack: string) => (await cloud.list('local')).filter((r) => r.urn.startsWith(`urn:pulumi:${stack}::`));
    async function resourceOf(stack: string, name: string) {
      const found = (await resourcesOf(stack)).find((r) => r.urn.endsWith(`::${name}`));
      if (!found) throw new Error(`${name} of ${stack} is not in the target`);
      return found;
    }
    let proposals = 0;
    const proposalId = () => `prop-${dialect}-${++proposals}`;
    /** A request to reconcile what `applied` applied: its tenant, environment and stack (project and name). */
    const requestFor = (applied: Run, overrides: Partial<ReconcileRequest> = {}): ReconcileRequest => ({
      proposalId: proposalId(),
      tenant: applied.tenant,
      environmentId: applied.environment.id,
      project: applied.project,
      stack: applied.stack,
      requestedBy: 'operator-1',
      ignore: [],
      ...overrides,
    });

    /** A promotion of the example to a stack of its own, planned and applied (production approved by operator-1). */
    async function appliedPromotion(tier: 'development' | 'production'): Promise<Run> {
      const result = await service.intake({ messageId: `msg-${randomIds.next('m')}`, body: aStackPromotion(example.repository, tier, { stack: freshStack(tier) }) });
      if (result.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(result)}`);
      const step = await service.plan(result.run.id);
      if (step.outcome === 'awaiting-approval') await service.approve(ALL, result.run.id, { planDigest: step.planDigest, by: 'operator-1' });
      expect(await service.apply(result.run.id)).toEqual({ outcome: 'ended', state: 'applied' });
      return result.run;
    }

    async function accepted(request: ReconcileRequest): Promise<Run> {
      const result = await service.reconcile(request);
      if (result.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(result)}`);
      return result.run;
    }

    it('when a property was changed in the target and the proposal is accepted, then the run plans an update of that path and the apply restores it', async () => {
      // Arrange: the platform scaled replicas (ignoreChanges) and someone resized the service by hand.
      const promoted = await appliedPromotion('development');
      const api = await resourceOf(promoted.stack, 'api');
      await cloud.update('local', api.id, { ...api.properties, size: 'huge', replicas: 5 });
      const request = requestFor(promoted);

      // Act
      const run = await accepted(request);
      const planned = await service.plan(run.id);
      const applied = await service.apply(run.id);

      // Assert
      expect(run).toMatchObject({
        state: 'queued',
        reason: 'reconciliation',
        reconciliation: { proposalId: request.proposalId, ignore: [] },
        tenant: promoted.tenant,
        environment: promoted.environment,
        release: promoted.release,
        project: EXAMPLE_PROJECT,
        stack: promoted.stack,
        desiredState: promoted.desiredState,
        requestedBy: 'operator-1',
      });
      expect(planned).toEqual({ outcome: 'applying' });
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.planReceipt?.plan.steps.map((s) => [s.name, s.op, s.changedPaths])).toEqual([
        ['assets', 'same', []],
        ['api', 'update', ['size']],
        ['endpoint', 'same', []],
      ]);
      // The old value is what the target held (the plan refreshes), beside the value the apply restores.
      expect(detail.planReceipt?.plan.steps.find((s) => s.name === 'api')).toMatchObject({ oldValues: { size: 'huge' }, inputs: { size: 'small' } });
      expect((await resourceOf(promoted.stack, 'api')).properties).toEqual({
        ...api.properties,
        size: 'small',
        replicas: 5,
        environment: { ...(api.properties.environment as object), DB_PASSWORD: EXAMPLE_SECRETS.development },
      });
      const events = await eventsOf(run.id);
      expect(events.map((e) => e.type)).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      for (const event of events) {
        expect(event.data).toMatchObject({ trigger: 'reconciliation', proposalId: request.proposalId, stack: promoted.stack, qualifiedStack: qualifiedExampleStack(promoted.stack) });
        expect(event.data).not.toHaveProperty('promotionId');
      }
      expect(JSON.stringify(events)).not.toContain(EXAMPLE_SECRETS.development);
    });

    it('when the same proposal is accepted again, also at the same moment, then there is one run and the later asks get it as a duplicate', async () => {
      // Arrange
      const promoted = await appliedPromotion('development');
      const request = requestFor(promoted);
      const racing = requestFor(promoted);

      // Act
      const first = await accepted(request);
      const again = await service.reconcile({ ...request, requestedBy: 'operator-2' });
      const raced = await Promise.all([service.reconcile(racing), service.reconcile(racing)]);

      // Assert
      expect(again).toEqual({ outcome: 'duplicate', run: first });
      expect(raced.map((r) => r.outcome).sort()).toEqual(['accepted', 'duplicate']);
      expect(raced[0].run.id).toBe(raced[1].run.id);
      const page = await service.listRuns(ALL, { environment: promoted.environment.id, limit: 100 });
      expect(page.items.filter((r) => r.reason === 'reconciliation').map((r) => r.id).sort()).toEqual([first.id, raced[0].run.id].sort());
      // The raced proposal is the newer one of the stack: it superseded the first, still queued.
      expect((await service.getRun(ALL, first.id)).run).toMatchObject({ state: 'superseded', supersededBy: raced[0].run.id });
      await service.cancel(ALL, raced[0].run.id, 'operator-1');
    });

    it('when the environment is production, then the reconciliation run waits for approval of its plan by another than who accepted the proposal, and applies once approved', async () => {
      // Arrange
      const promoted = await appliedPromotion('production');
      const endpoint = await resourceOf(promoted.stack, 'endpoint');
      await cloud.update('local', endpoint.id, { ...endpoint.properties, port: 8080 });
      const run = await accepted(requestFor(promoted));

      // Act
      const planned = await service.plan(run.id);
      const waiting = (await service.getRun(ALL, run.id)).run;
      // operator-1 accepted the proposal: a second person must approve its plan.
      const selfApproval = await refusal(service.approve(ALL, run.id, { planDigest: waiting.planDigest ?? '', by: 'operator-1' }));
      await service.approve(ALL, run.id, { planDigest: waiting.planDigest ?? '', by: 'operator-2' });
      const applied = await service.apply(run.id);

      // Assert
      expect(planned).toMatchObject({ outcome: 'awaiting-approval', planDigest: waiting.planDigest });
      expect(waiting).toMatchObject({ state: 'awaiting-approval', approvalRequired: true });
      expect(selfApproval).toMatchObject({ code: 'PROVISIONING.SELF_APPROVAL', kind: 'forbidden' });
      expect((await service.getRun(ALL, run.id)).decision).toMatchObject({ decision: 'approved', by: 'operator-2' });
      expect((await service.getRun(ALL, run.id)).planReceipt?.approvalReasons).toEqual(['production tier']);
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      expect((await resourceOf(promoted.stack, 'endpoint')).properties).toMatchObject({ port: 443 });
    });

    it('when the stack was never applied, or applied for another tenant, project or environment, then UNKNOWN_STACK and no run; a malformed request is INVALID_RECONCILIATION', async () => {
      // Arrange
      const promoted = await appliedPromotion('development');

      // Act
      const never = await refusal(service.reconcile(requestFor(promoted, { stack: freshStack('development') })));
      const otherTenant = await refusal(service.reconcile(requestFor(promoted, { tenant: 'other-team' })));
      const otherProject = await refusal(service.reconcile(requestFor(promoted, { project: 'other-app' })));
      const otherEnvironment = await refusal(service.reconcile(requestFor(promoted, { environmentId: 'env-elsewhere' })));
      const noProject = await refusal(service.reconcile(requestFor(promoted, { project: 'a/b' })));
      const badPath = await refusal(service.reconcile(requestFor(promoted, { ignore: [{ scope: { type: 'local:compute:Service' }, path: 'tags.*.env' }] })));
      const hugeIndex = await refusal(service.reconcile(requestFor(promoted, { ignore: [{ scope: { type: 'local:compute:Service' }, path: 'items.999999999.x' }] })));
      const noProposal = await refusal(service.reconcile(requestFor(promoted, { proposalId: '' })));

      // Assert
      for (const error of [never, otherTenant, otherProject, otherEnvironment]) {
        expect(error).toMatchObject({ code: 'PROVISIONING.UNKNOWN_STACK', kind: 'not-found', message: expect.stringContaining('no run has applied stack') });
      }
      for (const error of [badPath, hugeIndex]) {
        expect(error).toMatchObject({ code: 'PROVISIONING.INVALID_RECONCILIATION', kind: 'validation', details: { errors: [{ field: 'ignore.0.path' }] } });
      }
      expect(noProposal).toMatchObject({ code: 'PROVISIONING.INVALID_RECONCILIATION', details: { errors: [{ field: 'proposalId' }] } });
      expect(noProject).toMatchObject({ code: 'PROVISIONING.INVALID_RECONCILIATION', details: { errors: [{ field: 'project' }] } });
      const page = await service.listRuns(ALL, { environment: promoted.environment.id, limit: 100 });
      expect(page.items.map((r) => r.reason)).toEqual(['promotion']);
    });

    it("when the proposal carries ignore rules, then the run plans and applies with them: what they match stays as the target has it", async () => {
      // Arrange: the image and the size were changed by hand; the operator holds the image.
      const promoted = await appliedPromotion('development');
      const api = await resourceOf(promoted.stack, 'api');
      await cloud.update('local', api.id, { ...api.properties, size: 'huge', image: 'registry.local/demo-app:hotfix' });
      const ignore = [{ scope: { urn: api.urn }, path: 'image' }];

      // Act
      const run = await accepted(requestFor(promoted, { ignore }));
      await service.plan(run.id);
      const applied = await service.apply(run.id);

      // Assert
      expect(run.reconciliation?.ignore).toEqual(ignore);
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.planReceipt?.plan.steps.find((s) => s.name === 'api')).toMatchObject({ op: 'update', changedPaths: ['size'] });
      expect((await resourceOf(promoted.stack, 'api')).properties).toMatchObject({ size: 'small', image: 'registry.local/demo-app:hotfix' });
    });

    it('when the target cannot be reached, then the reconciliation run fails at its plan with TARGET_UNREACHABLE and one ProvisioningFailed', async () => {
      // Arrange
      const promoted = await appliedPromotion('development');
      const run = await accepted(requestFor(promoted));
      await cloud.setReachable('local', false);

      // Act
      let planned;
      try {
        planned = await service.plan(run.id);
      } finally {
        await cloud.setReachable('local', true);
      }

      // Assert
      expect(planned).toEqual({ outcome: 'ended', state: 'failed' });
      expect((await service.getRun(ALL, run.id)).run).toMatchObject({ state: 'failed', error: { code: 'PROVISIONING.TARGET_UNREACHABLE' } });
      const events = await eventsOf(run.id);
      expect(events.map((e) => e.type)).toEqual(['ProvisioningFailed']);
      expect(events[0]?.data).toMatchObject({ trigger: 'reconciliation', code: 'PROVISIONING.TARGET_UNREACHABLE' });
    });

    it('when a resource was deleted out of band, then the reconciliation run creates it again', async () => {
      // Arrange
      const promoted = await appliedPromotion('development');
      const endpoint = await resourceOf(promoted.stack, 'endpoint');
      await cloud.delete('local', endpoint.id);

      // Act
      const run = await accepted(requestFor(promoted));
      await service.plan(run.id);
      await service.apply(run.id);

      // Assert
      expect((await service.getRun(ALL, run.id)).planReceipt?.plan.counts).toMatchObject({ create: 1, same: 2 });
      const recreated = await resourceOf(promoted.stack, 'endpoint');
      expect(recreated.id).not.toBe(endpoint.id);
      expect(recreated.properties).toEqual(endpoint.properties);
    });

    it('when a newer proposal of a stack is accepted while an older one is queued, then the older is superseded; promotions and reconciliations never supersede each other', async () => {
      // Arrange: the stack is held elsewhere, so what is accepted stays queued.
      const promoted = await appliedPromotion('development');
      const stack = promoted.stack;
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const older = await accepted(requestFor(promoted));
      const promotion = await service.intake({ messageId: `msg-${randomIds.next('m')}`, body: aStackPromotion(example.repository, 'development', { stack, environmentId: promoted.environment.id }) });
      if (promotion.outcome !== 'accepted') throw new Error('not accepted');

      // Act
      const newer = await accepted(requestFor(promoted));

      // Assert
      expect((await service.getRun(ALL, older.id)).run).toMatchObject({ state: 'superseded', supersededBy: newer.id, error: { code: 'PROVISIONING.SUPERSEDED' } });
      expect((await service.getRun(ALL, promotion.run.id)).run.state).toBe('queued');
      expect((await service.getRun(ALL, newer.id)).run.state).toBe('queued');
      const failed = (await eventsOf(older.id)).find((e) => e.type === 'ProvisioningFailed');
      expect(failed?.data).toMatchObject({ trigger: 'reconciliation', proposalId: older.reconciliation?.proposalId, state: 'superseded', supersededBy: newer.id });
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');
      for (const run of [promotion.run.id, newer.id]) await service.cancel(ALL, run, 'operator-1');
    });

    it('when a pool resize applies while a reconciliation waits, then the reconciliation applies what the stack runs then, undoing nothing', async () => {
      // Arrange: the pool project applied at size 2; a resize to 4 holds the stack when the proposal is accepted.
      const repository = await addPoolProject(example);
      const stack = `pool-reconcile-${dialect}`;
      const intake = await service.intake({ messageId: `msg-${randomIds.next('m')}`, body: aPoolPromotion(repository, stack) });
      if (intake.outcome !== 'accepted') throw new Error('not accepted');
      await service.plan(intake.run.id);
      await service.apply(intake.run.id);
      const resized = await service.poolResize({ messageId: `evt-${dialect}-reconcile`, body: aPoolResizeEvent({ id: `evt-${dialect}-reconcile`, pool: 'p', iacStack: qualifiedExampleStack(stack, POOL_PROJECT), fromCapacity: 2, toCapacity: 4 }) });
      if (resized.outcome !== 'accepted') throw new Error('not accepted');
      await service.plan(resized.run.id);
      const run = await accepted(requestFor(intake.run));
      await service.apply(resized.run.id);
      const workers = await resourceOf(stack, 'workers');
      await cloud.update('local', workers.id, { ...workers.properties, kind: 'tampered' });

      // Act
      await service.plan(run.id);
      await service.apply(run.id);

      // Assert
      expect(run.config).toBeUndefined();
      expect((await service.getRun(ALL, run.id)).run).toMatchObject({ state: 'applied', config: { poolSize: 4 } });
      expect((await service.getRun(ALL, run.id)).planReceipt?.plan.steps.map((s) => [s.name, s.op, s.changedPaths])).toEqual([['workers', 'update', ['kind']]]);
      expect((await resourceOf(stack, 'workers')).properties).toEqual({ kind: 'build', size: 4 });
    });
  });
}
