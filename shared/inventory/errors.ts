import type { ProblemCatalogue } from '../platform/errors/catalogue';

/** Every problem the inventory module answers with (its codes start `INVENTORY.`). */
export const InventoryErrors = {
  invalidIgnoreRule: { code: 'INVENTORY.INVALID_IGNORE_RULE', kind: 'validation', title: 'Ignore rule not valid' },
  scopeIncomplete: { code: 'INVENTORY.SCOPE_INCOMPLETE', kind: 'validation', title: 'Observation scope incomplete' },
  environmentNotFound: { code: 'INVENTORY.ENVIRONMENT_NOT_FOUND', kind: 'not-found', title: 'Environment not found' },
  ignoreRuleNotFound: { code: 'INVENTORY.IGNORE_RULE_NOT_FOUND', kind: 'not-found', title: 'Ignore rule not found' },
  proposalNotFound: { code: 'INVENTORY.PROPOSAL_NOT_FOUND', kind: 'not-found', title: 'Proposal not found' },
  environmentAmbiguous: { code: 'INVENTORY.ENVIRONMENT_AMBIGUOUS', kind: 'conflict', title: 'Environment id used by several tenants' },
  proposalNotOpen: { code: 'INVENTORY.PROPOSAL_NOT_OPEN', kind: 'conflict', title: 'Proposal not open' },
  targetNotObserved: { code: 'INVENTORY.TARGET_NOT_OBSERVED', kind: 'unavailable', title: 'Target has no observer' },
  targetUnreachable: { code: 'INVENTORY.TARGET_UNREACHABLE', kind: 'unavailable', title: 'Target unreachable' },
  observeTimeout: { code: 'INVENTORY.OBSERVE_TIMEOUT', kind: 'unavailable', title: 'Observation timed out' },
  observationConflict: { code: 'INVENTORY.OBSERVATION_CONFLICT', kind: 'unavailable', title: 'Observation written concurrently' },
  tablesUnavailable: { code: 'INVENTORY.TABLES_UNAVAILABLE', kind: 'unavailable', title: 'Observed inventory unavailable' },
} as const satisfies ProblemCatalogue;
