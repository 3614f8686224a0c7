import type { Kysely, Transaction } from 'kysely';
import type { AnyDb } from '../../shared/platform/sql/database';
import { firstRows, type SqlDialect } from '../../shared/platform/sql/dialect';
import {
  HistoryEventType,
  TERMINAL_STATUSES,
  subOrchestrationFailure,
  subOrchestrationTerminatedMessage,
  type HistoryEvent,
  type RuntimeStatus,
} from './durable-protocol';
import type { DurableInstanceTable, DurableTables } from './durable.tables';

type Db = Kysely<DurableTables>;
type Trx = Transaction<DurableTables>;

export function durableDb(db: AnyDb): Db {
  return db as Db;
}

export interface DurableInstance {
  readonly instanceId: string;
  readonly name: string;
  readonly executionId: string;
  readonly status: RuntimeStatus;
  readonly input: string | null;
  readonly output: string | null;
  readonly customStatus: string | null;
  readonly failure: string | null;
  readonly runnerState: string;
  readonly historyLength: number;
  readonly version: number;
  readonly leaseOwner: string | null;
  readonly createdAt: number;
  readonly updatedAt: number;
  /** Set for a sub-orchestration: the parent execution and task its end is delivered to. */
  readonly parent: ParentLink | null;
  /** The orchestration version it was created with; null when none. */
  readonly orchestrationVersion: string | null;
}

/** Where a sub-orchestration's end goes: the parent instance, the execution that awaits it, and its task id there. */
export interface ParentLink {
  readonly instanceId: string;
  readonly executionId: string;
  readonly taskId: number;
}

function instanceRowToInstance(row: DurableInstanceTable): DurableInstance {
  return {
    instanceId: row.instance_id,
    name: row.name,
    executionId: row.execution_id,
    status: row.status as RuntimeStatus,
    input: row.input,
    output: row.output,
    customStatus: row.custom_status,
    failure: row.failure,
    runnerState: row.runner_state,
    historyLength: Number(row.history_length),
    version: Number(row.version),
    leaseOwner: row.lease_owner,
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
    parent:
      row.parent_instance_id !== null && row.parent_execution_id !== null && row.parent_task_id !== null
        ? { instanceId: row.parent_instance_id, executionId: row.parent_execution_id, taskId: Number(row.parent_task_id) }
        : null,
    orchestrationVersion: row.orchestration_version,
  };
}

/** Instances that have not ended: a suspended one still takes events and may be terminated. */
const ACTIVE: RuntimeStatus[] = ['Pending', 'Running', 'Suspended'];
const terminal = [...TERMINAL_STATUSES];

/**
 * Lock order of the task hub's transactions: an instance's row first, then (a parent's episode creating a child)
 * the child's row. A child's end never locks its parent's row: it reads it (without locking) to check the awaiting
 * execution is still active and adds the result to the parent's inbox, so parent and child never wait on each other.
 */

/** An instance lost to another worker (lease expired and taken) or changed by terminate while an episode ran. */
export class LeaseLostError extends Error {
  constructor(instanceId: string) {
    super(`the lease on durable instance ${instanceId} was lost`);
    this.name = 'LeaseLostError';
  }
}

export interface NewInstance {
  readonly instanceId: string;
  readonly name: string;
  readonly executionId: string;
  readonly input: string | null;
  readonly runnerState: string;
  readonly now: number;
  /** Set when a parent's episode starts this instance as its sub-orchestration. */
  readonly parent?: ParentLink;
  /** The orchestration version it is created with (the caller's, else the host's default). */
  readonly orchestrationVersion?: string;
}

/**
 * Creates an instance, or restarts one whose previous run ended (as Durable Functions overwrites non-running ids).
 * Refused while an instance with this id is pending or running.
 */
export async function startInstance(db: Db, instance: NewInstance): Promise<'started' | 'conflict'> {
  return db.transaction().execute((trx) => startInstanceIn(trx, instance));
}

