import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { examplePromotion } from '../../local/example-repository';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { randomIds } from '../../shared/platform/time/clock';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { acquireStackLock, getStackLock, provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { TestRepository } from '../support/git-repositories';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';

/**
 * Tenants are isolated all the way down (issue 16), end to end on a local host as a user would see it: two tenants
 * with the same project (`demo-app`), stack (`development`) and environment id promote different programs to one
 * local cloud. Tenant A (`demo-team`) promotes the example (3 resources); tenant B (`tenant-b`), from a repository of
 * its own under the state dir's `repos/`, a program holding one of those resources under the same name. Each applies
 * only its own, deletes only its own, scans only its own; neither reads, approves, cancels, unlocks or decides the
 * other's runs, stacks, environments or proposals; a lock held on one tenant's stack never holds up the other's.
 */
const ENVIRONMENT = 'env-demo-development';
const A = 'demo-team';
const B = 'tenant-b';
const admin = { roles: ['PlatformAdmin'], subject: 'platform-admin' };
const operatorA = { tenant: A, roles: ['Operator'], subject: 'operator-a' };
const operatorB = { tenant: B, roles: ['Operator'], subject: 'operator-b' };
const B_PROGRAM = 'name: demo-app\nruntime: yaml\nresources:\n  assets:\n    type: local:storage:Bucket\n    properties:\n      name: tenant-b-assets\n';

interface RunBody {
  runId: string;
  promotionId: string;
  tenant: string;
  state: string;
  qualifiedStack?: string;
  planDigest?: string;
  waitingFor?: { kind: string; stack?: string; heldBy?: string };
  error?: { code: string; message: string };
  planReceipt?: { plan: { counts: Record<string, number> } };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`two tenants with the same names on one local host (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    let repositoryB: TestRepository;
    let cloud: LocalCloud;
    const runs: Record<string, RunBody> = {};

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-tenants-'));
      // The product's path: plans and applies as runner jobs on the host's agents.
      host = await startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS }, depsOverrides: database.overrides });
      example = await provisioningExample(root, host.stateDir, 0);
      writeExampleReferences(host.stateDir);
      // Tenant B's own repository, where the local host allows developers' repositories: <state dir>/repos/.
      repositoryB = await TestRepository.init(join(host.stateDir, 'repos', 'tenant-b'));
      await repositoryB.commit({ 'app/Pulumi.yaml': B_PROGRAM, 'app/Pulumi.development.yaml': 'config: {}\n' });
      const created = await host.fetch(`/runtime-cloud/tenants/${B}`, { method: 'PUT', body: JSON.stringify({ edition: 'team' }), claims: admin });
      expect(created.status).toBeLessThan(300);
      cloud = createLocalCloud({ store: host.host.deps.sql, clock: host.host.deps.clock, ids: randomIds });
    });
    afterAll(async () => {
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    const call = async (path: string, claims: object, init: RequestInit = {}) => {
      const response = await host.fetch(path, { ...init, claims });
      const text = await response.text();
      return { status: response.status, body: (text ? JSON.parse(text) : undefined) as Record<string, unknown> & { items?: unknown[]; code?: string } };
    };
    const getJson = async <T>(path: string, claims: object): Promise<T> => {
      const answer = await call(path, claims);
      expect(answer.status, `${path}: ${JSON.stringify(answer.body)}`).toBe(200);
      return answer.body as T;
    };
    let sent = 0;
    /** Sends a promotion and answers its run once in one of `states`. */
    async function promoted(promotion: PromotionApproved, operator: object, states: readonly string[] = ['applied', 'failed', 'rejected']): Promise<RunBody> {
      await sendToPromotions(host, promotion, `tenants-${++sent}-${promotion.promotionId}`);
      const queued = await eventually(async () => (await getJson<{ items: RunBody[] }>(`/runtime-cloud/runs?limit=1000`, operator)).items.find((r) => r.promotionId === promotion.promotionId));
      return eventually(async () => {
        const run = await getJson<RunBody>(`/runtime-cloud/runs/${queued.runId}`, operator);
        return states.includes(run.state) ? run : undefined;
      });
    }
    const promotionOfA = () => examplePromotion('development', example.repository);
    const promotionOfB = (commit: string): PromotionApproved => ({
      ...examplePromotion('development', example.repository),
      tenantId: B,
      desiredState: { repository: pathToFileURL(repositoryB.dir).href, commit, path: 'app', stack: 'development' },
    });
    const scopeOf = async (tenant: string) => (await cloud.list('local')).filter((r) => r.scope === tenant);
    const inventoryOf = (operator: object) => getJson<{ items: { urn: string }[] }>(`/runtime-cloud/environments/${ENVIRONMENT}/inventory`, operator);
    const driftOf = (operator: object) => getJson<{ environment: { drift: { status: string } }; findings: unknown[]; openProposalId?: string }>(`/runtime-cloud/environments/${ENVIRONMENT}/drift`, operator);
    const inSync = (operator: object) => eventually(async () => ((await driftOf(operator)).environment.drift.status === 'in-sync' ? true : undefined));

    it('when both tenants promote their program to the same project, stack, environment and promotion id, then each plans against its own state and applies only its own resources', async () => {
      // Act: B's promotion even has A's promotion id (ids are unique per tenant).
      const fromA = promotionOfA();
      runs.a = await promoted(fromA, operatorA);
      runs.b = await promoted({ ...promotionOfB(await gitHead(repositoryB)), promotionId: fromA.promotionId }, operatorB);

      // Assert: B's plan creates its one bucket; against A's state it would have deleted A's service and endpoint.
      expect(runs.a).toMatchObject({ state: 'applied', tenant: A, qualifiedStack: `${A}/demo-app/development`, planReceipt: { plan: { counts: { create: 3, delete: 0 } } } });
      expect(runs.b).toMatchObject({ state: 'applied', tenant: B, qualifiedStack: `${B}/demo-app/development`, planReceipt: { plan: { counts: { create: 1, delete: 0 } } } });
      expect((await scopeOf(A)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service', 'local:network:Endpoint']);
      expect((await scopeOf(B)).map((r) => r.properties.name)).toEqual(['tenant-b-assets']);
      // The same urn in both scopes, two resources.
      expect((await scopeOf(B))[0]?.urn).toBe((await scopeOf(A))[0]?.urn);
    });

    it('when both environments are scanned, then each tenant sees its own resources only, in sync, none of the other\'s reported as unmanaged', async () => {
      // Act
      await inSync(operatorA);
      await inSync(operatorB);

      // Assert
      expect((await inventoryOf(operatorA)).items).toHaveLength(3);
      expect((await inventoryOf(operatorB)).items).toHaveLength(1);
      expect((await driftOf(operatorA)).findings).toEqual([]);
      expect((await driftOf(operatorB)).findings).toEqual([]);
      // A PlatformAdmin naming the id both tenants use is asked to name the tenant, and sees each when it does.
      const ambiguous = await call(`/runtime-cloud/environments/${ENVIRONMENT}`, admin);
      expect(ambiguous).toMatchObject({ status: 409, body: { code: 'INVENTORY.ENVIRONMENT_AMBIGUOUS' } });
      expect((await getJson<{ tenantId: string }>(`/runtime-cloud/environments/${ENVIRONMENT}?tenant=${B}`, admin)).tenantId).toBe(B);
    });

    it('when tenant B tries tenant A\'s run, stack and lock, then it reads nothing, cancels nothing and unlocks nothing', async () => {
      // Act and assert
      const runA = runs.a?.runId ?? '';
      expect((await call(`/runtime-cloud/runs/${runA}`, operatorB)).status).toBe(404);
      expect((await call(`/runtime-cloud/runs/${runA}/cancel`, operatorB, { method: 'POST' })).status).toBe(404);
      expect((await call(`/runtime-cloud/runs/${runA}/approve`, operatorB, { method: 'POST', body: JSON.stringify({ planDigest: runs.a?.planDigest }) })).status).toBe(404);
      expect((await getJson<{ items: RunBody[] }>(`/runtime-cloud/runs?environment=${ENVIRONMENT}`, operatorB)).items.map((r) => r.tenant)).toEqual([B]);
      expect(await call(`/runtime-cloud/tenants/${A}/stacks/demo-app/development/lock`, operatorB)).toMatchObject({ status: 403, body: { code: 'AUTH.TENANT_MISMATCH' } });
      const unlock = { method: 'POST', body: JSON.stringify({ reason: 'taking it over' }) };
      expect(await call(`/runtime-cloud/tenants/${A}/stacks/demo-app/development/unlock`, operatorB, unlock)).toMatchObject({ status: 403 });
      expect(await call(`/runtime-cloud/tenants/${A}/stacks/demo-app/development/unlock`, { ...operatorB, roles: ['PlatformAdmin'] }, unlock)).toMatchObject({
        status: 403,
        body: { code: 'AUTH.PLATFORM_ONLY' },
      });
    });

    it('when tenant A\'s stack is locked, then tenant B\'s run of the same names goes through, A\'s waits, and a PlatformAdmin\'s unlock of A\'s stack is recorded and frees only it', async () => {
      // Arrange: a run that is not there holds A's stack (a host that died mid-apply).
      const db = provisioningDb(host.host.deps.sql.db);
      const stackA = { tenant: A, project: 'demo-app', stack: 'development' };
      const stackB = { tenant: B, project: 'demo-app', stack: 'development' };
      await acquireStackLock(db, host.host.deps.sql.dialect, { stack: stackA, run: 'run-of-a-dead-host', host: 'dead-host', now: Date.now(), ttlMs: 600_000 });

      // Act
      await repositoryB.commit({ 'app/Pulumi.development.yaml': 'config: {}\n# again\n' });
      const throughB = await promoted(promotionOfB(await gitHead(repositoryB)), operatorB);
      const waitingA = await promoted(promotionOfA(), operatorA, ['queued']);
      const held = await eventually(async () => {
        const run = await getJson<RunBody>(`/runtime-cloud/runs/${waitingA.runId}`, operatorA);
        return run.waitingFor?.kind === 'stack-lock' ? run : undefined;
      });
      const lock = await getJson<{ stack: string; holderRun: string; version: number }>(`/runtime-cloud/tenants/${A}/stacks/demo-app/development/lock`, operatorA);
      const broken = await call(`/runtime-cloud/tenants/${A}/stacks/demo-app/development/unlock`, admin, { method: 'POST', body: JSON.stringify({ reason: 'its host is gone', version: lock.version }) });
      const appliedA = await eventually(async () => {
        const run = await getJson<RunBody>(`/runtime-cloud/runs/${waitingA.runId}`, operatorA);
        return run.state === 'applied' ? run : undefined;
      });

      // Assert
      expect(throughB.state).toBe('applied');
      expect(held.waitingFor).toMatchObject({ kind: 'stack-lock', stack: `${A}/demo-app/development`, heldBy: 'run-of-a-dead-host' });
      expect(lock).toMatchObject({ stack: `${A}/demo-app/development`, holderRun: 'run-of-a-dead-host' });
      expect(broken).toMatchObject({ status: 200, body: { by: 'platform-admin', reason: 'its host is gone' } });
      expect(appliedA.state).toBe('applied');
      const breaks = await host.host.deps.sql.db.selectFrom('provisioning_lock_breaks' as never).selectAll().execute();
      expect(breaks).toEqual([expect.objectContaining({ tenant_id: A, project: 'demo-app', stack: 'development', holder_run: 'run-of-a-dead-host', broken_by: 'platform-admin' })]);
      expect(await getStackLock(db, stackB)).toBeUndefined();
      expect(await call(`/runtime-cloud/tenants/${B}/stacks/demo-app/development/lock`, operatorB)).toMatchObject({ status: 404, body: { code: 'PROVISIONING.STACK_NOT_LOCKED' } });
    });

    it('when tenant A\'s resource drifts, then only A gets a proposal; B can neither see, accept nor dismiss it, and B stays in sync', async () => {
      // Arrange: someone edits A's service in the portal (out of band). The same urn in B's scope is another resource.
      const service = (await scopeOf(A)).find((r) => r.type === 'local:compute:Service');
      const patched = await call(`/runtime-cloud/local/cloud/resources/${encodeURIComponent(service?.urn ?? '')}?tenant=${A}`, admin, { method: 'PATCH', body: JSON.stringify({ image: 'registry.local/demo-app:hotfix' }) });
      expect(patched.status).toBe(200);

      // Act
      expect((await call(`/runtime-cloud/environments/${ENVIRONMENT}/scan`, operatorA, { method: 'POST' })).status).toBe(200);
      expect((await call(`/runtime-cloud/environments/${ENVIRONMENT}/scan`, operatorB, { method: 'POST' })).status).toBe(200);

      // Assert
      const driftA = await driftOf(operatorA);
      expect(driftA.environment.drift.status).toBe('drifted');
      const proposal = driftA.openProposalId ?? '';
      expect(proposal).not.toBe('');
      expect((await driftOf(operatorB)).environment.drift.status).toBe('in-sync');
      expect((await getJson<{ items: unknown[] }>('/runtime-cloud/proposals', operatorB)).items).toEqual([]);
      expect((await call(`/runtime-cloud/proposals/${proposal}`, operatorB)).status).toBe(404);
      expect((await call(`/runtime-cloud/proposals/${proposal}/accept`, operatorB, { method: 'POST' })).status).toBe(404);
      expect((await call(`/runtime-cloud/proposals/${proposal}/dismiss`, operatorB, { method: 'POST', body: JSON.stringify({ reason: 'not mine' }) })).status).toBe(404);
      expect((await getJson<{ status: string }>(`/runtime-cloud/proposals/${proposal}`, operatorA)).status).toBe('open');
    });

    it('when tenant A adds an ignore rule to its environment, then tenant B\'s environment of the same id has none, and B cannot delete A\'s', async () => {
      // Arrange
      const rule = { scope: { type: 'local:compute:Service' }, path: 'image', reason: 'hotfix under review', owner: 'operator-a', expiresAt: '2099-01-01T00:00:00Z', holdsOnApply: false };

      // Act
      const added = await call(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, operatorA, { method: 'POST', body: JSON.stringify(rule) });
      const deleted = await call(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules/${String(added.body.id)}`, operatorB, { method: 'DELETE' });

      // Assert
      expect(added.status).toBe(201);
      expect(deleted).toMatchObject({ status: 404, body: { code: 'INVENTORY.IGNORE_RULE_NOT_FOUND' } });
      expect((await getJson<{ items: unknown[] }>(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, operatorB)).items).toEqual([]);
      expect((await getJson<{ items: { id: string }[] }>(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, operatorA)).items.map((r) => r.id)).toEqual([added.body.id]);
    });

    it('when tenant A deletes its endpoint, then its run deletes that one resource of its own, and B\'s bucket stays', async () => {
      // Arrange: the example without its endpoint (and the output that names it); the delete waits for approval.
      const projectFile = join(example.source, 'app', 'Pulumi.yaml');
      const text = fs.readFileSync(projectFile, 'utf8');
      fs.writeFileSync(projectFile, text.slice(0, text.indexOf('  endpoint:')) + 'outputs:\n  service: ${api.name}\n');
      await example.commit();
      const waiting = await promoted(promotionOfA(), operatorA, ['awaiting-approval', 'failed', 'rejected']);
      expect(waiting).toMatchObject({ state: 'awaiting-approval', planReceipt: { plan: { counts: { delete: 1 } } } });

      // Act: B cannot approve it; A's operator (not the requester) does.
      expect((await call(`/runtime-cloud/runs/${waiting.runId}/approve`, operatorB, { method: 'POST', body: JSON.stringify({ planDigest: waiting.planDigest }) })).status).toBe(404);
      expect((await call(`/runtime-cloud/runs/${waiting.runId}/approve`, operatorA, { method: 'POST', body: JSON.stringify({ planDigest: waiting.planDigest }) })).status).toBe(200);
      await eventually(async () => ((await getJson<RunBody>(`/runtime-cloud/runs/${waiting.runId}`, operatorA)).state === 'applied' ? true : undefined));

      // Assert
      expect((await scopeOf(A)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service']);
      expect((await scopeOf(B)).map((r) => r.properties.name)).toEqual(['tenant-b-assets']);
    });

    it('when tenant B deletes its only resource, then its run deletes its bucket and none of A\'s, whose bucket of the same urn stays', async () => {
      // Arrange: B's program without resources; the delete makes the plan wait for approval.
      await repositoryB.commit({ 'app/Pulumi.yaml': 'name: demo-app\nruntime: yaml\nresources: {}\n' });
      const waiting = await promoted(promotionOfB(await gitHead(repositoryB)), operatorB, ['awaiting-approval', 'failed', 'rejected']);
      expect(waiting).toMatchObject({ state: 'awaiting-approval', planReceipt: { plan: { counts: { delete: 1 } } } });

      // Act: A cannot approve it; B's operator (not the requester) does.
      expect((await call(`/runtime-cloud/runs/${waiting.runId}/approve`, operatorA, { method: 'POST', body: JSON.stringify({ planDigest: waiting.planDigest }) })).status).toBe(404);
      expect((await call(`/runtime-cloud/runs/${waiting.runId}/approve`, operatorB, { method: 'POST', body: JSON.stringify({ planDigest: waiting.planDigest }) })).status).toBe(200);
      const applied = await eventually(async () => {
        const run = await getJson<RunBody>(`/runtime-cloud/runs/${waiting.runId}`, operatorB);
        return run.state === 'applied' ? run : undefined;
      });

      // Assert
      expect(applied.state).toBe('applied');
      expect(await scopeOf(B)).toEqual([]);
      expect((await scopeOf(A)).map((r) => r.type)).toEqual(['local:storage:Bucket', 'local:compute:Service']);
    });

    it('when a promotion names another stack than its environment is bound to, or a repository no rule allows, then it is a rejected run with the reason, and nothing is touched', async () => {
      // Arrange
      const other = await TestRepository.init(fs.mkdtempSync(join(tmpdir(), 'rch-tenants-other-')));
      const commit = await other.commit({ 'app/Pulumi.yaml': B_PROGRAM });
      const before = await cloud.list('local');
      try {
        // Act
        const production = examplePromotion('production', example.repository);
        const mismatch = await promoted({ ...promotionOfA(), desiredState: { ...production.desiredState } }, operatorA);
        const elsewhere = await promoted({ ...promotionOfA(), desiredState: { repository: pathToFileURL(other.dir).href, commit, path: 'app', stack: 'development' } }, operatorA);

        // Assert
        expect(mismatch).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.STACK_MISMATCH' } });
        expect(mismatch.error?.message).toContain(`bound to stack ${A}/demo-app/development`);
        expect(elsewhere).toMatchObject({ state: 'rejected', error: { code: 'PROVISIONING.SOURCE_NOT_ALLOWED' } });
        expect(await cloud.list('local')).toEqual(before);
      } finally {
        fs.rmSync(other.dir, { recursive: true, force: true });
      }
    });
  });
}

/** The commit `main` of a test repository points at. */
async function gitHead(repository: TestRepository): Promise<string> {
  const git = await import('isomorphic-git');
  return git.resolveRef({ fs, dir: repository.dir, ref: 'HEAD' });
}
