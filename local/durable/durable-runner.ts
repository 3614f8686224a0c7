import { crashPoint } from '../../shared/platform/faults/crash-points';
import type { InvocationContext, InvocationContextInit } from '@azure/functions';
import { randomUUID } from 'node:crypto';
import { ensureError } from '../../shared/platform/errors/app-error';
import { faultLevel } from '../../shared/platform/sql/transaction';
import type { AnyDb, SqlDialect } from '../../shared/platform/sql/database';
import type { Clock } from '../../shared/platform/time/clock';
import type { Registration } from '../functions-core/registry';
import type { LogHandler } from '../http/http-binding';
import {
  HistoryEventType,
  orchestrationPayload,
  activityFailure,
  flattenActions,
  invalidChildInstanceId,
  missingFunctionFailure,
  subOrchestrationFailure,
  subOrchestrationInstanceId,
  notSupportedMessage,
  orchestratorFailedMessage,
  parseOrchestrationFailure,
  retryDelayMs,
  type FailureDetails,
  type TaskFailure,
  type HistoryEvent,
  type OrchestrationTriggerPayload,
  type OrchestratorStateShape,
  type RetryOptionsShape,
} from './durable-protocol';
import {
  LeaseLostError,
  acquireInstanceLease,
  claimActivity,
  commitEpisode,
  completeActivity,
  durableDb,
  findDueActivities,
  findRunnableInstances,
  getInstance,
  loadHistory,
  nextInboxMessage,
  releaseInstanceLease,
  renewLeases,
  type ActivityWork,
  type DurableInstance,
  type EpisodeCommit,
  type InboxMessage,
  type NewActivity,
  type NewChild,
  type NewInboxMessage,
} from './durable.repository';
import { NO_VERSIONING, versionMismatch, type DurableVersioning } from './durable-versioning';

export interface DurableRunnerOptions {
  /** How long a worker holds an instance or an activity without renewing (renewed every third of it). Example: `15000`. */
  readonly leaseMs?: number;
  /** How often an idle worker looks for due work (timers, other hosts' events). Example: `100`. */
  readonly pollMs?: number;
  /** Instances this worker runs at once. Example: `16`. */
  readonly maxConcurrentOrchestrations?: number;
  /** Activities this worker runs at once. Example: `16`. */
  readonly maxConcurrentActivities?: number;
  /** This worker's identity in leases and history; random per process by default. Example: `host-a`. */
  readonly workerId?: string;
  /** Orchestration versioning (host.json `defaultVersion` and strategies). Example: `{ defaultVersion: '2.0', match: 'CurrentOrOlder', failure: 'Reject' }`. */
  readonly versioning?: DurableVersioning;
}

export interface DurableRunnerDeps {
  readonly db: AnyDb;
  readonly dialect: SqlDialect;
  readonly clock: Clock;
  readonly log: LogHandler;
  /** The functions registered so far (looked up at each invocation, so late registrations are seen). */
  readonly registrations: (triggerType: string) => readonly Registration[];
  /** Builds the InvocationContext of a call (options and extra inputs, as the Functions worker does). */
  readonly invocationContext: (registration: Registration, init: InvocationContextInit) => InvocationContext;
}

/**
 * The runner's bookkeeping for the current execution of an instance, stored with the instance (runner_state).
 * Serialized state: changing its shape is a breaking change of stored instances.
 */
export interface RunnerState {
  /** The SDK's next sequence number. */
  nextSeq: number;
  /** Sequence number per dispatched action (flattened order); null for actions without one. */
  actionIds: (number | null)[];
  /** Timers the orchestrator cancelled. */
  canceledTimers: number[];
  /**
   * Retry chains of CallActivityWithRetry and CallSubOrchestratorWithRetry, keyed by the id awaited next (the
   * attempt's task or the retry timer).
   */
  retries: Record<string, RetryChain>;
}

export interface RetryChain {
  /** What each attempt runs; absent in chains stored before sub-orchestrations existed (activities). */
  readonly kind?: 'activity' | 'sub-orchestration';
  /** A sub-orchestration's caller-chosen instance id, reused by every attempt (absent: derived per attempt). */
  readonly instanceId?: string;
  /** A sub-orchestration's version, given by the caller, reused by every attempt. */
  readonly version?: string;
  readonly name: string;
  readonly input: string | null;
  readonly options: RetryOptionsShape;
  /** Attempts scheduled so far. */
  readonly attempts: number;
  readonly startedAt: number;
  /** Retry timeout passed or the failure was non-retriable: remaining attempts fail at once without running. */
  readonly giveUp: boolean;
  readonly lastFailure?: TaskFailure;
}

