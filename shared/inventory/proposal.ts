/**
 * The statuses of a reconciliation proposal. Pure. Kept apart from the inventory model (environment.ts), so the
 * proposals endpoints name them without loading the drift model when the functions register (docs/benchmarks.md,
 * "Cold start").
 */
export const PROPOSAL_STATUSES = ['open', 'accepted', 'dismissed', 'superseded', 'resolved'] as const;
export type ProposalStatus = (typeof PROPOSAL_STATUSES)[number];
