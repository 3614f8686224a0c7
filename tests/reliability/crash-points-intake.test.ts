import { describe, it } from 'vitest';
import { crashEveryPoint, expectEachRunEndedOnce, type DriveContext, type TopicMessage } from '../support/crash-points';
import { eventually } from '../support/eventually';
import { addPoolProject, aPoolPromotion, aStackPromotion, POOL_PROJECT, qualifiedExampleStack } from '../support/provisioning';

/**
 * The runs that do not come from a promotion (issue 19): a pool resize's (from the capacity module's event) and a
 * reconciliation's (an operator accepting a drift proposal). Their runs then take a promotion's durable steps, whose
 * crash points crash-points-in-process.test.ts covers; here the host is SIGKILLed at the boundaries of their intake.
 */
const IN_PROCESS = { RuntimeCloud__IaC__Execution: 'in-process', RuntimeCloud__Local__Runners: '0' };

describe('crash points: pool resizes and reconciliations', () => {
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

    expectEachRunEndedOnce(report, ['pool-resize:recorded', 'pool-resize:started'], () => ['ProvisioningApplied', undefined]);
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

    expectEachRunEndedOnce(report, ['reconciliation:recorded', 'reconciliation:started'], () => ['ProvisioningApplied', undefined]);
  }, 300_000);
});
