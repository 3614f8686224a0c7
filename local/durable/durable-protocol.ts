import { backoffDelayMs } from '../../shared/platform/time/retry';

/**
 * The out-of-process protocol between a Durable Functions host and the durable-functions SDK, as the local runner
 * relies on it. Pinned to durable-functions 3.5.0 (package.json pins it exactly); tests/unit/durable-protocol.test.ts
 * fails when the SDK's enums, schema version or failure encoding change. Pure: no I/O.
 *
 * The protocol, in short (SDK sources under node_modules/durable-functions/lib/src/):
 * - The host calls the registered orchestration callback with an `OrchestrationTriggerPayload` and a fresh
 *   InvocationContext. The SDK replays `history` from the top (the generator restarts each call) and answers an
 *   `OrchestratorStateShape` whose `actions` are cumulative since the execution started: only the tail past what
 *   the host already dispatched is new. A failed orchestration makes the callback throw an error whose message ends
 *   in `OUT_OF_PROC_DATA_LABEL` + the state JSON.
 * - Tasks are matched by the SDK's sequence numbers: each activity, sub-orchestration and timer takes the next
 *   number in flattened action order (WaitForExternalEvent takes none; it is matched by name).
 *   TaskScheduled/SubOrchestrationInstanceCreated/TimerCreated carry the number as `EventId`;
 *   TaskCompleted/TaskFailed and SubOrchestrationInstanceCompleted/Failed name it as `TaskScheduledId`, TimerFired
 *   as `TimerId`.
 * - Retries (CallActivityWithRetry, CallSubOrchestratorWithRetry) are the host's job: the action is emitted once; after each failure the SDK takes
 *   the next number for a retry timer and, once that timer fired, the next one for the new attempt (or fails the
 *   task when attempts are exhausted).
 * - The host feeds one new event per episode (after an OrchestratorStarted whose Timestamp becomes
 *   `currentUtcDateTime`), so the numbers the SDK assigns while processing it stay in step with the host's.
 */

/** The SDK version whose protocol this file describes. */
export const DURABLE_FUNCTIONS_VERSION = '3.5.0';

/** `history/HistoryEventType.js` (the values the runner writes or reads). */
export const HistoryEventType = {
  ExecutionStarted: 0,
  ExecutionCompleted: 1,
  ExecutionFailed: 2,
  ExecutionTerminated: 3,
  TaskScheduled: 4,
  TaskCompleted: 5,
  TaskFailed: 6,
  SubOrchestrationInstanceCreated: 7,
  SubOrchestrationInstanceCompleted: 8,
  SubOrchestrationInstanceFailed: 9,
  TimerCreated: 10,
  TimerFired: 11,
  OrchestratorStarted: 12,
  OrchestratorCompleted: 13,
  EventRaised: 15,
  ContinueAsNew: 16,
} as const;
export type HistoryEventTypeValue = (typeof HistoryEventType)[keyof typeof HistoryEventType];

/** `actions/ActionType.js` (the values the runner dispatches; the others fail the orchestration as unsupported). */
export const ActionType = {
  CallActivity: 0,
  CallActivityWithRetry: 1,
  CallSubOrchestrator: 2,
  CallSubOrchestratorWithRetry: 3,
  ContinueAsNew: 4,
  CreateTimer: 5,
  WaitForExternalEvent: 6,
  CallEntity: 7,
  CallHttp: 8,
  SignalEntity: 9,
  WhenAny: 11,
  WhenAll: 12,
} as const;

/** `orchestrations/ReplaySchema.js`: V4 = 3, the latest 3.5.0 knows; actions then arrive as `[[…]]` with compounds. */
export const REPLAY_SCHEMA_VERSION = 3;

/**
 * Timer durations handed to the SDK. With schema ≥ V3 it splits timers longer than `maximumShortTimerDuration` into
 * sub-timers of `longRunningTimerIntervalDuration` (an Azure Storage limit); the local store has no such limit, so
 * both are set far beyond any timer and every timer stays one action and one id.
 */
