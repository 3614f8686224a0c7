import { describe, expect, it } from 'vitest';
import type { EnvironmentTier } from '../../shared/provisioning/promotion';
import {
  approvalRequired,
  canTransition,
  isTerminal,
  planExpiryMs,
  RUN_STATES,
  secondPersonRequired,
  statesBefore,
  TERMINAL_RUN_STATES,
  type ApprovalPolicy,
  type PlanCounts,
  type RunState,
} from '../../shared/provisioning/run';

const env = (tier: EnvironmentTier, id = `env-${tier}`, name: string = tier) => ({ id, name, tier });
const counts = (overrides: Partial<PlanCounts> = {}): PlanCounts => ({ create: 0, update: 0, replace: 0, delete: 0, same: 0, ...overrides });

describe('provisioning run model', () => {
  it('when a run follows the happy paths, then every move is allowed', () => {
    const paths: RunState[][] = [
      ['queued', 'planning', 'applying', 'applied'],
      ['queued', 'planning', 'awaiting-approval', 'applying', 'applied'],
      ['queued', 'planning', 'awaiting-approval', 'rejected'],
      ['queued', 'planning', 'applying', 'failed'],
      ['queued', 'superseded'],
      ['queued', 'canceled'],
      ['queued', 'planning', 'awaiting-approval', 'stale', 'planning', 'awaiting-approval', 'applying', 'applied'],
      ['queued', 'planning', 'awaiting-approval', 'applying', 'stale', 'planning', 'applying', 'applied'],
      ['queued', 'planning', 'awaiting-approval', 'stale', 'rejected'],
      ['queued', 'planning', 'applying', 'stale', 'failed'],
      // A plan waiting for its policy check is rejected by an operator, or fails (denied, timed out).
      ['queued', 'planning', 'rejected'],
      ['queued', 'planning', 'failed'],
    ];
    for (const path of paths) {
      for (let i = 1; i < path.length; i++) expect(canTransition(path[i - 1]!, path[i]!), `${path[i - 1]} → ${path[i]}`).toBe(true);
    }
  });

  it('when a move skips a step or leaves a final state, then it is refused', () => {
    expect(canTransition('queued', 'applying')).toBe(false);
    expect(canTransition('queued', 'applied')).toBe(false);
    expect(canTransition('planning', 'applied')).toBe(false);
    expect(canTransition('awaiting-approval', 'applied')).toBe(false);
    expect(canTransition('applying', 'canceled')).toBe(false);
    expect(canTransition('planning', 'canceled')).toBe(false);
    for (const final of TERMINAL_RUN_STATES) {
      for (const to of RUN_STATES) expect(canTransition(final, to), `${final} → ${to}`).toBe(false);
    }
  });

  it('when asked which states may move to one, then the answer is exactly the sources of the table', () => {
    expect(statesBefore('canceled')).toEqual(['queued']);
    expect(statesBefore('applying')).toEqual(['planning', 'awaiting-approval']);
    expect(statesBefore('rejected')).toEqual(['planning', 'awaiting-approval', 'stale']);
    expect(statesBefore('failed')).toEqual(['queued', 'planning', 'awaiting-approval', 'applying', 'stale']);
    expect(statesBefore('stale')).toEqual(['awaiting-approval', 'applying']);
    expect(statesBefore('planning')).toEqual(['queued', 'stale']);
    expect(statesBefore('queued')).toEqual([]);
  });

  it('when a plan is stale, then the run can only be replanned, rejected or failed: never applied or canceled from there', () => {
    expect(RUN_STATES.filter((to) => canTransition('stale', to))).toEqual(['planning', 'failed', 'rejected']);
    expect(isTerminal('stale')).toBe(false);
    expect(canTransition('stale', 'applying')).toBe(false);
    expect(canTransition('queued', 'stale')).toBe(false);
    expect(canTransition('planning', 'stale')).toBe(false);
  });

  it('when an environment has its own plan expiry, then it applies by id or by name; others get the default', () => {
    const policy = { defaultMs: 86_400_000, byEnvironment: { 'env-prod-eu': 3_600_000, staging: 7_200_000 } };
    expect(planExpiryMs(policy, { id: 'env-prod-eu', name: 'production' })).toBe(3_600_000);
    expect(planExpiryMs(policy, { id: 'env-stg-1', name: 'staging' })).toBe(7_200_000);
    expect(planExpiryMs(policy, { id: 'env-dev', name: 'development' })).toBe(86_400_000);
  });

  it('when a state is final, then isTerminal says so, and only for the five final states', () => {
    expect(RUN_STATES.filter(isTerminal)).toEqual(['applied', 'failed', 'rejected', 'superseded', 'canceled']);
  });

  it('when the tier is production, then approval is required even for a plan that only creates', () => {
    expect(approvalRequired(env('production'), counts({ create: 3 }))).toEqual({ required: true, reasons: ['production tier'] });
  });

  it('when a development or staging plan deletes or replaces anything, then approval is required and says why', () => {
    expect(approvalRequired(env('development'), counts({ delete: 1 }))).toEqual({ required: true, reasons: ['1 delete step'] });
    expect(approvalRequired(env('staging'), counts({ replace: 2, update: 1 }))).toEqual({ required: true, reasons: ['2 replace steps'] });
    expect(approvalRequired(env('production'), counts({ delete: 2, replace: 1 })).reasons).toEqual(['production tier', '2 delete steps', '1 replace step']);
  });

  it('when a development plan only creates, updates or keeps resources, then no approval is required', () => {
    expect(approvalRequired(env('development'), counts({ create: 2, update: 1, same: 4 }))).toEqual({ required: false, reasons: [] });
    expect(approvalRequired(env('staging'), counts())).toEqual({ required: false, reasons: [] });
  });

  it('when an environment is set to always require approval, then even its plans that only create need it', () => {
    const policy: ApprovalPolicy = { tiers: ['production'], onDeleteOrReplace: true, secondPersonTiers: ['production'], byEnvironment: { 'env-dev-1': { always: true } } };
    expect(approvalRequired(env('development', 'env-dev-1', 'dev'), counts({ create: 1 }), policy)).toEqual({ required: true, reasons: ['required for environment dev'] });
    expect(approvalRequired(env('development', 'env-dev-2', 'dev2'), counts({ create: 1 }), policy).required).toBe(false);
  });

  it('when an environment turns off approval by tier and on delete or replace, then its destroying plans need none', () => {
    const policy: ApprovalPolicy = { tiers: ['production'], onDeleteOrReplace: true, secondPersonTiers: ['production'], byEnvironment: { 'prod-sandbox': { always: false, onDeleteOrReplace: false } } };
    expect(approvalRequired(env('production', 'env-p-9', 'prod-sandbox'), counts({ delete: 2, replace: 1 }), policy)).toEqual({ required: false, reasons: [] });
    expect(approvalRequired(env('production', 'env-p-1', 'production'), counts({ create: 1 }), policy).required).toBe(true);
  });

  it('when an environment is of the production tier, then a second person must approve by default; an environment rule by id or name says otherwise', () => {
    expect(secondPersonRequired(env('production'))).toBe(true);
    expect(secondPersonRequired(env('staging'))).toBe(false);
    expect(secondPersonRequired(env('development'))).toBe(false);
    const policy: ApprovalPolicy = {
      tiers: ['production'],
      onDeleteOrReplace: true,
      secondPersonTiers: ['production'],
      byEnvironment: { 'env-dev-1': { secondPerson: true }, 'prod-sandbox': { secondPerson: false }, 'env-p-1': { always: true } },
    };
    expect(secondPersonRequired(env('development', 'env-dev-1', 'dev'), policy)).toBe(true);
    expect(secondPersonRequired(env('production', 'env-p-9', 'prod-sandbox'), policy)).toBe(false);
    // A rule that says nothing of a second person leaves the tier's.
    expect(secondPersonRequired(env('production', 'env-p-1', 'production'), policy)).toBe(true);
    expect(secondPersonRequired(env('production'), { ...policy, secondPersonTiers: [] })).toBe(false);
  });

  it('when an environment is named by id and by name, then the id rule wins', () => {
    const policy: ApprovalPolicy = { tiers: [], onDeleteOrReplace: false, secondPersonTiers: [], byEnvironment: { 'env-s-1': { always: true }, staging: { always: false } } };
    expect(approvalRequired(env('staging', 'env-s-1', 'staging'), counts(), policy).required).toBe(true);
    expect(approvalRequired(env('staging', 'env-s-2', 'staging'), counts({ delete: 1 }), policy).required).toBe(false);
  });
});