async function startInstanceIn(trx: Trx, instance: NewInstance): Promise<'started' | 'conflict'> {
  const fields = {
    name: instance.name,
    execution_id: instance.executionId,
    status: 'Pending',
    input: instance.input,
    output: null,
    custom_status: null,
    failure: null,
    runner_state: instance.runnerState,
    history_length: 0,
    lease_owner: null,
    lease_expires_at: null,
    created_at: instance.now,
    updated_at: instance.now,
    parent_instance_id: instance.parent?.instanceId ?? null,
    parent_execution_id: instance.parent?.executionId ?? null,
    parent_task_id: instance.parent?.taskId ?? null,
    orchestration_version: instance.orchestrationVersion ?? null,
  };
  const restarted = await trx
    .updateTable('durable_instances')
    .set((eb) => ({ ...fields, version: eb('version', '+', 1) }))
    .where('instance_id', '=', instance.instanceId)
    .where('status', 'in', terminal)
    .executeTakeFirst();
  if (Number(restarted.numUpdatedRows) === 1) {
    await deleteWork(trx, instance.instanceId, { history: true });
    return 'started';
  }
  const existing = await trx
    .selectFrom('durable_instances')
    .select('status')
    .where('instance_id', '=', instance.instanceId)
    .executeTakeFirst();
  if (existing) return 'conflict';
  await trx
    .insertInto('durable_instances')
    .values({ instance_id: instance.instanceId, ...fields, version: 0 })
    .execute();
  return 'started';
}

async function deleteWork(trx: Trx, instanceId: string, what: { history: boolean }): Promise<void> {
  if (what.history) await trx.deleteFrom('durable_history').where('instance_id', '=', instanceId).execute();
  await trx.deleteFrom('durable_inbox').where('instance_id', '=', instanceId).execute();
  await trx.deleteFrom('durable_activities').where('instance_id', '=', instanceId).execute();
}

export async function getInstance(db: Db, instanceId: string): Promise<DurableInstance | undefined> {
  const row = await db.selectFrom('durable_instances').selectAll().where('instance_id', '=', instanceId).executeTakeFirst();
  return row ? instanceRowToInstance(row) : undefined;
}

/**
 * Instances with work to do and no live lease: not yet started, or with an inbox event that is due. Only those of
 * the named orchestrations: hosts sharing a store may enable different modules, and each runs only what it has.
 */
export async function findRunnableInstances(db: Db, dialect: SqlDialect, now: number, limit: number, names: readonly string[]): Promise<string[]> {
  if (names.length === 0) return [];
  const query = db
    .selectFrom('durable_instances as i')
    .select('i.instance_id')
    .where('i.name', 'in', [...names])
    .where((eb) =>
      eb.and([
        eb.or([eb('i.lease_expires_at', 'is', null), eb('i.lease_expires_at', '<', now)]),
        eb.or([
          eb('i.status', '=', 'Pending'),
          eb.and([
            eb('i.status', '=', 'Running'),
            // The due messages' instances as one list, not a lookup of each running instance's inbox: a host
            // with thousands of orchestrations waiting (approvals, timers) polls in a fraction of the time.
            eb('i.instance_id', 'in', eb.selectFrom('durable_inbox as m').select('m.instance_id').where('m.visible_at', '<=', now)),
          ]),
        ]),
      ]),
    );
  const rows = await firstRows(query, dialect, limit).execute();
  return rows.map((r) => r.instance_id);
}

