import { describe, it } from 'vitest';
import { crashEveryPoint, expectEachRunEndedOnce } from '../support/crash-points';

/**
 * Every step boundary is a crash point (issue 19), with plans and applies as runner jobs (the product's default):
 * the host is SIGKILLed at each boundary of a run's steps in turn, and separately a runner agent at each of its own
 * (claimed a job; evaluated a plan or applied, outcome not yet posted). Every run ends with exactly one terminal
 * event and its receipts, and the local cloud began its apply at most once.
 */
const HOST_POINTS = [
  'intake:recorded',
  'intake:started',
  'durable:activity-started:provisioningRunPlan',
  'durable:activity-returned:provisioningRunPlan',
  'durable:episode-decided:provisioningRun#2',
  'runner-result:accepted',
  'runner-result:woken',
];
const AGENT_POINTS = ['agent:claimed', 'agent:evaluated:plan', 'agent:evaluated:apply'];

describe('crash points: runner jobs', () => {
  it(`when the host is SIGKILLed at each of ${HOST_POINTS.length} boundaries and an agent at each of ${AGENT_POINTS.length}, then every run ends once, with its receipts, applied at most once`, async () => {
    const report = await crashEveryPoint({ settings: { RuntimeCloud__IaC__Execution: 'runner-jobs', RuntimeCloud__Local__Runners: '2' }, hostPoints: HOST_POINTS, agentPoints: AGENT_POINTS });
    console.log(`[crash-points runner-jobs] ${report.fired.size} points fired over ${report.runs.length} runs; ${report.hostStarts} host starts, ${report.hostCrashes} host crashes`);

    // An agent killed after its apply and before its outcome reached the host: what it changed is not known, so
    // the run fails RUNNER_LOST (with a receipt) and is never applied again. Everywhere else the run applies.
    expectEachRunEndedOnce(report, [...HOST_POINTS, ...AGENT_POINTS], (point) => (point === 'agent:evaluated:apply' ? ['ProvisioningFailed', 'PROVISIONING.RUNNER_LOST'] : ['ProvisioningApplied', undefined]));
  }, 600_000);
});