export function initialRunnerState(): RunnerState {
  return { nextSeq: 0, actionIds: [], canceledTimers: [], retries: {} };
}

type OrchestrationCallback = (payload: OrchestrationTriggerPayload, context: InvocationContext) => Promise<OrchestratorStateShape>;
type ActivityCallback = (input: unknown, context: InvocationContext) => unknown;

const DEFAULTS = { leaseMs: 15_000, pollMs: 100, maxConcurrentOrchestrations: 16, maxConcurrentActivities: 16, versioning: NO_VERSIONING };

/** An instance this worker leaves for another (its version does not match, versionFailureStrategy Reject). */
class VersionRejected extends Error {}

/** The two kinds of durable work a look takes. */
interface Work {
  readonly instances: boolean;
  readonly activities: boolean;
}
const BOTH: Work = { instances: true, activities: true };

/**
 * The local Durable runner: drives orchestration instances stored in the SQL store through the durable-functions
 * SDK's own replay, and runs their activities. Any number of runners (hosts) may share one store: an instance is
 * executed only under a lease on its row, renewed while work goes on and taken over only after it expired; an episode
 * commits only if the lease and the instance's version still hold, so a worker that lost its lease changes nothing.
 * A sub-orchestration is an instance like any other: the parent's episode creates it in its own commit, and the
 * child's last commit (or its termination) puts its output or failure in the parent's inbox, so the handoff holds
 * across crashes and hosts the way activity results do.
 */
export class DurableRunner {
  readonly workerId: string;
  readonly #deps: DurableRunnerDeps;
  readonly #options: typeof DEFAULTS;
  readonly #sessions = new Map<string, Promise<void>>();
  readonly #activities = new Map<number, Promise<void>>();
  #stopping = false;
  #started = false;
  #ticking = false;
  /** The look for work in flight, if any (stop waits for it). */
  #looking: Promise<void> = Promise.resolve();
  #again = false;
  /** What the next look takes: a wake names the kind of work it made due; the poll takes both. */
  #wanted: Work = { instances: false, activities: false };
  /** When a look last took both kinds (performance.now()): work made due elsewhere is found within pollMs. */
  #lastFullLook = -Infinity;
  /** The last look left due work untaken for want of a free slot: a freed slot looks again. */
  readonly #full = { instances: false, activities: false };
  /** Instances a look found due while their session here still ran: their session's end looks again. */
  readonly #dueInSession = new Set<string>();
  #pollTimer: NodeJS.Timeout | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  /** Instances whose version this worker does not run (left for another worker, versionFailureStrategy Reject). */
  readonly #rejected = new Set<string>();