/** Takes the instance's lease when it is free or expired; true when this worker now holds it. */
export async function acquireInstanceLease(db: Db, instanceId: string, owner: string, now: number, leaseMs: number): Promise<boolean> {
  const result = await db
    .updateTable('durable_instances')
    .set({ lease_owner: owner, lease_expires_at: now + leaseMs })
    .where('instance_id', '=', instanceId)
    .where((eb) => eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<', now)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

export async function releaseInstanceLease(db: Db, instanceId: string, owner: string): Promise<void> {
  await db
    .updateTable('durable_instances')
    .set({ lease_owner: null, lease_expires_at: null })
    .where('instance_id', '=', instanceId)
    .where('lease_owner', '=', owner)
    .execute();
}

/** Extends every lease this worker holds on the given instances and activities. */
export async function renewLeases(
  db: Db,
  owner: string,
  held: { instances: readonly string[]; activities: readonly number[] },
  now: number,
  leaseMs: number,
): Promise<void> {
  if (held.instances.length > 0) {
    await db
      .updateTable('durable_instances')
      .set({ lease_expires_at: now + leaseMs })
      .where('lease_owner', '=', owner)
      .where('instance_id', 'in', [...held.instances])
      .execute();
  }
  if (held.activities.length > 0) {
    await db
      .updateTable('durable_activities')
      .set({ lease_expires_at: now + leaseMs })
      .where('lease_owner', '=', owner)
      .where('seq', 'in', [...held.activities])
      .execute();
  }
}

export async function loadHistory(db: Db, instanceId: string): Promise<HistoryEvent[]> {
  const rows = await db
    .selectFrom('durable_history')
    .select('event')
    .where('instance_id', '=', instanceId)
    .orderBy('position')
    .execute();
  return rows.map((r) => JSON.parse(r.event) as HistoryEvent);
}

export interface InboxMessage {
  readonly seq: number;
  readonly executionId: string | null;
  readonly event: HistoryEvent;
}

/** The oldest due event of an instance. */
export async function nextInboxMessage(db: Db, dialect: SqlDialect, instanceId: string, now: number): Promise<InboxMessage | undefined> {
  const row = await firstRows(
    db.selectFrom('durable_inbox').select(['seq', 'execution_id', 'event']).where('instance_id', '=', instanceId).where('visible_at', '<=', now).orderBy('seq'),
    dialect,
    1,
  ).executeTakeFirst();
  return row ? { seq: Number(row.seq), executionId: row.execution_id, event: JSON.parse(row.event) as HistoryEvent } : undefined;
}

export interface NewInboxMessage {
  readonly executionId: string | null;
  readonly dedupeKey: string | null;
  readonly event: HistoryEvent;
  readonly visibleAt: number;
}

export interface NewActivity {
  readonly taskId: number;
  readonly name: string;
  readonly input: string | null;
}

/** A sub-orchestration an episode starts: created in the episode's own transaction, so it exists once or not at all. */
export interface NewChild {
  readonly taskId: number;
  readonly instanceId: string;
  readonly name: string;
  readonly executionId: string;
  readonly input: string | null;
  readonly runnerState: string;
  /** Its orchestration version (the caller's, else the host's default). */
  readonly orchestrationVersion?: string;
  /** The parent's failure when the id is taken by an instance still pending, running or suspended. */
  readonly conflict: HistoryEvent;
}

/** Everything one episode changes, committed atomically over the version the episode started from. */
export interface EpisodeCommit {
  readonly instanceId: string;
  readonly owner: string;
  readonly expectedVersion: number;
  readonly now: number;
  /** The inbox event the episode consumed (none for the first episode of an execution). */
  readonly consumedSeq?: number;
  readonly instance: {
    readonly status: RuntimeStatus;
    readonly executionId: string;
    readonly input: string | null;
    readonly output: string | null;
    readonly customStatus: string | null;
    readonly failure: string | null;
    readonly runnerState: string;
    readonly historyLength: number;
  };
  /** History rows to append, from `appendAt`. */
  readonly appendAt: number;
  readonly append: readonly HistoryEvent[];
  readonly activities: readonly NewActivity[];
  readonly inbox: readonly NewInboxMessage[];
  /** Sub-orchestrations to start (none by default). */
  readonly children?: readonly NewChild[];
  /** A sub-orchestration's end (SubOrchestrationInstanceCompleted/Failed), for its parent's inbox. */
  readonly toParent?: HistoryEvent;
  /** Timer ids whose pending TimerFired is dropped (the orchestrator cancelled them). */
  readonly cancelTimers: readonly number[];
  /** ContinueAsNew: the old execution's history and work go; raised events stay for the new execution. */
  readonly resetFrom?: string;
  /** The instance ended: its pending work goes. */
  readonly finished: boolean;
}

/** Commits an episode; throws LeaseLostError (and changes nothing) when the lease or version no longer holds. */
export async function commitEpisode(db: Db, commit: EpisodeCommit): Promise<void> {
  await db.transaction().execute(async (trx) => {
    const { instance } = commit;
    // The conditional update comes first: it takes the row lock that orders this commit against terminate.
    const updated = await trx
      .updateTable('durable_instances')
      .set({
        status: instance.status,
        execution_id: instance.executionId,
        input: instance.input,
        output: instance.output,
        custom_status: instance.customStatus,
        failure: instance.failure,
        runner_state: instance.runnerState,
        history_length: instance.historyLength,
        version: commit.expectedVersion + 1,
        updated_at: commit.now,
      })
      .where('instance_id', '=', commit.instanceId)
      .where('lease_owner', '=', commit.owner)
      .where('version', '=', commit.expectedVersion)
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) !== 1) throw new LeaseLostError(commit.instanceId);
    if (commit.consumedSeq !== undefined) {
      const consumed = await trx.deleteFrom('durable_inbox').where('seq', '=', commit.consumedSeq).executeTakeFirst();
      if (Number(consumed.numDeletedRows) !== 1) throw new LeaseLostError(commit.instanceId);
    }
    if (commit.resetFrom !== undefined) {
      await trx.deleteFrom('durable_history').where('instance_id', '=', commit.instanceId).execute();
      await trx
        .deleteFrom('durable_inbox')
        .where('instance_id', '=', commit.instanceId)
        .where('execution_id', 'is not', null)
        .execute();
      await trx.deleteFrom('durable_activities').where('instance_id', '=', commit.instanceId).execute();
    }
    if (commit.finished) await deleteWork(trx, commit.instanceId, { history: false });
    if (commit.append.length > 0) {
      await trx
        .insertInto('durable_history')
        .values(
          commit.append.map((event, i) => ({
            instance_id: commit.instanceId,
            position: commit.appendAt + i,
            execution_id: instance.executionId,
            event_type: event.EventType,
            event: JSON.stringify(event),
            recorded_by: commit.owner,
            recorded_at: commit.now,
          })),
        )
        .execute();
    }
    if (commit.cancelTimers.length > 0) {
      await trx
        .deleteFrom('durable_inbox')
        .where('instance_id', '=', commit.instanceId)
        .where('execution_id', '=', instance.executionId)
        .where(
          'dedupe_key',
          'in',
          commit.cancelTimers.map((id) => `timer:${id}`),
        )
        .execute();
    }
    if (commit.activities.length > 0) {
      await trx
        .insertInto('durable_activities')
        .values(
          commit.activities.map((a) => ({
            instance_id: commit.instanceId,
            execution_id: instance.executionId,
            task_id: a.taskId,
            name: a.name,
            input: a.input,
            claims: 0,
            lease_owner: null,
            lease_expires_at: null,
            created_at: commit.now,
          })),
        )
        .execute();
    }
    if (commit.inbox.length > 0) await insertInbox(trx, commit.instanceId, commit.inbox, commit.now);
    for (const child of commit.children ?? []) {
      const started = await startInstanceIn(trx, {
        instanceId: child.instanceId,
        name: child.name,
        executionId: child.executionId,
        input: child.input,
        runnerState: child.runnerState,
        ...(child.orchestrationVersion !== undefined ? { orchestrationVersion: child.orchestrationVersion } : {}),
        now: commit.now,
        parent: { instanceId: commit.instanceId, executionId: instance.executionId, taskId: child.taskId },
      });
      if (started === 'conflict') {
        await insertInbox(
          trx,
          commit.instanceId,
          [{ executionId: instance.executionId, dedupeKey: `task:${child.taskId}`, event: child.conflict, visibleAt: commit.now }],
          commit.now,
        );
      }
    }
    if (commit.toParent) await deliverToParent(trx, commit.instanceId, commit.toParent, commit.now);
  });
}

