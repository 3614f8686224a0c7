import { AppError } from '../../shared/platform/errors/app-error';
import type { SqlStore } from '../../shared/platform/sql/database';
import { retryingContention } from '../../shared/platform/sql/transaction';
import type { Clock, Ids } from '../../shared/platform/time/clock';
import { qualifiedStackName, type StackRef } from '../../shared/platform/iac/stack-ref';
import {
  deleteResource,
  findResource,
  insertApply,
  insertResource,
  listApplies,
  listResources,
  listStackResources,
  localCloudDb,
  readReachable,
  updateResourceProperties,
  updateResourceUrn,
  writeReachable,
  type LocalCloudDb,
  type ResourceRecord,
} from './local-cloud.repository';

/**
 * The local cloud: a target like an Azure subscription, kept in the SQL store, that the local IaC engine applies
 * to and inventory observes. Each target holds resources with ids and properties, each in a scope (a tenant's,
 * as an Azure subscription holds a resource group per tenant): a stack's resources are found in its tenant's scope
 * by urn, so two tenants with the same project and stack names never see each other's. A target can be switched
 * unreachable: then every resource call fails with `PROVISIONING.TARGET_UNREACHABLE` (kind `unavailable`), as an
 * unreachable subscription would, so failed applies and stale observations can be produced on one machine.
 * Resources can also be changed out of band (`update`), which is how drift is produced.
 */
export interface LocalCloud {
  /** Creates a resource; the cloud assigns its id. */
  create(target: string, resource: NewCloudResource): Promise<CloudResource>;
  /** Replaces a resource's properties; `LOCAL_CLOUD.NOT_FOUND` when it does not exist. */
  update(target: string, id: string, properties: Readonly<Record<string, unknown>>): Promise<CloudResource>;
  /**
   * Gives a resource another urn: a stack adopts it (Pulumi's `import`), so it is found among the stack's from now
   * on. Properties stay as they are. `LOCAL_CLOUD.NOT_FOUND` when it does not exist.
   */
  adopt(target: string, id: string, urn: string): Promise<CloudResource>;
  /** Deletes a resource; false when there was none. */
  delete(target: string, id: string): Promise<boolean>;
  get(target: string, id: string): Promise<CloudResource | undefined>;
  /** Every resource of the target, in creation order. */
  list(target: string): Promise<CloudResource[]>;
  /**
   * The resources of the stack: those in the scope of its tenant whose urn belongs to its project and stack
   * (`urn:pulumi:<stack>::<project>::…`; stack `dev` is not `dev-2`), in creation order. Filtered in the store, by
   * index, so one stack's read costs the same however many share the target.
   */
  listStack(target: string, stack: StackRef): Promise<CloudResource[]>;
  /** The operator's switch (a local-only endpoint); works while the target is unreachable. */
  setReachable(target: string, reachable: boolean): Promise<void>;
  isReachable(target: string): Promise<boolean>;
  /** Logs that a stack began an apply against the target; tests count these to prove a run applied at most once. */
  recordApply(target: string, apply: { readonly stack: StackRef; readonly planDigest: string }): Promise<void>;
  /** The applies logged for the target (one stack's, when given), oldest first; bookkeeping, so it works while unreachable. */
  applies(target: string, stack?: StackRef): Promise<CloudApply[]>;
}

export interface NewCloudResource {
  /** The tenant whose resource it is; a stack's resources are looked for in its tenant's scope only. */
  readonly scope: string;
  readonly urn: string;
  /** Type token, e.g. `local:compute:WorkerPool`. */
  readonly type: string;
  readonly properties: Readonly<Record<string, unknown>>;
}

export interface CloudResource extends NewCloudResource {
  readonly target: string;
  readonly id: string;
  /** ISO-8601 UTC. */
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface CloudApply {
  readonly target: string;
  /** `tenant/project/stack`. */
  readonly stack: string;
  readonly planDigest: string;
  /** ISO-8601 UTC. */
  readonly appliedAt: string;
}

export interface LocalCloudOptions {
  readonly store: SqlStore;
  readonly clock: Clock;
  /** Resource ids: `ids.next('lcr')`. */
  readonly ids: Ids;
}

export function createLocalCloud({ store, clock, ids }: LocalCloudOptions): LocalCloud {
  const db: LocalCloudDb = localCloudDb(store.db);
  const now = () => clock.now().getTime();
  const reachable = async (target: string) => (await retryingContention(() => readReachable(db, target))) ?? true;
  const assertReachable = async (target: string) => {
    if (!(await reachable(target))) {
      throw new AppError('PROVISIONING.TARGET_UNREACHABLE', 'unavailable', `the target ${target} is unreachable`, { target });
    }
  };
  const found = async (target: string, id: string): Promise<CloudResource> => {
    const record = await retryingContention(() => findResource(db, target, id));
    if (!record) throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `the target ${target} has no resource ${id}`, { target, id });
    return toResource(record);
  };

  return {
    async create(target, resource) {
      await assertReachable(target);
      const at = now();
      const record: ResourceRecord = { target, id: ids.next('lcr'), scope: resource.scope, urn: resource.urn, type: resource.type, properties: resource.properties, createdAt: at, updatedAt: at };
      await retryingContention(() => insertResource(db, record));
      return toResource(record);
    },
    async update(target, id, properties) {
      await assertReachable(target);
      if (!(await retryingContention(() => updateResourceProperties(db, target, id, properties, now())))) {
        throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `the target ${target} has no resource ${id}`, { target, id });
      }
      return found(target, id);
    },
    async adopt(target, id, urn) {
      await assertReachable(target);
      if (!(await retryingContention(() => updateResourceUrn(db, target, id, urn, now())))) {
        throw new AppError('LOCAL_CLOUD.NOT_FOUND', 'not-found', `the target ${target} has no resource ${id}`, { target, id });
      }
      return found(target, id);
    },
    async delete(target, id) {
      await assertReachable(target);
      return retryingContention(() => deleteResource(db, target, id));
    },
    async get(target, id) {
      await assertReachable(target);
      const record = await retryingContention(() => findResource(db, target, id));
      return record ? toResource(record) : undefined;
    },
    async list(target) {
      await assertReachable(target);
      return (await retryingContention(() => listResources(db, target))).map(toResource);
    },
    async listStack(target, stack) {
      await assertReachable(target);
      return (await retryingContention(() => listStackResources(db, target, stack))).map(toResource);
    },
    async setReachable(target, value) {
      await retryingContention(() => writeReachable(db, target, value, now()));
    },
    isReachable: reachable,
    async recordApply(target, apply) {
      await assertReachable(target);
      await retryingContention(() => insertApply(db, { target, stack: qualifiedStackName(apply.stack), planDigest: apply.planDigest, appliedAt: now() }));
    },
    async applies(target, stack) {
      const records = await retryingContention(() => listApplies(db, target, stack && qualifiedStackName(stack)));
      return records.map((r) => ({ target: r.target, stack: r.stack, planDigest: r.planDigest, appliedAt: new Date(r.appliedAt).toISOString() }));
    },
  };
}

function toResource(record: ResourceRecord): CloudResource {
  return {
    target: record.target,
    id: record.id,
    scope: record.scope,
    urn: record.urn,
    type: record.type,
    properties: record.properties,
    createdAt: new Date(record.createdAt).toISOString(),
    updatedAt: new Date(record.updatedAt).toISOString(),
  };
}
