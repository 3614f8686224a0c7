import * as fs from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { CloudEvent } from '../../shared/platform/bus/events';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { type IacEngine } from '../../shared/platform/iac/iac-runner';
import { localIacRunner } from '../../local/engine/local-engine';
import { readStackState, stackStateDb, writeStackState } from '../../local/engine/stack-state.repository';
import { randomIds } from '../../shared/platform/time/clock';
import { findRunDetail, recordApply, recordPlan } from '../../shared/provisioning/receipts.repository';
import type { EventResource } from '../../shared/provisioning/run-events';
import { createProvisioningService, type ProvisioningService, type ProvisioningServiceOptions } from '../../shared/provisioning/provisioning.service';
import { parseSourcePolicy } from '../../shared/provisioning/source-policy';
import { acquireStackLock, getStackLock, provisioningDb, releaseStackLock } from '../../shared/provisioning/stack-lock.repository';
import { REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { refusal } from '../support/refusal';
import {
  addPoolProject,
  aPoolPromotion,
  aPoolResizeEvent,
  aStackPromotion,
  EXAMPLE_SECRETS,
  EXAMPLE_PROJECT,
  EXAMPLE_TENANT,
  exampleStack,
  POOL_PROJECT,
  type ProvisioningExample,
  outboxEvents,
  qualifiedExampleStack,
  testServiceOptions,
  testSources,
} from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';

const ALL = { kind: 'all' } as const;

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`provisioning runs on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-provisioning-', stackCopies: 40, references: true });
    const { clock, freshStack } = fixture;
    let database: TestDatabase;
    let example: ProvisioningExample;
    let service: ProvisioningService;
    let cloud: LocalCloud;
    let root: string;

    beforeAll(() => {
      ({ database, example, cloud, root } = fixture);
      service = createProvisioningService(serviceOptions());
      expiringService = createProvisioningService({ ...serviceOptions(), planExpiry: { defaultMs: 24 * 3600_000, byEnvironment: shortExpiry } });
      approvingService = createProvisioningService({ ...serviceOptions(), approval: { tiers: ['production'], onDeleteOrReplace: true, secondPersonTiers: ['production'], byEnvironment: approvalRules } });
    });
    /** Environments with their own approval rule, by id; every other environment keeps the default rule. */
    const approvalRules = { 'env-always-approved': { always: true }, 'env-destroys-freely': { onDeleteOrReplace: false } };
    /** The same store, with the approval rules above. */
    let approvingService: ProvisioningService;
    /** Environments whose plans expire after a minute; the policy matches them by id. */
    const shortExpiry = { 'env-short-expiry': 60_000, 'env-short-woken': 60_000, 'env-short-forgotten': 60_000 };
    const serviceOptions = (): ProvisioningServiceOptions => testServiceOptions(database.store, clock, cloud, root);

    const db = () => provisioningDb(database.store.db);
    /** The same store, but plans of environments named env-short-… expire after one minute. */
    let expiringService: ProvisioningService;

    /**
     * A service over the same store whose target holds the first create of an apply until `open()`, with a stack
     * lock lease of one minute renewed every 10 ms.
     */
    function gatedService() {
      let open = () => {};
      let entered = () => {};
      const gate = new Promise<void>((resolve) => (open = resolve));
      const reached = new Promise<void>((resolve) => (entered = resolve));
      let first = true;
      const slowCloud: LocalCloud = {
        ...cloud,
        async create(target, resource) {
          if (first) {
            first = false;
            entered();
            await gate;
          }
          return cloud.create(target, resource);
        },
      };
      const { store } = database;
      const gated = createProvisioningService({
        ...serviceOptions(),
        engine: localIacRunner({ store, clock, ids: randomIds, cloud: slowCloud }),
        stackLockTtlMs: 60_000,
        stackLockRenewEveryMs: 10,
      });
      return { service: gated, entered: reached, open: () => open() };
    }
    /** The events a run (or a promotion or message, by correlation id) put in the outbox, in order. */
    const eventsOf = (correlationId: string) => outboxEvents(database.store, correlationId);
    const types = (events: readonly CloudEvent[]) => events.map((e) => e.type);
    /** The resources of every scope whose urn names the stack; each must be the example tenant's. */
    const resourcesOf = async (stack: string) => {
      const found = (await cloud.list('local')).filter((r) => r.urn.startsWith(`urn:pulumi:${stack}::`));
      expect(found.filter((r) => r.scope !== EXAMPLE_TENANT)).toEqual([]);
      return found;
    };
    let messages = 0;
    const intake = (body: unknown, messageId = `msg-${dialect}-${++messages}`) => service.intake({ messageId, body });

    /** An import out of band: a bucket is created in the target and written into the stack's state (serial 0 → 1). */
    async function importBucket(stack: string) {
      const urn = `urn:pulumi:${stack}::demo-app::local:storage:Bucket::assets`;
      const inputs = { name: 'demo-app-production-assets', versioning: true };
      const bucket = await cloud.create('local', { scope: EXAMPLE_TENANT, urn, type: 'local:storage:Bucket', properties: inputs });
      await writeStackState(
        stackStateDb(database.store.db),
        EXAMPLE_TENANT,
        { stack, project: 'demo-app', serial: 1, resources: [{ urn, name: 'assets', type: 'local:storage:Bucket', id: bucket.id, inputs, outputs: { ...inputs, id: bucket.id }, protect: true, dependencies: [] }] },
        clock.now().getTime(),
      );
    }

    async function accepted(body: unknown) {
      const result = await intake(body);
      if (result.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(result)}`);
      return result.run;
    }

    it('when a development promotion is planned and applied, then the run ends applied with receipts, one ProvisioningApplied and resources in the target', async () => {
      // Arrange
      const stack = freshStack('development');
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));

      // Act
      const planned = await service.plan(run.id);
      const applied = await service.apply(run.id);

      // Assert
      expect(run.state).toBe('queued');
      expect(planned).toEqual({ outcome: 'applying' });
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run).toMatchObject({ state: 'applied', approvalRequired: false, planDigest: detail.planReceipt?.plan.digest, tenant: EXAMPLE_TENANT, project: EXAMPLE_PROJECT, stack });
      expect(detail.run.finishedAt).toBeInstanceOf(Date);
      expect(detail.planReceipt).toMatchObject({
        runId: run.id,
        stack,
        qualifiedStack: qualifiedExampleStack(stack),
        commit: example.repository.commit,
        runner: { name: 'local', version: expect.stringMatching(/^runtime-cloud-local-iac /) },
        approvalRequired: false,
        plan: { counts: { create: 3, update: 0, replace: 0, delete: 0, same: 0 }, digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) },
      });
      expect(detail.planReceipt?.plan.steps.map((s) => [s.name, s.op])).toEqual([
        ['assets', 'create'],
        ['api', 'create'],
        ['endpoint', 'create'],
      ]);
      expect(detail.applyReceipt).toMatchObject({ stack, qualifiedStack: qualifiedExampleStack(stack) });
      expect(detail.applyReceipt?.result).toMatchObject({ status: 'applied', planDigest: detail.run.planDigest });
      expect(detail.applyReceipt?.result.resources.map((r) => r.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      const events = await eventsOf(run.id);
      expect(types(events)).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      for (const event of events) expect(event.data).toMatchObject({ tenantId: EXAMPLE_TENANT, project: EXAMPLE_PROJECT, stack, qualifiedStack: qualifiedExampleStack(stack) });
      expect((await resourcesOf(stack)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service', 'local:network:Endpoint']);
      expect(await getStackLock(db(), exampleStack(stack))).toBeUndefined();
      // What inventory takes as the desired properties: the state's inputs, with the secret still a reference.
      const specified = (events[1]?.data as { resources: EventResource[] }).resources;
      expect(specified.map((r) => [r.name, r.properties])).toEqual([
        ['assets', { name: 'demo-app-development-assets', versioning: true }],
        [
          'api',
          {
            name: 'demo-app-development-api',
            image: 'registry.local/demo-app:1.0.0',
            size: 'small',
            replicas: 1,
            environment: {
              ASSETS_BUCKET: 'demo-app-development-assets',
              DB_PASSWORD: { secretRef: 'broker://runtime-cloud/app-db-password-development' },
              FEATURE_FLAGS: '{"newCheckout":true}',
            },
          },
        ],
        ['endpoint', { hostname: 'demo-app-development.local', target: 'demo-app-development-api', port: 443 }],
      ]);
      expect(JSON.stringify(events)).not.toContain(EXAMPLE_SECRETS.development);
    });

    it('when a run ended but a crash came before it gave its stack back, then its retried step gives it back, and a retried step never frees a lock another run holds', async () => {
      // Arrange: an applied run, and its lock as the crash left it (taken again here under its id).
      const stack = freshStack('development');
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await service.plan(run.id);
      await service.apply(run.id);
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: run.id, host: 'crashed-host', now: clock.now().getTime(), ttlMs: 600_000 });

      // Act
      const retried = await service.apply(run.id);
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const retriedAgain = await service.apply(run.id);

      // Assert
      expect(retried).toEqual({ outcome: 'ended', state: 'applied' });
      expect(retriedAgain).toEqual({ outcome: 'ended', state: 'applied' });
      expect((await getStackLock(db(), exampleStack(stack)))?.holderRun).toBe('run-elsewhere');
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');
    });

    it('when a production promotion is planned, then it waits for approval of its digest; another digest is refused, the right one applies', async () => {
      // Arrange
      const stack = freshStack('production');
      const run = await accepted(aStackPromotion(example.repository, 'production', { stack }));

      // Act
      const planned = await service.plan(run.id);
      const waiting = (await service.getRun(ALL, run.id)).run;
      const wrong = service.approve(ALL, run.id, { planDigest: `sha256:${'0'.repeat(64)}`, by: 'operator-1' });
      await expect(wrong).rejects.toMatchObject({ code: 'PROVISIONING.PLAN_DIGEST_MISMATCH', kind: 'conflict' });
      const beforeApproval = await service.apply(run.id);
      const approved = await service.approve(ALL, run.id, { planDigest: waiting.planDigest ?? '', by: 'operator-1', comment: 'looks right' });
      const applied = await service.apply(run.id);

      // Assert
      expect(planned).toEqual({ outcome: 'awaiting-approval', planDigest: waiting.planDigest, planExpiresAt: waiting.planExpiresAt?.toISOString() });
      // The plan expires after the default of 24 hours unless its environment says otherwise.
      expect(waiting.planExpiresAt?.getTime()).toBe(clock.now().getTime() + 24 * 3600_000);
      expect(waiting).toMatchObject({ state: 'awaiting-approval', approvalRequired: true, waitingFor: { kind: 'approval', planDigest: waiting.planDigest } });
      // While it waits for a person, the stack is free for others.
      expect(await getStackLock(db(), exampleStack(stack))).toBeUndefined();
      expect(beforeApproval).toMatchObject({ outcome: 'awaiting-approval', planDigest: waiting.planDigest });
      expect(approved.state).toBe('applying');
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.planReceipt?.approvalReasons).toEqual(['production tier']);
      expect(detail.decision).toMatchObject({ decision: 'approved', planDigest: waiting.planDigest, by: 'operator-1', comment: 'looks right' });
      expect(types(await eventsOf(run.id))).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      await expect(service.approve(ALL, run.id, { planDigest: waiting.planDigest ?? '', by: 'operator-1' })).rejects.toMatchObject({ code: 'PROVISIONING.RUN_NOT_AWAITING_APPROVAL' });
    });

    it('when the stack state changes between approval and apply, then the run goes stale with PLAN_STALE, nothing is applied, and a replan needs its own approval', async () => {
      // Arrange
      const stack = freshStack('production');
      const run = await accepted(aStackPromotion(example.repository, 'production', { stack }));
      await service.plan(run.id);
      const digest = (await service.getRun(ALL, run.id)).run.planDigest ?? '';
      await service.approve(ALL, run.id, { planDigest: digest, by: 'operator-1' });
      await importBucket(stack);

      // Act
      const result = await service.apply(run.id);
      const approveStale = await refusal(service.approve(ALL, run.id, { planDigest: digest, by: 'operator-1' }));
      const stale = await service.getRun(ALL, run.id);
      const replanned = await service.replan(ALL, run.id, 'operator-2');
      const replanAgain = await refusal(service.replan(ALL, run.id, 'operator-2'));
      const planned = await service.plan(run.id);
      const fresh = (await service.getRun(ALL, run.id)).run;
      const beforeApproval = await service.apply(run.id);
      await service.approve(ALL, run.id, { planDigest: fresh.planDigest ?? '', by: 'operator-3' });
      const applied = await service.apply(run.id);

      // Assert
      expect(result).toEqual({ outcome: 'stale', reason: expect.stringContaining(`the state of stack ${qualifiedExampleStack(stack)} changed since the plan was made (serial 0, now 1)`) });
      expect(stale.run).toMatchObject({ state: 'stale', error: { code: 'PROVISIONING.PLAN_STALE' }, waitingFor: { kind: 'replan', planDigest: digest } });
      expect(stale.applyReceipt).toBeUndefined();
      expect(approveStale).toMatchObject({ code: 'PROVISIONING.PLAN_STALE', kind: 'conflict' });
      expect(replanned).toMatchObject({ state: 'planning' });
      expect(replanned.planDigest).toBeUndefined();
      expect(replanned.error).toBeUndefined();
      expect(replanAgain).toMatchObject({ code: 'PROVISIONING.RUN_NOT_STALE', details: { state: 'planning' } });
      // The fresh plan starts from the imported bucket: another digest, and the old approval does not carry over.
      expect(planned).toMatchObject({ outcome: 'awaiting-approval', planDigest: fresh.planDigest });
      expect(fresh.planDigest).not.toBe(digest);
      expect(beforeApproval.outcome).toBe('awaiting-approval');
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.decision).toMatchObject({ decision: 'approved', planDigest: fresh.planDigest, by: 'operator-3' });
      expect(detail.planReceipt?.plan.baseSerial).toBe(1);
      expect(detail.replacedPlans).toHaveLength(1);
      expect(detail.replacedPlans[0]).toMatchObject({
        planDigest: digest,
        planReceipt: { plan: { digest, baseSerial: 0 } },
        decision: { decision: 'approved', planDigest: digest, by: 'operator-1' },
        stale: { code: 'PROVISIONING.PLAN_STALE' },
        replannedBy: 'operator-2',
      });
      expect(types(await eventsOf(run.id))).toEqual(['SpecificationDeclared', 'SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
    });

    it('when the stack state changed without its serial moving, then the engine still refuses with PLAN_CHANGED and nothing is applied', async () => {
      // Arrange: the stack runs the example; a production promotion of it plans all same and is approved.
      const stack = freshStack('development');
      const first = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await service.plan(first.id);
      await service.apply(first.id);
      const run = await accepted(aStackPromotion(example.repository, 'production', { stack, environmentId: `env-prod-${stack}` }));
      await service.plan(run.id);
      await service.approve(ALL, run.id, { planDigest: (await service.getRun(ALL, run.id)).run.planDigest ?? '', by: 'operator-1' });
      const before = await resourcesOf(stack);
      // An edit of the state out of band that leaves its serial as it was: only the digest can tell.
      const states = stackStateDb(database.store.db);
      const state = await readStackState(states, exampleStack(stack));
      if (!state) throw new Error('no state');
      const edited = state.resources.map((r) => (r.name === 'api' ? { ...r, inputs: { ...r.inputs, size: 'huge' } } : r));
      await states.updateTable('local_iac_stacks').set({ resources: JSON.stringify(edited) }).where('tenant_id', '=', EXAMPLE_TENANT).where('project', '=', state.project).where('stack', '=', stack).execute();

      // Act
      const result = await service.apply(run.id);

      // Assert
      expect(result).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error?.code).toBe('PROVISIONING.PLAN_CHANGED');
      expect(detail.applyReceipt?.result).toMatchObject({ status: 'failed', error: { code: 'PROVISIONING.PLAN_CHANGED' } });
      expect(detail.applyReceipt?.result.resources.every((r) => r.status === 'skipped')).toBe(true);
      expect(await resourcesOf(stack)).toEqual(before);
      const events = await eventsOf(run.id);
      expect(types(events)).toEqual(['SpecificationDeclared', 'ProvisioningFailed']);
      expect(events[1]?.data).toMatchObject({ state: 'failed', code: 'PROVISIONING.PLAN_CHANGED' });
    });

    it('when a plan expires before its approval, then approving it is refused with PLAN_STALE and the run shows stale; other environments keep the default expiry', async () => {
      // Arrange: plans of the environment env-short-expiry expire after a minute (the default is 24 hours).
      const short = await accepted(aStackPromotion(example.repository, 'production', { stack: freshStack('production'), environmentId: 'env-short-expiry' }));
      const long = await accepted(aStackPromotion(example.repository, 'production', { stack: freshStack('production') }));
      await expiringService.plan(short.id);
      await expiringService.plan(long.id);
      const shortDigest = (await service.getRun(ALL, short.id)).run.planDigest ?? '';
      const longDigest = (await service.getRun(ALL, long.id)).run.planDigest ?? '';
      const inTime = await expiringService.afterApproval(short.id, false);

      // Act
      clock.advance(61_000);
      const late = await refusal(expiringService.approve(ALL, short.id, { planDigest: shortDigest, by: 'operator-1' }));
      const lateAgain = await refusal(expiringService.approve(ALL, short.id, { planDigest: shortDigest, by: 'operator-1' }));
      const longApproved = await expiringService.approve(ALL, long.id, { planDigest: longDigest, by: 'operator-1' });

      // Assert
      expect(inTime.outcome).toBe('awaiting-approval');
      expect(late).toMatchObject({ code: 'PROVISIONING.PLAN_STALE', kind: 'conflict', details: { state: 'stale', planDigest: shortDigest } });
      expect(lateAgain).toMatchObject({ code: 'PROVISIONING.PLAN_STALE' });
      const stale = (await service.getRun(ALL, short.id)).run;
      expect(stale).toMatchObject({ state: 'stale', error: { code: 'PROVISIONING.PLAN_STALE', message: expect.stringContaining('expired at') }, waitingFor: { kind: 'replan' } });
      expect(longApproved.state).toBe('applying');
      expect(await expiringService.afterApproval(short.id, false)).toEqual({ outcome: 'stale', reason: stale.error?.message });
      expect(types(await eventsOf(short.id))).toEqual(['SpecificationDeclared']);
      await service.apply(long.id);
    });

    it("when a plan's expiry wakes the run, then it goes stale; a stale run is rejected on request, or fails when nobody decides in time", async () => {
      // Arrange
      const woken = await accepted(aStackPromotion(example.repository, 'production', { stack: freshStack('production'), environmentId: 'env-short-woken' }));
      const forgotten = await accepted(aStackPromotion(example.repository, 'production', { stack: freshStack('production'), environmentId: 'env-short-forgotten' }));
      await expiringService.plan(woken.id);
      await expiringService.plan(forgotten.id);
      clock.advance(61_000);

      // Act
      const wokenStep = await expiringService.afterApproval(woken.id, false);
      await expiringService.afterApproval(forgotten.id, false);
      const rejected = await expiringService.reject(ALL, woken.id, { reason: 'the freeze began', by: 'operator-2' });
      const timedOut = await expiringService.afterApproval(forgotten.id, true);

      // Assert
      expect(wokenStep).toMatchObject({ outcome: 'stale', reason: expect.stringContaining('expired at') });
      expect(rejected).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.REJECTED' } });
      expect((await service.getRun(ALL, woken.id)).decision).toMatchObject({ decision: 'rejected', by: 'operator-2' });
      expect(timedOut).toEqual({ outcome: 'ended', state: 'failed' });
      expect((await service.getRun(ALL, forgotten.id)).run.error).toMatchObject({ code: 'PROVISIONING.APPROVAL_TIMEOUT', message: expect.stringContaining('nobody replanned or rejected') });
      for (const id of [woken.id, forgotten.id]) expect(types(await eventsOf(id))).toEqual(['SpecificationDeclared', 'ProvisioningFailed']);
    });

    it("when nothing holds a stack, then its lock is not found; a held lock is shown to operators and to the stack's tenant only, and broken once with who and why", async () => {
      // Arrange
      const stack = freshStack('development');
      const demoTeam = { kind: 'one', tenant: 'demo-team' } as const;
      const someoneElse = { kind: 'one', tenant: 'someone-else' } as const;
      const missing = await refusal(service.stackLock(ALL, exampleStack(stack)));
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const held = await service.stackLock(ALL, exampleStack(stack));
      const seenByTenant = await service.stackLock(demoTeam, exampleStack(stack));
      const hiddenFromOthers = await refusal(service.stackLock(someoneElse, exampleStack(stack)));
      // The stack of the same project and stack names of another tenant is another stack: nothing holds it.
      const othersStack = exampleStack(stack, EXAMPLE_PROJECT, 'someone-else');
      const othersMissing = await refusal(service.stackLock(ALL, othersStack));
      const othersUnlock = await refusal(service.unlockStack(othersStack, { by: 'admin-1', reason: 'wrong tenant' }));

      // Act
      const wrongVersion = await refusal(service.unlockStack(exampleStack(stack), { by: 'admin-1', reason: 'host-b hung', version: held.version + 1 }));
      const broken = await service.unlockStack(exampleStack(stack), { by: 'admin-1', reason: 'host-b hung', version: held.version });
      const again = await refusal(service.unlockStack(exampleStack(stack), { by: 'admin-1', reason: 'host-b hung' }));

      // Assert
      expect(missing).toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED', kind: 'not-found' });
      expect(held).toMatchObject({ stack: exampleStack(stack), holderRun: 'run-elsewhere', holderHost: 'other-host', version: 1, expiresAt: new Date(clock.now().getTime() + 60_000) });
      expect(seenByTenant).toEqual(held);
      expect(hiddenFromOthers).toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED' });
      for (const error of [othersMissing, othersUnlock]) expect(error).toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED', details: { stack: qualifiedExampleStack(stack, EXAMPLE_PROJECT, 'someone-else') } });
      expect(wrongVersion).toMatchObject({ code: 'PROVISIONING.STACK_LOCK_VERSION_MISMATCH', kind: 'conflict', details: { version: 1 } });
      expect(broken).toMatchObject({ lock: { holderRun: 'run-elsewhere', version: 1 }, by: 'admin-1', reason: 'host-b hung' });
      expect(again).toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED' });
      expect(await getStackLock(db(), exampleStack(stack))).toBeUndefined();
      const breaks = await db().selectFrom('provisioning_lock_breaks').select(['holder_run', 'holder_host', 'broken_by', 'reason']).where('stack', '=', stack).execute();
      expect(breaks).toEqual([{ holder_run: 'run-elsewhere', holder_host: 'other-host', broken_by: 'admin-1', reason: 'host-b hung' }]);
    });

    it("when a tenant's run holds a stack, then that tenant sees the lock", async () => {
      // Arrange
      const stack = freshStack('production');
      const run = await accepted(aStackPromotion(example.repository, 'production', { stack }));
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: run.id, host: 'test-host', now: clock.now().getTime(), ttlMs: 60_000 });

      // Act
      const seen = await service.stackLock({ kind: 'one', tenant: 'demo-team' }, exampleStack(stack));

      // Assert
      expect(seen).toMatchObject({ holderRun: run.id, holderHost: 'test-host' });
      await expect(service.stackLock({ kind: 'one', tenant: 'someone-else' }, exampleStack(stack))).rejects.toMatchObject({ code: 'PROVISIONING.STACK_NOT_LOCKED' });
      await service.cancel(ALL, run.id, 'operator-1');
      await releaseStackLock(db(), exampleStack(stack), run.id);
    });

    it('when the stack lock is broken during an apply, then the apply stops before its next step and the run fails with STACK_LOCK_LOST', async () => {
      // Arrange: the first create waits until the test lets it finish.
      const gated = gatedService();
      const stack = freshStack('development');
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await gated.service.plan(run.id);

      // Act
      const applying = gated.service.apply(run.id);
      await gated.entered;
      await gated.service.unlockStack(exampleStack(stack), { by: 'admin-1', reason: 'stuck apply' });
      gated.open();
      const result = await applying;

      // Assert
      expect(result).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error).toMatchObject({ code: 'PROVISIONING.STACK_LOCK_LOST', message: expect.stringContaining('lost the lock') });
      expect(detail.applyReceipt?.result.resources.map((r) => [r.name, r.status])).toEqual([
        ['assets', 'succeeded'],
        ['api', 'skipped'],
        ['endpoint', 'skipped'],
      ]);
      expect((await resourcesOf(stack)).map((r) => r.type)).toEqual(['local:storage:Bucket']);
      const events = await eventsOf(run.id);
      expect(events.at(-1)).toMatchObject({ type: 'ProvisioningFailed', data: { code: 'PROVISIONING.STACK_LOCK_LOST' } });
    });

    it('when the engine fails right after its apply made the changes, then a retried step does not call the run stale: nothing between the apply and its record can fail', async () => {
      // Arrange: an engine whose version() fails once, the first time it is asked after an apply made changes.
      const inner = localIacRunner({ store: database.store, clock, ids: randomIds, cloud });
      let appliedAndUnasked = false;
      const engine: IacEngine = {
        name: inner.name,
        version: () => {
          if (!appliedAndUnasked) return inner.version();
          appliedAndUnasked = false;
          return Promise.reject(new Error('the engine went away after its apply'));
        },
        preview: (...args) => inner.preview(...args),
        apply: async (...args) => {
          const result = await inner.apply(...args);
          appliedAndUnasked = true;
          return result;
        },
      };
      const flaky = createProvisioningService({ ...serviceOptions(), engine });
      const stack = freshStack('development');
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await flaky.plan(run.id);

      // Act: the step, and its retry when it throws (as the orchestration's retry policy does).
      const result = await flaky.apply(run.id).catch(() => flaky.apply(run.id));

      // Assert: applied once, with its receipt and its events.
      expect(result).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.state).toBe('applied');
      expect(detail.applyReceipt?.result.status).toBe('applied');
      expect(types(await eventsOf(run.id))).toContain('ProvisioningApplied');
    });

    it("when an apply runs longer than the stack lock's lease, then renewals keep the lock: no other run takes the stack meanwhile", async () => {
      // Arrange: a lease of one minute, renewed every 10 ms of real time; the first create takes "100 s" of the clock.
      const gated = gatedService();
      const stack = freshStack('development');
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await gated.service.plan(run.id);
      const applying = gated.service.apply(run.id);
      await gated.entered;

      // Act
      const start = clock.now().getTime();
      clock.advance(50_000);
      await vi.waitFor(async () => expect((await getStackLock(db(), exampleStack(stack)))?.expiresAt.getTime()).toBeGreaterThanOrEqual(start + 50_000 + 60_000), { timeout: 5000, interval: 10 });
      clock.advance(50_000);
      const other = await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      gated.open();
      const result = await applying;

      // Assert
      expect(other).toMatchObject({ acquired: false, heldBy: { holderRun: run.id } });
      expect(result).toEqual({ outcome: 'ended', state: 'applied' });
      expect((await resourcesOf(stack)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service', 'local:network:Endpoint']);
    });

    it('when a PoolResizeRequested names a stack a promotion applied, then a pool-resize run plans that desired state with poolSize and applies it', async () => {
      // Arrange: the worker-pool project applied on its stack with the default size.
      const repository = await addPoolProject(example);
      const stack = `pool-${dialect}-1`;
      const promoted = await accepted(aPoolPromotion(repository, stack));
      await service.plan(promoted.id);
      await service.apply(promoted.id);
      const event = aPoolResizeEvent({ id: `evt-resize-${dialect}-1`, pool: 'build-pool', iacStack: qualifiedExampleStack(stack, POOL_PROJECT), fromCapacity: 2, toCapacity: 6 });

      // Act
      const result = await service.poolResize({ messageId: `evt-resize-${dialect}-1`, body: JSON.stringify(event) });
      if (result.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(result)}`);
      const planned = await service.plan(result.run.id);
      const applied = await service.apply(result.run.id);

      // Assert
      expect(result.run).toMatchObject({
        reason: 'pool-resize',
        stack,
        tenant: promoted.tenant,
        environment: promoted.environment,
        desiredState: promoted.desiredState,
        poolResize: { pool: 'build-pool', eventId: `evt-resize-${dialect}-1`, fromCapacity: 2, toCapacity: 6 },
        config: { poolSize: 6 },
        requestedBy: 'pool build-pool',
      });
      expect(planned).toEqual({ outcome: 'applying' });
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, result.run.id);
      expect(detail.planReceipt?.plan.steps.map((st) => [st.name, st.op, st.changedPaths])).toEqual([['workers', 'update', ['size']]]);
      expect(detail.planReceipt?.plan.steps[0]).toMatchObject({ oldValues: { size: 2 }, inputs: { size: 6 } });
      expect((await resourcesOf(stack)).map((r) => r.properties)).toEqual([{ kind: 'build', size: 6 }]);
      const events = await eventsOf(result.run.id);
      expect(types(events)).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      expect(events[2]?.data).toMatchObject({ trigger: 'pool-resize', poolResize: { pool: 'build-pool', toCapacity: 6 }, stack });
      expect(events[2]?.data).not.toHaveProperty('promotionId');
    });

    it("when a resize repeats, names a stack nobody applied (or another tenant's of the same names), is malformed, names a bare stack or another event comes, then one run, a recorded rejection, or nothing", async () => {
      // Arrange
      const repository = await addPoolProject(example);
      const stack = `pool-${dialect}-2`;
      const promoted = await accepted(aPoolPromotion(repository, stack));
      await service.plan(promoted.id);
      await service.apply(promoted.id);
      const resize = aPoolResizeEvent({ id: `evt-resize-${dialect}-2`, pool: 'build-pool', iacStack: qualifiedExampleStack(stack, POOL_PROJECT), fromCapacity: 2, toCapacity: 3 });
      const unknown = aPoolResizeEvent({ id: `evt-resize-${dialect}-3`, pool: 'other-pool', iacStack: qualifiedExampleStack('no-such-stack', POOL_PROJECT), fromCapacity: 2, toCapacity: 3 });
      const malformed = { ...resize, id: `evt-resize-${dialect}-4`, data: { pool: 'build-pool', iacStack: qualifiedExampleStack(stack, POOL_PROJECT), toCapacity: -1 } };
      // The stack's own name, and the stack of the same project and name of a tenant that never applied it.
      const bare = aPoolResizeEvent({ id: `evt-resize-${dialect}-6`, pool: 'build-pool', iacStack: stack, fromCapacity: 2, toCapacity: 3 });
      const otherTenant = aPoolResizeEvent({ id: `evt-resize-${dialect}-7`, pool: 'build-pool', iacStack: qualifiedExampleStack(stack, POOL_PROJECT, 'other-team'), fromCapacity: 2, toCapacity: 3 });

      // Act
      const first = await service.poolResize({ messageId: `evt-resize-${dialect}-2`, body: resize });
      const redelivered = await service.poolResize({ messageId: `evt-resize-${dialect}-2`, body: resize });
      const unknownStack = await service.poolResize({ messageId: `evt-resize-${dialect}-3`, body: unknown });
      const invalid = await service.poolResize({ messageId: `evt-resize-${dialect}-4`, body: malformed });
      const bareStack = await service.poolResize({ messageId: `evt-resize-${dialect}-6`, body: bare });
      const notTheirs = await service.poolResize({ messageId: `evt-resize-${dialect}-7`, body: otherTenant });
      const other = await service.poolResize({ messageId: `evt-other-${dialect}`, body: { ...resize, id: `evt-other-${dialect}`, type: 'LeaseExpired' } });
      // Claim-checked messages whose data could not be read back (event-bodies.ts openEvent): a resize, another type.
      const unreadable = await service.poolResize({ messageId: `evt-resize-${dialect}-8`, body: {}, unreadable: { code: 'EVENTS.BODY_MISSING', reason: 'the data is gone', type: 'PoolResizeRequested' } });
      const unreadableOther = await service.poolResize({ messageId: `evt-other-${dialect}-2`, body: {}, unreadable: { code: 'EVENTS.BODY_MISSING', reason: 'the data is gone', type: 'LeaseExpired' } });

      // Assert
      if (first.outcome !== 'accepted') throw new Error('not accepted');
      expect(redelivered).toEqual({ outcome: 'duplicate', run: first.run });
      expect(await db().selectFrom('provisioning_runs').select('id').where('stack', '=', stack).where('reason', '=', 'pool-resize').execute()).toHaveLength(1);
      expect(unknownStack).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.UNKNOWN_STACK', reason: expect.stringContaining(qualifiedExampleStack('no-such-stack', POOL_PROJECT)) });
      expect(await eventsOf(`evt-resize-${dialect}-3`)).toMatchObject([
        { type: 'ProvisioningFailed', subject: 'pools/other-pool', data: { trigger: 'pool-resize', tenantId: 'demo-team', project: POOL_PROJECT, stack: 'no-such-stack', qualifiedStack: qualifiedExampleStack('no-such-stack', POOL_PROJECT), code: 'PROVISIONING.UNKNOWN_STACK' } },
      ]);
      expect(invalid).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.INVALID_POOL_RESIZE', reason: expect.stringContaining('fromCapacity') });
      expect(bareStack).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.INVALID_POOL_RESIZE', reason: expect.stringContaining('iacStack') });
      expect(notTheirs).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.UNKNOWN_STACK', reason: expect.stringContaining(qualifiedExampleStack(stack, POOL_PROJECT, 'other-team')) });
      expect(await service.getRejection(`evt-resize-${dialect}-4`)).toMatchObject({ code: 'PROVISIONING.INVALID_POOL_RESIZE' });
      expect(other).toMatchObject({ outcome: 'ignored' });
      expect(await service.getRejection(`evt-other-${dialect}`)).toBeUndefined();
      expect(unreadable).toEqual({ outcome: 'rejected', code: 'EVENTS.BODY_MISSING', reason: 'the data is gone' });
      expect(await service.getRejection(`evt-resize-${dialect}-8`)).toMatchObject({ code: 'EVENTS.BODY_MISSING', reason: 'the data is gone' });
      expect(unreadableOther).toMatchObject({ outcome: 'ignored' });
      expect(await service.getRejection(`evt-other-${dialect}-2`)).toBeUndefined();
      await service.cancel(ALL, first.run.id, 'operator-1');
    });

    it('when a promotion applies while a resize waits, then the resize plans the newly applied commit with the new size, undoing nothing', async () => {
      // Arrange: the stack runs the first commit; a promotion of a second commit (a label) is planned and holds the
      // stack when the resize comes in, so the resize is taken in at the first commit.
      const repository = await addPoolProject(example);
      const stack = `pool-${dialect}-3`;
      const first = await accepted(aPoolPromotion(repository, stack));
      await service.plan(first.id);
      await service.apply(first.id);
      const project = join(example.source, 'pools', 'Pulumi.yaml');
      fs.writeFileSync(project, fs.readFileSync(project, 'utf8').replace('      kind: build\n', '      kind: build\n      label: blue\n'));
      const labeled = await example.commit();
      const second = await accepted({ ...aPoolPromotion(labeled, stack), environment: first.environment });
      await service.plan(second.id);
      const resized = await service.poolResize({ messageId: `evt-resize-${dialect}-5`, body: aPoolResizeEvent({ id: `evt-resize-${dialect}-5`, pool: 'p', iacStack: qualifiedExampleStack(stack, POOL_PROJECT), fromCapacity: 2, toCapacity: 4 }) });
      if (resized.outcome !== 'accepted') throw new Error('not accepted');
      await service.apply(second.id);

      // Act
      await service.plan(resized.run.id);
      await service.apply(resized.run.id);

      // Assert
      expect(resized.run.desiredState.commit).toBe(repository.commit);
      const run = (await service.getRun(ALL, resized.run.id)).run;
      expect(run).toMatchObject({ state: 'applied', desiredState: { commit: labeled.commit } });
      expect((await resourcesOf(stack)).map((r) => r.properties)).toEqual([{ kind: 'build', label: 'blue', size: 4 }]);
      fs.writeFileSync(project, fs.readFileSync(project, 'utf8').replace('      label: blue\n', ''));
      await example.commit();
    });

    it('when the target is unreachable, then the run fails with an apply receipt and PROVISIONING.TARGET_UNREACHABLE', async () => {
      // Arrange
      const stack = freshStack('development');
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await service.plan(run.id);
      await cloud.setReachable('local', false);

      // Act
      let result;
      try {
        result = await service.apply(run.id);
      } finally {
        await cloud.setReachable('local', true);
      }

      // Assert
      expect(result).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error?.code).toBe('PROVISIONING.TARGET_UNREACHABLE');
      expect(detail.applyReceipt?.result).toMatchObject({ status: 'failed', error: { code: 'PROVISIONING.TARGET_UNREACHABLE' } });
      const events = await eventsOf(run.id);
      expect(types(events).filter((t) => t.startsWith('Provisioning'))).toEqual(['ProvisioningFailed']);
      expect(events.at(-1)?.data).toMatchObject({ code: 'PROVISIONING.TARGET_UNREACHABLE', runId: run.id, stack });
      expect(await getStackLock(db(), exampleStack(stack))).toBeUndefined();
      expect(await resourcesOf(stack)).toEqual([]);
    });

    it('when a development plan would delete a resource, then approval is required although the tier needs none', async () => {
      // Arrange: the stack holds the example; the next commit drops the endpoint.
      const stack = freshStack('development');
      const first = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      await service.plan(first.id);
      await service.apply(first.id);
      const pulumiYaml = join(example.source, 'app', 'Pulumi.yaml');
      const original = fs.readFileSync(pulumiYaml, 'utf8');
      fs.writeFileSync(pulumiYaml, original.replace(/\n {2}endpoint:\n[\s\S]*?(?=\noutputs:)/, '\n').replace(/ {2}url: .*\n/, ''));
      const changed = await example.commit();
      fs.writeFileSync(pulumiYaml, original);
      await example.commit();
      const second = await accepted(aStackPromotion(changed, 'development', { stack }));

      // Act
      const planned = await service.plan(second.id);

      // Assert
      expect(planned.outcome).toBe('awaiting-approval');
      const detail = await service.getRun(ALL, second.id);
      expect(detail.planReceipt?.plan.counts).toMatchObject({ delete: 1, same: 2 });
      expect(detail.planReceipt?.approvalReasons).toEqual(['1 delete step']);
    });

    it('when an environment is set to always require approval, then even its development plan that only creates waits; others do not', async () => {
      // Arrange
      const always = await accepted(aStackPromotion(example.repository, 'development', { stack: freshStack('development'), environmentId: 'env-always-approved' }));
      const other = await accepted(aStackPromotion(example.repository, 'development', { stack: freshStack('development') }));

      // Act
      const planned = await approvingService.plan(always.id);
      const otherPlanned = await approvingService.plan(other.id);

      // Assert
      expect(planned.outcome).toBe('awaiting-approval');
      const detail = await approvingService.getRun(ALL, always.id);
      expect(detail.run).toMatchObject({ state: 'awaiting-approval', approvalRequired: true, waitingFor: { kind: 'approval', planDigest: detail.run.planDigest } });
      expect(detail.planReceipt?.plan.counts).toMatchObject({ create: 3, delete: 0, replace: 0 });
      expect(detail.planReceipt?.approvalReasons).toEqual([`required for environment ${always.environment.name}`]);
      expect(otherPlanned).toEqual({ outcome: 'applying' });
    });

    it('when an environment is set not to require approval on delete or replace, then its deleting plan applies without one; by default it waits', async () => {
      // Arrange: two stacks hold the example; the next commit drops the endpoint.
      const freely = freshStack('development');
      const guarded = freshStack('development');
      const firsts = [
        await accepted(aStackPromotion(example.repository, 'development', { stack: freely, environmentId: 'env-destroys-freely' })),
        await accepted(aStackPromotion(example.repository, 'development', { stack: guarded })),
      ];
      for (const first of firsts) {
        await approvingService.plan(first.id);
        await approvingService.apply(first.id);
      }
      const pulumiYaml = join(example.source, 'app', 'Pulumi.yaml');
      const original = fs.readFileSync(pulumiYaml, 'utf8');
      fs.writeFileSync(pulumiYaml, original.replace(/\n {2}endpoint:\n[\s\S]*?(?=\noutputs:)/, '\n').replace(/ {2}url: .*\n/, ''));
      const changed = await example.commit();
      fs.writeFileSync(pulumiYaml, original);
      await example.commit();
      const deleting = await accepted(aStackPromotion(changed, 'development', { stack: freely, environmentId: 'env-destroys-freely' }));
      const deletingByDefault = await accepted(aStackPromotion(changed, 'development', { stack: guarded }));

      // Act
      const planned = await approvingService.plan(deleting.id);
      const applied = await approvingService.apply(deleting.id);
      const plannedByDefault = await approvingService.plan(deletingByDefault.id);

      // Assert
      expect(planned).toEqual({ outcome: 'applying' });
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await approvingService.getRun(ALL, deleting.id);
      expect(detail.planReceipt).toMatchObject({ approvalRequired: false, approvalReasons: [], plan: { counts: { delete: 1, same: 2 } } });
      expect((await resourcesOf(freely)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service']);
      // A deleted resource is named with its op, but has no properties: it is not desired any more.
      const specified = ((await eventsOf(deleting.id)).find((e) => e.type === 'SpecificationApplied')?.data as { resources: EventResource[] }).resources;
      expect(specified.map((r) => [r.name, r.op, r.properties !== undefined])).toEqual([
        ['assets', 'same', true],
        ['api', 'same', true],
        ['endpoint', 'delete', false],
      ]);
      expect(plannedByDefault.outcome).toBe('awaiting-approval');
      expect((await approvingService.getRun(ALL, deletingByDefault.id)).planReceipt?.approvalReasons).toEqual(['1 delete step']);
    });

    it('when a plan is rejected, then the run ends rejected with the reason and one ProvisioningFailed', async () => {
      // Arrange
      const stack = freshStack('production');
      const run = await accepted(aStackPromotion(example.repository, 'production', { stack }));
      await service.plan(run.id);

      // Act
      const rejected = await service.reject(ALL, run.id, { reason: 'not during the freeze', by: 'operator-2' });

      // Assert
      expect(rejected).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.REJECTED', message: 'rejected by operator-2: not during the freeze' } });
      expect(await service.apply(run.id)).toEqual({ outcome: 'ended', state: 'rejected' });
      expect((await service.getRun(ALL, run.id)).decision).toMatchObject({ decision: 'rejected', by: 'operator-2', comment: 'not during the freeze' });
      const events = await eventsOf(run.id);
      expect(types(events)).toEqual(['SpecificationDeclared', 'ProvisioningFailed']);
      expect(events[1]?.data).toMatchObject({ state: 'rejected', code: 'PROVISIONING.REJECTED' });
    });

    it('when the approval wait times out, then the run fails with APPROVAL_TIMEOUT; an approved run goes on to apply', async () => {
      // Arrange
      const stack = freshStack('production');
      const idle = await accepted(aStackPromotion(example.repository, 'production', { stack }));
      await service.plan(idle.id);

      // Act
      const notYet = await service.afterApproval(idle.id, false);
      const timedOut = await service.afterApproval(idle.id, true);

      // Assert
      expect(notYet.outcome).toBe('awaiting-approval');
      expect(timedOut).toEqual({ outcome: 'ended', state: 'failed' });
      expect((await service.getRun(ALL, idle.id)).run.error?.code).toBe('PROVISIONING.APPROVAL_TIMEOUT');
      expect(types(await eventsOf(idle.id))).toEqual(['SpecificationDeclared', 'ProvisioningFailed']);
    });

    it('when another run holds the stack, then the run waits saying who holds it, and plans once the lock is released', async () => {
      // Arrange
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));

      // Act
      const blocked = await service.plan(run.id);
      const recorded = (await service.getRun(ALL, run.id)).run;
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');
      const planned = await service.plan(run.id);

      // Assert
      expect(blocked).toEqual({ outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack: qualifiedExampleStack(stack), heldBy: 'run-elsewhere' } });
      expect(recorded).toMatchObject({ state: 'queued', waitingFor: { kind: 'stack-lock', heldBy: 'run-elsewhere' } });
      expect(planned).toEqual({ outcome: 'applying' });
      expect((await service.getRun(ALL, run.id)).run.waitingFor).toBeUndefined();
      expect((await getStackLock(db(), exampleStack(stack)))?.holderRun).toBe(run.id);
      await service.apply(run.id);
    });

    it('when a stack is released, then the run to wake is the first one waiting for it; none while a run holds it or nobody waits', async () => {
      // Arrange: two environments deploying to one stack, both behind a lock held elsewhere.
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const first = await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId: `env-${stack}-a` }));
      const second = await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId: `env-${stack}-b` }));
      await service.plan(second.id);
      await service.plan(first.id);

      // Act
      const whileHeld = await service.nextWaitingRun({ stack: exampleStack(stack) });
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');
      const afterRelease = await service.nextWaitingRun({ runId: second.id });
      await service.plan(first.id);
      const whileFirstHoldsIt = await service.nextWaitingRun({ runId: first.id });
      await service.apply(first.id);
      const afterFirst = await service.nextWaitingRun({ runId: first.id });
      await service.plan(second.id);
      await service.apply(second.id);
      const afterBoth = await service.nextWaitingRun({ stack: exampleStack(stack) });

      // Assert
      expect(whileHeld).toBeUndefined();
      expect(afterRelease).toBe(first.id);
      expect(whileFirstHoldsIt).toBeUndefined();
      expect(afterFirst).toBe(second.id);
      expect(afterBoth).toBeUndefined();
    });

    it('when runs of one stack wait for it, then the earlier one takes it first even if the later one asks first', async () => {
      // Arrange: two environments deploying to one stack, both behind a lock held elsewhere.
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const earlier = await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId: `env-a-${stack}` }));
      const later = await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId: `env-b-${stack}` }));
      await service.plan(earlier.id);
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');

      // Act
      const laterFirst = await service.plan(later.id);
      const earlierNext = await service.plan(earlier.id);

      // Assert
      expect(laterFirst).toEqual({ outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack: qualifiedExampleStack(stack), queuedBehind: earlier.id } });
      expect(earlierNext).toEqual({ outcome: 'applying' });
      await service.apply(earlier.id);
      expect(await service.plan(later.id)).toEqual({ outcome: 'applying' });
      await service.apply(later.id);
    });

    it('when a newer promotion of the same environment arrives, then a queued older run is superseded pointing at it', async () => {
      // Arrange
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const older = await accepted(aStackPromotion(example.repository, 'development', { stack }));

      // Act
      const newer = await accepted(aStackPromotion(example.repository, 'development', { stack }));

      // Assert
      const superseded = (await service.getRun(ALL, older.id)).run;
      expect(superseded).toMatchObject({ state: 'superseded', supersededBy: newer.id, error: { code: 'PROVISIONING.SUPERSEDED' } });
      expect(await service.plan(older.id)).toEqual({ outcome: 'ended', state: 'superseded' });
      const events = await eventsOf(older.id);
      expect(types(events)).toEqual(['ProvisioningFailed']);
      expect(events[0]?.data).toMatchObject({ state: 'superseded', supersededBy: newer.id });
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');
    });

    it('when a queued run is canceled, then it ends canceled with one ProvisioningFailed; a started run cannot be canceled', async () => {
      // Arrange
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack: exampleStack(stack), run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const queued = await accepted(aStackPromotion(example.repository, 'development', { stack }));
      const started = await accepted(aStackPromotion(example.repository, 'production', { stack: freshStack('production') }));
      await service.plan(started.id);

      // Act
      const canceled = await service.cancel(ALL, queued.id, 'operator-3');

      // Assert
      expect(canceled).toMatchObject({ state: 'canceled', error: { code: 'PROVISIONING.CANCELED' } });
      expect(types(await eventsOf(queued.id))).toEqual(['ProvisioningFailed']);
      await expect(service.cancel(ALL, queued.id, 'operator-3')).rejects.toMatchObject({ code: 'PROVISIONING.RUN_NOT_CANCELABLE', details: { state: 'canceled' } });
      await expect(service.cancel(ALL, started.id, 'operator-3')).rejects.toMatchObject({ code: 'PROVISIONING.RUN_NOT_CANCELABLE', details: { state: 'awaiting-approval' } });
      expect(await service.plan(queued.id)).toEqual({ outcome: 'ended', state: 'canceled' });
      await releaseStackLock(db(), exampleStack(stack), 'run-elsewhere');
    });

    it('when a promotion arrives twice, under its messageId or under a new one, then there is one run', async () => {
      // Arrange
      const promotion = aStackPromotion(example.repository, 'development', { stack: freshStack('development') });
      const first = await intake(promotion, `dup-${dialect}-1`);

      // Act
      const redelivered = await intake(promotion, `dup-${dialect}-1`);
      const resent = await intake(promotion, `dup-${dialect}-2`);

      // Assert
      if (first.outcome !== 'accepted') throw new Error('not accepted');
      expect(redelivered).toEqual({ outcome: 'duplicate', run: first.run });
      expect(resent).toEqual({ outcome: 'duplicate', run: first.run });
      const runs = await db().selectFrom('provisioning_runs').select('id').where('promotion_id', '=', promotion.promotionId).execute();
      expect(runs).toHaveLength(1);
      // Keyed by the run's tenant and promotion id: the resend is known by that key.
      const inbox = await db().selectFrom('inbox').select(['message_id', 'outcome']).where('message_id', 'in', [`dup-${dialect}-1`, `dup-${dialect}-2`]).orderBy('message_id').execute();
      expect(inbox).toEqual([
        { message_id: `dup-${dialect}-1`, outcome: 'queued' },
        { message_id: `dup-${dialect}-2`, outcome: 'duplicate-business-key' },
      ]);
    });

    it('when a message is not a PromotionApproved, then a rejection is recorded with the reason and one ProvisioningFailed, also when it comes again', async () => {
      // Arrange
      const body = { promotionId: `prom-bad-${dialect}`, tenantId: 'demo-team', environment: { id: 'env-x' } };

      // Act
      const first = await intake(body, `bad-${dialect}-1`);
      const again = await intake(body, `bad-${dialect}-1`);
      const notJson = await intake('{ not json', `bad-${dialect}-2`);

      // Assert
      expect(first).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.INVALID_PROMOTION', reason: expect.stringContaining('desiredState') });
      expect(again).toMatchObject({ outcome: 'rejected' });
      const rejection = await service.getRejection(`bad-${dialect}-1`);
      expect(rejection).toMatchObject({ promotionId: body.promotionId, tenantId: 'demo-team', code: 'PROVISIONING.INVALID_PROMOTION' });
      expect(rejection?.problems.map((p) => p.field)).toEqual(expect.arrayContaining(['environment.name', 'release', 'desiredState', 'requestedBy']));
      const events = await eventsOf(body.promotionId);
      expect(types(events)).toEqual(['ProvisioningFailed']);
      expect(events[0]?.data).toMatchObject({ messageId: `bad-${dialect}-1`, state: 'rejected', code: 'PROVISIONING.INVALID_PROMOTION' });
      expect(notJson).toMatchObject({ outcome: 'rejected', reason: expect.stringContaining('not valid JSON') });
      expect(types(await eventsOf(`bad-${dialect}-2`))).toEqual(['ProvisioningFailed']);
      expect(await db().selectFrom('provisioning_runs').select('id').where('promotion_id', '=', body.promotionId).execute()).toEqual([]);
    });

    it('when the tenant is unknown or the commit or path is not in the repository, then the run is recorded rejected with that reason', async () => {
      // Arrange
      const base = aStackPromotion(example.repository, 'development', { stack: freshStack('development') });
      const unknownTenant = { ...base, promotionId: `${base.promotionId}-t`, tenantId: 'nobody' };
      const missingCommit = { ...base, promotionId: `${base.promotionId}-c`, desiredState: { ...base.desiredState, commit: 'f'.repeat(40) } };
      const missingPath = { ...base, promotionId: `${base.promotionId}-p`, desiredState: { ...base.desiredState, path: 'no-such-folder' } };

      // Act
      const results = [await intake(unknownTenant), await intake(missingCommit), await intake(missingPath)];

      // Assert
      expect(results.map((r) => (r.outcome === 'rejected' ? [r.run?.state, r.code] : r.outcome))).toEqual([
        ['rejected', 'PROVISIONING.UNKNOWN_TENANT'],
        ['rejected', 'DESIRED_STATE.COMMIT_NOT_FOUND'],
        ['rejected', 'DESIRED_STATE.PATH_NOT_FOUND'],
      ]);
      for (const result of results) {
        if (result.outcome !== 'rejected' || !result.run) throw new Error('no run');
        const events = await eventsOf(result.run.id);
        expect(types(events)).toEqual(['ProvisioningFailed']);
        expect(events[0]?.data).toMatchObject({ state: 'rejected', code: result.code, reason: result.reason });
        expect(await service.plan(result.run.id)).toEqual({ outcome: 'ended', state: 'rejected' });
      }
    });

    it('when the Git remote cannot be reached, then intake throws a transient error and records nothing, so the message is retried', async () => {
      // Arrange
      const base = aStackPromotion(example.repository, 'development', { stack: freshStack('development') });
      const unreachable = { ...base, desiredState: { ...base.desiredState, repository: 'https://127.0.0.1:9/desired-state.git' } };
      // An installation that allows the remote: only then is it fetched from.
      const allowing = createProvisioningService({ ...serviceOptions(), sources: { ...testSources(root), policy: parseSourcePolicy({ '*': [{ prefix: 'https://127.0.0.1:9/' }] }) } });

      // Act
      const result = allowing.intake({ messageId: `remote-${dialect}`, body: unreachable });

      // Assert
      await expect(result).rejects.toMatchObject({ code: 'DESIRED_STATE.REMOTE_UNREACHABLE', kind: 'unavailable' });
      expect(await db().selectFrom('provisioning_runs').select('id').where('promotion_id', '=', base.promotionId).execute()).toEqual([]);
      expect(await db().selectFrom('inbox').select('message_id').where('message_id', '=', `remote-${dialect}`).execute()).toEqual([]);
    });

    it('when a receipt is written, then it cannot be written again', async () => {
      // Arrange
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack: freshStack('development') }));
      await service.plan(run.id);
      await service.apply(run.id);
      const before = await findRunDetail(db(), run.id, ALL);
      if (!before?.planReceipt || !before.applyReceipt) throw new Error(`no receipts: ${JSON.stringify(before?.run)}`);
      const now = clock.now().getTime();

      // Act (one at a time: a rejection must have its handler before the next one can happen)
      const rewritePlan = await recordPlan(db(), run.id, { ...before.planReceipt, approvalRequired: true }, 'applying', null, now).catch((e: unknown) => e);
      const rewriteApply = await recordApply(db(), run.id, { ...before.applyReceipt, stack: 'elsewhere' }, 'applied', undefined, now).catch((e: unknown) => e);

      // Assert
      expect(rewritePlan).toMatchObject({ code: 'PROVISIONING.RECEIPT_IMMUTABLE' });
      expect(rewriteApply).toMatchObject({ code: 'PROVISIONING.RECEIPT_IMMUTABLE' });
      expect(await findRunDetail(db(), run.id, ALL)).toEqual(before);
    });

    it('when runs used secret and configuration references, then no stored or published byte holds a value; only the target does', async () => {
      // Arrange
      const development = await accepted(aStackPromotion(example.repository, 'development', { stack: freshStack('development') }));
      const production = await accepted(aStackPromotion(example.repository, 'production', { stack: freshStack('production') }));

      // Act
      await service.plan(development.id);
      await service.apply(development.id);
      await service.plan(production.id);
      await service.approve(ALL, production.id, { planDigest: (await service.getRun(ALL, production.id)).run.planDigest ?? '', by: 'operator-1' });
      await service.apply(production.id);

      // Assert
      expect((await service.getRun(ALL, production.id)).run.state).toBe('applied');
      const stored = [];
      for (const table of ['provisioning_runs', 'provisioning_approvals', 'provisioning_rejections', 'outbox', 'inbox', 'local_iac_stacks']) {
        stored.push(JSON.stringify((await sql`select * from ${sql.table(table)}`.execute(database.store.db)).rows));
      }
      const everything = stored.join('\n');
      for (const value of [EXAMPLE_SECRETS.development, EXAMPLE_SECRETS.production, 'flag-token-91c2aa']) expect(everything).not.toContain(value);
      expect(everything).toContain('broker://runtime-cloud/app-db-password');
      const target = JSON.stringify(await cloud.list('local'));
      expect(target).toContain(EXAMPLE_SECRETS.development);
      expect(target).toContain(EXAMPLE_SECRETS.production);
      expect(target).toContain('flag-token-91c2aa');
    });

    it('when runs are listed, then they filter by environment and status, page with a cursor and show only the tenant asked for', async () => {
      // Arrange: three runs of one environment, on the one stack its first run bound it to: each newer one
      // supersedes the queued one before it.
      const environmentId = `env-list-${dialect}`;
      const stack = freshStack('development');
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId })));
      const ids = runs.map((r) => r.id);
      const demoTeam = { kind: 'one', tenant: 'demo-team' } as const;

      // Act
      const pageOne = await service.listRuns(demoTeam, { environment: environmentId, limit: 2 });
      const pageTwo = await service.listRuns(demoTeam, { environment: environmentId, limit: 2, cursor: pageOne.nextCursor ?? '' });
      const queued = await service.listRuns(ALL, { environment: environmentId, state: 'queued', limit: 10 });
      const superseded = await service.listRuns(ALL, { environment: environmentId, state: 'superseded', limit: 10 });
      const applied = await service.listRuns(ALL, { environment: environmentId, state: 'applied', limit: 10 });
      const otherTenant = await service.listRuns({ kind: 'one', tenant: 'someone-else' }, { environment: environmentId, limit: 10 });
      const newestOne = await service.listRuns(demoTeam, { environment: environmentId, limit: 2, order: 'newest' });
      const newestTwo = await service.listRuns(demoTeam, { environment: environmentId, limit: 2, order: 'newest', cursor: newestOne.nextCursor ?? '' });

      // Assert
      expect(newestOne.items.map((r) => r.id)).toEqual([ids[2], ids[1]]);
      expect(newestTwo.items.map((r) => r.id)).toEqual([ids[0]]);
      expect(newestTwo.nextCursor).toBeUndefined();
      expect(pageOne.items.map((r) => r.id)).toEqual(ids.slice(0, 2));
      expect(pageOne.nextCursor).toBeDefined();
      expect(pageTwo.items.map((r) => r.id)).toEqual(ids.slice(2));
      expect(pageTwo.nextCursor).toBeUndefined();
      expect(queued.items.map((r) => r.id)).toEqual(ids.slice(2));
      expect(superseded.items.map((r) => r.id)).toEqual(ids.slice(0, 2));
      expect(applied.items).toEqual([]);
      expect(otherTenant.items).toEqual([]);
      await expect(service.getRun({ kind: 'one', tenant: 'someone-else' }, ids[0] ?? '')).rejects.toMatchObject({ code: 'PROVISIONING.RUN_NOT_FOUND', kind: 'not-found' });
      await expect(service.listRuns(ALL, { limit: 10, cursor: 'bogus!' })).rejects.toMatchObject({ code: 'REQUEST.INVALID_CURSOR' });
    });
  });
}