/**
 * Adds a sub-orchestration's end to its parent's inbox, when the execution that awaits it is still active (a parent
 * that ended, was purged or restarted under its id gets nothing). The dedupe key makes a second delivery impossible.
 */
async function deliverToParent(trx: Trx, childId: string, event: HistoryEvent, now: number): Promise<void> {
  const child = await trx
    .selectFrom('durable_instances')
    .select(['parent_instance_id', 'parent_execution_id', 'parent_task_id'])
    .where('instance_id', '=', childId)
    .executeTakeFirst();
  if (!child?.parent_instance_id || child.parent_execution_id === null || child.parent_task_id === null) return;
  const parent = await trx
    .selectFrom('durable_instances')
    .select(['status', 'execution_id'])
    .where('instance_id', '=', child.parent_instance_id)
    .executeTakeFirst();
  if (!parent || parent.execution_id !== child.parent_execution_id || !ACTIVE.includes(parent.status as RuntimeStatus)) return;
  const taskId = Number(child.parent_task_id);
  await insertInbox(
    trx,
    child.parent_instance_id,
    [{ executionId: child.parent_execution_id, dedupeKey: `task:${taskId}`, event: { ...event, TaskScheduledId: taskId }, visibleAt: now }],
    now,
  );
}

async function insertInbox(trx: Trx | Db, instanceId: string, messages: readonly NewInboxMessage[], now: number): Promise<void> {
  await trx
    .insertInto('durable_inbox')
    .values(
      messages.map((m) => ({
        instance_id: instanceId,
        execution_id: m.executionId,
        dedupe_key: m.dedupeKey,
        event: JSON.stringify(m.event),
        visible_at: m.visibleAt,
        created_at: now,
      })),
    )
    .execute();
}

