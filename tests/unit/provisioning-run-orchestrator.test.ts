import * as df from 'durable-functions';
import { describe, expect, it } from 'vitest';
import { HistoryEventType, orchestrationPayload, flattenActions, type Action, type HistoryEvent } from '../../local/durable/durable-protocol';
import { functionsWithTrigger } from '../../local/functions-core/registry';
import { ProvisioningActivities } from '../../functions/provisioning/provisioning-run.activities';
import { POLICY_POLLS_PER_EXECUTION, ProvisioningOrchestrations, STACK_WAITS_PER_EXECUTION, type RunOrchestrationInput } from '../../functions/provisioning/provisioning-run.orchestrator';
import type { RunStep } from '../../shared/provisioning/provisioning.service';

type Callback = (payload: unknown, context: df.DummyOrchestrationContext) => Promise<{ isDone: boolean; actions: unknown[][]; output?: unknown; customStatus?: unknown }>;

/**
 * The provisioning run orchestrator under the SDK's DummyOrchestrationContext with histories written by hand: what it
 * waits for after each answer of its activities, deterministically (time from the history, durations from the input).
 */
describe('provisioning run orchestrator', () => {
  const registration = functionsWithTrigger('orchestrationTrigger').find((r) => r.metadata.name === ProvisioningOrchestrations.run);
  const orchestrator = registration?.callback as unknown as Callback;
  const input: RunOrchestrationInput = { runId: 'run_1', timings: { approvalTimeoutMs: 3_600_000, lockRetryMs: 1000, policyPollMs: 5000, policyTimeoutMs: 600_000 } };
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  const at = (seconds: number) => new Date(t0 + seconds * 1000).toISOString();
  const ev = (e: Omit<HistoryEvent, 'IsPlayed' | 'EventId'> & { EventId?: number }): HistoryEvent => ({ EventId: -1, IsPlayed: false, ...e });
  const started = (s: number) => ev({ EventType: HistoryEventType.OrchestratorStarted, Timestamp: at(s) });
  const begin = () => [started(0), ev({ EventType: HistoryEventType.ExecutionStarted, Timestamp: at(0), Input: JSON.stringify(input) })];
  const scheduled = (id: number, name: string, s: number) => ev({ EventType: HistoryEventType.TaskScheduled, EventId: id, Name: name, Timestamp: at(s) });
  const completed = (id: number, result: RunStep, s: number) => ev({ EventType: HistoryEventType.TaskCompleted, TaskScheduledId: id, Result: JSON.stringify(result), Timestamp: at(s) });
  const failed = (id: number, s: number) =>
    ev({ EventType: HistoryEventType.TaskFailed, TaskScheduledId: id, Reason: 'the store is down', FailureDetails: { ErrorType: 'Error', ErrorMessage: 'the store is down', StackTrace: '' }, Timestamp: at(s) });
  const timerCreated = (id: number, s: number) => ev({ EventType: HistoryEventType.TimerCreated, EventId: id, Timestamp: at(s) });
  const timerFired = (id: number, s: number) => ev({ EventType: HistoryEventType.TimerFired, TimerId: id, Timestamp: at(s) });

  async function run(history: HistoryEvent[], runInput: RunOrchestrationInput = input) {
    const last = history.map((e) => e.EventType).lastIndexOf(HistoryEventType.OrchestratorStarted);
    const payload = orchestrationPayload({ history: history.map((e, i) => ({ ...e, IsPlayed: i < last })), input: runInput, instanceId: runInput.runId, isReplaying: last > 0 });
    const state = await orchestrator(payload, new df.DummyOrchestrationContext());
    return { ...state, flat: flattenActions(state.actions) };
  }
  const describeAction = (a: Action | undefined) =>
    a?.kind === 'activity' ? `${a.name} ${a.input ?? ''}` : a?.kind === 'timer' ? `timer ${a.fireAt.toISOString()}${a.isCanceled ? ' canceled' : ''}` : a?.kind;

  it('when the plan needs no approval, then the orchestrator applies next and returns the final step', async () => {
    const history = begin();
    expect(describeAction((await run(history)).flat[0])).toBe(`${ProvisioningActivities.plan} {"runId":"run_1"}`);

    history.push(scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, { outcome: 'applying' }, 1));
    expect(describeAction((await run(history)).flat[1])).toBe(`${ProvisioningActivities.apply} {"runId":"run_1"}`);

    history.push(scheduled(1, ProvisioningActivities.apply, 1), started(2), completed(1, { outcome: 'ended', state: 'applied' }, 2));
    expect(await run(history)).toMatchObject({ isDone: true, output: { outcome: 'ended', state: 'applied' } });
  });

  it("when a plan's runner job is collected with its apply job already dispatched, then the orchestrator waits for that job, not the apply activity", async () => {
    const raised = (s: number) => ev({ EventType: HistoryEventType.EventRaised, Name: 'runner-result', Input: '{}', Timestamp: at(s) });
    const planJob: RunStep = { outcome: 'running', jobId: 'job_plan', kind: 'plan', until: at(60) };
    const applyJob: RunStep = { outcome: 'running', jobId: 'job_apply', kind: 'apply', until: at(120) };
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, planJob, 1)];
    expect((await run(history)).flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(60)}`]);

    history.push(timerCreated(1, 1), started(2), raised(2));
    expect(describeAction((await run(history)).flat[3])).toBe(`${ProvisioningActivities.collectJob} {"runId":"run_1","jobId":"job_plan"}`);

    // The collect answers with the apply job running: no apply activity, a wait for the apply job's result.
    history.push(scheduled(2, ProvisioningActivities.collectJob, 2), started(3), completed(2, applyJob, 3));
    const waiting = await run(history);
    expect(waiting.flat.slice(4).map(describeAction)).toEqual(['wait-event', `timer ${at(120)}`]);

    history.push(timerCreated(3, 3), started(4), raised(4));
    expect(describeAction((await run(history)).flat[6])).toBe(`${ProvisioningActivities.collectJob} {"runId":"run_1","jobId":"job_apply"}`);

    history.push(scheduled(4, ProvisioningActivities.collectJob, 4), started(5), completed(4, { outcome: 'ended', state: 'applied' }, 5));
    expect(await run(history)).toMatchObject({ isDone: true, output: { outcome: 'ended', state: 'applied' } });
  });

  it("when the result event carries the step its endpoint collected, then the orchestrator goes on with it and schedules no collect; an earlier job's event is collected", async () => {
    const raised = (s: number, payload: object) => ev({ EventType: HistoryEventType.EventRaised, Name: 'runner-result', Input: JSON.stringify(payload), Timestamp: at(s) });
    const planJob: RunStep = { outcome: 'running', jobId: 'job_plan', kind: 'plan', until: at(60) };
    const applyJob: RunStep = { outcome: 'running', jobId: 'job_apply', kind: 'apply', until: at(120) };
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, planJob, 1), timerCreated(1, 1)];

    // The plan job's endpoint collected it and dispatched the apply job: the run waits for the apply job at once.
    history.push(started(2), raised(2, { jobId: 'job_plan', step: applyJob }));
    expect((await run(history)).flat.slice(3).map(describeAction)).toEqual(['wait-event', `timer ${at(120)}`]);

    // A late event of the plan job, carrying its step, says nothing of the apply job: that one is collected.
    history.push(timerCreated(2, 2), started(3), raised(3, { jobId: 'job_plan', step: { outcome: 'ended', state: 'applied' } }));
    expect(describeAction((await run(history)).flat[5])).toBe(`${ProvisioningActivities.collectJob} {"runId":"run_1","jobId":"job_apply"}`);

    history.push(scheduled(3, ProvisioningActivities.collectJob, 3), started(4), completed(3, applyJob, 4), timerCreated(4, 4));
    history.push(started(5), raised(5, { jobId: 'job_apply', step: { outcome: 'ended', state: 'applied' } }));
    expect(await run(history)).toMatchObject({ isDone: true, output: { outcome: 'ended', state: 'applied' } });
  });

  it(`when a run waited ${STACK_WAITS_PER_EXECUTION} times for its stack, then it continues as new with its input, so a long wait keeps a short history`, async () => {
    // Arrange: behind an apply the run's apply step answers "waiting" each time its 1 s timer fires.
    const busy: RunStep = { outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack: 's', heldBy: 'run_0' } };
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, { outcome: 'applying' }, 1)];
    let id = 1;
    let s = 1;
    for (let i = 0; i <= STACK_WAITS_PER_EXECUTION; i++, s += 2) {
      history.push(scheduled(id, ProvisioningActivities.apply, s), started(s + 1), completed(id, busy, s + 1));
      if (i < STACK_WAITS_PER_EXECUTION) history.push(timerCreated(id + 1, s + 1), started(s + 2), timerFired(id + 1, s + 2));
      id += 2;
    }

    // Act
    const continued = await run(history);
    const fewer = await run(history.slice(0, -6));

    // Assert
    const action = continued.flat.at(-1);
    expect(continued.isDone).toBe(true);
    expect(action?.kind === 'continue-as-new' && JSON.parse(action.input ?? '{}')).toEqual(input);
    expect(fewer.flat.at(-1)?.kind).not.toBe('continue-as-new');
  });

  it('when the stack is busy, then the orchestrator waits for the stack-free event racing a timer of lockRetryMs; when the timer fires it asks again', async () => {
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, { outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack: 's', heldBy: 'run_0' } }, 1)];
    expect((await run(history)).flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(2)}`]);

    history.push(timerCreated(1, 1), started(2), timerFired(1, 2));
    expect(describeAction((await run(history)).flat[3])).toBe(`${ProvisioningActivities.plan} {"runId":"run_1"}`);
  });

  it('when the stack-free event comes before the retry timer, then the timer is canceled and the run asks for the stack at once', async () => {
    const input60: RunOrchestrationInput = { ...input, timings: { ...input.timings, lockRetryMs: 60_000 } };
    const history = [
      started(0),
      ev({ EventType: HistoryEventType.ExecutionStarted, Timestamp: at(0), Input: JSON.stringify(input60) }),
      scheduled(0, ProvisioningActivities.plan, 0),
      started(1),
      completed(0, { outcome: 'waiting', waitingFor: { kind: 'stack-lock', stack: 's', heldBy: 'run_0' } }, 1),
      timerCreated(1, 1),
      started(3),
      ev({ EventType: HistoryEventType.EventRaised, Name: 'stack-free', Input: '{}', Timestamp: at(3) }),
    ];
    const woken = await run(history, input60);
    expect(woken.flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(61)} canceled`, `${ProvisioningActivities.plan} {"runId":"run_1"}`]);
  });

  it('when approval is required and none comes, then the timeout of approvalTimeoutMs wins and the run is told it timed out', async () => {
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, { outcome: 'awaiting-approval', planDigest: 'sha256:d' }, 1)];
    const waiting = await run(history);
    expect(waiting.flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(3601)}`]);

    history.push(timerCreated(1, 1), started(3601), timerFired(1, 3601));
    expect(describeAction((await run(history)).flat[3])).toBe(`${ProvisioningActivities.afterApproval} {"runId":"run_1","timedOut":true}`);
  });

  it('when the approval event comes first, then the timer is canceled and the run goes on to apply', async () => {
    const history = [
      ...begin(),
      scheduled(0, ProvisioningActivities.plan, 0),
      started(1),
      completed(0, { outcome: 'awaiting-approval', planDigest: 'sha256:d' }, 1),
      timerCreated(1, 1),
      started(5),
      ev({ EventType: HistoryEventType.EventRaised, Name: 'approval', Input: JSON.stringify({ decision: 'approved' }), Timestamp: at(5) }),
    ];
    const decided = await run(history);
    expect(decided.flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(3601)} canceled`, `${ProvisioningActivities.afterApproval} {"runId":"run_1","timedOut":false}`]);

    history.push(scheduled(2, ProvisioningActivities.afterApproval, 5), started(6), completed(2, { outcome: 'applying' }, 6));
    expect(describeAction((await run(history)).flat[4])).toBe(`${ProvisioningActivities.apply} {"runId":"run_1"}`);
  });

  it("when the plan expires before the approval deadline, then an expiry timer races too; when it fires the run is asked where it stands", async () => {
    const expiring: RunStep = { outcome: 'awaiting-approval', planDigest: 'sha256:d', planExpiresAt: at(601) };
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), completed(0, expiring, 1)];
    expect((await run(history)).flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(3601)}`, `timer ${at(601)}`]);

    history.push(timerCreated(1, 1), timerCreated(2, 1), started(601), timerFired(2, 601));
    const expired = await run(history);
    expect(expired.flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(3601)} canceled`, `timer ${at(601)}`, `${ProvisioningActivities.afterApproval} {"runId":"run_1","timedOut":false}`]);
  });

  it('when a plan goes stale, then the run waits for a replan or rejection racing a fresh deadline; after a replan it plans again', async () => {
    const history = [
      ...begin(),
      scheduled(0, ProvisioningActivities.plan, 0),
      started(1),
      completed(0, { outcome: 'awaiting-approval', planDigest: 'sha256:d', planExpiresAt: at(601) }, 1),
      timerCreated(1, 1),
      timerCreated(2, 1),
      started(601),
      timerFired(2, 601),
      scheduled(3, ProvisioningActivities.afterApproval, 601),
      started(602),
      completed(3, { outcome: 'stale', reason: 'the plan expired' }, 602),
    ];
    const stale = await run(history);
    expect(stale.flat.slice(5).map(describeAction)).toEqual(['wait-event', `timer ${at(4202)}`]);
    expect(stale.isDone).toBe(false);

    history.push(timerCreated(4, 602), started(700), ev({ EventType: HistoryEventType.EventRaised, Name: 'approval', Input: JSON.stringify({ decision: 'replan' }), Timestamp: at(700) }));
    const woken = await run(history);
    expect(woken.flat.slice(5).map(describeAction)).toEqual(['wait-event', `timer ${at(4202)} canceled`, `${ProvisioningActivities.afterApproval} {"runId":"run_1","timedOut":false}`]);

    history.push(scheduled(5, ProvisioningActivities.afterApproval, 700), started(701), completed(5, { outcome: 'planning' }, 701));
    expect(describeAction((await run(history)).flat[8])).toBe(`${ProvisioningActivities.plan} {"runId":"run_1"}`);
  });

  it('when an approved plan goes stale at its apply and nobody replans it in time, then the deadline fails it through afterApproval', async () => {
    const history = [
      ...begin(),
      scheduled(0, ProvisioningActivities.plan, 0),
      started(1),
      completed(0, { outcome: 'applying' }, 1),
      scheduled(1, ProvisioningActivities.apply, 1),
      started(2),
      completed(1, { outcome: 'stale', reason: 'the state moved' }, 2),
    ];
    expect((await run(history)).flat.slice(2).map(describeAction)).toEqual(['wait-event', `timer ${at(3602)}`]);

    history.push(timerCreated(2, 2), started(3602), timerFired(2, 3602));
    expect(describeAction((await run(history)).flat[4])).toBe(`${ProvisioningActivities.afterApproval} {"runId":"run_1","timedOut":true}`);
  });

  describe('a plan waiting for its policy check', () => {
    const pending: RunStep = { outcome: 'awaiting-policy', checkId: 'chk-1', planDigest: 'sha256:d', since: at(1) };
    /** The input with a policy wait of `timeoutS` seconds polled every 5 s, and its history up to the plan's answer at 1 s. */
    const policyRun = (timeoutS: number, extra: Partial<RunOrchestrationInput> = {}) => {
      const policyInput: RunOrchestrationInput = { ...input, timings: { ...input.timings, policyPollMs: 5000, policyTimeoutMs: timeoutS * 1000 }, ...extra };
      const history = [
        started(0),
        ev({ EventType: HistoryEventType.ExecutionStarted, Timestamp: at(0), Input: JSON.stringify(policyInput) }),
        scheduled(0, ProvisioningActivities.plan, 0),
        started(1),
        completed(0, pending, 1),
      ];
      return { policyInput, history };
    };
    /** One poll whose timer (id `id`) fires at `s` and whose ask (id `id + 1`) answers `answer` a second later. */
    const poll = (id: number, created: number, s: number, answer: RunStep = pending) => [
      timerCreated(id, created),
      started(s),
      timerFired(id, s),
      scheduled(id + 1, ProvisioningActivities.checkPolicy, s),
      started(s + 1),
      completed(id + 1, answer, s + 1),
    ];

    it('when the plan awaits a policy check, then the orchestrator asks again on a timer of policyPollMs, and once the check allows it, it applies', async () => {
      // Arrange
      const { policyInput, history } = policyRun(600);

      // Act
      const waiting = await run(history, policyInput);
      history.push(timerCreated(1, 1), started(6), timerFired(1, 6));
      const polled = await run(history, policyInput);
      history.push(scheduled(2, ProvisioningActivities.checkPolicy, 6), started(7), completed(2, { outcome: 'applying' }, 7));
      const allowed = await run(history, policyInput);

      // Assert
      expect(waiting.flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(6)}`]);
      expect(waiting.customStatus).toEqual({ runId: 'run_1', waitingFor: 'policy', checkId: 'chk-1', planDigest: 'sha256:d' });
      expect(describeAction(polled.flat[3])).toBe(`${ProvisioningActivities.checkPolicy} {"runId":"run_1","timedOut":false}`);
      expect(describeAction(allowed.flat[4])).toBe(`${ProvisioningActivities.apply} {"runId":"run_1"}`);
    });

    it('when the check stays pending, then the last poll fires at the deadline and the ask is told it timed out; the run ends with its answer', async () => {
      // Arrange: the wait began at 1 s with a deadline 12 s later; polls at 6 s and 11 s find the check pending.
      const { policyInput, history } = policyRun(12);
      history.push(...poll(1, 1, 6), ...poll(3, 7, 11));

      // Act
      const last = await run(history, policyInput);
      history.push(timerCreated(5, 12), started(13), timerFired(5, 13));
      const timedOut = await run(history, policyInput);
      history.push(scheduled(6, ProvisioningActivities.checkPolicy, 13), started(14), completed(6, { outcome: 'ended', state: 'failed' }, 14));
      const ended = await run(history, policyInput);

      // Assert
      expect(describeAction(last.flat.at(-1))).toBe(`timer ${at(13)}`);
      expect(describeAction(timedOut.flat.at(-1))).toBe(`${ProvisioningActivities.checkPolicy} {"runId":"run_1","timedOut":true}`);
      expect(ended).toMatchObject({ isDone: true, output: { outcome: 'ended', state: 'failed' } });
    });

    it('when the run is rejected meanwhile, then the approval event cancels the poll timer, the run is asked at once, and the orchestration ends', async () => {
      // Arrange
      const { policyInput, history } = policyRun(600);
      history.push(timerCreated(1, 1), started(3), ev({ EventType: HistoryEventType.EventRaised, Name: 'approval', Input: JSON.stringify({ decision: 'rejected' }), Timestamp: at(3) }));

      // Act
      const woken = await run(history, policyInput);
      history.push(scheduled(2, ProvisioningActivities.checkPolicy, 3), started(4), completed(2, { outcome: 'ended', state: 'rejected' }, 4));
      const ended = await run(history, policyInput);

      // Assert
      expect(woken.flat.slice(1).map(describeAction)).toEqual(['wait-event', `timer ${at(6)} canceled`, `${ProvisioningActivities.checkPolicy} {"runId":"run_1","timedOut":false}`]);
      expect(ended).toMatchObject({ isDone: true, output: { outcome: 'ended', state: 'rejected' } });
    });

    it(`when ${POLICY_POLLS_PER_EXECUTION} polls found the check pending, then the orchestration continues as new with the check and its deadline, which the new execution keeps`, async () => {
      // Arrange: a day-long wait polled every 5 s.
      const { policyInput, history } = policyRun(86_400);
      let s = 1;
      for (let i = 0; i < POLICY_POLLS_PER_EXECUTION; i++, s += 6) history.push(...poll(1 + 2 * i, s, s + 5));

      // Act
      const continued = await run(history, policyInput);
      const carried: RunOrchestrationInput = { ...policyInput, policyWait: { checkId: 'chk-1', deadline: at(86_401) } };
      const next = [
        started(s),
        ev({ EventType: HistoryEventType.ExecutionStarted, Timestamp: at(s), Input: JSON.stringify(carried) }),
        scheduled(0, ProvisioningActivities.plan, s),
        started(s + 1),
        completed(0, pending, s + 1),
      ];
      const resumed = await run(next, carried);
      const nearDeadline = { ...carried, policyWait: { checkId: 'chk-1', deadline: at(s + 3) } };
      const withInput = (history: HistoryEvent[]) => history.map((e) => (e.EventType === HistoryEventType.ExecutionStarted ? { ...e, Input: JSON.stringify(nearDeadline) } : e));
      const late = await run(withInput(next), nearDeadline);
      const otherCheck = await run(
        withInput(next).map((e) => (e.EventType === HistoryEventType.TaskCompleted ? { ...e, Result: JSON.stringify({ ...pending, checkId: 'chk-2' }) } : e)),
        nearDeadline,
      );

      // Assert
      const action = continued.flat.at(-1);
      expect(continued.isDone).toBe(true);
      expect(action?.kind).toBe('continue-as-new');
      expect(action?.kind === 'continue-as-new' && JSON.parse(action.input ?? '{}')).toEqual(carried);
      // The new execution polls as before; a carried deadline nearer than the next poll is its last timer, but only
      // for the check it was carried for.
      expect(describeAction(resumed.flat.at(-1))).toBe(`timer ${at(s + 6)}`);
      expect(describeAction(late.flat.at(-1))).toBe(`timer ${at(s + 3)}`);
      expect(describeAction(otherCheck.flat.at(-1))).toBe(`timer ${at(s + 6)}`);
    });
  });

  it('when a step fails after all its retries, then the orchestrator fails the run through the fail activity', async () => {
    // Four attempts of the plan, each failure followed by the retry timer the SDK expects from the host (after the
    // last one too: the SDK gives up when that timer fires).
    const history = [...begin(), scheduled(0, ProvisioningActivities.plan, 0), started(1), failed(0, 1)];
    let seconds = 1;
    for (const id of [1, 3, 5]) {
      history.push(timerCreated(id, seconds), started(++seconds), timerFired(id, seconds), scheduled(id + 1, ProvisioningActivities.plan, seconds), started(++seconds), failed(id + 1, seconds));
    }
    history.push(timerCreated(7, seconds), started(++seconds), timerFired(7, seconds));

    const state = await run(history);

    const fail = state.flat.find((a) => a.kind === 'activity' && a.name === ProvisioningActivities.fail);
    expect(fail?.kind === 'activity' && JSON.parse(fail.input ?? '{}')).toMatchObject({ runId: 'run_1', reason: expect.stringContaining('the store is down') });
    expect(state.isDone).toBe(false);
  });
});
