import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import type { SqlStore } from '../../shared/platform/sql/database';
import { createTableStore } from '../../shared/platform/tables/tables';
import { randomIds, type Clock } from '../../shared/platform/time/clock';
import { createInventoryService, type InventoryService, type InventoryServiceOptions } from '../../shared/inventory/inventory.service';
import { createLocalCloudObserver } from '../../local/cloud/local-cloud-observer.adapter';
import { createObservedInventory } from '../../shared/inventory/observed-inventory.repository';
import type { Observer } from '../../shared/inventory/observer';

/** The project of every test environment's stack: urns are `urn:pulumi:<stack>::demo::…`. */
export const TEST_PROJECT = 'demo';

/** A resource of a test environment: its urn is that of the stack's project `demo`. */
export interface TestResource {
  readonly name: string;
  readonly type: string;
  readonly properties: Record<string, unknown>;
  /** The provider's id the stack state records (an ARM id, for the ARM observer); default `id-<name>`. */
  readonly id?: string;
}

export const urnOf = (stack: string, r: { name: string; type: string }) => `urn:pulumi:${stack}::demo::${r.type}::${r.name}`;

/** The `data` of a `SpecificationApplied` as run-events.ts builds it, for one environment and stack. */
export function specificationApplied(environment: { id: string; name?: string; tier?: string; tenant?: string; stack: string; runId?: string }, resources: readonly TestResource[]) {
  return {
    runId: environment.runId ?? `run-${environment.id}`,
    trigger: 'promotion',
    promotionId: `promotion-${environment.id}`,
    tenantId: environment.tenant ?? 'tenant-a',
    environment: { id: environment.id, name: environment.name ?? environment.id, tier: environment.tier ?? 'development' },
    release: { name: 'demo-app', version: '1.0.0' },
    project: TEST_PROJECT,
    stack: environment.stack,
    desiredState: { repository: 'file:///repo', commit: 'a'.repeat(40), path: 'app' },
    planDigest: `sha256:${'0'.repeat(64)}`,
    resources: resources.map((r) => ({ urn: urnOf(environment.stack, r), type: r.type, name: r.name, op: 'create', id: r.id ?? `id-${r.name}`, properties: r.properties })),
    outputs: {},
  };
}

/**
 * Puts the resources in the local cloud as an apply of the stack would (the properties given as applied), in the
 * scope of `tenant` (default `tenant-a`, as `specificationApplied`'s).
 */
export async function applyToCloud(
  cloud: LocalCloud,
  stack: string,
  resources: readonly TestResource[],
  applied: (r: TestResource) => Record<string, unknown> = (r) => r.properties,
  tenant = 'tenant-a',
): Promise<void> {
  for (const r of resources) await cloud.create('local', { scope: tenant, urn: urnOf(stack, r), type: r.type, properties: applied(r) });
}

/** An inventory service over a store and a Table server, observing the local cloud of the same store. */
export function inventoryOver(
  store: SqlStore,
  tablesConnection: string,
  clock: Clock,
  overrides: Partial<InventoryServiceOptions> & { wrapObserver?: (observer: Observer) => Observer } = {},
): { inventory: InventoryService; cloud: LocalCloud } {
  const cloud = createLocalCloud({ store, clock, ids: randomIds });
  const { wrapObserver = (o: Observer) => o, ...options } = overrides;
  const inventory = createInventoryService({
    store,
    tables: createObservedInventory(createTableStore(tablesConnection)),
    observers: new Map([['local', wrapObserver(createLocalCloudObserver({ cloud }))]]),
    clock,
    ids: randomIds,
    scanInterval: { defaultMs: 300_000, byEnvironment: {} },
    scanConcurrency: 4,
    observeTimeoutMs: 5_000,
    scopeOf: (environment) => ({ tenant: environment.tenant, environmentId: environment.id, stack: environment.stack, target: 'local' }),
    applyingRun: async () => undefined,
    // Every tenant is known unless a test says otherwise (the host asks its capacity module).
    knowsTenant: async () => true,
    ...options,
  });
  return { inventory, cloud };
}