export interface ActivityWork {
  readonly seq: number;
  readonly instanceId: string;
  readonly executionId: string;
  readonly taskId: number;
  readonly name: string;
  readonly input: string | null;
  readonly claims: number;
}

/** Activity work items of the named activities that no live lease holds. */
export async function findDueActivities(db: Db, dialect: SqlDialect, now: number, limit: number, names: readonly string[]): Promise<number[]> {
  if (names.length === 0) return [];
  const query = db
    .selectFrom('durable_activities')
    .select('seq')
    .where('name', 'in', [...names])
    .where((eb) => eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<', now)]))
    .orderBy('seq');
  const rows = await firstRows(query, dialect, limit).execute();
  return rows.map((r) => Number(r.seq));
}

/** Takes an activity's lease; returns the work when this worker now holds it. */
export async function claimActivity(
  db: Db,
  seq: number,
  owner: string,
  now: number,
  leaseMs: number,
): Promise<ActivityWork | undefined> {
  const result = await db
    .updateTable('durable_activities')
    .set((eb) => ({ lease_owner: owner, lease_expires_at: now + leaseMs, claims: eb('claims', '+', 1) }))
    .where('seq', '=', seq)
    .where((eb) => eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<', now)]))
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) !== 1) return undefined;
  const row = await db.selectFrom('durable_activities').selectAll().where('seq', '=', seq).executeTakeFirst();
  if (!row || row.lease_owner !== owner) return undefined;
  return {
    seq: Number(row.seq),
    instanceId: row.instance_id,
    executionId: row.execution_id,
    taskId: Number(row.task_id),
    name: row.name,
    input: row.input,
    claims: Number(row.claims),
  };
}

/**
 * Records an activity's result in its instance's inbox and removes the work item, atomically. Only the worker that
 * still holds the item records: a worker whose lease expired and was taken over records nothing, so each completion
 * is recorded once even when the activity ran twice. Returns whether this call recorded it.
 */
export async function completeActivity(db: Db, work: ActivityWork, owner: string, event: HistoryEvent, now: number): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    const removed = await trx
      .deleteFrom('durable_activities')
      .where('seq', '=', work.seq)
      .where('lease_owner', '=', owner)
      .executeTakeFirst();
    if (Number(removed.numDeletedRows) !== 1) return false;
    await insertInbox(trx, work.instanceId, [{ executionId: work.executionId, dedupeKey: `task:${work.taskId}`, event, visibleAt: now }], now);
    return true;
  });
}

