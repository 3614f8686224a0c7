import type { TenantFilter } from '../platform/auth/auth';
import type { IgnoreRule } from './drift';
import type { EnvironmentKey } from './environment';
import type { ProposalStatus } from './proposal';
import { drift, getEnvironment, inventory, listEnvironments, setScanning } from './environments.service';
import { addIgnoreRule, deleteIgnoreRule, listIgnoreRules } from './ignore-rules.service';
import { createInventoryContext, type DriftView, type EnvironmentView, type InventoryServiceOptions, type Page, type PageRequest, type ProposalView, type ReconciliationRequest } from './inventory.context';
import { getRejection, intake, type IntakeMessage, type IntakeResult } from './intake.service';
import type { InventoryRejection, RecordedIgnoreRule } from './inventory.repository';
import type { ScanRecord, StoredResource } from './observed-inventory.repository';
import { acceptedAs, dismiss, getProposal, listProposals, reconciliationFor } from './proposals.service';
import { scan, scanDue, type ScanTrigger } from './scan.service';
import { recordSpecification, type SpecificationOutcome } from './specification.service';

export type { DriftView, EnvironmentView, IntakeMessage, IntakeResult, InventoryRejection, InventoryServiceOptions, Page, PageRequest, ProposalView, ReconciliationRequest, ScanTrigger };

export interface InventoryService {
  /** Records the desired state of a `SpecificationApplied`; an older one arriving late changes nothing. */
  recordSpecification(event: { readonly id: string; readonly time: string; readonly data: unknown }): Promise<SpecificationOutcome>;
  /**
   * Takes a message of inventory's subscription in (a desired state, a run's end), or records it as a rejection with
   * its reason; a failed reconciliation run reopens its proposal.
   */
  intake(message: IntakeMessage): Promise<IntakeResult>;
  /** The rejection recorded for a message of inventory's subscription, by its messageId. */
  getRejection(messageId: string): Promise<InventoryRejection | undefined>;
  /** Observes one environment now, diffs it and records the outcome (also a skip or a failure, with why). */
  scan(environment: EnvironmentKey, trigger: ScanTrigger): Promise<ScanRecord>;
  /** Scans the environments that are due, at most `scanConcurrency` at once; returns the records of this round. */
  scanDue(): Promise<ScanRecord[]>;
  setScanning(tenants: TenantFilter, environmentId: string, request: { enabled: boolean; by: string; reason: string }): Promise<EnvironmentView>;
  listEnvironments(tenants: TenantFilter, page: PageRequest): Promise<Page<EnvironmentView>>;
  getEnvironment(tenants: TenantFilter, environmentId: string): Promise<EnvironmentView>;
  /**
   * The environment and a page of its observed resources, in the order Table storage keeps them: by row key (the
   * urn percent-encoded, or its sha-256 past 512 characters), which is not urn order. The cursor holds the last
   * row's key.
   */
  inventory(tenants: TenantFilter, environmentId: string, page: PageRequest): Promise<{ environment: EnvironmentView; items: StoredResource[]; nextCursor?: string }>;
  drift(tenants: TenantFilter, environmentId: string): Promise<DriftView>;
  listIgnoreRules(tenants: TenantFilter, environmentId: string, query: PageRequest & { includeDeleted: boolean }): Promise<Page<RecordedIgnoreRule>>;
  /**
   * Records a rule; `created` false when the Idempotency-Key made one before (that rule is returned). The key used
   * for a different rule is refused with 422 `REQUEST.IDEMPOTENCY_KEY_REUSED`.
   */
  addIgnoreRule(tenants: TenantFilter, environmentId: string, rule: Omit<IgnoreRule, 'id'>, made: { by: string; idempotencyKey?: string }): Promise<{ rule: RecordedIgnoreRule; created: boolean }>;
  deleteIgnoreRule(tenants: TenantFilter, environmentId: string, ruleId: string, by: string): Promise<void>;
  listProposals(tenants: TenantFilter, query: PageRequest & { status?: ProposalStatus; environment?: string }): Promise<Page<ProposalView>>;
  getProposal(tenants: TenantFilter, proposalId: string): Promise<ProposalView>;
  /** The run request for accepting an open proposal; `acceptedAs` then records the run. */
  reconciliationFor(tenants: TenantFilter, proposalId: string, by: string): Promise<ReconciliationRequest>;
  acceptedAs(proposalId: string, runId: string, by: string): Promise<ProposalView>;
  dismiss(tenants: TenantFilter, proposalId: string, request: { by: string; reason: string }): Promise<ProposalView>;
}

/**
 * The inventory use cases, each in a file of its own flow (specification, scan, environments, ignore-rules,
 * proposals `.service.ts`) over one `InventoryContext` (inventory.context.ts).
 */
export function createInventoryService(options: InventoryServiceOptions): InventoryService {
  const ctx = createInventoryContext(options);
  return {
    recordSpecification: (event) => recordSpecification(ctx, event),
    intake: (message) => intake(ctx, message),
    getRejection: (messageId) => getRejection(ctx, messageId),
    scan: (environment, trigger) => scan(ctx, environment, trigger),
    scanDue: () => scanDue(ctx),
    setScanning: (tenants, environmentId, request) => setScanning(ctx, tenants, environmentId, request),
    listEnvironments: (tenants, page) => listEnvironments(ctx, tenants, page),
    getEnvironment: (tenants, environmentId) => getEnvironment(ctx, tenants, environmentId),
    inventory: (tenants, environmentId, page) => inventory(ctx, tenants, environmentId, page),
    drift: (tenants, environmentId) => drift(ctx, tenants, environmentId),
    listIgnoreRules: (tenants, environmentId, query) => listIgnoreRules(ctx, tenants, environmentId, query),
    addIgnoreRule: (tenants, environmentId, rule, made) => addIgnoreRule(ctx, tenants, environmentId, rule, made),
    deleteIgnoreRule: (tenants, environmentId, ruleId, by) => deleteIgnoreRule(ctx, tenants, environmentId, ruleId, by),
    listProposals: (tenants, query) => listProposals(ctx, tenants, query),
    getProposal: (tenants, proposalId) => getProposal(ctx, tenants, proposalId),
    reconciliationFor: (tenants, proposalId, by) => reconciliationFor(ctx, tenants, proposalId, by),
    acceptedAs: (proposalId, runId, by) => acceptedAs(ctx, proposalId, runId, by),
    dismiss: (tenants, proposalId, request) => dismiss(ctx, tenants, proposalId, request),
  };
}
