import { describe, it } from 'vitest';
import { crashUnderLoad, describeReport, expectInvariantsHeld } from '../support/crash-under-load';
import { postgresSkipReason, skipDialect } from '../support/databases';

const SEED = Number(process.env.CRASH_SEED ?? Date.now() % 100_000);

/**
 * Random crashes under load (issue 19), on PostgreSQL: 100 promotions and 500 lease operations in flight, the
 * host SIGKILLed at random moments five times and started again. Every promotion ends with exactly one terminal
 * event; no stack and plan is applied more often than runs ended with it; the lease history has no instant over
 * the pool's capacity or a tenant's quota; no outbox event is lost or on the topic twice. (CRASH_SEED replays a run.)
 */
const skip = skipDialect('postgres');
if (skip) console.warn(`[crash-under-load] SKIPPED: ${postgresSkipReason()}`);

describe.skipIf(skip)('random crashes under load: PostgreSQL', () => {
  it('when the host is SIGKILLed five times under 100 promotions and 500 lease operations, then every invariant holds', async () => {
    console.log(`[crash-under-load] seed ${SEED}`);
    const load = { dialect: 'postgres', promotions: 100, leaseOperations: 500, kills: 5, seed: SEED } as const;
    const report = await crashUnderLoad(load);
    console.log(`[crash-under-load postgres, seed ${SEED}]\n${describeReport(report)}`);
    expectInvariantsHeld(report, load);
  }, 400_000);
});