/** Lets a stopping worker's activity go back to the pool at once. */
export async function releaseActivity(db: Db, seq: number, owner: string): Promise<void> {
  await db
    .updateTable('durable_activities')
    .set({ lease_owner: null, lease_expires_at: null })
    .where('seq', '=', seq)
    .where('lease_owner', '=', owner)
    .execute();
}

/** Queues a raised event for a pending or running instance. */
export async function raiseEvent(db: Db, instanceId: string, event: HistoryEvent, now: number): Promise<'accepted' | 'gone' | 'not-found'> {
  return db.transaction().execute(async (trx) => {
    const row = await trx.selectFrom('durable_instances').select('status').where('instance_id', '=', instanceId).executeTakeFirst();
    if (!row) return 'not-found';
    if (!ACTIVE.includes(row.status as RuntimeStatus)) return 'gone';
    await insertInbox(trx, instanceId, [{ executionId: null, dedupeKey: null, event, visibleAt: now }], now);
    return 'accepted';
  });
}

/**
 * Ends a pending or running instance at once; an episode in flight then fails its commit on the version. As in
 * Durable Functions, its sub-orchestrations run on (termination does not propagate); a terminated sub-orchestration
 * fails its parent's task (DurableTask.Core reports it as SubOrchestrationInstanceFailed).
 */
export async function terminateInstance(
  db: Db,
  instanceId: string,
  reason: string,
  owner: string,
  now: number,
): Promise<'terminated' | 'gone' | 'not-found'> {
  return db.transaction().execute(async (trx) => {
    const updated = await trx
      .updateTable('durable_instances')
      .set((eb) => ({
        status: 'Terminated',
        output: JSON.stringify(reason),
        version: eb('version', '+', 1),
        history_length: eb('history_length', '+', 1),
        updated_at: now,
      }))
      .where('instance_id', '=', instanceId)
      .where('status', 'in', ACTIVE)
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) !== 1) {
      const exists = await trx.selectFrom('durable_instances').select('status').where('instance_id', '=', instanceId).executeTakeFirst();
      return exists ? 'gone' : 'not-found';
    }
    const row = await trx
      .selectFrom('durable_instances')
      .select(['history_length', 'execution_id', 'name'])
      .where('instance_id', '=', instanceId)
      .executeTakeFirstOrThrow();
    const event: HistoryEvent = {
      EventType: HistoryEventType.ExecutionTerminated,
      EventId: -1,
      Timestamp: new Date(now).toISOString(),
      IsPlayed: false,
      Input: JSON.stringify(reason),
    };
    await trx
      .insertInto('durable_history')
      .values({
        instance_id: instanceId,
        position: Number(row.history_length) - 1,
        execution_id: row.execution_id,
        event_type: event.EventType,
        event: JSON.stringify(event),
        recorded_by: owner,
        recorded_at: now,
      })
      .execute();
    await deleteWork(trx, instanceId, { history: false });
    const failure = subOrchestrationFailure(row.name, subOrchestrationTerminatedMessage(reason));
    await deliverToParent(
      trx,
      instanceId,
      { EventType: HistoryEventType.SubOrchestrationInstanceFailed, EventId: -1, Timestamp: new Date(now).toISOString(), IsPlayed: false, ...failure },
      now,
    );
    return 'terminated';
  });
}

/**
 * Deletes an ended instance with its history; a pending or running one is refused. Its sub-orchestrations stay
 * (each is an instance of its own, purged by its own id or by filter), as the Durable client's purge does.
 */
export async function purgeInstance(db: Db, instanceId: string): Promise<'purged' | 'active' | 'not-found'> {
  return db.transaction().execute(async (trx) => {
    const row = await trx.selectFrom('durable_instances').select('status').where('instance_id', '=', instanceId).executeTakeFirst();
    if (!row) return 'not-found';
    if (ACTIVE.includes(row.status as RuntimeStatus)) return 'active';
    await deleteWork(trx, instanceId, { history: true });
    await trx.deleteFrom('durable_instances').where('instance_id', '=', instanceId).execute();
    return 'purged';
  });
}

