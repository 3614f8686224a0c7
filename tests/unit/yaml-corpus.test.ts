import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalEngine } from '../../local/engine/local-engine';
import { loadProgram, type ProjectFiles } from '../../local/engine/pulumi-yaml';
import type { SqlStore } from '../../shared/platform/sql/database';
import { prepareProgram } from '../bench/yaml-corpus-program';
import { causeOf, corpusEngine, measureProgram, measureSequence } from '../bench/yaml-corpus-stages';

/** The measurement harness of `npm run yaml-corpus`, on tiny programs: its stages must be able to fail. */

const PASSES_EVERYTHING = `name: tiny
runtime: yaml
config:
  size:
    type: integer
    default: 2
resources:
  box:
    type: local:compute:Box
    properties:
      label: hello
      size: \${size}
outputs:
  greeting: hi-\${size}
  literal: $\${kept}
`;

const UNKNOWN_REFERENCE = `name: broken
runtime: yaml
resources:
  box:
    type: local:compute:Box
    properties:
      network: \${nothing.id}
`;

const INVOKES = `name: invoking
runtime: yaml
variables:
  ami:
    fn::invoke:
      function: aws:ec2:getAmi
      arguments: { mostRecent: true }
resources:
  vm:
    type: aws:ec2:Instance
    properties:
      ami: \${ami.id}
`;

