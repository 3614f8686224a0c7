import { AppError, ensureError } from '../platform/errors/app-error';
import type { JsonValue } from '../platform/iac/iac-values';
import type { EnvironmentTier } from './promotion';

/**
 * The external services of the seed that provisioning runs call, as ports (design page, "Dependencies"). Each has a
 * local implementation for the local host (local-external-services.adapter.ts); Azure adapters are a named gap (README).
 *
 * Failure modes, as the seed gives them:
 * - GovernanceHost, ControlPlaneApi, KnowledgeHost, DeliveryHost: **fail-fast**. A call that fails throws an AppError of kind
 *   `unavailable` with the service's code (`PROVISIONING.GOVERNANCE_UNAVAILABLE`, …): the step throws, the
 *   orchestration's activity retry runs it again, and when the retries run out the run fails with that code. A
 *   failed call never counts as an allow.
 * - Config Platform: **degrade**. A failed resolution uses the last known value of the reference, and the apply
 *   receipt says so; without one the apply fails before it changes anything (`PROVISIONING.CONFIG_UNAVAILABLE`).
 */
export const ExternalErrors = {
  governanceUnavailable: 'PROVISIONING.GOVERNANCE_UNAVAILABLE',
  controlPlaneUnavailable: 'PROVISIONING.CONTROL_PLANE_UNAVAILABLE',
  knowledgeUnavailable: 'PROVISIONING.KNOWLEDGE_UNAVAILABLE',
  deliveryUnavailable: 'PROVISIONING.DELIVERY_UNAVAILABLE',
  /** The Config Platform failed and the reference has no last known value: nothing was applied. */
  configUnavailable: 'PROVISIONING.CONFIG_UNAVAILABLE',
  /** A GovernanceHost policy denied the plan. */
  policyDenied: 'PROVISIONING.POLICY_DENIED',
  /** The GovernanceHost does not know a policy check it answered `pending` with (it lost it): the run fails. */
  policyCheckUnknown: 'PROVISIONING.POLICY_CHECK_UNKNOWN',
  /** The ControlPlaneApi does not know the promotion's environment. */
  unknownEnvironment: 'PROVISIONING.UNKNOWN_ENVIRONMENT',
  /** The approver is not one the ControlPlaneApi allows for the run's environment. */
  approverNotAllowed: 'PROVISIONING.APPROVER_NOT_ALLOWED',
  /** The DeliveryHost made no release of the promotion's name and version for its tenant. */
  releaseUnknown: 'PROVISIONING.RELEASE_UNKNOWN',
  /** The promotion's desired state (repository, commit, path) is not its release's. */
  releaseMismatch: 'PROVISIONING.RELEASE_MISMATCH',
  /** The DeliveryHost answered the release without its desired state, and this host promotes pinned releases only. */
  releaseNotPinned: 'PROVISIONING.RELEASE_NOT_PINNED',
} as const;

/** The codes a step throws when a fail-fast service did not answer; a run that gives up on such a step ends with it. */
export const UNAVAILABLE_CODES: readonly string[] = [ExternalErrors.governanceUnavailable, ExternalErrors.controlPlaneUnavailable, ExternalErrors.knowledgeUnavailable, ExternalErrors.deliveryUnavailable];

/**
 * The error a fail-fast call throws. Its message starts with the code: the orchestration sees only the message of
 * a step that failed after its retries, and the run ends with the code it finds there (`unavailableCodeIn`).
 */
export function serviceUnavailable(code: string, service: string, thrown: unknown): AppError {
  const cause = ensureError(thrown);
  return new AppError(code, 'unavailable', `${code}: ${service} did not answer (${cause.message.slice(0, 300)})`, { service });
}

/** The fail-fast code a failure reason names, if any. */
export function unavailableCodeIn(reason: string): string | undefined {
  return UNAVAILABLE_CODES.find((code) => reason.includes(code));
}

/** What a policy decides on: the run and its plan (steps by op and type), never a resolved value. */
export interface PolicyInput {
  readonly runId: string;
  readonly tenant: string;
  readonly environment: { readonly id: string; readonly name: string; readonly tier: EnvironmentTier };
  readonly stack: string;
  readonly planDigest: string;
  readonly steps: readonly { readonly urn: string; readonly type: string; readonly op: string }[];
}

