import { describe, it } from 'vitest';
import { crashEveryPoint, expectEachRunEndedOnce } from '../support/crash-points';

/**
 * Every step boundary of a run is a crash point (issue 19), with the engine in the host: the host is SIGKILLed at
 * each boundary of a run's durable steps in turn (one run per point), including "engine applied, receipt not yet
 * recorded", and started again on the same store. Every run ends with exactly one terminal event and its receipts,
 * and the local cloud began its apply at most once.
 */
const POINTS = [
  'intake:recorded',
  'durable:episode-decided:provisioningRun',
  'durable:episode-committed:provisioningRun',
  'intake:started',
  'durable:activity-started:provisioningRunPlan',
  'durable:activity-returned:provisioningRunPlan',
  'durable:activity-recorded:provisioningRunPlan',
  'durable:episode-decided:provisioningRun#2',
  'durable:activity-started:provisioningRunApply',
  'apply:engine-applied',
  'durable:activity-returned:provisioningRunApply',
  'durable:activity-recorded:provisioningRunApply',
  'durable:episode-decided:provisioningRun#3',
];

const IN_PROCESS = { RuntimeCloud__IaC__Execution: 'in-process', RuntimeCloud__Local__Runners: '0' };

describe('crash points: the engine in the host', () => {
  it(`when the host is SIGKILLed at each of ${POINTS.length} step boundaries of a run and started again, then every run ends once, with its receipts, applied at most once`, async () => {
    const report = await crashEveryPoint({ settings: IN_PROCESS, hostPoints: POINTS });
    console.log(`[crash-points in-process] ${report.fired.size} points fired over ${report.runs.length} runs; ${report.hostStarts} host starts, ${report.hostCrashes} host crashes`);

    // Killed between its changes and their record, the apply is not known: the run fails, never applied again.
    expectEachRunEndedOnce(report, POINTS, (point) => (point === 'apply:engine-applied' ? ['ProvisioningFailed', 'PROVISIONING.APPLY_INTERRUPTED'] : ['ProvisioningApplied', undefined]));
  }, 600_000);
});
