import { useState, type ReactNode } from 'react';
import { allPages, AS_TEXT, client, Problem, read } from '../api';
import { hrefOf } from '../router';
import { currentSession } from '../session';
import { ConfirmAction, Countdown, DataTable, Link, ProblemBox, StateBadge, useEvery, useLoaded, useNow, When } from '../ui';
import type { Environment, Page, Run, StackLock } from '../views';

/** Pages of the tenant's runs read for one stack's: the API cannot filter runs by stack, so the console does. */
const RUN_PAGES = 5;
const RUN_PAGE = 1000;

interface StackRuns {
  readonly runs: Run[];
  /** More of the tenant's runs remain than the console read. */
  readonly more: boolean;
}

async function runsOf(tenant: string, qualified: string): Promise<StackRuns> {
  // Newest first, so that the pages read hold the stack's latest runs however many the tenant has.
  const { items, more } = await allPages(
    (cursor) => read<Page<Run>>(client.GET('/runtime-cloud/runs', { params: { query: { tenant, limit: RUN_PAGE, order: 'newest', ...(cursor ? { cursor } : {}) } }, ...AS_TEXT })),
    RUN_PAGES,
  );
  return { runs: items.filter((run) => run.qualifiedStack === qualified), more };
}

async function environmentsOf(tenant: string, qualified: string): Promise<Environment[]> {
  const { items } = await allPages((cursor) => read<Page<Environment>>(client.GET('/runtime-cloud/environments', { params: { query: { tenant, limit: 200, ...(cursor ? { cursor } : {}) } }, ...AS_TEXT })));
  return items.filter((environment) => environment.qualifiedStack === qualified);
}

/** The stack's lock, or undefined when nothing holds it (404 PROVISIONING.STACK_NOT_LOCKED is an answer, not a failure). */
async function lockOf(tenant: string, project: string, stack: string): Promise<StackLock | undefined> {
  try {
    return await read<StackLock>(client.GET('/runtime-cloud/tenants/{tenant}/stacks/{project}/{stack}/lock', { params: { path: { tenant, project, stack } }, ...AS_TEXT }));
  } catch (problem) {
    if (problem instanceof Problem && problem.code === 'PROVISIONING.STACK_NOT_LOCKED') return undefined;
    throw problem;
  }
}

/** One stack (`tenant/project/stack`): its lock, the environment its runs apply to, and its runs. */
export function StackPage({ tenant, project, stack }: { tenant: string; project: string; stack: string }) {
  const qualified = `${tenant}/${project}/${stack}`;
  const [loaded, reload] = useLoaded(async () => {
    const [runs, environments, lock] = await Promise.all([runsOf(tenant, qualified), environmentsOf(tenant, qualified), lockOf(tenant, project, stack)]);
    return { ...runs, environments, lock };
  }, qualified);
  useEvery(5000, reload);
  return (
    <>
      <header className="page-header">
        <h1>
          Stack {project}/{stack}
        </h1>
        <p className="muted">
          {qualified}
        </p>
      </header>
      {loaded.state === 'loading' && <p className="muted">Loading the stack…</p>}
      {loaded.state === 'failed' && <ProblemBox problem={loaded.problem} onRetry={reload} />}
      {loaded.state === 'ready' && (
        <>
          <Lock lock={loaded.value.lock} route={{ tenant, project, stack }} onDone={reload} />
          <Environments environments={loaded.value.environments} runs={loaded.value.runs} />
          <Runs runs={loaded.value.runs} more={loaded.value.more} />
        </>
      )}
    </>
  );
}