  constructor(deps: DurableRunnerDeps, options: DurableRunnerOptions = {}) {
    this.#deps = deps;
    this.#options = {
      leaseMs: options.leaseMs ?? DEFAULTS.leaseMs,
      pollMs: options.pollMs ?? DEFAULTS.pollMs,
      maxConcurrentOrchestrations: options.maxConcurrentOrchestrations ?? DEFAULTS.maxConcurrentOrchestrations,
      maxConcurrentActivities: options.maxConcurrentActivities ?? DEFAULTS.maxConcurrentActivities,
      versioning: options.versioning ?? DEFAULTS.versioning,
    };
    this.workerId = options.workerId ?? `worker-${randomUUID()}`;
  }

  get #db() {
    return durableDb(this.#deps.db);
  }

  start(): void {
    if (this.#started) return;
    this.#started = true;
    this.#renewTimer = setInterval(() => void this.#renew(), Math.max(50, Math.floor(this.#options.leaseMs / 3)));
    this.wake();
  }

  /**
   * Looks for work now (after a local change such as a start, an event or a completed activity): for the kind of
   * work the change made due, or both when not said. A look for one kind costs one query, not two.
   */
  wake(work: Partial<Work> = BOTH): void {
    if (!this.#started || this.#stopping) return;
    if (!work.instances && !work.activities) return;
    this.#wanted = { instances: this.#wanted.instances || work.instances === true, activities: this.#wanted.activities || work.activities === true };
    if (this.#ticking) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#pollTimer);
    this.#pollTimer = setTimeout(() => void this.#tick(), 0);
  }

  /**
   * Stops taking work and waits (at most one lease period) for a look for work, and the episodes and activities, in
   * flight: the store closes after this, and a look still running then would fail on a closed store.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#pollTimer);
    clearInterval(this.#renewTimer);
    const inFlight = (async () => {
      await this.#looking;
      await Promise.allSettled([...this.#sessions.values(), ...this.#activities.values()]);
    })();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([inFlight, new Promise((resolve) => (timer = setTimeout(resolve, this.#options.leaseMs)))]);
    clearTimeout(timer);
  }

  #tick(): Promise<void> {
    if (this.#stopping) return Promise.resolve();
    this.#looking = this.#look();
    return this.#looking;
  }

  async #look(): Promise<void> {
    this.#ticking = true;
    try {
      do {
        this.#again = false;
        // Real time, not the injected clock: the poll's cadence is the timer's.
        const full = performance.now() - this.#lastFullLook >= this.#options.pollMs;
        const wanted = full ? BOTH : this.#wanted;
        this.#wanted = { instances: false, activities: false };
        if (full) this.#lastFullLook = performance.now();
        if (wanted.instances) await this.#takeInstances();
        if (wanted.activities) await this.#takeActivities();
      } while (this.#again && !this.#stopping);
    } catch (error) {
      this.#deps.log(faultLevel(ensureError(error)), 'durable-runner', 'looking for durable work failed', ensureError(error));
    } finally {
      this.#ticking = false;
      if (!this.#stopping) this.#pollTimer = setTimeout(() => void this.#tick(), this.#options.pollMs);
    }
  }

  async #takeInstances(): Promise<void> {
    const free = this.#options.maxConcurrentOrchestrations - this.#sessions.size;
    if (free <= 0) return;
    const now = this.#deps.clock.now().getTime();
    const names = this.#deps.registrations('orchestrationTrigger').map((r) => r.metadata.name);
    const candidates = await findRunnableInstances(this.#db, this.#deps.dialect, now, free + this.#sessions.size + this.#rejected.size, names);
    for (const instanceId of candidates) {
      if (this.#sessions.size >= this.#options.maxConcurrentOrchestrations || this.#stopping) break;
      // An instance whose lease this worker let lapse may still have a session here: never run two.
      if (this.#sessions.has(instanceId)) this.#dueInSession.add(instanceId);
      if (this.#sessions.has(instanceId) || this.#rejected.has(instanceId)) continue;
      if (!(await acquireInstanceLease(this.#db, instanceId, this.workerId, now, this.#options.leaseMs))) continue;
      const session = this.#runSession(instanceId).finally(() => {
        this.#sessions.delete(instanceId);
        this.wake({ instances: this.#dueInSession.delete(instanceId) || this.#full.instances });
      });
      this.#sessions.set(instanceId, session);
    }
    this.#full.instances = this.#sessions.size >= this.#options.maxConcurrentOrchestrations && candidates.length > 0;
  }

  async #takeActivities(): Promise<void> {
    const free = this.#options.maxConcurrentActivities - this.#activities.size;
    if (free <= 0) return;
    const now = this.#deps.clock.now().getTime();
    const names = this.#deps.registrations('activityTrigger').map((r) => r.metadata.name);
    const candidates = await findDueActivities(this.#db, this.#deps.dialect, now, free + this.#activities.size, names);
    for (const seq of candidates) {
      if (this.#activities.size >= this.#options.maxConcurrentActivities || this.#stopping) break;
      if (this.#activities.has(seq)) continue;
      const work = await claimActivity(this.#db, seq, this.workerId, now, this.#options.leaseMs);
      if (!work) continue;
      const run = this.#runActivity(work).finally(() => {
        this.#activities.delete(seq);
        // Its result is in its instance's inbox.
        this.wake({ instances: true, activities: this.#full.activities });
      });
      this.#activities.set(seq, run);
    }
    this.#full.activities = this.#activities.size >= this.#options.maxConcurrentActivities && candidates.length > 0;
  }

  async #renew(): Promise<void> {
    try {
      await renewLeases(
        this.#db,
        this.workerId,
        { instances: [...this.#sessions.keys()], activities: [...this.#activities.keys()] },
        this.#deps.clock.now().getTime(),
        this.#options.leaseMs,
      );
    } catch (error) {
      this.#deps.log('warning', 'durable-runner', 'renewing leases failed', ensureError(error));
    }
  }

  /** Runs episodes of one leased instance until it has no due event left, then releases it. */
  async #runSession(instanceId: string): Promise<void> {
    let history: HistoryEvent[] | undefined;
    try {
      while (!this.#stopping) {
        const instance = await getInstance(this.#db, instanceId);
        if (!instance || instance.leaseOwner !== this.workerId) return;
        const now = this.#deps.clock.now().getTime();
        if (instance.status === 'Pending') {
          const started: HistoryEvent = {
            EventType: HistoryEventType.ExecutionStarted,
            EventId: -1,
            Timestamp: new Date(now).toISOString(),
            IsPlayed: false,
            Name: instance.name,
            Input: instance.input,
            ...(instance.orchestrationVersion !== null ? { Version: instance.orchestrationVersion } : {}),
          };
          history = await this.#episode(instance, [], started, undefined, now);
          continue;
        }
        if (instance.status !== 'Running') return;
        const message = await nextInboxMessage(this.#db, this.#deps.dialect, instanceId, now);
        if (!message) return;
        if (!history || history.length !== instance.historyLength) history = await loadHistory(this.#db, instanceId);
        history = await this.#episode(instance, history, message.event, message, now);
      }
    } catch (error) {
      if (error instanceof VersionRejected) {
        this.#rejected.add(instanceId);
        this.#deps.log('warning', 'durable-runner', `durable instance ${instanceId} is left for another worker: ${error.message} (versionFailureStrategy Reject)`);
      } else if (!(error instanceof LeaseLostError)) {
        // Its episode did not commit: the instance runs again at the next look (at once when only the store blinked).
        this.#deps.log(faultLevel(ensureError(error)), 'durable-runner', `durable instance ${instanceId} could not run`, ensureError(error));
      }
    } finally {
      await releaseInstanceLease(this.#db, instanceId, this.workerId).catch((error: unknown) =>
        this.#deps.log('warning', 'durable-runner', `releasing ${instanceId} failed`, ensureError(error)),
      );
    }
  }

  /**
   * One episode: feed one new event to the SDK's replay, carry out the new actions, commit. Returns the history
   * after the episode.
   */
  async #episode(
    instance: DurableInstance,
    history: readonly HistoryEvent[],
    newEvent: HistoryEvent,
    message: InboxMessage | undefined,
    now: number,
  ): Promise<HistoryEvent[]> {
    const state = JSON.parse(instance.runnerState) as RunnerState;
    if (message && message.executionId !== null && message.executionId !== instance.executionId) {
      // A result or timer of an execution that ContinueAsNew replaced: consumed without an episode.
      return this.#commit(instance, state, history, { consumedSeq: message.seq, append: [], status: 'Running' }, now);
    }
    const timestamp = new Date(now).toISOString();
    const orchestratorStarted: HistoryEvent = { EventType: HistoryEventType.OrchestratorStarted, EventId: -1, Timestamp: timestamp, IsPlayed: false };
    const fed: HistoryEvent = { ...newEvent, IsPlayed: false };
    const effects: Effects = { append: [], activities: [], inbox: [], cancelTimers: [], children: [] };

    this.#continueRetry(state, fed, effects, instance, now);

    const registration = this.#deps.registrations('orchestrationTrigger').find((r) => r.metadata.name === instance.name);
    const payload = orchestrationPayload({
      history: [...history.map((e) => ({ ...e, IsPlayed: true })), { ...orchestratorStarted }, { ...fed }],
      input: instance.input === null ? undefined : (JSON.parse(instance.input) as unknown),
      instanceId: instance.instanceId,
      isReplaying: history.length > 0,
      parentInstanceId: instance.parent?.instanceId,
    });
    const episodeEvents = [orchestratorStarted, fed];
    const mismatch = versionMismatch(this.#options.versioning, instance.orchestrationVersion);
    if (mismatch) {
      if (this.#options.versioning.failure === 'Reject') throw new VersionRejected(mismatch);
      return this.#fail(instance, state, history, episodeEvents, message, now, { message: mismatch });
    }
    if (!registration) {
      return this.#fail(instance, state, history, episodeEvents, message, now, {
        message: `orchestration function '${instance.name}' is not registered on this host`,
      });
    }
    const context = this.#deps.invocationContext(registration, {
      invocationId: randomUUID(),
      functionName: instance.name,
      logHandler: (level, ...args) => this.#deps.log(level, instance.name, ...args),
    });
    let result: OrchestratorStateShape;
    try {
      result = await (registration.callback as unknown as OrchestrationCallback)(payload, context);
    } catch (thrown) {
      const failure = parseOrchestrationFailure(ensureError(thrown));
      return this.#fail(instance, state, history, episodeEvents, message, now, {
        message: failure.message,
        ...(failure.state?.customStatus !== undefined ? { customStatus: failure.state.customStatus } : {}),
        ...(failure.state?.failureDetails ? { failureDetails: failure.state.failureDetails } : {}),
      });
    }

    const flat = flattenActions(result.actions);
    for (let i = 0; i < Math.min(flat.length, state.actionIds.length); i++) {
      const action = flat[i];
      const id = state.actionIds[i];
      if (action?.kind === 'timer' && action.isCanceled && typeof id === 'number' && !state.canceledTimers.includes(id)) {
        state.canceledTimers.push(id);
        effects.cancelTimers.push(id);
      }
    }
    let continueAsNew: { input: string | null } | undefined;
    for (const action of flat.slice(state.actionIds.length)) {
      switch (action.kind) {
        case 'activity': {
          const id = state.nextSeq++;
          state.actionIds.push(id);
          effects.append.push({ EventType: HistoryEventType.TaskScheduled, EventId: id, Timestamp: timestamp, IsPlayed: false, Name: action.name, Input: action.input });
          effects.activities.push({ taskId: id, name: action.name, input: action.input });
          if (action.retry) {
            state.retries[String(id)] = { name: action.name, input: action.input, options: action.retry, attempts: 1, startedAt: now, giveUp: false };
          }
          break;
        }
        case 'sub-orchestration': {
          const id = state.nextSeq++;
          state.actionIds.push(id);
          this.#startChild(effects, instance, id, action, now);
          if (action.retry) {
            state.retries[String(id)] = {
              kind: 'sub-orchestration',
              ...(action.instanceId !== undefined ? { instanceId: action.instanceId } : {}),
              ...(action.version !== undefined ? { version: action.version } : {}),
              name: action.name,
              input: action.input,
              options: action.retry,
              attempts: 1,
              startedAt: now,
              giveUp: false,
            };
          }
          break;
        }
        case 'timer': {
          const id = state.nextSeq++;
          state.actionIds.push(id);
          if (action.isCanceled) {
            state.canceledTimers.push(id);
            break;
          }
          this.#scheduleTimer(effects, instance.executionId, id, action.fireAt, timestamp);
          break;
        }
        case 'wait-event':
          state.actionIds.push(null);
          break;
        case 'continue-as-new':
          state.actionIds.push(null);
          continueAsNew = { input: action.input };
          break;
        case 'refused-task': {
          const id = state.nextSeq++;
          state.actionIds.push(id);
          this.#refuseTask(effects, instance.executionId, id, action.feature, now);
          break;
        }
        case 'refused-signal':
          return this.#fail(instance, state, history, episodeEvents, message, now, { message: notSupportedMessage(action.feature) });
        case 'unsupported':
          return this.#fail(instance, state, history, episodeEvents, message, now, {
            message: `action type ${action.actionType} is not supported by the local Durable host (runtime-cloud)`,
          });
      }
    }

    // The SDK's own counter, when it is where 3.5.0 keeps it, must agree with the runner's; a disagreement would
    // leave the instance waiting forever on an id the SDK never matches, so it fails loudly instead.
    const sdkSeq = (context as { df?: { taskOrchestratorExecutor?: { sequenceNumber?: unknown } } }).df?.taskOrchestratorExecutor
      ?.sequenceNumber;
    if (typeof sdkSeq === 'number' && sdkSeq !== state.nextSeq && !result.isDone) {
      return this.#fail(instance, state, history, episodeEvents, message, now, {
        message: `local Durable runner out of step with the SDK: next task id ${state.nextSeq}, SDK ${sdkSeq}`,
      });
    }

    const customStatus = result.customStatus !== undefined ? JSON.stringify(result.customStatus) : instance.customStatus;
    if (result.isDone && continueAsNew) {
      return this.#commit(
        instance,
        initialRunnerState(),
        [],
        {
          consumedSeq: message?.seq,
          append: [],
          status: 'Pending',
          executionId: randomUUID(),
          input: continueAsNew.input,
          customStatus,
          resetFrom: instance.executionId,
        },
        now,
      );
    }
    if (result.isDone) {
      const output = JSON.stringify(result.output ?? null);
      const completed: HistoryEvent = {
        EventType: HistoryEventType.ExecutionCompleted,
        EventId: -1,
        Timestamp: timestamp,
        IsPlayed: false,
        OrchestrationStatus: 'Completed',
        Result: output,
      };
      // A sub-orchestration's output goes to its parent in the same commit.
      const toParent: HistoryEvent | undefined = instance.parent
        ? { EventType: HistoryEventType.SubOrchestrationInstanceCompleted, EventId: -1, Timestamp: timestamp, IsPlayed: false, Result: output }
        : undefined;
      return this.#commit(
        instance,
        state,
        history,
        {
          consumedSeq: message?.seq,
          append: [...episodeEvents, ...effects.append, completed],
          status: 'Completed',
          output,
          customStatus,
          finished: true,
          ...(toParent ? { toParent } : {}),
        },
        now,
      );
    }
    const orchestratorCompleted: HistoryEvent = { EventType: HistoryEventType.OrchestratorCompleted, EventId: -1, Timestamp: timestamp, IsPlayed: false };
    return this.#commit(
      instance,
      state,
      history,
      {
        consumedSeq: message?.seq,
        append: [...episodeEvents, ...effects.append, orchestratorCompleted],
        status: 'Running',
        customStatus,
        activities: effects.activities,
        inbox: effects.inbox,
        cancelTimers: effects.cancelTimers,
        children: effects.children,
      },
      now,
    );
  }

  /**
   * Starts a sub-orchestration on task `id`: records SubOrchestrationInstanceCreated and has the commit create the
   * child instance (id given, or derived from this execution and the task id). A child this host cannot run (an
   * unknown orchestration, an id the extension refuses) fails the task at once, so the parent can catch it.
   */
  #startChild(
    effects: Effects,
    instance: DurableInstance,
    id: number,
    call: { name: string; input: string | null; instanceId?: string | undefined; version?: string | undefined },
    now: number,
  ): void {
    const timestamp = new Date(now).toISOString();
    const childId = call.instanceId ?? subOrchestrationInstanceId(instance.executionId, id);
    const registered = this.#deps
      .registrations('orchestrationTrigger')
      .find((r) => r.metadata.name.toLowerCase() === call.name.toLowerCase())?.metadata.name;
    effects.append.push({
      EventType: HistoryEventType.SubOrchestrationInstanceCreated,
      EventId: id,
      Timestamp: timestamp,
      IsPlayed: false,
      Name: registered ?? call.name,
      InstanceId: childId,
      Input: call.input,
    });
    const failed = (failure: TaskFailure): HistoryEvent => ({
      EventType: HistoryEventType.SubOrchestrationInstanceFailed,
      EventId: -1,
      Timestamp: timestamp,
      IsPlayed: false,
      TaskScheduledId: id,
      ...failure,
    });
    const refusal = call.instanceId !== undefined ? invalidChildInstanceId(call.instanceId, instance.instanceId, instance.parent?.instanceId ?? null) : undefined;
    if (!registered || refusal) {
      const failure = refusal ? subOrchestrationFailure(call.name, refusal) : subOrchestrationFailure(call.name, missingFunctionFailure(call.name, 'orchestrator').Reason);
      effects.inbox.push({ executionId: instance.executionId, dedupeKey: `task:${id}`, visibleAt: now, event: failed(failure) });
      return;
    }
    const version = call.version ?? this.#options.versioning.defaultVersion;
    effects.children.push({
      taskId: id,
      instanceId: childId,
      name: registered,
      executionId: randomUUID(),
      input: call.input,
      runnerState: JSON.stringify(initialRunnerState()),
      ...(version !== undefined ? { orchestrationVersion: version } : {}),
      conflict: failed(subOrchestrationFailure(registered, `an orchestration instance with the ID '${childId}' is already pending, running or suspended`)),
    });
  }

  /**
   * Retries of CallActivityWithRetry and CallSubOrchestratorWithRetry, which the host carries out: a failed attempt
   * with attempts left gets a retry timer on the SDK's next id (first × backoff^(n−1), capped); a fired retry timer
   * gets the next attempt on the id after it (a new activity run, or a new child: the caller's id again, or one
   * derived from the new task id). After the last failure the SDK still waits for a timer (then fails the task), so
   * one fires at once.
   */
  #continueRetry(state: RunnerState, fed: HistoryEvent, effects: Effects, instance: DurableInstance, now: number): void {
    const { executionId } = instance;
    const timestamp = new Date(now).toISOString();
    const failed = fed.EventType === HistoryEventType.TaskFailed || fed.EventType === HistoryEventType.SubOrchestrationInstanceFailed;
    if (failed && fed.TaskScheduledId !== undefined) {
      const chain = state.retries[String(fed.TaskScheduledId)];
      if (!chain) return;
      delete state.retries[String(fed.TaskScheduledId)];
      const timeout = chain.options.retryTimeoutInMilliseconds;
      const giveUp =
        chain.giveUp || fed.FailureDetails?.IsNonRetriable === true || (timeout !== undefined && timeout > 0 && now - chain.startedAt >= timeout);
      const retrying = chain.attempts < chain.options.maxNumberOfAttempts && !giveUp;
      const timerId = state.nextSeq++;
      const fireAt = new Date(now + (retrying ? retryDelayMs(chain.options, chain.attempts) : 0));
      this.#scheduleTimer(effects, executionId, timerId, fireAt, timestamp);
      state.retries[String(timerId)] = { ...chain, giveUp, ...(fed.Reason !== undefined ? { lastFailure: taskFailureOf(fed) } : {}) };
      return;
    }
    if (fed.EventType === HistoryEventType.TimerFired && fed.TimerId !== undefined) {
      const chain = state.retries[String(fed.TimerId)];
      if (!chain) return;
      delete state.retries[String(fed.TimerId)];
      // Attempts exhausted: the SDK fails the task on this timer and takes no id.
      if (chain.attempts >= chain.options.maxNumberOfAttempts) return;
      const taskId = state.nextSeq++;
      state.retries[String(taskId)] = { ...chain, attempts: chain.attempts + 1 };
      if (chain.kind === 'sub-orchestration') {
        if (chain.giveUp) {
          const failure = chain.lastFailure ?? subOrchestrationFailure(chain.name, 'retry timeout elapsed');
          effects.inbox.push({
            executionId,
            dedupeKey: `task:${taskId}`,
            visibleAt: now,
            event: { EventType: HistoryEventType.SubOrchestrationInstanceFailed, EventId: -1, Timestamp: timestamp, IsPlayed: false, TaskScheduledId: taskId, ...failure },
          });
        } else {
          this.#startChild(effects, instance, taskId, chain, now);
        }
        return;
      }
      effects.append.push({ EventType: HistoryEventType.TaskScheduled, EventId: taskId, Timestamp: timestamp, IsPlayed: false, Name: chain.name, Input: chain.input });
      if (chain.giveUp) {
        const failure = chain.lastFailure ?? { Reason: `Activity function '${chain.name}' failed: retry timeout elapsed`, Details: '' };
        effects.inbox.push({
          executionId,
          dedupeKey: `task:${taskId}`,
          visibleAt: now,
          event: { EventType: HistoryEventType.TaskFailed, EventId: -1, Timestamp: timestamp, IsPlayed: false, TaskScheduledId: taskId, ...failure },
        });
      } else {
        effects.activities.push({ taskId, name: chain.name, input: chain.input });
      }
    }
  }

  /**
   * A task the local host does not carry out (an entity call, a durable HTTP call) fails at once with a message
   * naming the feature: the orchestrator can catch it.
   */
  #refuseTask(effects: Effects, executionId: string, id: number, feature: string, now: number): void {
    const timestamp = new Date(now).toISOString();
    const failure: TaskFailure = { Reason: notSupportedMessage(feature), Details: '' };
    effects.append.push({ EventType: HistoryEventType.TaskScheduled, EventId: id, Timestamp: timestamp, IsPlayed: false, Name: feature });
    effects.inbox.push({
      executionId,
      dedupeKey: `task:${id}`,
      visibleAt: now,
      event: { EventType: HistoryEventType.TaskFailed, EventId: -1, Timestamp: timestamp, IsPlayed: false, TaskScheduledId: id, ...failure },
    });
  }

  #scheduleTimer(effects: Effects, executionId: string, id: number, fireAt: Date, timestamp: string): void {
    const at = fireAt.toISOString();
    effects.append.push({ EventType: HistoryEventType.TimerCreated, EventId: id, Timestamp: timestamp, IsPlayed: false, FireAt: at });
    effects.inbox.push({
      executionId,
      dedupeKey: `timer:${id}`,
      visibleAt: fireAt.getTime(),
      event: { EventType: HistoryEventType.TimerFired, EventId: -1, Timestamp: at, IsPlayed: false, TimerId: id, FireAt: at },
    });
  }

  #fail(
    instance: DurableInstance,
    state: RunnerState,
    history: readonly HistoryEvent[],
    episodeEvents: readonly HistoryEvent[],
    message: InboxMessage | undefined,
    now: number,
    failure: { message: string; customStatus?: unknown; failureDetails?: FailureDetails },
  ): Promise<HistoryEvent[]> {
    const output = orchestratorFailedMessage(instance.name, failure.message);
    const timestamp = new Date(now).toISOString();
    const completed: HistoryEvent = {
      EventType: HistoryEventType.ExecutionCompleted,
      EventId: -1,
      Timestamp: timestamp,
      IsPlayed: false,
      OrchestrationStatus: 'Failed',
      Result: JSON.stringify(output),
    };
    // A failed sub-orchestration fails its parent's task, in the same commit.
    const toParent: HistoryEvent | undefined = instance.parent
      ? {
          EventType: HistoryEventType.SubOrchestrationInstanceFailed,
          EventId: -1,
          Timestamp: timestamp,
          IsPlayed: false,
          ...subOrchestrationFailure(instance.name, failure.message, failure.failureDetails),
        }
      : undefined;
    return this.#commit(
      instance,
      state,
      history,
      {
        consumedSeq: message?.seq,
        append: [...episodeEvents, completed],
        status: 'Failed',
        output: JSON.stringify(output),
        failure: JSON.stringify({ message: output }),
        customStatus: failure.customStatus !== undefined ? JSON.stringify(failure.customStatus) : instance.customStatus,
        finished: true,
        ...(toParent ? { toParent } : {}),
      },
      now,
    );
  }

  async #commit(
    instance: DurableInstance,
    state: RunnerState,
    history: readonly HistoryEvent[],
    change: {
      consumedSeq: number | undefined;
      append: readonly HistoryEvent[];
      status: EpisodeCommit['instance']['status'];
      executionId?: string;
      input?: string | null;
      output?: string | null;
      failure?: string | null;
      customStatus?: string | null;
      activities?: readonly NewActivity[];
      inbox?: readonly NewInboxMessage[];
      cancelTimers?: readonly number[];
      children?: readonly NewChild[];
      toParent?: HistoryEvent;
      resetFrom?: string;
      finished?: boolean;
    },
    now: number,
  ): Promise<HistoryEvent[]> {
    const appendAt = change.resetFrom !== undefined ? 0 : history.length;
    crashPoint(`durable:episode-decided:${instance.name}`, instance.instanceId);
    await commitEpisode(this.#db, {
      instanceId: instance.instanceId,
      owner: this.workerId,
      expectedVersion: instance.version,
      now,
      ...(change.consumedSeq !== undefined ? { consumedSeq: change.consumedSeq } : {}),
      instance: {
        status: change.status,
        executionId: change.executionId ?? instance.executionId,
        input: change.input !== undefined ? change.input : instance.input,
        output: change.output ?? null,
        customStatus: change.customStatus !== undefined ? change.customStatus : instance.customStatus,
        failure: change.failure ?? null,
        runnerState: JSON.stringify(state),
        historyLength: appendAt + change.append.length,
      },
      appendAt,
      append: change.append,
      activities: change.activities ?? [],
      inbox: change.inbox ?? [],
      cancelTimers: change.cancelTimers ?? [],
      children: change.children ?? [],
      ...(change.toParent ? { toParent: change.toParent } : {}),
      ...(change.resetFrom !== undefined ? { resetFrom: change.resetFrom } : {}),
      finished: change.finished ?? false,
    });
    crashPoint(`durable:episode-committed:${instance.name}`, instance.instanceId);
    this.wake({
      activities: (change.activities?.length ?? 0) > 0,
      instances: (change.inbox?.length ?? 0) > 0 || (change.children?.length ?? 0) > 0 || change.toParent !== undefined,
    });
    return change.resetFrom !== undefined ? [] : [...history, ...change.append];
  }

  /** Runs one activity and records its result, unless this worker lost the work item meanwhile. */
  async #runActivity(work: ActivityWork): Promise<void> {
    const registration = this.#deps.registrations('activityTrigger').find((r) => r.metadata.name === work.name);
    let event: HistoryEvent;
    const failed = (failure: TaskFailure): HistoryEvent => ({
      EventType: HistoryEventType.TaskFailed,
      EventId: -1,
      Timestamp: this.#deps.clock.now().toISOString(),
      IsPlayed: false,
      TaskScheduledId: work.taskId,
      ...failure,
    });
    if (!registration) {
      event = failed(missingFunctionFailure(work.name, 'activity'));
    } else {
      try {
        const context = this.#deps.invocationContext(registration, {
          invocationId: randomUUID(),
          functionName: work.name,
          triggerMetadata: { instanceId: work.instanceId },
          logHandler: (level, ...args) => this.#deps.log(level, work.name, ...args),
        });
        const input = work.input === null ? undefined : (JSON.parse(work.input) as unknown);
        crashPoint(`durable:activity-started:${work.name}`, work.instanceId);
        const result = await (registration.callback as unknown as ActivityCallback)(input, context);
        crashPoint(`durable:activity-returned:${work.name}`, work.instanceId);
        event = {
          EventType: HistoryEventType.TaskCompleted,
          EventId: -1,
          Timestamp: this.#deps.clock.now().toISOString(),
          IsPlayed: false,
          TaskScheduledId: work.taskId,
          Result: JSON.stringify(result ?? null),
        };
      } catch (thrown) {
        event = failed(activityFailure(work.name, ensureError(thrown)));
      }
    }
    try {
      await completeActivity(this.#db, work, this.workerId, event, this.#deps.clock.now().getTime());
      crashPoint(`durable:activity-recorded:${work.name}`, work.instanceId);
    } catch (error) {
      // The work item stays leased and runs again after the lease expires (at least once, as in Azure).
      this.#deps.log(faultLevel(ensureError(error)), 'durable-runner', `recording activity ${work.name} of ${work.instanceId} failed`, ensureError(error));
    }
  }
}

/** The failure a TaskFailed event carries. */
function taskFailureOf(event: HistoryEvent): TaskFailure {
  return { Reason: event.Reason ?? '', Details: event.Details ?? '', ...(event.FailureDetails ? { FailureDetails: event.FailureDetails } : {}) };
}

interface Effects {
  append: HistoryEvent[];
  activities: NewActivity[];
  inbox: NewInboxMessage[];
  cancelTimers: number[];
  children: NewChild[];
}
