import Database from 'better-sqlite3';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { HistoryEventType, type HistoryEvent } from '../../local/durable/durable-protocol';
import { startChildHost, type RunningChild } from '../support/child-process';

const APP = join(__dirname, '..', 'apps', 'durable-sample');

/**
 * The parent/child handoff across SIGKILLs of a `runtime-cloud start --app` host, at the local host's crash points:
 * once before the parent's episode that creates the child commits, once right after the child's last episode (which
 * hands its output to the parent) committed. A host restarted on the same store finishes both, and the child was
 * created once and its output delivered once.
 */
describe('local Durable sub-orchestrations across host crashes', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-durable-sub-crash-'));
  const markers = join(stateDir, 'crash-markers');
  mkdirSync(markers);
  const env = {
    RuntimeCloud__Faults__CrashAt: 'durable:episode-decided:ParentOfWaitingChild,durable:episode-committed:WaitingChild#2',
    RuntimeCloud__Faults__CrashMarkers: markers,
    // A killed host's leases lapse in a second, so the next host takes its instances over at once.
    RuntimeCloud__Local__DurableLeaseSeconds: '1',
  };
  const hosts: RunningChild[] = [];
  const start = async () => {
    const host = await startChildHost(stateDir, env, 60_000, ['--app', APP]);
    hosts.push(host);
    return host;
  };
  const exited = (host: RunningChild) =>
    new Promise<void>((resolve) => (host.child.exitCode !== null || host.child.signalCode !== null ? resolve() : host.child.once('exit', () => resolve())));
  afterAll(async () => {
    for (const host of hosts) await host.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  /** Reads the host's own SQLite store (read-only, beside a running or killed host). */
  function read<T>(query: (db: Database.Database) => T): T {
    const db = new Database(join(stateDir, 'runtime-cloud.sqlite'), { readonly: true });
    try {
      return query(db);
    } finally {
      db.close();
    }
  }
  const history = (instanceId: string) =>
    read((db) =>
      (db.prepare('select event from durable_history where instance_id = ? order by position').all(instanceId) as { event: string }[]).map(
        (r) => JSON.parse(r.event) as HistoryEvent,
      ),
    );
  const instance = (instanceId: string) =>
    read((db) => db.prepare('select status, output from durable_instances where instance_id = ?').get(instanceId) as { status: string; output: string | null } | undefined);
  const ofType = (events: readonly HistoryEvent[], type: number) => events.filter((e) => e.EventType === type);
  const client = (host: RunningChild, operation: string, instanceId: string, body: unknown) =>
    fetch(new URL(`/api/client/${operation}/${instanceId}`, host.url), { method: 'POST', body: JSON.stringify(body) });

  it('when the host dies before the creating episode commits and after the child hands over, then a restart creates and delivers once', async () => {
    const first = await start();
    // The start commits before the runner takes the instance; the answer may or may not arrive before the crash.
    await client(first, 'start', 'crash-parent', { name: 'ParentOfWaitingChild', input: { childId: 'crash-child' } }).catch(() => undefined);
    await exited(first);
    expect(first.output()).toContain('crash point durable:episode-decided:ParentOfWaitingChild reached (crash-parent)');
    // Nothing of the episode was recorded: no history, no child.
    expect(history('crash-parent')).toEqual([]);
    expect(instance('crash-child')).toBeUndefined();

    const second = await start();
    await vi.waitFor(() => expect(read((db) => db.prepare('select custom_status from durable_instances where instance_id = ?').get('crash-child'))).toEqual({ custom_status: '"waiting"' }), {
      timeout: 20_000,
      interval: 50,
    });
    // As with the start, the answer races the crash the event leads to (the event is queued before it is answered).
    await client(second, 'raise', 'crash-child', { eventName: 'go', data: 'after the crash' }).catch(() => undefined);
    await exited(second);
    expect(second.output()).toContain('crash point durable:episode-committed:WaitingChild#2 reached (crash-child)');
    // The child's end and the parent's notice committed together; the parent has not run on it yet.
    expect(instance('crash-child')).toEqual({ status: 'Completed', output: '"child got after the crash"' });
    expect(ofType(history('crash-parent'), HistoryEventType.SubOrchestrationInstanceCompleted)).toEqual([]);
    expect(read((db) => db.prepare('select count(*) as n from durable_inbox where instance_id = ?').get('crash-parent'))).toEqual({ n: 1 });

    await start();
    await vi.waitFor(() => expect(instance('crash-parent')?.status).toBe('Completed'), { timeout: 20_000, interval: 50 });
    expect(instance('crash-parent')?.output).toBe('"parent saw: child got after the crash"');
    const parentHistory = history('crash-parent');
    expect(ofType(parentHistory, HistoryEventType.SubOrchestrationInstanceCreated).map((e) => e.InstanceId)).toEqual(['crash-child']);
    expect(ofType(parentHistory, HistoryEventType.SubOrchestrationInstanceCompleted).map((e) => e.TaskScheduledId)).toEqual([0]);
    expect(ofType(parentHistory, HistoryEventType.ExecutionCompleted)).toHaveLength(1);
    const childHistory = history('crash-child');
    expect(ofType(childHistory, HistoryEventType.ExecutionStarted)).toHaveLength(1);
    expect(ofType(childHistory, HistoryEventType.ExecutionCompleted)).toHaveLength(1);
    // Three host starts: a loaded machine takes several seconds for each.
  }, 120_000);
});
