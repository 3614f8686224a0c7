import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { EngineEvent } from '@pulumi/pulumi/automation';
import type { JsonObject } from '../../shared/platform/iac/iac-values';

/**
 * What Pulumi published of its engine's output, for the tests of the Pulumi mapping (the published fixtures:
 * docs/testing.md, "Published fixtures"; read from there, never copied here): engine event streams recorded from real
 * `pulumi` runs (`pulumi.display.*`) and from the engine's lifecycle tests (`pulumi.lifecycletest.*`), and the two
 * update plans (`pulumi preview --save-plan`) Pulumi's own pages show.
 */
export const PULUMI_FIXTURES = join(__dirname, '..', '..', '..', 'shared', 'fixtures', 'pulumi');

/** The published event streams, by what each shows. */
export const STREAMS = {
  /** An update that creates six resources (EKS), with their outputs. */
  creates: 'pulumi.display.up-3.json',
  /** An update of one resource in place, with `detailedDiff`; five others `same`. */
  inPlaceUpdate: 'pulumi.display.up-4.json',
  /** A preview that replaces an instance (`detailedDiff` update-replace); stack outputs become unknown. */
  replacePreview: 'pulumi.display.webserver-userdata.json',
  /** A preview of a replacement from the engine's own tests (`detailedDiff` add-replace). */
  engineReplacePreview: 'pulumi.lifecycletest.TestDetailedDiffReplace.1.eventstream.json',
  /** A destroy of two component children; the stack `same`. */
  deletes: 'pulumi.display.destroy-with-components.json',
  /** A preview where nothing changes but the stack outputs are nested values, registered twice. */
  stackOutputs: 'pulumi.display.stack-output-resource-diff.json',
  /** A preview of a stack whose outputs change with no diff, pretty-printed: values over many lines. */
  prettyPrinted: 'pulumi.display.json-yaml.yaml-text-change.json',
  /** An update whose resource operation fails (`resOpFailedEvent`) with no diagnostic; `maybeCorrupt`. */
  failedWithoutDiagnostic: 'pulumi.display.failed-stacks-dont-rewrite-operations.json',
  /** An update (--continue-on-error) where two updates fail with error diagnostics and three creates succeed. */
  failedWithDiagnostics: 'pulumi.lifecycletest.TestUpContinueOnErrorUpdate.1.eventstream.json',
  /** An update a mandatory policy stops (`policyEvent`), with no resource event and no diagnostic. */
  policyViolation: 'pulumi.lifecycletest.TestSimpleAnalyzeResourceFailure.eventstream.json',
} as const;
export type StreamName = keyof typeof STREAMS;

/** The published update plans (`apitype.DeploymentPlanV1`). */
export const PLANS = {
  /** A new aws-typescript project: a bucket, its default provider and the stack (docs page "Update plans"). */
  awsTypescript: 'pulumi-hugo.update-plans.aws-typescript-preview.plan.json',
  /** The .NET Automation API example: a random pet, its provider and the stack; goals with `checkedInputs`. */
  randomPet: 'automation-api-examples.PreviewUpProgram.inline_preview_up.plan.json',
} as const;
export type PlanName = keyof typeof PLANS;

const streamFile = (name: StreamName) => join(PULUMI_FIXTURES, 'events', STREAMS[name]);
const planFile = (name: PlanName) => join(PULUMI_FIXTURES, 'plans', PLANS[name]);

export const present = [...(Object.keys(STREAMS) as StreamName[]).map(streamFile), ...(Object.keys(PLANS) as PlanName[]).map(planFile)].every((file) => existsSync(file));
if (!present) console.warn(`skipped: the published Pulumi engine event streams and update plans are not at ${PULUMI_FIXTURES} (the published fixtures: docs/testing.md)`);

/**
 * The JSON values of a stream that holds them back to back, as Pulumi writes engine events and reads them (Go's
 * `json.Decoder` in a loop until EOF): one a line, or pretty-printed over many lines, only whitespace between.
 * Throws on anything else (text between values, a value cut off): `JSON.parse` of such a whole file always fails.
 */
export function jsonValues(text: string): unknown[] {
  const values: unknown[] = [];
  let depth = 0;
  let start = 0;
  let inString = false;
  let escaped = false;
  for (let at = 0; at < text.length; at++) {
    const char = text[at]!;
    if (inString) {
      if (escaped) escaped = false;
      else if (char === '\\') escaped = true;
      else if (char === '"') inString = false;
    } else if (char === '"') {
      inString = true;
    } else if (char === '{' || char === '[') {
      if (depth++ === 0) start = at;
    } else if (char === '}' || char === ']') {
      if (--depth === 0) values.push(JSON.parse(text.slice(start, at + 1)));
      if (depth < 0) throw new Error(`the stream closes a value it never opened, at ${at}`);
    } else if (depth === 0 && !/\s/.test(char)) {
      throw new Error(`the stream holds ${JSON.stringify(char)} between values, at ${at}`);
    }
  }
  if (depth > 0 || inString) throw new Error('the stream ends inside a value');
  return values;
}

/** The text of a published stream, as it is. */
export const streamText = (name: StreamName): string => readFileSync(streamFile(name), 'utf8');

/** The engine events of a published stream, in the order it holds them. */
export const publishedEvents = (name: StreamName): EngineEvent[] => jsonValues(streamText(name)) as EngineEvent[];

/** A published update plan file's JSON. */
export const publishedPlan = (name: PlanName): JsonObject => JSON.parse(readFileSync(planFile(name), 'utf8')) as JsonObject;

/** The stack and project a URN (`urn:pulumi:<stack>::<project>::…`) names. */
export function stackOfUrn(urn: string): { stack: string; project: string } {
  const [, stack = '', project = ''] = /^urn:pulumi:([^:]+)::([^:]+)::/.exec(urn) ?? [];
  return { stack, project };
}
