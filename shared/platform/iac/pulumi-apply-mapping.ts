import type { EngineEvent, OutputMap, UpdateSummary } from '@pulumi/pulumi/automation';
import { type ApplyError, type ApplyResult, type Plan, type ResourceResult } from './plan';
import { inSequence, maskObject, maskOutputs, plainMessage, redact, stackOutputsOf } from './pulumi-mapping';
import { latestNew, observe } from './pulumi-plan-mapping';

/** A Pulumi `up` as this host's `ApplyResult`: each resource's outcome, the stack outputs masked, and the error, if any. */

/** The diagnostics by which Pulumi stops an update that would go beyond its `--plan` (the "constraint" errors). */
const PLAN_CONSTRAINT = [/violates plan/i, /is not allowed by the plan/i, /expected resource operations for .* but none were seen/i];

export function isPlanConstraintMessage(message: string): boolean {
  return PLAN_CONSTRAINT.some((pattern) => pattern.test(message));
}

/**
 * What stopped a preview or an update, in arrival order, plain text, secrets redacted: error diagnostics (severity
 * `error`) and violations of mandatory policies. Pulumi fails an update on a mandatory `policyEvent` without an
 * error diagnostic of its own (its engine's recorded stream TestSimpleAnalyzeResourceFailure has none), so without
 * them the failure would not say why. An advisory violation (`warning`) stops nothing and is not one of them.
 */
export function errorDiagnostics(events: readonly EngineEvent[], secrets: readonly string[]): { readonly urn?: string; readonly message: string }[] {
  return events
    .flatMap((e) => {
      const { diagnosticEvent: d, policyEvent: p } = e;
      if (d?.severity === 'error') return [{ urn: d.urn, text: plainMessage(d.message) }];
      if (p?.enforcementLevel === 'mandatory') return [{ urn: p.resourceUrn, text: `policy ${p.policyName} of ${p.policyPackName} (mandatory): ${plainMessage(p.message)}` }];
      return [];
    })
    .map(({ urn, text }) => ({ ...(urn ? { urn } : {}), message: redact(text, secrets) }))
    .filter((d) => d.message.length > 0);
}

/** What an `up` with `plan: <path>` gave. */
export interface UpObservation {
  /** The plan `up` carried out: the one made again inside apply, covered by the approved one. */
  readonly plan: Plan;
  /** The digest of the approved plan (the result's `planDigest`). */
  readonly approvedDigest: string;
  /** As `onEvent` received them. */
  readonly events: readonly EngineEvent[];
  /** The command's result; absent when it failed. */
  readonly result?: { readonly outputs: OutputMap; readonly summary?: UpdateSummary };
  /** Why the command failed (already redacted); absent when it succeeded. */
  readonly failure?: string;
  /** Why the caller cancelled the update (its `beforeStep` refused); absent when it did not. */
  readonly stopped?: ApplyError;
  /** The stack's update version after the command. */
  readonly serial: number;
  /** Resolved reference values: redacted from every message. */
  readonly secrets: readonly string[];
  readonly startedAt: string;
  readonly finishedAt: string;
}

/**
 * The apply result of an `up`: each planned resource's status (a resource whose operation failed is `failed`
 * with Pulumi's diagnostic; one never reached is `skipped`), stack outputs with secrets masked, and the error: a
 * plan constraint error is `PROVISIONING.PLAN_CHANGED`, anything else `PROVISIONING.APPLY_FAILED`.
 */
export function applyResultFromUp(observation: UpObservation): ApplyResult {
  const { plan, secrets } = observation;
  const events = inSequence(observation.events);
  // `up` runs with --skip-preview; events of a planning pass, should one come, say nothing about what was done.
  const applied = events.filter((e) => !e.resourcePreEvent?.planning && !e.resOutputsEvent?.planning);
  const observed = observe(applied);
  const finishedUrns = new Set(applied.flatMap((e) => (e.resOutputsEvent ? [e.resOutputsEvent.metadata.urn] : [])));
  const failedUrns = new Set(applied.flatMap((e) => (e.resOpFailedEvent ? [e.resOpFailedEvent.metadata.urn] : [])));
  const diagnostics = errorDiagnostics(events, secrets);
  const summaryResult = observation.result?.summary?.result;
  const succeeded =
    observation.result !== undefined && observation.failure === undefined && observation.stopped === undefined && failedUrns.size === 0 && (summaryResult === undefined || summaryResult === 'succeeded');

  const resources = plan.steps.map((step): ResourceResult => {
    const common = { urn: step.urn, name: step.name, type: step.type, op: step.op };
    const seen = observed.get(step.urn);
    const done = finishedUrns.has(step.urn);
    const after = seen ? latestNew(seen.metadata)?.new : undefined;
    // After a replace the resource is the replacement: its id is the one the events show, never the old one's (a
    // stream that only finishes deleting the old copy, as Pulumi's recorded failed-stacks-dont-rewrite-operations, shows none).
    const id = step.op === 'delete' ? undefined : after?.id || (step.op === 'replace' ? undefined : step.id);
    if (failedUrns.has(step.urn)) {
      const message = diagnostics.find((d) => d.urn === step.urn)?.message ?? `pulumi could not ${step.op} ${step.name}`;
      const keptId = step.op === 'create' ? after?.id || undefined : step.id;
      return { ...common, status: 'failed', ...(keptId ? { id: keptId } : {}), error: { code: 'PROVISIONING.APPLY_FAILED', message } };
    }
    if (done || succeeded) {
      // Pulumi's inputs as its engine events show them after the step (else the preview's): it cannot tell which
      // reference a secret came from, so a secret-valued input is `[secret]`, not the `{ secretRef }` it was
      // given; a value still unknown stays a computed marker.
      const inputs = step.op === 'delete' ? undefined : after?.inputs ? maskObject(after.inputs) : step.inputs;
      return { ...common, status: step.op === 'same' ? 'unchanged' : 'succeeded', ...(id ? { id } : {}), ...(inputs ? { inputs } : {}) };
    }
    return { ...common, status: 'skipped', ...(step.id ? { id: step.id } : {}) };
  });

  const base = { stack: plan.stack, planDigest: observation.approvedDigest, serial: observation.serial, resources, startedAt: observation.startedAt, finishedAt: observation.finishedAt };
  if (succeeded) return { status: 'applied', ...base, outputs: maskOutputs(observation.result?.outputs, stackOutputsOf(applied), secrets) };
  return { status: 'failed', ...base, outputs: {}, error: observation.stopped ?? upError(diagnostics, observation.failure, resources) };
}

function upError(diagnostics: readonly { urn?: string; message: string }[], failure: string | undefined, resources: readonly ResourceResult[]): ApplyError {
  const constraint = diagnostics.find((d) => isPlanConstraintMessage(d.message)) ?? (failure && isPlanConstraintMessage(failure) ? { message: failure } : undefined);
  if (constraint) {
    return { code: 'PROVISIONING.PLAN_CHANGED', message: `pulumi stopped the update: it would have done what the approved plan did not (${constraint.message})` };
  }
  const first = resources.find((r) => r.error)?.error?.message ?? diagnostics[0]?.message ?? failure ?? 'pulumi up failed';
  return { code: 'PROVISIONING.APPLY_FAILED', message: first };
}
