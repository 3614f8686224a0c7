import * as df from 'durable-functions';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ActionType,
  DURABLE_FUNCTIONS_VERSION,
  HistoryEventType,
  orchestrationPayload,
  REPLAY_SCHEMA_VERSION,
  flattenActions,
  parseOrchestrationFailure,
  retryDelayMs,
  type HistoryEvent,
} from '../../local/durable/durable-protocol';
import { functionsWithTrigger } from '../../local/functions-core/registry';
import { SampleOrchestrations } from '../support/durable-sample';

const root = process.cwd();
const load = createRequire(join(root, 'package.json'));
const sdk = (path: string) => load(`durable-functions/lib/src/${path}`) as Record<string, unknown>;

describe('durable-functions protocol the local runner relies on', () => {
  it('when the SDK is loaded, then it is exactly the pinned version, and package.json pins it exactly', () => {
    const installed = JSON.parse(readFileSync(join(root, 'node_modules/durable-functions/package.json'), 'utf8')) as { version: string };
    const ours = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    expect(installed.version).toBe(DURABLE_FUNCTIONS_VERSION);
    expect(ours.dependencies['durable-functions']).toBe(DURABLE_FUNCTIONS_VERSION);
  });

  it('when the SDK enums are read, then history event and action types have the values the runner writes', () => {
    const historyTypes = sdk('history/HistoryEventType').HistoryEventType as Record<string, number>;
    for (const [name, value] of Object.entries(HistoryEventType)) expect({ name, value: historyTypes[name] }).toEqual({ name, value });
    const actionTypes = sdk('actions/ActionType').ActionType as Record<string, number>;
    for (const [name, value] of Object.entries(ActionType)) expect({ name, value: actionTypes[name] }).toEqual({ name, value });
    expect(sdk('orchestrations/ReplaySchema').LatestReplaySchema).toBe(REPLAY_SCHEMA_VERSION);
  });

  it('when an orchestration fails, then the thrown error carries the state whose error the runner records', () => {
    const OrchestrationFailureError = sdk('error/OrchestrationFailureError').OrchestrationFailureError as new (
      e: unknown,
      state: unknown,
    ) => Error;
    const parsed = parseOrchestrationFailure(new OrchestrationFailureError(false, { error: 'boom', customStatus: 'half-way' }));
    expect(parsed).toMatchObject({ message: 'boom', state: { customStatus: 'half-way' } });
  });

  it('when the SDK numbers tasks, then its counter sits where the runner cross-checks it', async () => {
    const registration = functionsWithTrigger('orchestrationTrigger').find((r) => r.metadata.name === SampleOrchestrations.fanOut);
    const context = new df.DummyOrchestrationContext();
    const at = new Date('2026-01-01T00:00:00Z').toISOString();
    const history: HistoryEvent[] = [
      { EventType: HistoryEventType.OrchestratorStarted, EventId: -1, Timestamp: at, IsPlayed: false },
      { EventType: HistoryEventType.ExecutionStarted, EventId: -1, Timestamp: at, IsPlayed: false, Input: '1' },
    ];
    const payload = orchestrationPayload({ history, input: 1, instanceId: 'protocol-1', isReplaying: false });
    const state = (await (registration?.callback as unknown as (p: unknown, c: unknown) => Promise<{ actions: unknown[][] }>)(
      payload,
      context,
    )) as { actions: unknown[][]; schemaVersion: number };
    expect(state.schemaVersion).toBe(REPLAY_SCHEMA_VERSION);
    expect(flattenActions(state.actions).map((a) => a.kind)).toEqual(['activity', 'activity', 'activity']);
    const executor = (context.df as unknown as { taskOrchestratorExecutor?: { sequenceNumber?: unknown } }).taskOrchestratorExecutor;
    expect(executor?.sequenceNumber).toBe(3);
  });

  it('when compound actions repeat an already scheduled task, then it is flattened once, in id order', () => {
    const a = { actionType: ActionType.CallActivity, functionName: 'a', input: '"x"' };
    const t = { actionType: ActionType.CreateTimer, fireAt: new Date(0), isCanceled: true };
    const e = { actionType: ActionType.WaitForExternalEvent, externalEventName: 'go' };
    const flat = flattenActions([[a, { actionType: ActionType.WhenAny, compoundActions: [a, t, { actionType: ActionType.WhenAll, compoundActions: [e] }] }]]);
    expect(flat).toEqual([
      { kind: 'activity', name: 'a', input: '"x"' },
      { kind: 'timer', fireAt: new Date(0), isCanceled: true },
      { kind: 'wait-event', name: 'go' },
    ]);
  });

  it('when retries back off, then each delay is first × coefficient^(n−1), capped by the maximum', () => {
    const options = { firstRetryIntervalInMilliseconds: 50, maxNumberOfAttempts: 5, backoffCoefficient: 2, maxRetryIntervalInMilliseconds: 150 };
    expect([1, 2, 3, 4].map((n) => retryDelayMs(options, n))).toEqual([50, 100, 150, 150]);
    expect(retryDelayMs({ firstRetryIntervalInMilliseconds: 30, maxNumberOfAttempts: 3 }, 3)).toBe(30);
  });
});
