import type { EngineEvent, StepEventMetadata } from '@pulumi/pulumi/automation';
import { describe, expect, it } from 'vitest';
import { computed } from '../../shared/platform/iac/iac-values';
import { planSchema, type Plan } from '../../shared/platform/iac/plan';
import { PulumiCommandFailure, type PulumiAutomation } from '../../shared/platform/iac/pulumi-automation';
import { applyResultFromUp, errorDiagnostics } from '../../shared/platform/iac/pulumi-apply-mapping';
import { countsFromChangeSummary, maskValue, PULUMI_SECRET_SIG, PULUMI_UNKNOWN_EXPRESSION } from '../../shared/platform/iac/pulumi-mapping';
import { parseUpdatePlan, planFromPreview, type PulumiUpdatePlan } from '../../shared/platform/iac/pulumi-plan-mapping';
import { createPulumiRunner } from '../../shared/platform/iac/pulumi-runner';
import { ManualClock } from '../../shared/platform/time/clock';
import { refusal } from '../support/refusal';
import { jsonValues, present, PLANS, publishedEvents, publishedPlan, stackOfUrn, STREAMS, streamText, type PlanName, type StreamName } from '../support/pulumi-published';

/*
 * The Pulumi mapping (pulumi-mapping.ts) on what Pulumi itself published (tests/support/pulumi-published.ts): its
 * engine's event streams, recorded from real `pulumi` runs and from the engine's lifecycle tests, and the update
 * plans its pages show. Each test maps a stream or plan as it is and checks the plan or apply result against what
 * the stream itself says (its ops, `detailedDiff` keys, ids, failures, diagnostics, policy events, summary). The
 * cases no published stream shows stay hand-written in iac-pulumi-mapping.test.ts, which lists them.
 */

const TIMES = { startedAt: '2026-12-06T00:00:00.000Z', finishedAt: '2026-12-06T00:01:00.000Z' };

const metadataOf = (event: EngineEvent): StepEventMetadata | undefined => (event.resourcePreEvent ?? event.resOutputsEvent ?? event.resOpFailedEvent)?.metadata;
const summaryOf = (events: readonly EngineEvent[]) => events.find((e) => e.summaryEvent)?.summaryEvent;

/** The plan the mapping makes of a published stream (and update plan), for the stack and project its URNs name. */
function planOf(events: EngineEvent[], updatePlan: PulumiUpdatePlan = {}): Plan {
  const urn = events.map((e) => metadataOf(e)?.urn ?? e.policyEvent?.resourceUrn).find((u) => u !== undefined) ?? Object.keys(updatePlan.resourcePlans ?? {})[0] ?? '';
  return planFromPreview({ ...stackOfUrn(urn), baseSerial: 0, events, updatePlan, changeSummary: summaryOf(events)?.resourceChanges, references: [] });
}

/**
 * The apply result of a published update. The plan it carried out is the one its own events describe (no preview
 * of it was published); how the command ended is not in a stream: `succeeded` gives it a result without outputs,
 * otherwise it failed without a message of its own.
 */
function applyOf(name: StreamName, succeeded: boolean) {
  const events = publishedEvents(name);
  const plan = planOf(events);
  return applyResultFromUp({ plan, approvedDigest: plan.digest, events, ...(succeeded ? { result: { outputs: {} } } : {}), serial: 1, secrets: [], ...TIMES });
}

/** Each resource of an apply result as `name op status id`. */
const lines = (result: ReturnType<typeof applyResultFromUp>) => result.resources.map((r) => `${r.name} ${r.op} ${r.status} ${r.id ?? '-'}`);

/** What the stream says of the resource named `name`: the ops it reports, its detailed diff, its state before. */
function streamSays(events: readonly EngineEvent[], name: string) {
  const mds = events.map(metadataOf).filter((md) => md !== undefined && md.urn.endsWith(`::${name}`)) as StepEventMetadata[];
  return { ops: [...new Set(mds.map((md) => md.op))], detailedDiff: mds.find((md) => md.detailedDiff)?.detailedDiff ?? undefined, old: mds.find((md) => md.old)?.old };
}

