/**
 * Events benchmark (`npm run bench -- events`): how soon a run's `ProvisioningApplied` is on the events topic once
 * the run has finished, unloaded, on the local host (issue 19: p50 ≤ 150 ms from sent to seen). Nothing is asserted.
 * Options: `--runs N` (default 20; `--quick` 2, one round of each setting).
 *
 * Development promotions of the example project run one at a time (each sent once the one before was seen ending)
 * on a local host in a child process on SQLite, with the runs' plans and applies as runner jobs. Two settings of
 * `RuntimeCloud__Outbox__Publish` are measured in the same run, each on a fresh host: `relay` (the outbox relay's
 * 2 s timer publishes every event: the baseline) and `after-commit` (the invocation that committed the run's end
 * publishes its events right away). They run in the order relay, after-commit, after-commit, relay, so a machine
 * that gets busier or quieter during the bench moves both alike; each setting's figures are of both its rounds.
 *
 *   sent → … → run finished (the commit that writes the events) → published (on the topic) → seen by the bench
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ensureLocalKeys, issueLocalToken } from '../../local/auth/local-issuer';
import { parseConfig } from '../../shared/platform/config/config';
import { startChildHost } from '../support/child-process';
import { writeExampleReferences } from '../support/provisioning';
import { BenchClient, benchRepository, percentiles, quantile, runOneAtATime, type Timeline } from './provisioning.bench';
import { rowCollector, type Row } from './table';

type Publish = 'relay' | 'after-commit';

export async function run(args: string[]): Promise<Row[]> {
  const { values } = parseArgs({ args, options: { runs: { type: 'string' }, quick: { type: 'boolean' } } });
  const runs = Number(values.runs ?? (values.quick === true ? '2' : '20'));
  const work = mkdtempSync(join(tmpdir(), 'rch-bench-events-'));
  const { rows, print } = rowCollector();
  const measured: Record<Publish, Timeline[]> = { relay: [], 'after-commit': [] };
  try {
    process.stderr.write(`events benchmark: ${runs} unloaded runs per round, work dir ${work}\n`);
    // --quick: one round of each, for `npm run bench -- --quick`'s minute.
    const passes: readonly Publish[] = values.quick === true ? ['relay', 'after-commit'] : ['relay', 'after-commit', 'after-commit', 'relay'];
    for (const [index, publish] of passes.entries()) {
      measured[publish].push(...(await unloadedRuns(join(work, `pass-${index}-${publish}`), publish, runs)));
    }
    const relay = measured.relay;
    const afterCommit = measured['after-commit'];
    const latency = (t: Timeline) => t.seen - t.sent;
    const toTopic = (t: Timeline) => t.published - t.finished;
    const intake = (t: Timeline) => t.created - t.sent;
    const running = (t: Timeline) => t.finished - t.created;
    print({ name: 'unloaded sent → ProvisioningApplied seen, after-commit (target p50 ≤ 150 ms)', value: percentiles(afterCommit.map(latency)), note: `${afterCommit.length} runs` });
    print({ name: '  baseline: relay timer only', value: percentiles(relay.map(latency)), note: `${relay.length} runs` });
    print({ name: '  ratio after-commit / relay (p50)', value: `${(quantile(afterCommit.map(latency), 0.5) / quantile(relay.map(latency), 0.5)).toFixed(2)}×` });
    print({ name: 'run finished → event on the topic, after-commit', value: percentiles(afterCommit.map(toTopic)) });
    print({ name: '  baseline: relay timer only', value: percentiles(relay.map(toTopic)) });
    // The rest of sent → seen, the same in both settings: the queue's receiver and the run's own steps.
    print({ name: 'sent → run recorded (queue receive, intake), after-commit', value: percentiles(afterCommit.map(intake)) });
    print({ name: 'run recorded → run finished (plan, apply as runner jobs), after-commit', value: percentiles(afterCommit.map(running)) });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return rows;
}

/** A fresh local host with `publish`; `count` promotions one at a time; their timelines. */
async function unloadedRuns(stateDir: string, publish: Publish, count: number): Promise<Timeline[]> {
  const keys = await ensureLocalKeys(stateDir);
  const repository = await benchRepository(`${stateDir}-source`, stateDir, 0);
  writeExampleReferences(stateDir);
  const config = parseConfig({});
  const issue = (claims: object) => issueLocalToken(keys, { issuer: config.auth.issuer, audience: config.auth.audience, ttlSeconds: 3600, ...claims });
  const tokens = { admin: await issue({ roles: ['PlatformAdmin'] }), operator: await issue({ tenant: 'demo-team', roles: ['Operator'] }) };
  const host = await startChildHost(stateDir, { RuntimeCloud__Outbox__Publish: publish });
  try {
    const measured = await runOneAtATime(new BenchClient([host], tokens), repository, count);
    if (measured.notApplied.length > 0) throw new Error(`runs not applied (${publish}): ${measured.notApplied.join(', ')}`);
    return [...measured.timelines];
  } finally {
    await host.stop();
  }
}
