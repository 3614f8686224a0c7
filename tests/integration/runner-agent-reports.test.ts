import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { examplePromotion } from '../../local/example-repository';
import { runJob } from '../../runner/agent';
import type { HostClient } from '../../runner/host-client';
import { ownPool, testAgent, type TestAgent } from '../support/runner-agents';
import type { ApplyResult, Plan } from '../../shared/platform/iac/plan';
import type { ClaimedJob, RunnerJobOutcome } from '../../shared/platform/iac/runner-job';
import type { PromotionApproved } from '../../shared/provisioning/promotion';
import { stackNeedsRefresh } from '../../shared/provisioning/runner-jobs.repository';
import { provisioningDb } from '../../shared/provisioning/stack-lock.repository';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { eventually } from '../support/eventually';
import { TestRepository } from '../support/git-repositories';
import { RUNNER_JOBS, startTestHost, type TestHost } from '../support/local-host';
import { EXAMPLE_PROJECT, exampleStack, outboxEvents, provisioningExample, sendToPromotions, writeExampleReferences, type ProvisioningExample } from '../support/provisioning';
import { localEngineFor } from '../../local/runner-agent';

/**
 * The host checks what runner agents report (issue "Tenant code is contained in its own tenant's runner", part 3).
 * The test is the pool's only agent, a real HTTP client holding a valid pool credential and, per job, the job token
 * the host gave it: it runs some jobs honestly (the product's agent code, `runJob`) and forges others. Two tenants
 * use the same project, stack and environment names: tenant A's agent forges, tenant B's runs go through untouched.
 */
const A = 'demo-team';
const B = 'tenant-b';
/** Each tenant's own agent pool on the local target (tests/support/runner-agents.ts). */
const POOL = { [A]: ownPool(A), [B]: ownPool(B) } as Record<string, string>;
const admin = { roles: ['PlatformAdmin'], subject: 'platform-admin' };
const operatorOf = (tenant: string) => ({ tenant, roles: ['Operator'], subject: `operator-${tenant}` });
const B_PROGRAM = `name: ${EXAMPLE_PROJECT}\nruntime: yaml\nresources:\n  assets:\n    type: local:storage:Bucket\n    properties:\n      name: tenant-b-assets\n`;

interface RunBody {
  runId: string;
  promotionId: string;
  tenant: string;
  state: string;
  planDigest?: string;
  error?: { code: string; message: string };
  planReceipt?: { plan: Plan };
  applyReceipt?: { result: ApplyResult; diverged?: { reason: string; reported: unknown }; runner: { agent?: string; jobId?: string } };
}

/** What the forging agent reports of an apply, made from the honest report: a result, or that the state had moved. */
type Forged = { readonly result: ApplyResult } | { readonly stateMoved: { readonly baseSerial: number } };
type Forgery = (honest: ApplyResult, approved: Plan) => Forged;

const FORGERIES: readonly { readonly name: string; readonly forge: Forgery; readonly reason: RegExp }[] = [
  { name: 'another plan digest', forge: (r) => ({ result: { ...r, planDigest: `sha256:${'f'.repeat(64)}` } }), reason: /^it reports an apply of plan sha256:f{64}, not of the approved plan/ },
  {
    name: 'a step the plan never had',
    forge: (r, plan) => ({
      result: {
        ...r,
        resources: [...r.resources, { urn: `urn:pulumi:${plan.stack}::${plan.project}::local:storage:Bucket::smuggled`, name: 'smuggled', type: 'local:storage:Bucket', op: 'create', status: 'succeeded' }],
      },
    }),
    reason: /^it reports create urn:pulumi:.*::smuggled, which is no step of the approved plan$/,
  },
  { name: 'a changed op', forge: (r) => ({ result: { ...r, resources: r.resources.map((x, i) => (i === 0 ? { ...x, op: 'delete' as const } : x)) } }), reason: /^it reports delete .*, where the approved plan has create$/ },
  // An agent checks the state before it asks to begin: "nothing applied" after the begin is not believed.
  { name: "'the state moved' after its apply began", forge: () => ({ stateMoved: { baseSerial: 7 } }), reason: /^it reports the state moved and nothing applied, after the host recorded that its apply began$/ },
];

