import { describe, expect, it } from 'vitest';
import type { JsonObject } from '../../shared/platform/iac/iac-values';
import { applyDivergence, planCounts, planDigest, planSchema, type ApplyResult, type Plan, type PlanStep } from '../../shared/platform/iac/plan';
import { parseUpdatePlan, planFromPreview, updatePlanProblem } from '../../shared/platform/iac/pulumi-plan-mapping';
import { PLANS, present, publishedPlan, stackOfUrn, type PlanName } from '../support/pulumi-published';

/**
 * What the host checks of a runner agent's report (issue "Tenant code is contained in its own tenant's runner",
 * part 3), as pure functions: an apply result against the approved plan (`applyDivergence`), and the update plan a
 * `pulumi` plan carries against its steps (`updatePlanProblem`), the latter with the update plans Pulumi published
 * (the published fixtures, docs/testing.md, "Published fixtures").
 */

const STACK = 'development';
const urn = (type: string, name: string) => `urn:pulumi:${STACK}::demo-app::${type}::${name}`;
const step = (op: PlanStep['op'], type: string, name: string, extra: Partial<PlanStep> = {}): PlanStep => ({
  urn: urn(type, name),
  name,
  type,
  op,
  changedPaths: [],
  dependencies: [],
  protect: false,
  ...extra,
});

function aPlan(steps: readonly PlanStep[]): Plan {
  const content = { schemaVersion: 1 as const, project: 'demo-app', stack: STACK, steps, outputs: {} };
  return { ...content, baseSerial: 3, counts: planCounts(steps), references: [], digest: planDigest(content) };
}

const PLAN = aPlan([
  step('create', 'local:storage:Bucket', 'assets'),
  step('update', 'local:compute:Service', 'api', { id: 'svc-1', changedPaths: ['image'] }),
  step('same', 'local:network:Endpoint', 'public', { id: 'ep-1' }),
  step('delete', 'local:storage:Bucket', 'old', { id: 'b-0' }),
]);

/** The result an honest agent reports for `plan`: every step done. */
function honest(plan: Plan): ApplyResult {
  return {
    status: 'applied',
    stack: plan.stack,
    planDigest: plan.digest,
    serial: plan.baseSerial + 1,
    resources: plan.steps.map((s) => ({ urn: s.urn, name: s.name, type: s.type, op: s.op, status: s.op === 'same' ? 'unchanged' : 'succeeded' })),
    outputs: {},
    startedAt: '2026-12-06T05:00:00.000Z',
    finishedAt: '2026-12-06T05:00:01.000Z',
  };
}

describe('an apply result against the approved plan', () => {
  it('when the result is the approved plan carried out, or a failed apply that stopped early, then it does not diverge', () => {
    const result = honest(PLAN);
    const stopped: ApplyResult = { ...result, status: 'failed', resources: [{ ...result.resources[0]!, status: 'failed' }], error: { code: 'PROVISIONING.APPLY_FAILED', message: 'quota' } };
    const skipped: ApplyResult = { ...result, status: 'failed', resources: result.resources.map((r) => ({ ...r, status: 'skipped' as const })) };

    expect(applyDivergence(PLAN, result)).toBeUndefined();
    expect(applyDivergence(PLAN, { ...result, resources: [...result.resources].reverse() })).toBeUndefined();
    expect(applyDivergence(PLAN, stopped)).toBeUndefined();
    expect(applyDivergence(PLAN, skipped)).toBeUndefined();
  });

  it('when an update is reported unchanged (a secret-only change the pulumi engine found unchanged at apply), then it does not diverge', () => {
    const result = honest(PLAN);
    const resources = result.resources.map((r) => (r.op === 'update' ? { ...r, op: 'same' as const, status: 'unchanged' as const } : r));
    expect(applyDivergence(PLAN, { ...result, resources })).toBeUndefined();
  });

  it('when the result names another digest or stack, then it diverges saying so', () => {
    const result = honest(PLAN);
    expect(applyDivergence(PLAN, { ...result, planDigest: `sha256:${'f'.repeat(64)}` })).toMatch(/^it reports an apply of plan sha256:f+, not of the approved plan sha256:/);
    expect(applyDivergence(PLAN, { ...result, stack: 'production' })).toBe('it reports an apply of stack production, not development');
  });

  it('when the result has a step the plan never had, then it diverges naming it', () => {
    const result = honest(PLAN);
    const smuggled = { urn: urn('local:storage:Bucket', 'smuggled'), name: 'smuggled', type: 'local:storage:Bucket', op: 'create' as const, status: 'succeeded' as const };
    // The plan's urn with another name or type is not the plan's step either.
    const renamed = { ...result.resources[0]!, name: 'other' };

    expect(applyDivergence(PLAN, { ...result, resources: [...result.resources, smuggled] })).toBe(`it reports create ${smuggled.urn}, which is no step of the approved plan`);
    expect(applyDivergence(PLAN, { ...result, resources: [renamed, ...result.resources.slice(1)] })).toContain('which is no step of the approved plan');
  });

  it('when the result has another op than the plan, or a step twice, then it diverges naming the step', () => {
    const result = honest(PLAN);
    const [assets, api, ...rest] = result.resources;
    const deleted = { ...assets!, op: 'delete' as const };
    const replaced = { ...api!, op: 'replace' as const };
    // Only an update (or a replace keeping its type) may be found unchanged; a create may not.
    const createSame = { ...assets!, op: 'same' as const, status: 'unchanged' as const };

    expect(applyDivergence(PLAN, { ...result, resources: [deleted, api!, ...rest] })).toBe(`it reports delete ${assets!.urn}, where the approved plan has create`);
    expect(applyDivergence(PLAN, { ...result, resources: [assets!, replaced, ...rest] })).toBe(`it reports replace ${api!.urn}, where the approved plan has update`);
    expect(applyDivergence(PLAN, { ...result, resources: [createSame, api!, ...rest] })).toContain('where the approved plan has create');
    expect(applyDivergence(PLAN, { ...result, resources: [...result.resources, assets!] })).toBe(`it reports create ${assets!.urn}, where the approved plan has create once`);
  });

  it('when an applied result misses a step or reports one not done, then it diverges', () => {
    const result = honest(PLAN);
    expect(applyDivergence(PLAN, { ...result, resources: result.resources.slice(0, 3) })).toBe(`it reports the apply done without the approved delete of ${PLAN.steps[3]!.urn}`);
    expect(applyDivergence(PLAN, { ...result, resources: result.resources.map((r, i) => (i === 1 ? { ...r, status: 'skipped' as const } : r)) })).toBe(
      `it reports the apply done with ${PLAN.steps[1]!.urn} skipped`,
    );
  });
});

