import type { ProvisioningTarget } from './config';

/** An environment as targets are matched against it. */
export interface TargetedEnvironment {
  readonly tenant: string;
  readonly environment: string;
  readonly tier: string;
}

/**
 * The target an environment lives on: the first of `targets` with an `environments` rule that matches it (every
 * field a rule gives must match), else the first target. Provisioning and inventory both ask here, so a run applies
 * where the scans look.
 */
export function targetOfEnvironment(targets: readonly ProvisioningTarget[], environment: TargetedEnvironment): ProvisioningTarget {
  const matches = (rule: NonNullable<ProvisioningTarget['environments']>[number]) =>
    (rule.tenant === undefined || rule.tenant === environment.tenant) &&
    (rule.environment === undefined || rule.environment === environment.environment) &&
    (rule.tier === undefined || rule.tier === environment.tier);
  const first = targets[0];
  if (!first) throw new Error('RuntimeCloud__Targets names no target');
  return targets.find((t) => t.environments?.some(matches)) ?? first;
}

/** A target's runner pool (default `<id>-runner`) and the engine its runners use. */
export function runnerTargetOf(target: ProvisioningTarget): { readonly target: string; readonly pool: string; readonly engine: 'local' | 'pulumi' } {
  return { target: target.id, pool: target.runnerPool ?? `${target.id}-runner`, engine: target.kind === 'local-cloud' ? 'local' : 'pulumi' };
}