function Lock({ lock, route, onDone }: { lock: StackLock | undefined; route: { tenant: string; project: string; stack: string }; onDone: () => void }) {
  const now = useNow(1000);
  const session = currentSession();
  // What breaking it did, said here: the button that broke it is gone once the lock is.
  const [said, setSaid] = useState<ReactNode>();
  return (
    <section className="card" aria-labelledby="lock-title">
      <h2 id="lock-title">Lock</h2>
      {!lock ? (
        <p>
          <StateBadge state="not-locked" label="not locked" /> No run holds this stack&apos;s lock.
        </p>
      ) : (
        <>
          <p>
            <StateBadge state={lock.expired ? 'expired' : 'locked'} label={lock.expired ? 'lock expired' : 'locked'} />{' '}
            {lock.expired ? 'Its holder no longer renews it: the next run to ask takes it over.' : 'A run holds this stack to plan or apply.'}
          </p>
          <dl className="facts">
            <dt>Holder run</dt>
            <dd>
              <Link href={hrefOf({ page: 'run', runId: lock.holderRun })}>{lock.holderRun}</Link>
            </dd>
            <dt>Holder host</dt>
            <dd>{lock.holderHost}</dd>
            <dt>Fencing token</dt>
            <dd>
              <code>{lock.version}</code> <span className="muted">(the lock&apos;s version)</span>
            </dd>
            <dt>Taken</dt>
            <dd>
              <When at={lock.acquiredAt} />
            </dd>
            <dt>Expires</dt>
            <dd>
              <Countdown until={lock.expiresAt} now={now} />
            </dd>
          </dl>
          {session?.role === 'PlatformAdmin' &&
            (session.tenant ? (
              <p className="muted">Breaking a lock takes a PlatformAdmin signed in across tenants: the API refuses a token bound to a tenant.</p>
            ) : (
              <div className="actions">
                <ConfirmAction
                  onOutcome={setSaid}
                  label="Break lock"
                  title="Break this stack's lock"
                  confirmLabel="Break lock"
                  tone="danger"
                  reason="Why (recorded with the break)"
                  onConfirm={async (reason) => {
                    const broken = await read<{ by: string }>(
                      client.POST('/runtime-cloud/tenants/{tenant}/stacks/{project}/{stack}/unlock', { params: { path: route }, body: { reason, version: lock.version }, ...AS_TEXT }),
                    );
                    onDone();
                    return `Broke lock version ${lock.version} of run ${lock.holderRun}, recorded as broken by ${broken.by}.`;
                  }}
                >
                  <p>
                    The console breaks version <code>{lock.version}</code> of the lock, held by run <code>{lock.holderRun}</code> on host{' '}
                    {lock.holderHost}; if another run took the lock since, the host refuses. The holder loses it: an apply stops before its next
                    step and fails with PROVISIONING.STACK_LOCK_LOST, and the first run waiting for the stack takes it.
                  </p>
                </ConfirmAction>
              </div>
            ))}
        </>
      )}
      {said && (
        <p className="outcome" role="status">
          {said}
        </p>
      )}
    </section>
  );
}

interface Binding {
  readonly id: string;
  readonly name: string;
  readonly tier: string;
  readonly environment?: Environment;
}

/** The environments this stack's runs apply to: from the inventory once a run applied, else from the runs. */
function Environments({ environments, runs }: { environments: readonly Environment[]; runs: readonly Run[] }) {
  const bindings = new Map<string, Binding>();
  for (const environment of environments) bindings.set(environment.id, { id: environment.id, name: environment.name, tier: environment.tier, environment });
  for (const run of runs) if (!bindings.has(run.environment.id)) bindings.set(run.environment.id, { ...run.environment });
  return (
    <section className="card" aria-labelledby="environment-title">
      <h2 id="environment-title">Environment</h2>
      {bindings.size === 0 ? (
        <p className="muted">No environment is known for this stack: no run or environment names it.</p>
      ) : (
        <DataTable labelledBy="environment-title" columns={['Environment', 'Release applied', 'Drift', 'Last scan']}>
          {[...bindings.values()].map((binding) => {
            const applied = binding.environment?.desiredRelease;
            const drift = binding.environment?.drift;
            return (
              <tr key={binding.id}>
                <th scope="row">
                  {binding.name}{' '}
                  <span className="muted">
                    {binding.tier} · {binding.id}
                  </span>
                </th>
                <td>
                  {applied ? (
                    <>
                      <Link href={hrefOf({ page: 'run', runId: applied.runId })}>
                        {applied.name} {applied.version}
                      </Link>{' '}
                      <When at={applied.appliedAt} />
                    </>
                  ) : (
                    <span className="muted">none applied</span>
                  )}
                </td>
                <td>{drift ? <StateBadge state={drift.stale ? 'stale' : drift.status} label={drift.stale ? 'stale' : undefined} /> : <span className="muted">not observed</span>}</td>
                <td>
                  <When at={drift?.lastScanAt} />
                </td>
              </tr>
            );
          })}
        </DataTable>
      )}
    </section>
  );
}

function Runs({ runs, more }: { runs: readonly Run[]; more: boolean }) {
  return (
    <section className="card" aria-labelledby="runs-title">
      <h2 id="runs-title">Runs</h2>
      {runs.length === 0 ? (
        <p className="muted">No run of this stack.</p>
      ) : (
        <DataTable labelledBy="runs-title" columns={['Run', 'State', 'Requested by', 'Created', 'Finished']}>
          {runs.map((run) => (
            <tr key={run.runId}>
              <th scope="row">
                <Link href={hrefOf({ page: 'run', runId: run.runId })}>
                  {run.release ? `${run.release.name} ${run.release.version}` : run.reason} → {run.environment.name}
                </Link>{' '}
                <span className="muted">
                  {run.reason} · {run.runId}
                </span>
              </th>
              <td>
                <StateBadge state={run.state} />
              </td>
              <td>{run.requestedBy ?? <span className="muted">unknown</span>}</td>
              <td>
                <When at={run.createdAt} />
              </td>
              <td>{run.finishedAt ? <When at={run.finishedAt} /> : <span className="muted">not yet</span>}</td>
            </tr>
          ))}
        </DataTable>
      )}
      {more && <p className="muted">Only the tenant&apos;s latest {RUN_PAGES * RUN_PAGE} runs were searched: the API cannot list one stack&apos;s runs.</p>}
    </section>
  );
}