describe.skipIf(!present)('the published streams as Pulumi writes them', () => {
  it('when a published stream is read, then it is engine events back to back (one a line, or pretty-printed), each with one payload, ending in cancelEvent', () => {
    for (const name of Object.keys(STREAMS) as StreamName[]) {
      const text = streamText(name);
      expect(() => JSON.parse(text) as unknown, name).toThrow();
      const events = publishedEvents(name);
      const payloads = events.map((e) => Object.keys(e).filter((k) => k !== 'sequence' && k !== 'timestamp'));
      expect(payloads.every((keys) => keys.length === 1), name).toBe(true);
      expect(payloads.at(-1), name).toEqual(['cancelEvent']);
      if (name !== 'prettyPrinted') expect(events, name).toHaveLength(text.trimEnd().split('\n').length);
    }
    expect(publishedEvents('prettyPrinted').map((e) => Object.keys(e)[2])).toEqual(['preludeEvent', 'resourcePreEvent', 'summaryEvent', 'cancelEvent']);
    expect(publishedEvents('creates')).toHaveLength(15);
  });

  it('when a stream is cut inside a value or holds text between values, then it is not read; braces and quotes inside strings are text', () => {
    const text = streamText('prettyPrinted');
    // No published stream has an escaped quote before an unbalanced brace inside a string: this one does.
    expect(jsonValues('{"message":"a \\"}\\" {"}\n[1]{"b":"\\\\"}')).toEqual([{ message: 'a "}" {' }, [1], { b: '\\' }]);
    expect(() => jsonValues(text.slice(0, -2))).toThrow('the stream ends inside a value');
    expect(() => jsonValues(`${text}\n,{}`)).toThrow('between values');
  });
});

describe.skipIf(!present)('published previews as plans', () => {
  it('when the recorded preview replaces an instance (webserver-userdata), then it is one replace step with its id and the detailedDiff path, the rest same, outputs unknown', () => {
    const events = publishedEvents('replacePreview');
    const instance = streamSays(events, 'web-server-www');

    const plan = planOf(events);

    expect(instance.ops).toEqual(['create-replacement', 'replace', 'delete-replaced']);
    expect(plan.steps.map((s) => `${s.op} ${s.name}`).sort()).toEqual(['replace web-server-www', 'same aws-ts-webserver-dev', 'same web-secgrp']);
    expect(plan.steps.find((s) => s.name === 'web-server-www')).toMatchObject({ type: 'aws:ec2/instance:Instance', id: instance.old?.id, changedPaths: Object.keys(instance.detailedDiff!) });
    expect(Object.keys(instance.detailedDiff!)).toEqual(['userData']);
    expect(plan.counts).toEqual(countsFromChangeSummary(summaryOf(events)?.resourceChanges));
    expect(plan.counts).toMatchObject({ replace: 1, same: 2 });
    // The replaced instance's public address is not known before it exists: Pulumi's unknown, a computed marker here.
    expect(plan.outputs).toEqual({ publicHostName: computed(PULUMI_UNKNOWN_EXPRESSION), publicIp: computed(PULUMI_UNKNOWN_EXPRESSION) });
    expect(planSchema.safeParse(plan).success).toBe(true);
  });

  it("when the engine's own replace preview is read (TestDetailedDiffReplace), then it is one replace step of the old id, changing the detailedDiff path", () => {
    const events = publishedEvents('engineReplacePreview');
    const resA = streamSays(events, 'resA');

    const plan = planOf(events);

    expect(plan.steps).toEqual([
      expect.objectContaining({ name: 'resA', op: 'replace', type: 'pkgA:m:typA', id: resA.old?.id, changedPaths: Object.keys(resA.detailedDiff!), inputs: {} }),
    ]);
    expect(plan.steps[0]).toMatchObject({ id: '3', changedPaths: ['prop'] });
    expect(plan.counts).toEqual({ create: 0, update: 0, replace: 1, delete: 0, same: 0 });
  });

  it('when the recorded preview changes nothing but registers nested stack outputs twice, then every step is same and the outputs are the last registered', () => {
    const events = publishedEvents('stackOutputs');
    const lastStackOutputs = events.filter((e) => e.resOutputsEvent?.metadata.type === 'pulumi:pulumi:Stack').at(-1)?.resOutputsEvent?.metadata.new?.outputs;

    const plan = planOf(events);

    expect(plan.steps.map((s) => `${s.op} ${s.name}`).sort()).toEqual(['same pulumi-stack-output-diff-dev', 'same taxi', 'same vehicles']);
    expect(plan.counts).toMatchObject({ same: 3, create: 0, update: 0, replace: 0, delete: 0 });
    expect(plan.outputs).toEqual(maskValue(lastStackOutputs));
    expect(plan.outputs).toMatchObject({ vehicles: { taxi: { color: 'yellow', size: 'big' } } });
  });

  it('when the recorded preview (pretty-printed) updates only the stack outputs, then the stack is an update with no changed path and the outputs are the ones it will have', () => {
    const events = publishedEvents('prettyPrinted');
    const stackEvent = events.find((e) => e.resourcePreEvent)?.resourcePreEvent?.metadata;

    const plan = planOf(events);

    // The stream has no diffs and no detailedDiff for it, and no outputs event: its one event carries the outputs.
    expect([stackEvent?.op, stackEvent?.diffs, stackEvent?.detailedDiff]).toEqual(['update', undefined, undefined]);
    expect(plan.steps).toEqual([expect.objectContaining({ name: 'pulumi-stack-output-diff-dev', op: 'update', changedPaths: [] })]);
    expect(plan.counts).toMatchObject({ update: 1 });
    expect(plan.outputs).toEqual({ vehicles: { taxi: '# a comment\ncolor: yellow  \ntype: car' } });
  });

  for (const name of Object.keys(PLANS) as PlanName[]) {
    it(`when the published update plan ${PLANS[name]} is read alone, then each of its resources is a create step of its goal's type and name, after its parent`, () => {
      const published = publishedPlan(name);
      const goals = Object.entries(published.resourcePlans as Record<string, { goal: { type: string; name: string; parent?: string }; steps: string[] }>);

      const plan = planOf([], parseUpdatePlan(published));

      expect(plan.steps.map((s) => `${s.op} ${s.type} ${s.name}`).sort()).toEqual(goals.map(([, g]) => `create ${g.goal.type} ${g.goal.name}`).sort());
      const at = (urn: string) => plan.steps.findIndex((s) => s.urn === urn);
      for (const [urn, { goal }] of goals) {
        expect(plan.steps[at(urn)]!.dependencies).toEqual(goal.parent ? [goal.parent] : []);
        if (goal.parent) expect(at(goal.parent)).toBeLessThan(at(urn));
      }
      expect(plan.counts.create).toBe(goals.length);
      expect(planSchema.safeParse(plan).success).toBe(true);
    });
  }
});