export const NO_TIMER_SPLITTING = '3650.00:00:00';

/** The separator `error/OrchestrationFailureError.js` puts between the error message and the state JSON. */
export const OUT_OF_PROC_DATA_LABEL = '\n\n$OutOfProcData$:';

/** `orchestrations/OrchestrationRuntimeStatus.js` values this host reports. */
export type RuntimeStatus = 'Pending' | 'Running' | 'Suspended' | 'Completed' | 'Failed' | 'Terminated';
export const TERMINAL_STATUSES: readonly RuntimeStatus[] = ['Completed', 'Failed', 'Terminated'];

/**
 * A history event as the SDK reads it: plain PascalCase JSON. Serialized into the store (durable_history.event and
 * durable_inbox.event): changing these field names is a breaking change of stored state.
 */
export interface HistoryEvent {
  readonly EventType: HistoryEventTypeValue;
  /** The SDK sequence number for TaskScheduled/TimerCreated; -1 otherwise. */
  readonly EventId: number;
  /** ISO-8601; the SDK turns it into a Date. */
  readonly Timestamp: string;
  /** True for events of past episodes. */
  IsPlayed: boolean;
  readonly Name?: string;
  /** The child's instance id (SubOrchestrationInstanceCreated). */
  readonly InstanceId?: string;
  /** JSON text (ExecutionStarted, EventRaised, SubOrchestrationInstanceCreated). */
  readonly Input?: string | null;
  /** The instance's orchestration version (ExecutionStarted): `context.df.version`. */
  readonly Version?: string;
  /** JSON text (TaskCompleted, SubOrchestrationInstanceCompleted, ExecutionCompleted). */
  readonly Result?: string | null;
  readonly TaskScheduledId?: number;
  readonly TimerId?: number;
  readonly FireAt?: string;
  readonly Reason?: string;
  readonly Details?: string;
  readonly FailureDetails?: FailureDetails;
  readonly OrchestrationStatus?: string;
}

/** `FailureDetails` of TaskFailed and SubOrchestrationInstanceFailed (`history/FailureDetailsPayload.js`). */
export interface FailureDetails {
  readonly ErrorType: string;
  readonly ErrorMessage: string;
  readonly StackTrace?: string;
  readonly IsNonRetriable?: boolean;
  readonly Properties?: Readonly<Record<string, unknown>>;
}

/** What the orchestration callback receives (`orchestrations/DurableOrchestrationBindingInfo.js`). */
export interface OrchestrationTriggerPayload {
  readonly history: HistoryEvent[];
  /** The value `context.df.getInput()` returns (ExecutionStarted.Input is not read by the SDK). */
  readonly input: unknown;
  readonly instanceId: string;
  readonly isReplaying: boolean;
  readonly upperSchemaVersion: number;
  readonly upperSchemaVersionNew: number;
  readonly parentInstanceId: string | undefined;
  readonly maximumShortTimerDuration: string;
  readonly longRunningTimerIntervalDuration: string;
  readonly defaultHttpAsyncRequestSleepTimeMillseconds: number;
}

/**
 * The trigger payload of one episode, with the settings every call shares: the replay schema, timers never split
 * into sub-timers. `parentInstanceId` is set for a sub-orchestration (`context.df.parentInstanceId`).
 */
export function orchestrationPayload(episode: {
  history: HistoryEvent[];
  input: unknown;
  instanceId: string;
  isReplaying: boolean;
  parentInstanceId?: string | undefined;
}): OrchestrationTriggerPayload {
  return {
    ...episode,
    upperSchemaVersion: REPLAY_SCHEMA_VERSION,
    upperSchemaVersionNew: REPLAY_SCHEMA_VERSION,
    parentInstanceId: episode.parentInstanceId,
    maximumShortTimerDuration: NO_TIMER_SPLITTING,
    longRunningTimerIntervalDuration: NO_TIMER_SPLITTING,
    defaultHttpAsyncRequestSleepTimeMillseconds: 30_000,
  };
}