describe('the YAML corpus harness', () => {
  let store: SqlStore;
  let engine: LocalEngine;
  let tenant = 0;

  beforeAll(async () => {
    ({ engine, store } = await corpusEngine());
  });
  afterAll(async () => {
    await store?.close();
  });

  function measure(files: ProjectFiles, on: LocalEngine = engine, load?: typeof loadProgram) {
    tenant++;
    return measureProgram(on, prepareProgram({ id: `examples/program-${tenant}`, source: 'test', files }), `tenant-${tenant}`, load);
  }

  it('when a program plans, applies, re-plans same, converges on its change and gives its literal outputs, then it is faithful', async () => {
    const report = await measure({ 'Pulumi.yaml': PASSES_EVERYTHING });

    expect(report.stages).toEqual({ parse: 'passed', plan: 'passed', apply: 'passed', replan: 'passed', change: 'passed', outputs: 'passed' });
    expect(report.outcome).toBe('faithful');
    expect(report.failure).toBeUndefined();
    expect(report.change).toBe('resources.box.properties.label: "hello" -> "hello-changed"');
    expect(report.outputs).toMatchObject({ from: 'literal', equal: true, expected: { greeting: 'hi-2', literal: '${kept}' } });
    expect(report.dangers).toEqual([]);
  });

  it('when the engine plans no step for a program that declares resources, then plan fails with CORPUS.EMPTY_PLAN and the danger is flagged', async () => {
    // An engine that reads the wrong file: it plans and applies a program without resources.
    const blind: LocalEngine = {
      ...engine,
      preview: (stack, _files, config, options) => engine.preview(stack, { 'Pulumi.yaml': `name: ${stack.project}\nruntime: yaml\n` }, config, options),
      apply: (stack, _files, config, plan, resolve, options) => engine.apply(stack, { 'Pulumi.yaml': `name: ${stack.project}\nruntime: yaml\n` }, config, plan, resolve, options),
    };

    const report = await measure({ 'Pulumi.yaml': PASSES_EVERYTHING }, blind);

    expect(report.failure).toMatchObject({ stage: 'plan', code: 'CORPUS.EMPTY_PLAN' });
    expect(report.dangers).toEqual(['empty-plan']);
    expect(report.emptyPlanApplied).toBe(true);
    expect(report.plannedSteps).toBe(0);
    expect(report.stages).toMatchObject({ parse: 'passed', plan: 'failed', apply: 'not-reached', outputs: 'not-reached' });
  });

  it('when the engine refuses the plan, then the program fails at plan with the engine code and no later stage runs', async () => {
    const report = await measure({ 'Pulumi.yaml': UNKNOWN_REFERENCE });

    expect(report.outcome).toBe('failed');
    expect(report.failure).toMatchObject({ stage: 'plan', code: 'IAC.UNKNOWN_REFERENCE' });
    expect(report.stages).toEqual({ parse: 'passed', plan: 'failed', apply: 'not-reached', replan: 'not-reached', change: 'not-reached', outputs: 'not-reached' });
  });

  it('when the plan after an apply is not all same, then the program fails at re-plan with CORPUS.NOT_IDEMPOTENT', async () => {
    // An engine whose every preview after the first sees another label: the stack never settles.
    let previews = 0;
    const drifting: LocalEngine = {
      ...engine,
      preview: (stack, files, config, options) => {
        previews++;
        const text = files['Pulumi.yaml'] ?? '';
        return engine.preview(stack, previews > 1 ? { 'Pulumi.yaml': text.replace('label: hello', 'label: moved') } : files, config, options);
      },
    };

    const report = await measure({ 'Pulumi.yaml': PASSES_EVERYTHING }, drifting);

    expect(report.failure).toMatchObject({ stage: 'replan', code: 'CORPUS.NOT_IDEMPOTENT' });
    expect(report.failure?.message).toContain('update box (label)');
    expect(report.stages).toMatchObject({ apply: 'passed', replan: 'failed', change: 'not-reached' });
  });

  it('when the steps of a multi-step test are applied in turn on one stack, then a step that deletes a resource converges, and a blind engine fails the sequence', async () => {
    const step = (n: number, text: string) => prepareProgram({ id: `cmd/pulumi-language-yaml/testdata/projects/l2-steps/${n}`, source: 'test', files: { 'Pulumi.yaml': text } });
    const two = `name: l2-steps\nruntime: yaml\nresources:\n  a:\n    type: simple:Resource\n    properties:\n      value: true\n  b:\n    type: simple:Resource\n    properties:\n      value: true\n`;
    const one = `name: l2-steps\nruntime: yaml\nresources:\n  a:\n    type: simple:Resource\n    properties:\n      value: true\n`;

    await expect(measureSequence(engine, [step(0, two), step(1, one)], 'tenant-steps')).resolves.toEqual({ steps: 2, converged: true });

    const blind: LocalEngine = { ...engine, preview: (stack, _files, config, options) => engine.preview(stack, { 'Pulumi.yaml': 'name: l2-steps\nruntime: yaml\n' }, config, options) };
    const failed = await measureSequence(blind, [step(0, two), step(1, one)], 'tenant-steps-blind');
    expect(failed).toMatchObject({ converged: false, failure: { step: 'l2-steps/0', stage: 'plan', code: 'CORPUS.EMPTY_PLAN' } });
  });

  it('when a program calls a provider function, then a refusal is expected: an engine code is a faithful refusal, an applied plan is the danger', async () => {
    const refused = await measure({ 'Pulumi.yaml': INVOKES });
    expect(refused.expectation).toBe('refusal');
    expect(refused.outcome).toBe('refused');
    expect(refused.failure?.code).toMatch(/^IAC\./);

    // An engine that ignores the call parses, plans and applies the program anyway.
    const ignored = (project: string): ProjectFiles => ({ 'Pulumi.yaml': PASSES_EVERYTHING.replace('name: tiny', `name: ${project}`) });
    const ignoring: LocalEngine = {
      ...engine,
      preview: (stack, _files, config, options) => engine.preview(stack, ignored(stack.project), config, options),
      apply: (stack, _files, config, plan, resolve, options) => engine.apply(stack, ignored(stack.project), config, plan, resolve, options),
    };
    const accepted = await measure({ 'Pulumi.yaml': INVOKES }, ignoring, (_files, stack, config) => loadProgram(ignored('invoking'), stack, config));
    expect(accepted.outcome).toBe('accepted-refusal');
    expect(accepted.dangers).toContain('accepted-refusal');
  });

  it('when two programs fail for one reason, then their causes are equal: file, line, names and values taken out', () => {
    const a = causeOf({ code: 'IAC.INVALID_PROJECT', message: 'Main.yaml:9: resources.res.options.provider is not supported by the local engine' });
    const b = causeOf({ code: 'IAC.INVALID_PROJECT', message: 'Pulumi.yaml:24: resources.my-bucket.options.provider is not supported by the local engine' });
    expect(a).toBe('resources.*.options.provider is not supported by the local engine');
    expect(b).toBe(a);
    expect(causeOf({ code: 'IAC.UNKNOWN_REFERENCE', message: 'outputs.url: ${bucket.url} refers to nothing in the project' })).toBe('outputs.*: ${…} refers to nothing in the project');
  });
});
