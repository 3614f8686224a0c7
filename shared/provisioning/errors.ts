import type { ProblemCatalogue } from '../platform/errors/catalogue';

/**
 * Every problem the provisioning module answers with: its runs (`PROVISIONING.`) and its runner jobs (`RUNNER.`).
 * A run that fails ends with a code of `RunErrors` (run.ts), which names outcomes rather than answers; the codes of
 * those that are also thrown to a caller are here with their kind.
 */
export const ProvisioningErrors = {
  invalidReconciliation: { code: 'PROVISIONING.INVALID_RECONCILIATION', kind: 'validation', title: 'Reconciliation request not valid' },
  runNotFound: { code: 'PROVISIONING.RUN_NOT_FOUND', kind: 'not-found', title: 'Run not found' },
  unknownStack: { code: 'PROVISIONING.UNKNOWN_STACK', kind: 'not-found', title: 'No run has applied the stack' },
  unknownTarget: { code: 'PROVISIONING.UNKNOWN_TARGET', kind: 'not-found', title: 'Target not in this installation' },
  stackNotLocked: { code: 'PROVISIONING.STACK_NOT_LOCKED', kind: 'not-found', title: 'Stack not locked' },
  referenceUnresolved: { code: 'PROVISIONING.REFERENCE_UNRESOLVED', kind: 'not-found', title: 'Reference not resolved' },
  policyCheckUnknown: { code: 'PROVISIONING.POLICY_CHECK_UNKNOWN', kind: 'not-found', title: 'Policy check unknown to the GovernanceHost' },
  runnerUnavailable: { code: 'PROVISIONING.RUNNER_UNAVAILABLE', kind: 'not-found', title: 'No runner can run the step' },
  approverNotAllowed: { code: 'PROVISIONING.APPROVER_NOT_ALLOWED', kind: 'forbidden', title: 'Approver not allowed for the environment' },
  selfApproval: { code: 'PROVISIONING.SELF_APPROVAL', kind: 'forbidden', title: 'A second person must approve' },
  projectNotAllowed: { code: 'PROVISIONING.PROJECT_NOT_ALLOWED', kind: 'forbidden', title: 'Project sets keys not allowed' },
  packageNotAllowed: { code: 'PROVISIONING.PACKAGE_NOT_ALLOWED', kind: 'forbidden', title: 'Package not allowed' },
  sourceNotAllowed: { code: 'PROVISIONING.SOURCE_NOT_ALLOWED', kind: 'forbidden', title: 'Source repository not allowed' },
  sourceCredentialsInline: { code: 'PROVISIONING.SOURCE_CREDENTIALS_INLINE', kind: 'forbidden', title: 'Repository URL carries credentials' },
  planDigestMismatch: { code: 'PROVISIONING.PLAN_DIGEST_MISMATCH', kind: 'conflict', title: 'Plan digest is not the run’s plan' },
  planStale: { code: 'PROVISIONING.PLAN_STALE', kind: 'conflict', title: 'Plan stale' },
  receiptImmutable: { code: 'PROVISIONING.RECEIPT_IMMUTABLE', kind: 'conflict', title: 'Receipt already written' },
  runNotAwaitingApproval: { code: 'PROVISIONING.RUN_NOT_AWAITING_APPROVAL', kind: 'conflict', title: 'Run not awaiting approval' },
  runNotCancelable: { code: 'PROVISIONING.RUN_NOT_CANCELABLE', kind: 'conflict', title: 'Run cannot be canceled' },
  runNotStale: { code: 'PROVISIONING.RUN_NOT_STALE', kind: 'conflict', title: 'Run not stale' },
  stackLockVersionMismatch: { code: 'PROVISIONING.STACK_LOCK_VERSION_MISMATCH', kind: 'conflict', title: 'Stack lock version mismatch' },
  stackLockLost: { code: 'PROVISIONING.STACK_LOCK_LOST', kind: 'conflict', title: 'Stack lock lost' },
  configUnavailable: { code: 'PROVISIONING.CONFIG_UNAVAILABLE', kind: 'unavailable', title: 'Config Platform unavailable' },
  governanceUnavailable: { code: 'PROVISIONING.GOVERNANCE_UNAVAILABLE', kind: 'unavailable', title: 'GovernanceHost unavailable' },
  controlPlaneUnavailable: { code: 'PROVISIONING.CONTROL_PLANE_UNAVAILABLE', kind: 'unavailable', title: 'ControlPlaneApi unavailable' },
  knowledgeUnavailable: { code: 'PROVISIONING.KNOWLEDGE_UNAVAILABLE', kind: 'unavailable', title: 'KnowledgeHost unavailable' },
  deliveryUnavailable: { code: 'PROVISIONING.DELIVERY_UNAVAILABLE', kind: 'unavailable', title: 'DeliveryHost unavailable' },
  internal: { code: 'PROVISIONING.INTERNAL', kind: 'internal', title: 'Internal error of a run' },
  jobTokenInvalid: { code: 'RUNNER.JOB_TOKEN_INVALID', kind: 'unauthorized', title: 'Job token invalid' },
  poolMismatch: { code: 'RUNNER.POOL_MISMATCH', kind: 'forbidden', title: 'Pool credential of another pool' },
  callRefused: { code: 'RUNNER.CALL_REFUSED', kind: 'forbidden', title: 'Call not allowed to this job' },
  poolNotFound: { code: 'RUNNER.POOL_NOT_FOUND', kind: 'not-found', title: 'Agent pool not found' },
  jobSuperseded: { code: 'RUNNER.JOB_SUPERSEDED', kind: 'conflict', title: 'Job superseded' },
} as const satisfies ProblemCatalogue;
