import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import type { CloudResource, LocalCloud } from './local-cloud';
import type { JsonValue } from '../../shared/inventory/drift';
import type { ObservationScope, ObservedResource, Observer } from '../../shared/inventory/observer';

export interface LocalCloudObserverOptions {
  /**
   * The local cloud the local IaC engine applies to.
   * @example createLocalCloudObserver({ cloud: createLocalCloud({ store, clock, ids }) })
   */
  readonly cloud: Pick<LocalCloud, 'listStack'>;
}

/**
 * The embedded default observer: the resources of the environment's stack in the local cloud target
 * `scope.target`, read by urn prefix in the store. An unreachable target throws `INVENTORY.TARGET_UNREACHABLE`.
 */
export function createLocalCloudObserver({ cloud }: LocalCloudObserverOptions): Observer {
  return {
    name: 'local-cloud',
    async observe(scope, { signal }) {
      throwIfAborted(scope, signal);
      let resources: CloudResource[];
      try {
        resources = await untilAborted(cloud.listStack(scope.target, scope.stack), signal);
      } catch (thrown) {
        const error = ensureError(thrown);
        if (signal.aborted) throw observeTimeout(scope);
        if (error instanceof AppError && error.code === 'PROVISIONING.TARGET_UNREACHABLE') {
          throw new AppError('INVENTORY.TARGET_UNREACHABLE', 'unavailable', `the local cloud target ${scope.target} is unreachable`, {
            observer: 'local-cloud',
            environmentId: scope.environmentId,
            target: scope.target,
          });
        }
        throw error;
      }
      return resources.map(cloudResourceToObserved);
    },
  };
}

export function cloudResourceToObserved(resource: CloudResource): ObservedResource {
  // Properties were stored as JSON text (the local cloud parses them back), so they are JSON values already.
  return { urn: resource.urn, type: resource.type, id: resource.id, properties: resource.properties as { readonly [key: string]: JsonValue } };
}

function observeTimeout(scope: ObservationScope): AppError {
  return new AppError('INVENTORY.OBSERVE_TIMEOUT', 'unavailable', `observing the local cloud target ${scope.target} ran past the scan's timeout`, {
    observer: 'local-cloud',
    environmentId: scope.environmentId,
    target: scope.target,
  });
}

function throwIfAborted(scope: ObservationScope, signal: AbortSignal): void {
  if (signal.aborted) throw observeTimeout(scope);
}

/**
 * The promise, or a rejection as soon as the signal aborts: a store query cannot be cancelled, but the scan must
 * not wait for it past its timeout. A late outcome of the query is dropped.
 */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error('aborted'));
    // The signal may have aborted while the read was being started; a listener added now would never hear it.
    if (signal.aborted) {
      onAbort();
      promise.catch(() => {});
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(ensureError(error));
      },
    );
  });
}