/**
 * Suspends a pending or running instance: the runner leaves it alone (events wait in its inbox) until it is resumed.
 * An episode in flight fails its commit on the version, and runs again after the resume.
 */
export async function suspendInstance(db: Db, instanceId: string, now: number): Promise<'suspended' | 'gone' | 'not-found'> {
  const updated = await db
    .updateTable('durable_instances')
    .set((eb) => ({ status: 'Suspended', version: eb('version', '+', 1), updated_at: now }))
    .where('instance_id', '=', instanceId)
    .where('status', 'in', ['Pending', 'Running'])
    .executeTakeFirst();
  if (Number(updated.numUpdatedRows) === 1) return 'suspended';
  return (await getInstance(db, instanceId)) ? 'gone' : 'not-found';
}

/** Resumes a suspended instance: Running again, or Pending when it was suspended before its first episode. */
export async function resumeInstance(db: Db, instanceId: string, now: number): Promise<'resumed' | 'gone' | 'not-found'> {
  const updated = await db
    .updateTable('durable_instances')
    .set((eb) => ({
      status: eb.case().when('history_length', '=', 0).then('Pending').else('Running').end(),
      version: eb('version', '+', 1),
      updated_at: now,
    }))
    .where('instance_id', '=', instanceId)
    .where('status', '=', 'Suspended')
    .executeTakeFirst();
  if (Number(updated.numUpdatedRows) === 1) return 'resumed';
  return (await getInstance(db, instanceId)) ? 'gone' : 'not-found';
}

export interface PurgeFilter {
  readonly statuses?: readonly string[];
  readonly createdFrom?: number;
  readonly createdTo?: number;
  /** Only instances whose last change is older (the retention of completed runs' history). */
  readonly updatedBefore?: number;
}

/** Deletes every ended instance the filter matches, with its history; returns how many. Active ones are never purged. */
export async function purgeInstancesBy(db: Db, filter: PurgeFilter): Promise<number> {
  const statuses = terminal.filter((s) => !filter.statuses || filter.statuses.length === 0 || filter.statuses.includes(s));
  if (statuses.length === 0) return 0;
  return db.transaction().execute(async (trx) => {
    let select = trx.selectFrom('durable_instances').select('instance_id').where('status', 'in', statuses);
    if (filter.createdFrom !== undefined) select = select.where('created_at', '>=', filter.createdFrom);
    if (filter.createdTo !== undefined) select = select.where('created_at', '<=', filter.createdTo);
    if (filter.updatedBefore !== undefined) select = select.where('updated_at', '<', filter.updatedBefore);
    const ids = (await select.execute()).map((r) => r.instance_id);
    for (const id of ids) {
      await deleteWork(trx, id, { history: true });
      await trx.deleteFrom('durable_instances').where('instance_id', '=', id).where('status', 'in', statuses).execute();
    }
    return ids.length;
  });
}

export interface InstanceQuery {
  readonly limit: number;
  /** Instance id after which the page starts (ids sort as text). */
  readonly after?: string;
  readonly statuses?: readonly string[];
  readonly createdFrom?: number;
  readonly createdTo?: number;
}

/** One page of instances in instance-id order; `limit + 1` rows are read to know whether another page follows. */
export async function listInstances(db: Db, dialect: SqlDialect, query: InstanceQuery): Promise<{ items: DurableInstance[]; more: boolean }> {
  let select = firstRows(db.selectFrom('durable_instances').selectAll().orderBy('instance_id'), dialect, query.limit + 1);
  if (query.after !== undefined) select = select.where('instance_id', '>', query.after);
  if (query.statuses && query.statuses.length > 0) select = select.where('status', 'in', [...query.statuses]);
  if (query.createdFrom !== undefined) select = select.where('created_at', '>=', query.createdFrom);
  if (query.createdTo !== undefined) select = select.where('created_at', '<=', query.createdTo);
  const rows = await select.execute();
  return { items: rows.slice(0, query.limit).map(instanceRowToInstance), more: rows.length > query.limit };
}