/** What the callback answers (`orchestrations/OrchestratorState.js`). */
export interface OrchestratorStateShape {
  readonly isDone: boolean;
  readonly actions: unknown[][];
  readonly output?: unknown;
  readonly error?: string;
  readonly customStatus?: unknown;
  readonly schemaVersion: number;
  /** Set when the orchestrator failed with a TaskFailedError (`orchestrations/OrchestratorState.js`). */
  readonly failureDetails?: FailureDetails;
}

/** The retry options of CallActivityWithRetry and CallSubOrchestratorWithRetry (`RetryOptions.js`); optional fields are absent unless set. */
export interface RetryOptionsShape {
  readonly firstRetryIntervalInMilliseconds: number;
  readonly maxNumberOfAttempts: number;
  readonly backoffCoefficient?: number;
  readonly maxRetryIntervalInMilliseconds?: number;
  readonly retryTimeoutInMilliseconds?: number;
}

/** A leaf action, decoded from the SDK's action objects. */
export type Action =
  | { readonly kind: 'activity'; readonly name: string; readonly input: string | null; readonly retry?: RetryOptionsShape }
  /** `instanceId` is the caller's; without one the host derives the child's id (`subOrchestrationInstanceId`). */
  | {
      readonly kind: 'sub-orchestration';
      readonly name: string;
      readonly input: string | null;
      readonly instanceId?: string;
      /** The version the caller asked for (else the host's default version). */
      readonly version?: string;
      readonly retry?: RetryOptionsShape;
    }
  | { readonly kind: 'timer'; readonly fireAt: Date; readonly isCanceled: boolean }
  | { readonly kind: 'wait-event'; readonly name: string }
  | { readonly kind: 'continue-as-new'; readonly input: string | null }
  /** A task the local host does not carry out: it fails, so the orchestrator can catch it. */
  | { readonly kind: 'refused-task'; readonly feature: string }
  /** A fire-and-forget action (an entity signal) the local host does not carry out: it fails the orchestration. */
  | { readonly kind: 'refused-signal'; readonly feature: string }
  | { readonly kind: 'unsupported'; readonly actionType: number };

/** Whether an action takes one of the SDK's sequence numbers. */
export function takesSequenceNumber(action: Action): boolean {
  return (
    action.kind === 'activity' ||
    action.kind === 'sub-orchestration' ||
    action.kind === 'timer' ||
    action.kind === 'refused-task' ||
    action.kind === 'refused-signal'
  );
}

/**
 * The id of a sub-orchestration started without one, as DurableTask.Core derives it
 * (`TaskOrchestrationContext.CreateSubOrchestrationInstanceCore`): the parent's execution id, a colon, and the
 * task's sequence number. Deterministic across replays, and unique per execution and task (each retry attempt
 * takes a new number, so it gets a new child).
 */
export function subOrchestrationInstanceId(parentExecutionId: string, taskId: number): string {
  return `${parentExecutionId}:${taskId}`;
}

/**
 * Why a caller-chosen instance id cannot be a child's (the extension's checks, `DurableOrchestrationContext`
 * `CallDurableTaskFunctionAsync`, and the local host's id rules); undefined when it can.
 */
