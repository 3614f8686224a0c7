import type { StackRef } from '../platform/iac/stack-ref';
import type { JsonValue } from './drift';

/**
 * The observer port: reads what actually runs in one environment's managed scope. Implementations:
 * `local-cloud` (embedded default: the local cloud target of the environment's stack), `azure-resource-manager`
 * (a resource group, resources carrying the environment's tag) and `kubernetes` (workloads in namespaces).
 *
 * An observer either returns the complete set of resources in scope, or throws: a partial answer would make
 * resources look missing. A target that cannot be reached throws an AppError of kind `unavailable` (code
 * `INVENTORY.TARGET_UNREACHABLE`); the caller then marks the observation stale, never in sync. `signal` aborts a
 * call that ran past the scan's timeout.
 */
export interface Observer {
  readonly name: ObserverName;
  observe(scope: ObservationScope, options: { readonly signal: AbortSignal }): Promise<ObservedResource[]>;
}

export const OBSERVER_NAMES = ['local-cloud', 'azure-resource-manager', 'kubernetes'] as const;
export type ObserverName = (typeof OBSERVER_NAMES)[number];

/** Where one environment's resources live, as far as the observers need to know. */
export interface ObservationScope {
  readonly tenant: string;
  readonly environmentId: string;
  /**
   * The IaC stack whose resources these are, `tenant/project/stack`: the local cloud observer reads the
   * `urn:pulumi:<stack>::<project>::…` resources of the tenant's scope.
   */
  readonly stack: StackRef;
  /** local-cloud: the target name (`local`). */
  readonly target: string;
  /** azure-resource-manager: the subscription and resource group, and the tags that mark the managed scope. */
  readonly azure?: { readonly subscriptionId: string; readonly resourceGroup: string; readonly tags?: Readonly<Record<string, string>> };
  /**
   * The client id of the target's read-only observer identity (a user-assigned managed identity of the host): the
   * Azure observer reads the target with it, never with the host's own identity. Undefined: the host's default
   * credential (the developer's login locally).
   */
  readonly observerClientId?: string;
  /** kubernetes: the namespaces whose workloads belong to the environment. */
  readonly kubernetes?: { readonly namespaces: readonly string[] };
}

/**
 * One resource as observed. `urn` is the IaC urn when the resource carries one (local cloud: its urn; Azure: the
 * `runtime-cloud-urn` tag; Kubernetes: the `runtime-cloud.connectsoft.io/urn` annotation), otherwise an urn made
 * from the provider's id (`arm:/subscriptions/…`, `k8s:<namespace>/<kind>/<name>`), which no desired resource has,
 * so it shows as unmanaged.
 */
export interface ObservedResource {
  readonly urn: string;
  readonly type: string;
  /** The provider's id of the resource. */
  readonly id: string;
  readonly properties: { readonly [key: string]: JsonValue };
}

/** The Azure tag and the Kubernetes annotation that carry a resource's IaC urn. */
export const URN_TAG = 'runtime-cloud-urn';
export const URN_ANNOTATION = 'runtime-cloud.connectsoft.io/urn';
