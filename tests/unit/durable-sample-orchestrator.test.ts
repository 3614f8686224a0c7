import * as df from 'durable-functions';
import { describe, expect, it } from 'vitest';
import {
  HistoryEventType,
  orchestrationPayload,
  flattenActions,
  type Action,
  type HistoryEvent,
} from '../../local/durable/durable-protocol';
import { functionsWithTrigger } from '../../local/functions-core/registry';
import { SampleActivities, SampleOrchestrations, type SampleInput, type SampleOutput } from '../support/durable-sample';

type Callback = (payload: unknown, context: df.DummyOrchestrationContext) => Promise<{ isDone: boolean; actions: unknown[][]; output?: unknown; customStatus?: unknown }>;

/**
 * The sample orchestrator under the SDK's DummyOrchestrationContext, with histories written by hand: the same
 * registered function that the local host runs, tested without any host.
 */
describe('sample orchestrator under DummyOrchestrationContext', () => {
  const registration = functionsWithTrigger('orchestrationTrigger').find((r) => r.metadata.name === SampleOrchestrations.main);
  const orchestrator = registration?.callback as unknown as Callback;
  const input: SampleInput = { name: 'Ada', failures: 0, approvalTimeoutMs: 60_000 };
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString();
  const ev = (e: Omit<HistoryEvent, 'IsPlayed' | 'EventId'> & { EventId?: number }): HistoryEvent => ({ EventId: -1, IsPlayed: false, ...e });
  const started = (s: number) => ev({ EventType: HistoryEventType.OrchestratorStarted, Timestamp: at(s) });
  const scheduled = (id: number, name: string, s: number) => ev({ EventType: HistoryEventType.TaskScheduled, EventId: id, Name: name, Timestamp: at(s) });
  const completed = (id: number, result: unknown, s: number) =>
    ev({ EventType: HistoryEventType.TaskCompleted, TaskScheduledId: id, Result: JSON.stringify(result), Timestamp: at(s) });
  const timerCreated = (id: number, s: number) => ev({ EventType: HistoryEventType.TimerCreated, EventId: id, Timestamp: at(s) });
  const timerFired = (id: number, s: number) => ev({ EventType: HistoryEventType.TimerFired, TimerId: id, Timestamp: at(s) });

  async function run(history: HistoryEvent[]) {
    const last = history.map((e) => e.EventType).lastIndexOf(HistoryEventType.OrchestratorStarted);
    const payload = orchestrationPayload({
      history: history.map((e, i) => ({ ...e, IsPlayed: i < last })),
      input,
      instanceId: 'unit-1',
      isReplaying: last > 0,
    });
    const state = await orchestrator(payload, new df.DummyOrchestrationContext());
    return { ...state, flat: flattenActions(state.actions) };
  }

  const kinds = (actions: Action[]) => actions.map((a) => (a.kind === 'activity' ? `${a.kind}:${a.name}${a.retry ? ':retry' : ''}` : a.kind));

  it('when each step completes in turn, then the orchestrator schedules the next and returns the expected output', async () => {
    const history: HistoryEvent[] = [started(0), ev({ EventType: HistoryEventType.ExecutionStarted, Timestamp: at(0), Input: JSON.stringify(input) })];
    let state = await run(history);
    expect(kinds(state.flat)).toEqual([`activity:${SampleActivities.greet}`]);
    expect(state.customStatus).toEqual({ step: 'greeting' });

    history.push(scheduled(0, SampleActivities.greet, 0), started(1), completed(0, 'Hello, Ada', 1));
    state = await run(history);
    expect(kinds(state.flat).slice(1)).toEqual([`activity:${SampleActivities.flaky}:retry`]);

    history.push(scheduled(1, SampleActivities.flaky, 1), started(2), completed(1, 'ok after 0 failures', 2));
    state = await run(history);
    const pause = state.flat[2];
    expect(pause).toMatchObject({ kind: 'timer', isCanceled: false });
    // The timer is measured from the episode's OrchestratorStarted, never from the wall clock.
    expect(pause?.kind === 'timer' && pause.fireAt.toISOString()).toBe(new Date(t0 + 2000 + 200).toISOString());

    history.push(timerCreated(2, 2), started(3), timerFired(2, 3));
    state = await run(history);
    expect(kinds(state.flat).slice(3)).toEqual(['wait-event', 'timer']);
    expect(state.customStatus).toEqual({ step: 'awaiting-approval' });

    history.push(timerCreated(3, 3), started(4), ev({ EventType: HistoryEventType.EventRaised, Name: 'approval', Input: '"approved"', Timestamp: at(4) }));
    state = await run(history);
    // The approval won: the timeout is cancelled in place, and the fan-out follows.
    expect(state.flat[4]).toMatchObject({ kind: 'timer', isCanceled: true });
    expect(kinds(state.flat).slice(5)).toEqual([1, 2, 3].map(() => `activity:${SampleActivities.square}`));

    history.push(scheduled(4, SampleActivities.square, 4), scheduled(5, SampleActivities.square, 4), scheduled(6, SampleActivities.square, 4));
    history.push(started(5), completed(5, 4, 5), started(6), completed(4, 1, 6));
    expect((await run(history)).isDone).toBe(false);
    history.push(started(7), completed(6, 9, 7));
    state = await run(history);
    const expected: SampleOutput = { greeting: 'Hello, Ada', flaky: 'ok after 0 failures', decision: 'approved', squares: [1, 4, 9], sum: 14 };
    expect(state).toMatchObject({ isDone: true, output: expected, customStatus: { step: 'done' } });
  });

  it('when the approval timeout fires first, then the decision is timed-out', async () => {
    const history: HistoryEvent[] = [
      started(0),
      ev({ EventType: HistoryEventType.ExecutionStarted, Timestamp: at(0), Input: JSON.stringify(input) }),
      scheduled(0, SampleActivities.greet, 0),
      started(1),
      completed(0, 'Hello, Ada', 1),
      scheduled(1, SampleActivities.flaky, 1),
      started(2),
      completed(1, 'ok', 2),
      timerCreated(2, 2),
      started(3),
      timerFired(2, 3),
      timerCreated(3, 3),
      started(70),
      timerFired(3, 70),
      scheduled(4, SampleActivities.square, 70),
      scheduled(5, SampleActivities.square, 70),
      scheduled(6, SampleActivities.square, 70),
      started(71),
      completed(4, 1, 71),
      started(72),
      completed(5, 4, 72),
      started(73),
      completed(6, 9, 73),
    ];
    const state = await run(history);
    expect(state).toMatchObject({ isDone: true, output: { decision: 'timed-out', sum: 14 } });
  });
});