export function invalidChildInstanceId(childId: string, parentId: string, grandparentId: string | null): string | undefined {
  if (childId.toLowerCase() === parentId.toLowerCase() || (grandparentId !== null && childId.toLowerCase() === grandparentId.toLowerCase())) {
    return 'The instance ID of a sub-orchestration must be different than the instance ID of a parent orchestration.';
  }
  if (childId.startsWith('@')) return 'Orchestration instance ids must not start with @';
  if (childId.length > MAX_INSTANCE_ID_LENGTH || /[/\\#?]/.test(childId)) return INSTANCE_ID_RULES;
  return undefined;
}

/** Instance ids of this host: what the Durable HTTP API and sub-orchestrations accept. */
export const MAX_INSTANCE_ID_LENGTH = 200;
export const INSTANCE_ID_RULES = 'instance ids have at most 200 characters and no / \\ # ?';

/** The message of a task or signal the local host refuses: the feature named, and where it is supported. */
export function notSupportedMessage(feature: string): string {
  return `${feature} is not supported by the local Durable host (runtime-cloud); the Durable extension in Azure supports it`;
}

type RawAction = { actionType?: unknown; compoundActions?: unknown; [key: string]: unknown };

/**
 * The cumulative actions in flattened order (compounds expanded depth first, as the SDK assigns ids). A task that
 * was already scheduled and appears again inside a later Task.any/all is the very same action object: it is kept
 * once, because the SDK gives it no new id.
 */
export function flattenActions(actions: readonly unknown[][]): Action[] {
  const seen = new Set<unknown>();
  const out: Action[] = [];
  const visit = (value: unknown): void => {
    if (!value || typeof value !== 'object') return;
    const raw = value as RawAction;
    if (raw.actionType === ActionType.WhenAll || raw.actionType === ActionType.WhenAny) {
      for (const child of Array.isArray(raw.compoundActions) ? raw.compoundActions : []) visit(child);
      return;
    }
    if (seen.has(value)) return;
    seen.add(value);
    out.push(decodeAction(raw));
  };
  for (const group of actions) for (const action of group) visit(action);
  return out;
}

/** Activity and ContinueAsNew inputs arrive JSON-stringified when they are strings and raw otherwise. */
function inputAsJson(input: unknown): string | null {
  if (input === undefined) return null;
  return typeof input === 'string' ? input : JSON.stringify(input);
}

function decodeAction(raw: RawAction): Action {
  switch (raw.actionType) {
    case ActionType.CallActivity:
      return { kind: 'activity', name: String(raw.functionName), input: inputAsJson(raw.input) };
    case ActionType.CallActivityWithRetry:
      return {
        kind: 'activity',
        name: String(raw.functionName),
        input: inputAsJson(raw.input),
        retry: raw.retryOptions as RetryOptionsShape,
      };
    case ActionType.CreateTimer:
      return { kind: 'timer', fireAt: new Date(raw.fireAt as Date | string), isCanceled: raw.isCanceled === true };
    case ActionType.WaitForExternalEvent:
      return { kind: 'wait-event', name: String(raw.externalEventName) };
    case ActionType.ContinueAsNew:
      return { kind: 'continue-as-new', input: inputAsJson(raw.input) };
    case ActionType.CallSubOrchestrator:
    case ActionType.CallSubOrchestratorWithRetry:
      // The SDK hands the input over as given (no stringifying, unlike activities): it is always serialized here.
      return {
        kind: 'sub-orchestration',
        name: String(raw.functionName),
        input: raw.input === undefined ? null : JSON.stringify(raw.input),
        ...(typeof raw.instanceId === 'string' && raw.instanceId !== '' ? { instanceId: raw.instanceId } : {}),
        ...(typeof raw.version === 'string' && raw.version !== '' ? { version: raw.version } : {}),
        ...(raw.actionType === ActionType.CallSubOrchestratorWithRetry ? { retry: raw.retryOptions as RetryOptionsShape } : {}),
      };
    case ActionType.CallEntity:
      return { kind: 'refused-task', feature: 'callEntity (durable entities)' };
    case ActionType.CallHttp:
      return { kind: 'refused-task', feature: 'callHttp (durable HTTP calls)' };
    case ActionType.SignalEntity:
      return { kind: 'refused-signal', feature: 'signalEntity (durable entities)' };
    default:
      return { kind: 'unsupported', actionType: typeof raw.actionType === 'number' ? raw.actionType : -1 };
  }
}

/** The delay before attempt `failedAttempts + 1`: first × backoff^(failedAttempts − 1), capped by the maximum. */
export function retryDelayMs(options: RetryOptionsShape, failedAttempts: number): number {
  const factor = options.backoffCoefficient && options.backoffCoefficient > 0 ? options.backoffCoefficient : 1;
  const cap = options.maxRetryIntervalInMilliseconds;
  return backoffDelayMs({ firstMs: options.firstRetryIntervalInMilliseconds, factor, ...(cap && cap > 0 ? { maxMs: cap } : {}) }, failedAttempts);
}

/**
 * Splits what a failed orchestration threw into its error message and the orchestrator state (custom status).
 * In 3.5.0 the text before the label is not the error (the executor passes its `orchestratorReturned` flag, so it
 * reads `false`); the error's message is the state's `error`.
 */
export function parseOrchestrationFailure(error: Error): { message: string; state?: Partial<OrchestratorStateShape> } {
  const at = error.message.lastIndexOf(OUT_OF_PROC_DATA_LABEL);
  if (at < 0) return { message: error.message };
  const prefix = error.message.slice(0, at);
  try {
    const state = JSON.parse(error.message.slice(at + OUT_OF_PROC_DATA_LABEL.length)) as Partial<OrchestratorStateShape>;
    return { message: typeof state.error === 'string' && state.error ? state.error : prefix, state };
  } catch {
    return { message: prefix };
  }
}

/**
 * How a failed task reaches the orchestrator. The Durable extension sends a failed activity's `Reason`
 * (`Activity function '<name>' failed: <message>`) and `Details` (the stack) without FailureDetails, and the SDK
 * throws them into the orchestrator as a plain `Error` whose message is `<Reason> \n <Details>`. With an exception
 * properties provider registered, the SDK's activity wrapper sends a JSON payload of the details instead
 * (`error/ExceptionPropertiesProvider.js`), which the extension passes on as FailureDetails: the SDK then throws a
 * `TaskFailedError` carrying them (`error/TaskFailedError.js`).
 */
export interface TaskFailure {
  readonly Reason: string;
  readonly Details: string;
  readonly FailureDetails?: FailureDetails;
}

/** The failure of activity `name`, which threw `error`. */
export function activityFailure(name: string, error: Error): TaskFailure {
  const details = error.stack ?? '';
  const provided = providedFailureDetails(error);
  if (provided) return { Reason: `Activity function '${name}' failed: ${provided.ErrorMessage}`, Details: details, FailureDetails: provided };
  return { Reason: `Activity function '${name}' failed: ${error.message}`, Details: details };
}

/** The failure of a call to a function this host does not have, in the extension's words. */
export function missingFunctionFailure(name: string, kind: 'activity' | 'orchestrator'): TaskFailure {
  return { Reason: `The function '${name}' doesn't exist, is disabled, or is not an ${kind} function.`, Details: '' };
}

/**
 * The failure of a sub-orchestration, as the extension reports it to the parent (the SDK's own test histories,
 * `GetSayHelloWithSubOrchestratorFail`): `Sub orchestrator function '<name>' failed: <message>`. The SDK throws it
 * into the parent as a plain `Error` (`<Reason> \n <Details>`), or, when the child failed with a TaskFailedError
 * (an activity's failure details it did not catch), as a `TaskFailedError` carrying those details.
 */
export function subOrchestrationFailure(name: string, message: string, failureDetails?: FailureDetails): TaskFailure {
  return { Reason: `Sub orchestrator function '${name}' failed: ${message}`, Details: '', ...(failureDetails ? { FailureDetails: failureDetails } : {}) };
}

/** What a child that was terminated reports to its parent (DurableTask.Core sends it as a sub-orchestration failure). */
export function subOrchestrationTerminatedMessage(reason: string): string {
  return `the sub-orchestration was terminated: ${reason}`;
}

/** The output of a failed orchestration, in the extension's form. */
export function orchestratorFailedMessage(name: string, message: string): string {
  return `Orchestrator function '${name}' failed: ${message}`;
}

function providedFailureDetails(error: Error): FailureDetails | undefined {
  try {
    const parsed = JSON.parse(error.message) as Record<string, unknown>;
    if (parsed && typeof parsed.errorType === 'string' && typeof parsed.errorMessage === 'string') {
      return {
        ErrorType: parsed.errorType,
        ErrorMessage: parsed.errorMessage,
        ...(error.stack !== undefined ? { StackTrace: error.stack } : {}),
        IsNonRetriable: parsed.isNonRetriable === true,
        ...(parsed.properties && typeof parsed.properties === 'object'
          ? { Properties: parsed.properties as Record<string, unknown> }
          : {}),
      };
    }
  } catch {
    // Not the provider's payload: an ordinary error message.
  }
  return undefined;
}

/** The task hub name the local host reports to durable clients when host.json names none. */
export const LOCAL_TASK_HUB = 'RuntimeCloudLocalHub';

/**
 * The durable client input (`durableClient/OrchestrationClientInputData.js`) for functions that declare
 * `df.input.durableClient()`. `rpcBaseUrl` (with its trailing slash) switches the SDK's client to the routes the
 * local host serves under it; the webhook-style URLs are what `createCheckStatusResponse` hands to HTTP callers.
 * `key` is a secret of this host process: holders of the URLs may drive instances, as with the Functions system key.
 */
export function durableClientData(origin: string, key: string, taskHub = LOCAL_TASK_HUB) {
  const webhooks = `${origin}/runtime/webhooks/durabletask`;
  const query = `taskHub=${encodeURIComponent(taskHub)}&connection=Storage&code=${key}`;
  const instance = `${webhooks}/instances/INSTANCEID`;
  return {
    taskHubName: taskHub,
    creationUrls: {
      createNewInstancePostUri: `${webhooks}/orchestrators/{functionName}[/{instanceId}]?code=${key}`,
      createAndWaitOnNewInstancePostUri: `${webhooks}/orchestrators/{functionName}[/{instanceId}]?timeout={timeoutInSeconds}&pollingInterval={intervalInSeconds}&code=${key}`,
    },
    managementUrls: {
      id: 'INSTANCEID',
      statusQueryGetUri: `${instance}?${query}`,
      sendEventPostUri: `${instance}/raiseEvent/{eventName}?${query}`,
      terminatePostUri: `${instance}/terminate?reason={text}&${query}`,
      rewindPostUri: `${instance}/rewind?reason={text}&${query}`,
      purgeHistoryDeleteUri: `${instance}?${query}`,
      suspendPostUri: `${instance}/suspend?reason={text}&${query}`,
      resumePostUri: `${instance}/resume?reason={text}&${query}`,
    },
    baseUrl: webhooks,
    requiredQueryStringParameters: `code=${key}`,
    rpcBaseUrl: `${origin}/runtime-cloud/local/durable/rpc/${key}/`,
  };
}

/** A one-line summary of a history event for the local view. */
export function summarizeEvent(event: HistoryEvent): Record<string, unknown> {
  const type = Object.entries(HistoryEventType).find(([, v]) => v === event.EventType)?.[0] ?? String(event.EventType);
  return {
    type,
    at: event.Timestamp,
    ...(event.EventId >= 0 ? { id: event.EventId } : {}),
    ...(event.Name !== undefined ? { name: event.Name } : {}),
    ...(event.TaskScheduledId !== undefined ? { taskId: event.TaskScheduledId } : {}),
    ...(event.TimerId !== undefined ? { timerId: event.TimerId } : {}),
    ...(event.InstanceId !== undefined ? { instanceId: event.InstanceId } : {}),
    ...(event.FireAt !== undefined ? { fireAt: event.FireAt } : {}),
    ...(event.FailureDetails ? { error: `${event.FailureDetails.ErrorType}: ${event.FailureDetails.ErrorMessage}` } : {}),
    ...(event.OrchestrationStatus !== undefined ? { status: event.OrchestrationStatus } : {}),
  };
}
