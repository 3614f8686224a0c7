/**
 * The fleet part of `npm run bench -- drift`: a full drift scan of many environments on the local host's own
 * stores (a SQLite file, or a PostgreSQL schema with `--store postgres`, and Azurite's Table server in this
 * process), through the inventory service as the `driftScan` timer runs it: `scanDue()` with the default
 * concurrency of 8, observing the local cloud. Every environment has its resources in the one local cloud target
 * `local`, as the local engine puts them; 2% of the resources are tampered with, so about a third of the
 * environments are drifted and get a proposal.
 *
 * Two rounds are timed: the first writes every observed resource to Table storage and opens the proposals; the
 * second (one interval later, nothing changed) reads, diffs and writes nothing but scan records, which is the
 * steady state of a fleet.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTableServer } from '../../local/azurite/table-server';
import { createSqlStore, type SqlStore } from '../../shared/platform/sql/database';
import { migrateToLatest } from '../../shared/platform/sql/migrations';
import { ManualClock } from '../../shared/platform/time/clock';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { inventoryOver, specificationApplied, urnOf, type TestResource } from '../support/inventory';
import { adminQuery } from '../support/postgres-admin';
import type { Print } from './table';

export interface ScanBenchOptions {
  readonly environments: number;
  readonly resources: number;
  readonly store: 'sqlite' | 'postgres';
  readonly postgresUrl: string;
}


export async function runScanBench(print: Print, options: ScanBenchOptions): Promise<void> {
  const { store, drop } = await openStore(options);
  const tables = await startTableServer();
  try {
    const clock = new ManualClock('2026-06-01T00:00:00Z');
    const { inventory } = inventoryOver(store, tables.connectionString, clock, { scanConcurrency: 8 });
    const t0 = performance.now();
    for (let e = 0; e < options.environments; e++) {
      const stack = `bench-${e}`;
      const resources = environmentResources(options.resources);
      await insertCloudResources(store, stack, resources, e);
      await inventory.recordSpecification({ id: `event-${e}`, time: clock.now().toISOString(), data: specificationApplied({ id: `env-${e}`, stack }, resources) });
    }
    process.stderr.write(`  set-up: ${options.environments} environments × ${options.resources} resources in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);

    for (const round of ['first scan (writes the inventory)', 'rescan, nothing changed']) {
      clock.advance(300_000);
      const started = performance.now();
      const records = await inventory.scanDue();
      const seconds = (performance.now() - started) / 1000;
      const completed = records.filter((r) => r.outcome === 'completed');
      const drifted = completed.filter((r) => r.driftStatus === 'drifted').length;
      const written = completed.reduce((sum, r) => sum + (r.written ?? 0), 0);
      const perMinute = (completed.length / seconds) * 60;
      print({
        name: `${options.store}: ${round}, environments per minute (target ≥ 1,000)`,
        value: perMinute.toFixed(0),
        note: `${completed.length}/${records.length} completed in ${seconds.toFixed(1)} s (${(completed.length / seconds).toFixed(1)}/s), ${drifted} drifted, ${written.toLocaleString('en-US')} rows written, ${((completed.length * options.resources) / seconds).toFixed(0)} resources/s`,
      });
    }
  } finally {
    await tables.close();
    await drop();
  }
}

function environmentResources(count: number): TestResource[] {
  return Array.from({ length: count }, (_, i) => ({
    name: `res-${i}`,
    type: i % 2 === 0 ? 'local:compute:Service' : 'local:storage:Bucket',
    properties: { name: `res-${i}`, size: 'small', replicas: 1 + (i % 3), tags: { owner: `team-${i % 7}` } },
  }));
}

/** The environment's resources as an apply left them, inserted in bulk; every 50th is tampered with in one in three environments. */
async function insertCloudResources(store: SqlStore, stack: string, resources: readonly TestResource[], environment: number): Promise<void> {
  const now = Date.now();
  const rows = resources.map((r, i) => ({
    target: 'local',
    id: `lcr-${stack}-${i}`,
    // The scope of the tenant `specificationApplied` records the environment for: a scan reads that scope only.
    scope: 'tenant-a',
    urn: urnOf(stack, r),
    type: r.type,
    properties: JSON.stringify(environment % 3 === 0 && i % 50 === 0 ? { ...r.properties, size: 'large' } : r.properties),
    created_at: now,
    updated_at: now,
  }));
  for (let i = 0; i < rows.length; i += 100) await store.db.insertInto('local_cloud_resources').values(rows.slice(i, i + 100)).execute();
}

async function openStore(options: ScanBenchOptions): Promise<{ store: SqlStore; drop: () => Promise<void> }> {
  if (options.store === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'rch-scan-bench-'));
    const store = createSqlStore({ dialect: 'sqlite', connection: join(dir, 'store.sqlite') });
    await migrateToLatest(store.db, 'sqlite', allMigrations);
    return {
      store,
      async drop() {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const schema = `scan_bench_${process.pid}`;
  await adminQuery(options.postgresUrl, `create schema if not exists ${schema}`);
  const store = createSqlStore({ dialect: 'postgres', connection: options.postgresUrl, postgresSchema: schema });
  await migrateToLatest(store.db, 'postgres', allMigrations);
  return {
    store,
    async drop() {
      await store.close();
      await adminQuery(options.postgresUrl, `drop schema if exists ${schema} cascade`);
    },
  };
}
