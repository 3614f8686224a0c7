import { qualifiedStackName, type StackRef } from '../platform/iac/stack-ref';
import type { NewEvent } from '../platform/bus/events';
import type { DriftReport } from './drift';
import { countByKind, groupByResource, type ReconciliationPlan } from './environment';

/**
 * The events inventory publishes on `runtime-cloud-events` (CloudEvents 1.0, written to the outbox in the
 * transaction of the scan that found the drift). Pure.
 *
 * BREAKING-CHANGE SHAPES: consumers (Studio, DeliveryHost) read these `data` members; removing or renaming one, or
 * changing its meaning, is a breaking change. Adding a member is not. Observed values of properties whose desired
 * value is a secret reference are never included (inventory does not store them).
 */

interface EnvironmentRef {
  readonly environmentId: string;
  readonly name: string;
  readonly tenant: string;
  readonly stack: StackRef;
}

/** An environment's findings changed and it is drifted (sent once per new set of findings, not per scan). */
export function runtimeDriftDetected(environment: EnvironmentRef, scan: { scanId: string; observedAt: Date }, report: DriftReport, proposalId: string | undefined): NewEvent {
  return {
    type: 'RuntimeDriftDetected',
    subject: `environments/${environment.environmentId}`,
    correlationId: scan.scanId,
    tenant: environment.tenant,
    data: {
      environmentId: environment.environmentId,
      environmentName: environment.name,
      tenantId: environment.tenant,
      // The stack's own name, its project and its identity `tenant/project/stack`.
      stack: environment.stack.stack,
      project: environment.stack.project,
      qualifiedStack: qualifiedStackName(environment.stack),
      scanId: scan.scanId,
      observedAt: scan.observedAt.toISOString(),
      fingerprint: report.fingerprint,
      counts: countByKind(report.findings),
      ignored: report.ignored.length,
      findings: report.findings,
      ...(proposalId !== undefined ? { proposalId } : {}),
    },
  };
}

/** A new reconciliation proposal is open for review. */
export function reconciliationProposed(environment: EnvironmentRef, proposal: { id: string; fingerprint: string; supersedes?: string }, report: DriftReport, plan: ReconciliationPlan): NewEvent {
  return {
    type: 'ReconciliationProposed',
    subject: `proposals/${proposal.id}`,
    correlationId: proposal.id,
    tenant: environment.tenant,
    data: {
      proposalId: proposal.id,
      environmentId: environment.environmentId,
      environmentName: environment.name,
      tenantId: environment.tenant,
      // The stack's own name, its project and its identity `tenant/project/stack`.
      stack: environment.stack.stack,
      project: environment.stack.project,
      qualifiedStack: qualifiedStackName(environment.stack),
      fingerprint: proposal.fingerprint,
      ...(proposal.supersedes !== undefined ? { supersedes: proposal.supersedes } : {}),
      resources: groupByResource(report.findings).map((g) => ({ urn: g.urn, type: g.type, severity: g.severity, findings: g.findings.length })),
      plan,
    },
  };
}