/** The result an honest agent reports for the approved plan: every step done. */
function honestResult(plan: Plan): ApplyResult {
  const at = new Date().toISOString();
  return {
    status: 'applied',
    stack: plan.stack,
    planDigest: plan.digest,
    serial: plan.baseSerial + 1,
    resources: plan.steps.map((s) => ({ urn: s.urn, name: s.name, type: s.type, op: s.op, status: s.op === 'same' ? 'unchanged' : 'succeeded' })),
    outputs: {},
    startedAt: at,
    finishedAt: at,
  };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`the host checks what runner agents report (${dialect})`, () => {
    let database: TestDatabase;
    let host: TestHost;
    let root: string;
    let example: ProvisioningExample;
    let repositoryB: TestRepository;
    let commitB: string;
    /** The test as both pools' agent: claims from A's pool, then B's; each job's calls with its own pool's credential. */
    let client: HostClient;
    const agents: Record<string, TestAgent> = {};
    let stderr: MockInstance<typeof process.stderr.write>;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
      root = fs.mkdtempSync(join(tmpdir(), 'rch-reports-'));
      // No agents of its own: the test is the agent.
      host = await startTestHost({ settings: { ...database.settings, ...RUNNER_JOBS, RuntimeCloud__Local__Runners: '0' }, depsOverrides: database.overrides });
      example = await provisioningExample(root, host.stateDir, 8);
      writeExampleReferences(host.stateDir);
      repositoryB = await TestRepository.init(join(host.stateDir, 'repos', 'tenant-b'));
      const stackFiles: Record<string, string> = {};
      for (const stack of ['development-1', 'development-2', 'development-3', 'development-4', 'development-5', 'development-6', 'development-7', 'development-8', 'production-1']) stackFiles[`app/Pulumi.${stack}.yaml`] = 'config: {}\n';
      commitB = await repositoryB.commit({ 'app/Pulumi.yaml': B_PROGRAM, ...stackFiles });
      const created = await host.fetch(`/runtime-cloud/tenants/${B}`, { method: 'PUT', body: JSON.stringify({ edition: 'team' }), claims: admin });
      expect(created.status).toBeLessThan(300);
      for (const tenant of [A, B]) agents[tenant] = await testAgent(host, POOL[tenant] ?? '', 'test-agent');
      const clientOf = (claimed: ClaimedJob) => (agents[claimed.job.stack.tenant] ?? agents[A]!).client;
      client = {
        claim: async (agent, waitMs) => (await agents[A]!.client.claim(agent, waitMs)) ?? agents[B]!.client.claim(agent, waitMs),
        job: (claimed) => clientOf(claimed).job(claimed),
      };
      // The security events are lines on the host's stderr: read, and passed on.
      stderr = vi.spyOn(process.stderr, 'write');
    });
    afterAll(async () => {
      stderr?.mockRestore();
      await host?.stop();
      await database?.drop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    /** A's promotion (the example) and B's (its own program) onto the same stack and environment names. */
    const promotions = (tier: 'development' | 'production', stack: string): Record<string, PromotionApproved> => {
      const base = examplePromotion(tier, example.repository);
      const environment = { ...base.environment, id: `env-${stack}` };
      return {
        [A]: { ...base, promotionId: `${A}-${stack}`, environment, desiredState: { ...base.desiredState, stack } },
        [B]: { ...base, promotionId: `${B}-${stack}`, tenantId: B, environment, desiredState: { repository: pathToFileURL(repositoryB.dir).href, commit: commitB, path: 'app', stack } },
      };
    };
    const runOf = async (tenant: string, promotionId: string, states: readonly string[]): Promise<RunBody> => {
      const operator = operatorOf(tenant);
      const listed = await eventually(async () => ((await (await host.fetch('/runtime-cloud/runs?limit=1000', { claims: operator })).json()) as { items: RunBody[] }).items.find((r) => r.promotionId === promotionId));
      return eventually(async () => {
        const run = (await (await host.fetch(`/runtime-cloud/runs/${listed.runId}`, { claims: operator })).json()) as RunBody;
        return states.includes(run.state) ? run : undefined;
      });
    };
    /**
     * Plays the pool's agent until `done` says so: each claimed job goes to `handle` (which answers whether it
     * handled it), else it runs honestly.
     */
    async function agent(handle: (claimed: ClaimedJob) => Promise<boolean>, done: () => boolean): Promise<void> {
      while (!done()) {
        const claimed = await eventually(() => client.claim('test-agent', 0), 30_000);
        if (!(await handle(claimed))) await runJob({ client, engineFor: localEngineFor, agent: 'test-agent', workRoot: join(root, 'work') }, claimed, () => undefined);
      }
    }
    /** The outcome the product's agent code makes of a claimed job, not posted. */
    async function honestOutcome(claimed: ClaimedJob): Promise<RunnerJobOutcome> {
      let outcome: RunnerJobOutcome | undefined;
      const capturing: HostClient = { ...client, job: (c) => ({ ...client.job(c), result: (o) => Promise.resolve(void (outcome = o)) }) };
      await runJob({ client: capturing, engineFor: localEngineFor, agent: 'test-agent', workRoot: join(root, 'work') }, claimed, () => undefined);
      if (!outcome) throw new Error(`job ${claimed.job.id} made no outcome`);
      return outcome;
    }
    const securityLines = (runId: string) =>
      stderr.mock.calls
        .flatMap((call) => String(call[0]).split('\n'))
        .filter((line) => line.includes('"message":"security:') && line.includes(runId))
        .map((line) => JSON.parse(line) as Record<string, string>);
    const eventTypes = async (runId: string) => (await outboxEvents(host.host.deps.sql, runId)).map((e) => e.type);
    const jobLog = async (jobId: string) => (await provisioningDb(host.host.deps.sql.db).selectFrom('provisioning_runner_jobs').select('log').where('id', '=', jobId).executeTakeFirstOrThrow()).log;

    FORGERIES.forEach(({ name, forge, reason }, index) => {
      it(`when tenant A's agent reports an apply with ${name}, then A's run fails APPLY_DIVERGED with a receipt of the report, its stack is marked to refresh, nothing is published as applied, a security event is logged; B's run of the same names is applied`, async () => {
        // Arrange
        const stack = `development-${index + 1}`;
        const sent = promotions('development', stack);
        for (const tenant of [A, B]) await sendToPromotions(host, sent[tenant], `reports-${stack}-${tenant}`);
        let forged: { claimed: ClaimedJob; report: Forged; posted: number } | undefined;
        let appliedB = false;

        // Act: plans run honestly; A's apply job is claimed, begun and answered with a forged result.
        await agent(
          async (claimed) => {
            if (claimed.job.kind !== 'apply' || claimed.job.stack.stack !== stack) return false;
            if (claimed.job.stack.tenant === B) {
              await runJob({ client, engineFor: localEngineFor, agent: 'test-agent', workRoot: join(root, 'work') }, claimed, () => undefined);
              appliedB = true;
              return true;
            }
            const approved = claimed.job.approvedPlan as Plan;
            const job = client.job(claimed);
            await job.heartbeat({ log: [], applyBegins: true });
            const report = forge(honestResult(approved), approved);
            const answer = await agents[A]!.jobCall(claimed.job.id, claimed.token, 'result', {
              body: { kind: 'apply', runner: { name: 'local', version: 'forged', agent: 'test-agent' }, ...report } satisfies RunnerJobOutcome,
            });
            forged = { claimed, report, posted: answer.status };
            return true;
          },
          () => forged !== undefined && appliedB,
        );
        const runA = await runOf(A, sent[A]!.promotionId, ['applied', 'failed']);
        const runB = await runOf(B, sent[B]!.promotionId, ['applied', 'failed']);

        // Assert
        expect(forged?.posted).toBe(202);
        expect(runA.state).toBe('failed');
        expect(runA.error?.code).toBe('PROVISIONING.APPLY_DIVERGED');
        expect(runA.error?.message).toMatch(/what it changed is not known/);
        expect(runA.applyReceipt?.diverged?.reason).toMatch(reason);
        expect(runA.applyReceipt?.diverged?.reported).toEqual(forged && ('result' in forged.report ? forged.report.result : forged.report));
        expect(runA.applyReceipt?.result.resources.every((r) => (r.status as string) === 'unknown')).toBe(true);
        expect(runA.applyReceipt?.runner).toMatchObject({ agent: 'test-agent', jobId: forged?.claimed.job.id });
        const db = provisioningDb(host.host.deps.sql.db);
        expect(await stackNeedsRefresh(db, exampleStack(stack))).toBe(true);
        expect(await eventTypes(runA.runId)).toContain('ProvisioningFailed');
        expect(await eventTypes(runA.runId)).not.toContain('ProvisioningApplied');
        expect(await eventTypes(runA.runId)).not.toContain('SpecificationApplied');
        expect(securityLines(runA.runId)).toEqual([
          expect.objectContaining({ level: 'warning', code: 'PROVISIONING.APPLY_DIVERGED', tenant: A, runId: runA.runId, jobId: forged?.claimed.job.id, pool: POOL[A], agent: 'test-agent' }),
        ]);
        expect(await jobLog(forged?.claimed.job.id ?? '')).toContain('host refused the apply report of test-agent (PROVISIONING.APPLY_DIVERGED)');
        // Tenant B, same project, stack and environment names: applied, its stack not marked, nothing logged of it.
        expect(runB).toMatchObject({ state: 'applied', tenant: B });
        expect(await stackNeedsRefresh(db, exampleStack(stack, EXAMPLE_PROJECT, B))).toBe(false);
        expect(await eventTypes(runB.runId)).toContain('ProvisioningApplied');
        expect(securityLines(runB.runId)).toEqual([]);
      }, 90_000);
    });

    it("when tenant A's agent reports an error after its apply began, then A's run fails with that error, a receipt of unknown steps and its stack marked to refresh; B's run of the same names is applied", async () => {
      // Arrange
      const stack = 'development-7';
      const sent = promotions('development', stack);
      for (const tenant of [A, B]) await sendToPromotions(host, sent[tenant], `reports-${stack}-${tenant}`);
      let erred: ClaimedJob | undefined;
      let appliedB = false;

      // Act
      await agent(
        async (claimed) => {
          if (claimed.job.kind !== 'apply' || claimed.job.stack.stack !== stack) return false;
          if (claimed.job.stack.tenant === B) {
            await runJob({ client, engineFor: localEngineFor, agent: 'test-agent', workRoot: join(root, 'work') }, claimed, () => undefined);
            appliedB = true;
            return true;
          }
          const job = client.job(claimed);
          await job.heartbeat({ log: [], applyBegins: true });
          await job.result({ kind: 'apply', runner: { name: 'local', version: 'x', agent: 'test-agent' }, error: { code: 'RUNNER.ENGINE_FAULT', message: 'the engine crashed' } });
          erred = claimed;
          return true;
        },
        () => erred !== undefined && appliedB,
      );
      const runA = await runOf(A, sent[A]!.promotionId, ['applied', 'failed']);
      const runB = await runOf(B, sent[B]!.promotionId, ['applied', 'failed']);

      // Assert
      expect(runA.error).toMatchObject({ code: 'RUNNER.ENGINE_FAULT', message: expect.stringContaining('after its apply began') });
      expect(runA.applyReceipt?.result.resources.length).toBeGreaterThan(0);
      expect(runA.applyReceipt?.result.resources.every((r) => (r.status as string) === 'unknown')).toBe(true);
      const db = provisioningDb(host.host.deps.sql.db);
      expect(await stackNeedsRefresh(db, exampleStack(stack))).toBe(true);
      expect(runB).toMatchObject({ state: 'applied', tenant: B });
      expect(await stackNeedsRefresh(db, exampleStack(stack, EXAMPLE_PROJECT, B))).toBe(false);
    }, 90_000);

    it("when tenant A's agent reports a plan whose digest and counts are not its content's, then the run records and shows for approval the host's digest and counts, and a security event is logged; B's plan of the same names keeps its own", async () => {
      // Arrange
      const sent = promotions('production', 'production-1');
      for (const tenant of [A, B]) await sendToPromotions(host, sent[tenant], `reports-production-1-${tenant}`);
      let honest: Plan | undefined;
      let forgedJob: ClaimedJob | undefined;
      let plannedB = false;

      // Act
      await agent(
        async (claimed) => {
          if (claimed.job.kind !== 'plan' || claimed.job.stack.stack !== 'production-1') return false;
          if (claimed.job.stack.tenant === B) {
            plannedB = true;
            return false;
          }
          const outcome = await honestOutcome(claimed);
          if (!('plan' in outcome)) throw new Error(`the plan failed: ${JSON.stringify(outcome)}`);
          honest = outcome.plan;
          forgedJob = claimed;
          // Counts of nothing to do: the approval policy reads the counts.
          const forged = { ...outcome.plan, digest: `sha256:${'a'.repeat(64)}`, counts: { create: 0, update: 0, replace: 0, delete: 0, same: 0 } };
          await client.job(claimed).result({ ...outcome, plan: forged });
          return true;
        },
        () => honest !== undefined && plannedB,
      );
      const runA = await runOf(A, sent[A]!.promotionId, ['awaiting-approval', 'failed']);
      const runB = await runOf(B, sent[B]!.promotionId, ['awaiting-approval', 'failed']);

      // Assert
      expect(runA.state).toBe('awaiting-approval');
      expect(runA.planDigest).toBe(honest?.digest);
      expect(runA.planReceipt?.plan.digest).toBe(honest?.digest);
      expect(runA.planReceipt?.plan.counts).toEqual(honest?.counts);
      expect(honest?.counts.create).toBeGreaterThan(0);
      expect(securityLines(runA.runId)).toEqual([expect.objectContaining({ code: 'RUNNER.PLAN_SUMMARY_IGNORED', tenant: A, jobId: forgedJob?.job.id, agent: 'test-agent' })]);
      expect(runB.state).toBe('awaiting-approval');
      expect(runB.planDigest).toBe(runB.planReceipt?.plan.digest);
      expect(runB.planDigest).not.toBe(runA.planDigest);
      expect(securityLines(runB.runId)).toEqual([]);
    }, 90_000);

    const PLAN_FORGERIES: readonly { readonly name: string; readonly stack: string; readonly forge: (plan: Plan) => Plan; readonly message: (plan: Plan) => string }[] = [
      {
        name: 'of another stack',
        stack: 'development-5',
        forge: (plan) => ({ ...plan, stack: 'development' }),
        message: (plan) => `the plan is of stack ${EXAMPLE_PROJECT}/development, not of the job's ${EXAMPLE_PROJECT}/${plan.stack}`,
      },
      {
        // The update plan is what a pulumi apply is held to: one that allows more than the steps is refused.
        name: 'with an update plan that creates a resource its steps do not',
        stack: 'development-6',
        forge: (plan) => ({ ...plan, updatePlan: { resourcePlans: { [`urn:pulumi:${plan.stack}::${plan.project}::local:storage:Bucket::smuggled`]: { steps: ['create'] } } } }),
        message: (plan) => `its update plan has operations for urn:pulumi:${plan.stack}::${plan.project}::local:storage:Bucket::smuggled, which is no step of the plan`,
      },
      {
        // The host resolves a plan's references for its apply job: a secret the project never names is not asked for.
        name: 'listing a secret its project does not name',
        stack: 'development-8',
        forge: (plan) => ({ ...plan, references: [...plan.references, { secretRef: 'broker://runtime-cloud/unnamed-secret' }] }),
        message: () => "the plan lists the reference secretRef:broker://runtime-cloud/unnamed-secret, which the job's project does not name",
      },
    ];

    for (const { name, stack, forge, message } of PLAN_FORGERIES) {
      it(`when tenant A's agent reports a plan ${name}, then A's run fails PLAN_NOT_OF_JOB and nothing of that plan is recorded; B's run of the same names is applied`, async () => {
        // Arrange
        const sent = promotions('development', stack);
        for (const tenant of [A, B]) await sendToPromotions(host, sent[tenant], `reports-${stack}-${tenant}`);
        let forged: { claimed: ClaimedJob; honest: Plan } | undefined;
        let appliedB = false;

        // Act
        await agent(
          async (claimed) => {
            if (claimed.job.stack.stack !== stack) return false;
            if (claimed.job.stack.tenant === B) {
              await runJob({ client, engineFor: localEngineFor, agent: 'test-agent', workRoot: join(root, 'work') }, claimed, () => undefined);
              appliedB = claimed.job.kind === 'apply';
              return true;
            }
            const outcome = await honestOutcome(claimed);
            if (!('plan' in outcome)) throw new Error(`the plan failed: ${JSON.stringify(outcome)}`);
            forged = { claimed, honest: outcome.plan };
            await client.job(claimed).result({ ...outcome, plan: forge(outcome.plan) });
            return true;
          },
          () => forged !== undefined && appliedB,
        );
        const runA = await runOf(A, sent[A]!.promotionId, ['applied', 'failed']);
        const runB = await runOf(B, sent[B]!.promotionId, ['applied', 'failed']);

        // Assert
        expect(runA.state).toBe('failed');
        expect(runA.error).toMatchObject({ code: 'PROVISIONING.PLAN_NOT_OF_JOB', message: expect.stringContaining(message(forged!.honest)) });
        expect(runA.planReceipt).toBeUndefined();
        expect(securityLines(runA.runId)).toEqual([expect.objectContaining({ code: 'PROVISIONING.PLAN_NOT_OF_JOB', tenant: A, jobId: forged?.claimed.job.id })]);
        expect(runB).toMatchObject({ state: 'applied', tenant: B });
      }, 90_000);
    }
  });
}
