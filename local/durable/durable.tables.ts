import type { Generated } from 'kysely';

/**
 * Rows of the local Durable task hub (schema: shared/platform/durable/durable.migrations.ts). Times are epoch ms.
 * Row types never leave durable.repository.ts.
 */
export interface DurableInstanceTable {
  instance_id: string;
  /** The orchestration function's name. */
  name: string;
  /** Changes on every start and ContinueAsNew; work items of an older execution are ignored. */
  execution_id: string;
  /** Pending (no episode ran yet for this execution), Running, Completed, Failed, Terminated. */
  status: string;
  /** JSON text of the input; null when none. */
  input: string | null;
  /** JSON text of the output (or the termination reason); null while running. */
  output: string | null;
  /** JSON text of the last custom status. */
  custom_status: string | null;
  /** JSON of the failure (message, details) of a Failed instance. */
  failure: string | null;
  /** JSON `RunnerState`: the runner's bookkeeping of sequence numbers, dispatched actions and retries. */
  runner_state: string;
  /** Number of history rows of the current execution (the next position). */
  history_length: number;
  /** Incremented by every change; an episode commits only over the version it started from. */
  version: number;
  /** The worker that holds the instance; null when free. */
  lease_owner: string | null;
  lease_expires_at: number | null;
  created_at: number;
  updated_at: number;
  /** A sub-orchestration's parent instance; null for an instance started by a client. */
  parent_instance_id: string | null;
  /** The parent's execution that awaits this child (a later execution of the parent id ignores it). */
  parent_execution_id: string | null;
  /** The parent's task id (its SDK sequence number) that this child's end completes. */
  parent_task_id: number | null;
  /** The orchestration version the instance was created with (`context.df.version`); null when none. */
  orchestration_version: string | null;
}

export interface DurableHistoryTable {
  instance_id: string;
  position: number;
  execution_id: string;
  event_type: number;
  /** The HistoryEvent JSON (PascalCase, as the SDK reads it). */
  event: string;
  /** The worker that committed the episode (tests check work spread over hosts). */
  recorded_by: string;
  recorded_at: number;
}

export interface DurableInboxTable {
  seq: Generated<number>;
  instance_id: string;
  /** The execution the event belongs to; null for raised events, which survive ContinueAsNew. */
  execution_id: string | null;
  /** `task:N` for activity results, `timer:N` for timers; null for raised events. */
  dedupe_key: string | null;
  event: string;
  /** Timers become visible when they fall due. */
  visible_at: number;
  created_at: number;
}

export interface DurableActivityTable {
  seq: Generated<number>;
  instance_id: string;
  execution_id: string;
  task_id: number;
  name: string;
  /** JSON text of the input; null when none. */
  input: string | null;
  /** How many times a worker claimed it (more than one after a crash or an expired lease). */
  claims: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  created_at: number;
}

export interface DurableTables {
  durable_instances: DurableInstanceTable;
  durable_history: DurableHistoryTable;
  durable_inbox: DurableInboxTable;
  durable_activities: DurableActivityTable;
}
