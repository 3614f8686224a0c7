import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CloudEvent } from '../../shared/platform/bus/events';
import { createLocalCloud, type LocalCloud } from '../../shared/platform/cloud/local-cloud';
import { localIacRunner } from '../../shared/platform/iac/iac-runner';
import { stackStateDb, writeStackState } from '../../shared/platform/iac/stack-state.repository';
import { localReferenceResolver } from '../../shared/platform/secrets/local-references';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { findRunDetail, recordApply, recordPlan } from '../../shared/provisioning/provisioning.repository';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { acquireStackLock, getStackLock, provisioningDb, releaseStackLock } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { aStackPromotion, EXAMPLE_SECRETS, provisioningExample, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';

const ALL = { kind: 'all' } as const;
const TENANTS = new Set(['demo-team']);

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`provisioning runs on ${dialect}`, () => {
    let database: TestDatabase;
    let example: ProvisioningExample;
    let service: ProvisioningService;
    let cloud: LocalCloud;
    let root: string;
    let n = 0;
    const clock = new ManualClock('2026-03-01T09:00:00Z');
    /** A stack of the example no other test of this file uses. */
    const freshStack = (tier: 'development' | 'production') => `${tier}-${++n}`;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-provisioning-'));
      example = await provisioningExample(root, join(root, 'state'));
      writeExampleReferences(join(root, 'state'));
      const { store } = database;
      cloud = createLocalCloud({ store, clock, ids: randomIds });
      service = createProvisioningService({
        store,
        clock,
        ids: randomIds,
        engine: localIacRunner({ store, clock, ids: randomIds, cloud }),
        resolveReferences: localReferenceResolver(join(root, 'state', 'references.json')),
        knowsTenant: (tenant) => Promise.resolve(TENANTS.has(tenant)),
        desiredState: { cacheDir: join(root, 'git-cache') },
        hostId: 'test-host',
      });
    });
    afterAll(async () => {
      await database?.drop();
      fs.rmSync(root, { recursive: true, force: true });
    });

    const db = () => provisioningDb(database.store.db);
    /** The events a run (or a promotion or message, by correlation id) put in the outbox, in order. */
    const eventsOf = async (correlationId: string): Promise<CloudEvent[]> =>
      (await db().selectFrom('outbox').select('payload').where('correlation_id', '=', correlationId).orderBy('seq').execute()).map((r) => JSON.parse(r.payload) as CloudEvent);
    const types = (events: readonly CloudEvent[]) => events.map((e) => e.type);
    const resourcesOf = async (stack: string) => (await cloud.list('local')).filter((r) => r.urn.startsWith(`urn:pulumi:${stack}::`));
    let messages = 0;
    const intake = (body: unknown, messageId = `msg-${dialect}-${++messages}`) => service.intake({ messageId, body });

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
      expect(detail.run).toMatchObject({ state: 'applied', approvalRequired: false, planDigest: detail.planReceipt?.plan.digest });
      expect(detail.run.finishedAt).toBeInstanceOf(Date);
      expect(detail.planReceipt).toMatchObject({
        runId: run.id,
        stack,
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
      expect(detail.applyReceipt?.result).toMatchObject({ status: 'applied', planDigest: detail.run.planDigest });
      expect(detail.applyReceipt?.result.resources.map((r) => r.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      expect(types(await eventsOf(run.id))).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      expect((await resourcesOf(stack)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service', 'local:network:Endpoint']);
      expect(await getStackLock(db(), stack)).toBeUndefined();
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
      expect(planned).toEqual({ outcome: 'awaiting-approval', planDigest: waiting.planDigest });
      expect(waiting).toMatchObject({ state: 'awaiting-approval', approvalRequired: true, waitingFor: { kind: 'approval', planDigest: waiting.planDigest } });
      // While it waits for a person, the stack is free for others.
      expect(await getStackLock(db(), stack)).toBeUndefined();
      expect(beforeApproval).toEqual({ outcome: 'awaiting-approval', planDigest: waiting.planDigest });
      expect(approved.state).toBe('applying');
      expect(applied).toEqual({ outcome: 'ended', state: 'applied' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.planReceipt?.approvalReasons).toEqual(['production tier']);
      expect(detail.decision).toMatchObject({ decision: 'approved', planDigest: waiting.planDigest, by: 'operator-1', comment: 'looks right' });
      expect(types(await eventsOf(run.id))).toEqual(['SpecificationDeclared', 'SpecificationApplied', 'ProvisioningApplied']);
      await expect(service.approve(ALL, run.id, { planDigest: waiting.planDigest ?? '', by: 'operator-1' })).rejects.toMatchObject({ code: 'PROVISIONING.RUN_NOT_AWAITING_APPROVAL' });
    });

    it('when the stack state changes between approval and apply, then the run fails with PLAN_CHANGED and nothing is applied', async () => {
      // Arrange
      const stack = freshStack('production');
      const run = await accepted(aStackPromotion(example.repository, 'production', { stack }));
      await service.plan(run.id);
      const digest = (await service.getRun(ALL, run.id)).run.planDigest ?? '';
      await service.approve(ALL, run.id, { planDigest: digest, by: 'operator-1' });
      // An import out of band: the bucket now exists in the stack's state.
      await writeStackState(
        stackStateDb(database.store.db),
        {
          stack,
          project: 'demo-app',
          serial: 1,
          resources: [
            { urn: `urn:pulumi:${stack}::demo-app::local:storage:Bucket::assets`, name: 'assets', type: 'local:storage:Bucket', id: 'imported-1', inputs: {}, outputs: { id: 'imported-1' }, protect: true, dependencies: [] },
          ],
        },
        clock.now().getTime(),
      );

      // Act
      const result = await service.apply(run.id);

      // Assert
      expect(result).toEqual({ outcome: 'ended', state: 'failed' });
      const detail = await service.getRun(ALL, run.id);
      expect(detail.run.error?.code).toBe('PROVISIONING.PLAN_CHANGED');
      expect(detail.applyReceipt?.result).toMatchObject({ status: 'failed', error: { code: 'PROVISIONING.PLAN_CHANGED' } });
      expect(detail.applyReceipt?.result.resources.every((r) => r.status === 'skipped')).toBe(true);
      expect(await resourcesOf(stack)).toEqual([]);
      const events = await eventsOf(run.id);
      expect(types(events)).toEqual(['SpecificationDeclared', 'ProvisioningFailed']);
      expect(events[1]?.data).toMatchObject({ state: 'failed', code: 'PROVISIONING.PLAN_CHANGED' });
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
      expect(await getStackLock(db(), stack)).toBeUndefined();
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
      await acquireStackLock(db(), dialect, { stack, run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const run = await accepted(aStackPromotion(example.repository, 'development', { stack }));

      // Act
      const blocked = await service.plan(run.id);
      const recorded = (await service.getRun(ALL, run.id)).run;
      await releaseStackLock(db(), stack, 'run-elsewhere');
      const planned = await service.plan(run.id);

      // Assert
      expect(blocked).toEqual({ outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack, heldBy: 'run-elsewhere' } });
      expect(recorded).toMatchObject({ state: 'queued', waitingFor: { kind: 'stack-lock', heldBy: 'run-elsewhere' } });
      expect(planned).toEqual({ outcome: 'applying' });
      expect((await service.getRun(ALL, run.id)).run.waitingFor).toBeUndefined();
      expect((await getStackLock(db(), stack))?.holderRun).toBe(run.id);
      await service.apply(run.id);
    });

    it('when runs of one stack wait for it, then the earlier one takes it first even if the later one asks first', async () => {
      // Arrange: two environments deploying to one stack, both behind a lock held elsewhere.
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack, run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
      const earlier = await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId: `env-a-${stack}` }));
      const later = await accepted(aStackPromotion(example.repository, 'development', { stack, environmentId: `env-b-${stack}` }));
      await service.plan(earlier.id);
      await releaseStackLock(db(), stack, 'run-elsewhere');

      // Act
      const laterFirst = await service.plan(later.id);
      const earlierNext = await service.plan(earlier.id);

      // Assert
      expect(laterFirst).toEqual({ outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack, queuedBehind: earlier.id } });
      expect(earlierNext).toEqual({ outcome: 'applying' });
      await service.apply(earlier.id);
      expect(await service.plan(later.id)).toEqual({ outcome: 'applying' });
      await service.apply(later.id);
    });

    it('when a newer promotion of the same environment arrives, then a queued older run is superseded pointing at it', async () => {
      // Arrange
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack, run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
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
      await releaseStackLock(db(), stack, 'run-elsewhere');
    });

    it('when a queued run is canceled, then it ends canceled with one ProvisioningFailed; a started run cannot be canceled', async () => {
      // Arrange
      const stack = freshStack('development');
      await acquireStackLock(db(), dialect, { stack, run: 'run-elsewhere', host: 'other-host', now: clock.now().getTime(), ttlMs: 60_000 });
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
      await releaseStackLock(db(), stack, 'run-elsewhere');
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
      const inbox = await db().selectFrom('inbox').select(['message_id', 'outcome']).where('business_key', '=', promotion.promotionId).orderBy('message_id').execute();
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

      // Act
      const result = intake(unreachable, `remote-${dialect}`);

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
      if (!before?.planReceipt || !before.applyReceipt) throw new Error('no receipts');
      const now = clock.now().getTime();

      // Act
      const rewritePlan = recordPlan(db(), run.id, { ...before.planReceipt, approvalRequired: true }, 'applying', null, now);
      const rewriteApply = recordApply(db(), run.id, { ...before.applyReceipt, stack: 'elsewhere' }, 'applied', undefined, now);

      // Assert
      await expect(rewritePlan).rejects.toMatchObject({ code: 'PROVISIONING.RECEIPT_IMMUTABLE' });
      await expect(rewriteApply).rejects.toMatchObject({ code: 'PROVISIONING.RECEIPT_IMMUTABLE' });
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
      // Arrange: three queued runs of one environment, each on a stack of its own (so none supersedes another).
      const environmentId = `env-list-${dialect}`;
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await accepted(aStackPromotion(example.repository, 'development', { stack: freshStack('development'), environmentId })));
      const ids = runs.map((r) => r.id);
      const demoTeam = { kind: 'one', tenant: 'demo-team' } as const;

      // Act
      const pageOne = await service.listRuns(demoTeam, { environment: environmentId, limit: 2 });
      const pageTwo = await service.listRuns(demoTeam, { environment: environmentId, limit: 2, cursor: pageOne.nextCursor ?? '' });
      const queued = await service.listRuns(ALL, { environment: environmentId, state: 'queued', limit: 10 });
      const applied = await service.listRuns(ALL, { environment: environmentId, state: 'applied', limit: 10 });
      const otherTenant = await service.listRuns({ kind: 'one', tenant: 'someone-else' }, { environment: environmentId, limit: 10 });

      // Assert
      expect(pageOne.items.map((r) => r.id)).toEqual(ids.slice(0, 2));
      expect(pageOne.nextCursor).toBeDefined();
      expect(pageTwo.items.map((r) => r.id)).toEqual(ids.slice(2));
      expect(pageTwo.nextCursor).toBeUndefined();
      expect(queued.items.map((r) => r.id)).toEqual(ids);
      expect(applied.items).toEqual([]);
      expect(otherTenant.items).toEqual([]);
      await expect(service.getRun({ kind: 'one', tenant: 'someone-else' }, ids[0] ?? '')).rejects.toMatchObject({ code: 'PROVISIONING.RUN_NOT_FOUND', kind: 'not-found' });
      await expect(service.listRuns(ALL, { limit: 10, cursor: 'bogus!' })).rejects.toMatchObject({ code: 'REQUEST.INVALID_CURSOR' });
    });
  });
}
