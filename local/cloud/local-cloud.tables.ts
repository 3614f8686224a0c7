import type { Generated } from 'kysely';

/** Rows of the local cloud. Times are epoch milliseconds. Row types never leave the repository. */

/** Row of `local_cloud_resources`: one resource of a target. */
export interface LocalCloudResourceTable {
  target: string;
  id: string;
  /** The tenant whose resource it is. */
  scope: string;
  urn: string;
  type: string;
  /** JSON object. */
  properties: string;
  created_at: number;
  updated_at: number;
}

/** Row of `local_cloud_targets`: a target switched unreachable (0) or back (1); no row means reachable. */
export interface LocalCloudTargetTable {
  target: string;
  reachable: number;
  updated_at: number;
}

/** Row of `local_cloud_applies`: one apply that a stack began against a target. */
export interface LocalCloudApplyTable {
  seq: Generated<number>;
  target: string;
  /** `tenant/project/stack` (a bare stack name in rows from before stacks were tenant-qualified). */
  stack: string;
  plan_digest: string;
  applied_at: number;
}

export interface LocalCloudTables {
  local_cloud_resources: LocalCloudResourceTable;
  local_cloud_targets: LocalCloudTargetTable;
  local_cloud_applies: LocalCloudApplyTable;
}