/** BREAKING-CHANGE SHAPE: stored in the plan receipt. */
export type PolicyDecision =
  | { readonly decision: 'allow'; readonly policies: readonly string[] }
  | { readonly decision: 'deny'; readonly policy: string; readonly reason: string };

/**
 * The GovernanceHost's answer on a plan: a decision, or `pending` when it took the plan in and decides later (a
 * person reviews it); the run then asks again with `checkId` until the check is decided.
 *
 * BREAKING-CHANGE SHAPE: the GovernanceHost's API.
 */
export type PolicyAnswer = PolicyDecision | { readonly decision: 'pending'; readonly checkId: string };

/** The evidence of one apply, for the audit trail. BREAKING-CHANGE SHAPE: sent to the GovernanceHost. */
export interface ApplyEvidence {
  readonly runId: string;
  readonly tenant: string;
  readonly environment: string;
  readonly stack: string;
  readonly planDigest: string;
  /** Who approved the plan; absent when the plan needed no approval. */
  readonly approvedBy?: string;
  readonly result: 'applied' | 'failed';
  readonly errorCode?: string;
  /** The KnowledgeHost artifact of the apply receipt. */
  readonly applyReceiptArtifact: string;
  /** ISO-8601 UTC. */
  readonly at: string;
}

/** Whose reference is resolved: a reference names a value of one tenant, never of another. */
export interface ReferenceScope {
  readonly tenant: string;
  /** The run it is resolved for, when there is one (the service's audit trail). */
  readonly runId?: string;
}

/** GovernanceHost (fail-fast): deployment-domain policy, secret references, audit evidence of applies. */
export interface GovernanceHost {
  /**
   * Decides on a plan before it is recorded; a deny fails the run with `PROVISIONING.POLICY_DENIED`. `pending`: the
   * plan waits (its run without its stack) for the check's decision, which `policyCheck` answers.
   */
  decide(input: PolicyInput): Promise<PolicyAnswer>;
  /**
   * Where a check `decide` answered `pending` for stands: still pending, or decided. A check the service does not
   * know throws `PROVISIONING.POLICY_CHECK_UNKNOWN` (kind not-found).
   */
  policyCheck(checkId: string): Promise<PolicyAnswer>;
  /**
   * The value behind a `secretRef`, inside apply only. An unknown reference throws `PROVISIONING.REFERENCE_UNRESOLVED`
   * (kind not-found); a service that does not answer throws `PROVISIONING.GOVERNANCE_UNAVAILABLE`.
   */
  resolveSecret(reference: string, scope: ReferenceScope): Promise<JsonValue>;
  /** Records an apply's evidence; answers the evidence id. Idempotent per run and digest. */
  recordEvidence(evidence: ApplyEvidence): Promise<string>;
}

export interface ControlPlaneEnvironment {
  readonly id: string;
  readonly name?: string;
  readonly tier?: EnvironmentTier;
  /** Who may approve its plans; undefined: anyone with the operate scope. */
  readonly approvers?: readonly string[];
  /** The target (`RuntimeCloud__Targets` id) it lives on; undefined: the installation's rules decide. */
  readonly target?: string;
}

export interface Edition {
  readonly id: string;
  readonly name: string;
}

/** ControlPlaneApi (fail-fast): environments, who approves production applies, editions (read-only). */
export interface ControlPlaneApi {
  /** The environment of a tenant by id; undefined when the control plane does not know it. */
  environment(tenant: string, environmentId: string): Promise<ControlPlaneEnvironment | undefined>;
  editions(): Promise<readonly Edition[]>;
}

export type ReceiptKind = 'plan-receipt' | 'apply-receipt';

/** KnowledgeHost (fail-fast): receipts stored as artifacts. */
export interface KnowledgeHost {
  /** Stores a receipt; answers its artifact id. The same receipt stored twice gets the same id. */
  putReceipt(receipt: { readonly runId: string; readonly tenant: string; readonly kind: ReceiptKind; readonly content: unknown }): Promise<string>;
}

/** Config Platform (degrade): runtime configuration and feature flags by reference. */
export interface ConfigPlatform {
  /** The value behind a `configRef`; unknown: `PROVISIONING.REFERENCE_UNRESOLVED`; not answering: any other error. */
  resolve(reference: string, scope: ReferenceScope): Promise<JsonValue>;
}

