import { OBSERVER_OF_KIND, type ProvisioningTarget } from '../platform/config/setting-schemas';
import type { Config } from '../platform/config/config';
import type { StackRef } from '../platform/iac/stack-ref';
import type { ObservationScope, Observer, ObserverName } from './observer';

/** How to make each observer adapter; each is made once, and only when a target needs it. */
export type ObserverAdapters = { readonly [K in ObserverName]: () => Observer };

/**
 * The observer of each target, by target id, as the target's kind says (`OBSERVER_OF_KIND`): one installation scans
 * local-cloud, Azure and Kubernetes targets side by side. Targets of one kind share one adapter (which reads each
 * target with its own credential and settings); a kind no target has is never made, so its SDK is never loaded.
 * @example observersByTarget(config.targets, { 'local-cloud': () => createLocalCloudObserver({ cloud }), 'azure-resource-manager': () => createArmObserver(), kubernetes: () => createKubernetesObserver({ clusters }) })
 */
export function observersByTarget(targets: readonly ProvisioningTarget[], adapters: ObserverAdapters): ReadonlyMap<string, Observer> {
  const made = new Map<ObserverName, Observer>();
  const adapterOf = (name: ObserverName): Observer => {
    let adapter = made.get(name);
    if (!adapter) made.set(name, (adapter = adapters[name]()));
    return adapter;
  };
  return new Map(targets.map((target) => [target.id, adapterOf(OBSERVER_OF_KIND[target.kind])]));
}

/**
 * Where an environment on `target` is observed: by that target's observer (`scope.target` is the id observers are
 * keyed by), in the target's own Azure scope and with its read-only observer identity, unless the installation
 * configured the environment's own scope (`RuntimeCloud__Inventory__Scopes`), found by tenant and environment, never
 * by an environment id another tenant may use.
 */
export function observationScopeOn(
  target: ProvisioningTarget,
  environment: { readonly tenant: string; readonly id: string; readonly stack: StackRef },
  scopes: Config['inventory']['scopes'],
): ObservationScope {
  const { observerClientId, scope } = target;
  return {
    tenant: environment.tenant,
    environmentId: environment.id,
    stack: environment.stack,
    target: target.id,
    ...(observerClientId ? { observerClientId } : {}),
    ...(scope ? { azure: { subscriptionId: scope.subscriptionId, resourceGroup: scope.resourceGroup } } : {}),
    ...scopes[`${environment.tenant}/${environment.id}`],
  };
}