describe.skipIf(!present)('published updates as apply results', () => {
  it('when the recorded update creates six resources (up-3), then each succeeded with the id its outputs event gave it', () => {
    const events = publishedEvents('creates');
    const idsGiven = new Map(events.flatMap((e) => (e.resOutputsEvent ? [[e.resOutputsEvent.metadata.urn, e.resOutputsEvent.metadata.new?.id || undefined] as const] : [])));

    const result = applyOf('creates', true);

    expect(result.status).toBe('applied');
    expect(result.resources).toHaveLength(6);
    for (const resource of result.resources) expect([resource.op, resource.status, resource.id], resource.name).toEqual(['create', 'succeeded', idsGiven.get(resource.urn)]);
    expect(result.resources.find((r) => r.name === 'eks-cluster')).toMatchObject({ type: 'aws:eks/cluster:Cluster', id: 'eks-cluster-dc83353' });
    expect(planOf(events).counts).toEqual(countsFromChangeSummary(summaryOf(events)?.resourceChanges));
  });

  it('when the recorded update changes a security group in place (up-4), then it is the one update, its changed paths the detailedDiff keys, the others unchanged', () => {
    const events = publishedEvents('inPlaceUpdate');
    const group = streamSays(events, 'eks-sg');

    const plan = planOf(events);
    const result = applyOf('inPlaceUpdate', true);

    expect(group.ops).toEqual(['update']);
    expect(plan.steps.find((s) => s.name === 'eks-sg')).toMatchObject({ op: 'update', id: group.old?.id, changedPaths: Object.keys(group.detailedDiff!).sort() });
    expect(plan.steps.find((s) => s.name === 'eks-sg')?.changedPaths).toEqual(['ingress[1].cidrBlocks[0]', 'ingress[1].fromPort', 'ingress[1].protocol', 'ingress[1].self', 'ingress[1].toPort']);
    expect(plan.counts).toEqual({ create: 0, update: 1, replace: 0, delete: 0, same: 5 });
    expect(lines(result).filter((l) => !l.includes(' same unchanged '))).toEqual(['eks-sg update succeeded sg-0d1f8bb63e78926f4']);
  });

  it('when the recorded destroy deletes two components, then they are two delete steps last, with the id each had, succeeded and without inputs', () => {
    const plan = planOf(publishedEvents('deletes'));
    const result = applyOf('deletes', true);

    expect(plan.steps.map((s) => `${s.op} ${s.name} ${s.id ?? '-'}`)).toEqual(['same myproject-dev -', 'delete mychild mychild-id', 'delete mycomponent -']);
    expect(lines(result)).toEqual(['myproject-dev same unchanged -', 'mychild delete succeeded -', 'mycomponent delete succeeded -']);
    expect(result.resources.filter((r) => r.op === 'delete').every((r) => r.inputs === undefined)).toBe(true);
  });

  it('when a recorded resource operation fails with no diagnostic (failed-stacks-dont-rewrite-operations), then it failed naming the operation, the finished replacement succeeded, and its secret input is masked', () => {
    const events = publishedEvents('failedWithoutDiagnostic');
    expect(events.some((e) => e.diagnosticEvent)).toBe(false);
    expect(summaryOf(events)).toMatchObject({ maybeCorrupt: true });

    const result = applyOf('failedWithoutDiagnostic', false);

    expect(result.status).toBe('failed');
    // test-r's stream only finishes deleting its old copy (id foo): the id it has after the step is not in it.
    expect(lines(result).sort()).toEqual(['test-dev same unchanged -', 'test-r replace succeeded -', 'test-x update failed quux2']);
    expect(result.error).toEqual({ code: 'PROVISIONING.APPLY_FAILED', message: 'pulumi could not update test-x' });
    // The update's new inputs; the dynamic provider's `__provider` is a secret, blinded in the stream: masked.
    expect(planOf(events).steps.find((s) => s.name === 'test-x')?.inputs).toEqual({ __provider: '[secret]', quux: 'quux13' });
    expect(JSON.stringify([planOf(events), result])).not.toContain(PULUMI_SECRET_SIG);
  });

  it("when the engine's update fails two resources with error diagnostics (TestUpContinueOnErrorUpdate), then each failed with its own diagnostic, the creates succeeded, the apply failed with the first", () => {
    const events = publishedEvents('failedWithDiagnostics');
    const failing = streamSays(events, 'failing');

    const result = applyOf('failedWithDiagnostics', false);

    expect(lines(result).sort()).toEqual([
      'failing update failed 3',
      'failing2 update failed 4',
      'independent1 create succeeded 6',
      'independent2 create succeeded 7',
      'independent3 create succeeded 8',
    ]);
    expect(failing.old?.id).toBe('3');
    for (const name of ['failing', 'failing2']) {
      expect(result.resources.find((r) => r.name === name)?.error).toEqual({ code: 'PROVISIONING.APPLY_FAILED', message: 'intentionally failed update' });
    }
    expect(result.error).toEqual({ code: 'PROVISIONING.APPLY_FAILED', message: 'intentionally failed update' });
    expect(planOf(events).steps.find((s) => s.name === 'failing')).toMatchObject({ op: 'update', changedPaths: Object.keys(failing.detailedDiff!) });
    // The color markup is gone; the last diagnostic, of no resource, says the update failed.
    expect(errorDiagnostics(events, [])).toEqual([
      { urn: 'urn:pulumi:test::test::pkgB:m:typB::failing', message: 'intentionally failed update' },
      { urn: 'urn:pulumi:test::test::pkgB:m:typB::failing2', message: 'intentionally failed update' },
      { message: 'update failed' },
    ]);
  });

  it('when a mandatory policy stops the update (TestSimpleAnalyzeResourceFailure), then the failure names the policy, its pack and its message', () => {
    const events = publishedEvents('policyViolation');
    const violation = events.find((e) => e.policyEvent)?.policyEvent;
    expect(violation).toMatchObject({ enforcementLevel: 'mandatory', policyName: 'always-fails', policyPackName: 'analyzerA' });
    expect(events.some((e) => e.diagnosticEvent)).toBe(false);

    const result = applyOf('policyViolation', false);

    const why = 'policy always-fails of analyzerA (mandatory): a policy failed';
    expect(errorDiagnostics(events, [])).toEqual([{ urn: violation?.resourceUrn, message: why }]);
    expect(result).toMatchObject({ status: 'failed', resources: [], error: { code: 'PROVISIONING.APPLY_FAILED', message: why } });
  });

  it('when the same policy only advises (the published violation made advisory: no published stream has one), then nothing is reported as stopping the update', () => {
    const advisory = publishedEvents('policyViolation').map((e) => (e.policyEvent ? { ...e, policyEvent: { ...e.policyEvent, enforcementLevel: 'warning' as const } } : e));
    expect(errorDiagnostics(advisory, [])).toEqual([]);
  });

  it('when a preview ends as the policy-violation stream does, then the pulumi runner fails the plan with IAC.PREVIEW_FAILED naming the policy', async () => {
    // TEST DOUBLE of the Automation API port: its preview replays the published stream, then fails as the CLI does.
    const events = publishedEvents('policyViolation');
    const automation: PulumiAutomation = {
      selectStack: () =>
        Promise.resolve({
          setAllConfig: () => Promise.resolve(),
          info: () => Promise.resolve(undefined),
          preview: ({ onEvent }) => {
            events.forEach(onEvent);
            return Promise.reject(new PulumiCommandFailure('failed', 255, 'error: preview failed'));
          },
          up: () => Promise.reject(new Error('up is not part of a preview')),
        }),
    };
    const runner = createPulumiRunner({ automation, clock: new ManualClock('2026-12-06T00:00:00.000Z') });

    const error = await refusal(runner.preview({ tenant: 'tenant-a', project: 'test', stack: 'test' }, { 'Pulumi.yaml': 'name: test\nruntime: yaml\n' }));

    expect(error).toMatchObject({ code: 'IAC.PREVIEW_FAILED', message: 'policy always-fails of analyzerA (mandatory): a policy failed' });
  });
});
