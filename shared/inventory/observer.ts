import type { TargetObserver } from '../platform/config/setting-schemas';
import type { StackRef } from '../platform/iac/stack-ref';
import type { JsonValue, PathSegment } from './drift';

/**
 * The observer port: reads what actually runs in one environment's managed scope. Implementations:
 * `local-cloud` (embedded default: the local cloud target of the environment's stack), `azure-resource-manager`
 * (a resource group, its resources matched to the desired ones by ARM id) and `kubernetes` (workloads in namespaces).
 *
 * An observer either returns the complete set of resources in scope, or throws: a partial answer would make
 * resources look missing. A target that cannot be reached throws an AppError of kind `unavailable` (code
 * `INVENTORY.TARGET_UNREACHABLE`); the caller then marks the observation stale, never in sync. `signal` aborts a
 * call that ran past the scan's timeout.
 */
export interface Observer {
  readonly name: ObserverName;
  observe(scope: ObservationScope, options: { readonly signal: AbortSignal }): Promise<ObservedResource[]>;
  /**
   * Whether a desired resource is this observer's to see in the scope. One it is not (for ARM: the stack, a Pulumi
   * provider, a resource outside the resource group) is left out of the diff, neither missing nor compared. Absent:
   * every desired resource is.
   */
  reaches?(scope: ObservationScope, resource: DesiredResource): boolean;
}

/** A desired resource as an observer is told it: the stack's urn and type, the provider's id, the inputs. */
export interface DesiredResource {
  readonly urn: string;
  readonly type: string;
  /** The provider's id from the stack state (azure-native: the ARM resource id); absent before the first apply. */
  readonly id?: string;
  readonly properties: { readonly [key: string]: JsonValue };
}

/** The observer adapters, one per kind of target (config.ts `OBSERVER_OF_KIND`). */
export type ObserverName = TargetObserver;

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
  /**
   * The environment's desired resources (its last applied state), for an observer that matches what it finds by the
   * provider's id and reads only what the program sets (azure-resource-manager). The others go by urn and ignore it.
   */
  readonly desired?: readonly DesiredResource[];
}

/**
 * One resource as observed. `urn` is the IaC urn when the resource carries one (local cloud: its urn; Azure: the urn
 * of the desired resource with its ARM id; Kubernetes: the `runtime-cloud.connectsoft.io/urn` annotation), otherwise
 * an urn made from the provider's id (`arm:/subscriptions/…`, `k8s:<namespace>/<kind>/<name>`), which no desired
 * resource has, so it shows as unmanaged.
 */
export interface ObservedResource {
  readonly urn: string;
  readonly type: string;
  /** The provider's id of the resource. */
  readonly id: string;
  readonly properties: { readonly [key: string]: JsonValue };
  /**
   * Paths of the desired inputs this observation cannot show (ARM: inputs that are part of the id, write-only
   * secrets, names the SDK renamed): the diff leaves them out rather than report them changed. Absent: none.
   */
  readonly uncompared?: readonly (readonly PathSegment[])[];
}

/** The Kubernetes annotation that carries a resource's IaC urn. (Azure resources are matched by ARM id, not by a tag.) */
export const URN_ANNOTATION = 'runtime-cloud.connectsoft.io/urn';