/** A desired state by reference, as a promotion and a release name it. */
export interface DesiredStateRef {
  readonly repository: string;
  readonly commit: string;
  readonly path: string;
}

/**
 * A release as the DeliveryHost made it. `desiredState` absent: the DeliveryHost pins none (only the local stand-in
 * without a release catalog answers so, as the local ControlPlaneApi without its file knows every environment).
 *
 * BREAKING-CHANGE SHAPE: the DeliveryHost's API.
 */
export interface Release {
  readonly name: string;
  readonly version: string;
  readonly desiredState?: DesiredStateRef;
}

/** A receipt of a run by digest (`sha256:<hex>`). */
export interface ReceiptDigest {
  readonly kind: ReceiptKind;
  readonly digest: string;
}

/**
 * How the provisioning run of a promotion ended, as the DeliveryHost is told: once per run, sent until acknowledged.
 *
 * BREAKING-CHANGE SHAPE: stored in the host's delivery report outbox and sent to the DeliveryHost.
 */
export interface OutcomeReport {
  readonly tenant: string;
  readonly runId: string;
  readonly promotionId: string;
  readonly release: { readonly name: string; readonly version: string };
  readonly environmentId: string;
  readonly outcome: 'applied' | 'failed';
  /** The run's final state: applied, failed, rejected, superseded or canceled. */
  readonly state: string;
  /** Why it did not apply; absent when applied. */
  readonly code?: string;
  readonly reason?: string;
  readonly receipts: readonly ReceiptDigest[];
  /** ISO-8601 UTC. */
  readonly finishedAt: string;
}

/** DeliveryHost (fail-fast): release resolution at intake, promotion reports of ended runs. */
export interface DeliveryHost {
  /** A tenant's release by name and version; undefined when the DeliveryHost made no such release for the tenant. */
  resolveRelease(tenant: string, release: { readonly name: string; readonly version: string }): Promise<Release | undefined>;
  /** Records how a run ended; answers the report id. Idempotent per tenant and run: the first report stands. */
  reportOutcome(report: OutcomeReport): Promise<string>;
}

/** Where the last value the Config Platform gave for each tenant's reference is kept, for when it does not answer. */
export interface LastKnownConfig {
  get(tenant: string, reference: string): Promise<{ readonly value: JsonValue; readonly at: Date } | undefined>;
  put(tenant: string, reference: string, value: JsonValue, at: Date): Promise<void>;
}

/** The external services a provisioning service runs with. */
export interface ExternalServices {
  readonly governance: GovernanceHost;
  readonly controlPlane: ControlPlaneApi;
  readonly knowledge: KnowledgeHost;
  readonly configPlatform: ConfigPlatform;
  readonly lastKnownConfig: LastKnownConfig;
  readonly delivery: DeliveryHost;
}

/**
 * The services where no adapter is wired (a peer without an endpoint). Every call fails as a service that does not answer, so
 * a run fails with the service's code instead of passing unchecked.
 */
export function unwiredExternalServices(): ExternalServices {
  const down = (code: string, service: string) => () => Promise.reject(serviceUnavailable(code, service, new Error('no adapter is configured on this host')));
  return {
    governance: {
      decide: down(ExternalErrors.governanceUnavailable, 'the GovernanceHost'),
      policyCheck: down(ExternalErrors.governanceUnavailable, 'the GovernanceHost'),
      resolveSecret: down(ExternalErrors.governanceUnavailable, 'the GovernanceHost'),
      recordEvidence: down(ExternalErrors.governanceUnavailable, 'the GovernanceHost'),
    },
    controlPlane: { environment: down(ExternalErrors.controlPlaneUnavailable, 'the ControlPlaneApi'), editions: down(ExternalErrors.controlPlaneUnavailable, 'the ControlPlaneApi') },
    knowledge: { putReceipt: down(ExternalErrors.knowledgeUnavailable, 'the KnowledgeHost') },
    configPlatform: { resolve: down(ExternalErrors.configUnavailable, 'the Config Platform') },
    lastKnownConfig: { get: () => Promise.resolve(undefined), put: () => Promise.resolve() },
    delivery: { resolveRelease: down(ExternalErrors.deliveryUnavailable, 'the DeliveryHost'), reportOutcome: down(ExternalErrors.deliveryUnavailable, 'the DeliveryHost') },
  };
}
