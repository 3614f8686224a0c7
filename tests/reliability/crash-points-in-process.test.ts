import { describe, expect, it } from 'vitest';
import { crashEveryPoint, type DriveContext, type TopicMessage } from '../support/crash-points';
import { eventually } from '../support/eventually';
import { addPoolProject, aPoolPromotion, aStackPromotion, POOL_PROJECT, qualifiedExampleStack } from '../support/provisioning';

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

    expect([...report.fired.keys()].sort()).toEqual([...POINTS].sort());
    for (const run of report.runs) {
      const what = `${run.point ?? 'no crash'} (${run.runId})`;
      expect(run.terminal, what).toHaveLength(1);
      expect(new Set(run.eventIds).size, what).toBe(run.eventIds.length);
      expect(run.view.planReceipt, what).toBeDefined();
      expect(run.view.applyReceipt, what).toBeDefined();
      expect(run.applies, what).toBeLessThanOrEqual(1);
      // Killed between its changes and their record, the apply is not known: the run fails, never applied again.
      if (run.point === 'apply:engine-applied') {
        expect(run.terminal[0]?.body.data.code, what).toBe('PROVISIONING.APPLY_INTERRUPTED');
        expect(run.applies, what).toBe(1);
      } else {
        expect([what, run.terminal[0]?.body.type]).toEqual([what, 'ProvisioningApplied']);
        expect(run.applies, what).toBe(1);
      }
    }
  }, 600_000);

  it("when the host is SIGKILLed at the boundaries of a pool resize's intake (its run recorded; its orchestration started, the event not yet settled), then each resize run ends once, applied once", async () => {
    // A pool sized by a stack: the pool project applied on it first; each run then resizes the pool to a new size.
    const pool = { id: 'crash-pool', iacStack: qualifiedExampleStack('pool-workers', POOL_PROJECT) };
    const putPool = (drive: DriveContext, capacity: number) => drive.call('PUT', `/runtime-cloud/pools/${pool.id}`, { kind: 'build', target: 'local', capacity, max: 20, iacStack: pool.iacStack });
    const report = await crashEveryPoint({
      settings: IN_PROCESS,
      hostPoints: ['pool-resize:recorded', 'pool-resize:started'],
      async setup(drive) {
        const promotion = aPoolPromotion(await addPoolProject(drive.example), 'pool-workers');
        await drive.call('POST', '/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { body: promotion, messageId: promotion.promotionId });
        await drive.ended((event) => event.body.data.promotionId === promotion.promotionId);
        await putPool(drive, 2);
      },
      async startRun(i, drive) {
        const capacity = 3 + i;
        await putPool(drive, capacity);
        return (event: TopicMessage) => event.body.data.poolResize?.toCapacity === capacity;
      },
    });
    console.log(`[crash-points pool resize] ${report.fired.size} points fired over ${report.runs.length} runs; ${report.hostStarts} host starts, ${report.hostCrashes} host crashes`);

    expect([...report.fired.keys()].sort()).toEqual(['pool-resize:recorded', 'pool-resize:started']);
    for (const run of report.runs) {
      const what = `${run.point ?? 'no crash'} (${run.runId})`;
      expect(run.terminal.map((m) => m.body.type), what).toEqual(['ProvisioningApplied']);
      expect(run.view.applyReceipt, what).toBeDefined();
      expect(run.applies, what).toBe(1);
    }
  }, 300_000);

  it("when the host is SIGKILLed at the boundaries of a reconciliation's accept (its run recorded; its orchestration started, the proposal not yet marked), and the operator accepts again, then each reconciliation run ends once, applied once", async () => {
    const report = await crashEveryPoint({
      settings: IN_PROCESS,
      hostPoints: ['reconciliation:recorded', 'reconciliation:started'],
      async startRun(i, drive) {
        // An environment applied, then drifted out of band (a bucket's versioning turned off) and scanned: one proposal.
        const environment = `env-reconcile-${i + 1}`;
        const operator = await drive.token({ tenant: 'demo-team', roles: ['Operator'] });
        const promotion = aStackPromotion(drive.example.repository, 'development', { stack: `development-${i + 1}`, environmentId: environment });
        await drive.call('POST', '/runtime-cloud/local/queues/runtime-cloud-promotions/messages', { body: promotion, messageId: promotion.promotionId });
        await drive.ended((event) => event.body.data.promotionId === promotion.promotionId);
        const resources = (await drive.call('GET', `/runtime-cloud/local/cloud/resources?stack=development-${i + 1}&tenant=demo-team`)) as { items: { urn: string; type: string }[] };
        const bucket = resources.items.find((r) => r.type === 'local:storage:Bucket');
        await drive.call('PATCH', `/runtime-cloud/local/cloud/resources/${encodeURIComponent(bucket?.urn ?? '')}`, { versioning: false });
        const proposal = await eventually(async () => {
          await drive.call('POST', `/runtime-cloud/environments/${environment}/scan`, undefined, operator);
          return ((await drive.call('GET', `/runtime-cloud/proposals?status=open&environment=${environment}`, undefined, operator)) as { items: { id: string }[] }).items[0];
        });
        // The accept, again as a client does when its answer was lost with the host.
        const accepted = (await drive.again(() => drive.call('POST', `/runtime-cloud/proposals/${proposal.id}/accept`, undefined, operator))) as { runId: string };
        return (event: TopicMessage) => event.body.data.runId === accepted.runId;
      },
    });
    console.log(`[crash-points reconciliation] ${report.fired.size} points fired over ${report.runs.length} runs; ${report.hostStarts} host starts, ${report.hostCrashes} host crashes`);

    expect([...report.fired.keys()].sort()).toEqual(['reconciliation:recorded', 'reconciliation:started']);
    for (const run of report.runs) {
      const what = `${run.point ?? 'no crash'} (${run.runId})`;
      expect(run.terminal.map((m) => m.body.type), what).toEqual(['ProvisioningApplied']);
      expect(run.view.applyReceipt, what).toBeDefined();
      expect(run.applies, what).toBe(1);
    }
  }, 300_000);
});