/** The plan the `pulumi` engine makes of a preview that saved `published` (no events: the plan file alone). */
function planOfPublished(published: JsonObject): Plan {
  const resourcePlans = Object.keys((published.resourcePlans ?? {}) as JsonObject);
  const { stack, project } = stackOfUrn(resourcePlans[0] ?? '');
  const plan = planFromPreview({ stack, project, baseSerial: 0, events: [], updatePlan: parseUpdatePlan(published), changeSummary: undefined, references: [] });
  return { ...plan, updatePlan: published };
}

describe.skipIf(!present)('the update plan a pulumi plan carries, against its steps (published update plans)', () => {
  for (const name of Object.keys(PLANS) as PlanName[]) {
    const published = () => publishedPlan(name);
    const resourcePlans = (plan: JsonObject) => plan.resourcePlans as Record<string, { steps: string[] }>;

    it(`when the plan is the one made of ${PLANS[name]}, then its resourcePlans' urns and steps are its steps, and the update plan does nothing beyond them`, () => {
      const plan = planOfPublished(published());

      expect(plan.steps.map((s) => s.urn).sort()).toEqual(Object.keys(resourcePlans(published())).sort());
      expect(plan.steps.every((s) => s.op === 'create')).toBe(true);
      expect(planSchema.safeParse(plan).success).toBe(true);
      expect(updatePlanProblem(plan)).toBeUndefined();
    });

    it(`when ${PLANS[name]} gains a resource or another operation than the plan's steps, then the update plan is refused naming it`, () => {
      const plan = planOfPublished(published());
      const [first] = plan.steps;
      const extra = published();
      resourcePlans(extra)[`urn:pulumi:${plan.stack}::${plan.project}::local:storage:Bucket::smuggled`] = { steps: ['create'] };
      const deleting = published();
      resourcePlans(deleting)[first!.urn] = { steps: ['delete'] };
      const unknown = published();
      resourcePlans(unknown)[first!.urn] = { steps: ['teleport'] };

      expect(updatePlanProblem({ ...plan, updatePlan: extra })).toBe(`its update plan has operations for urn:pulumi:${plan.stack}::${plan.project}::local:storage:Bucket::smuggled, which is no step of the plan`);
      expect(updatePlanProblem({ ...plan, updatePlan: deleting })).toBe(`its update plan would delete ${first!.urn}, where the plan's step is create`);
      expect(updatePlanProblem({ ...plan, updatePlan: unknown })).toBe(`its update plan has the operation teleport for ${first!.urn}, which this host does not know`);
      expect(updatePlanProblem({ ...plan, updatePlan: { resourcePlans: 'none' } })).toBe("its update plan is not one of Pulumi's");
    });
  }

  it('when an update plan is larger than the bound, then the plan schema refuses it', () => {
    const plan = planOfPublished(publishedPlan('awsTypescript'));
    const huge = { ...plan, updatePlan: { ...plan.updatePlan, padding: 'x'.repeat(4 * 1024 * 1024) } };
    expect(planSchema.safeParse(plan).success).toBe(true);
    expect(planSchema.safeParse(huge).error?.issues[0]?.message).toContain('an update plan is at most');
  });
});
