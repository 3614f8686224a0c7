import { allPages, AS_TEXT, client, read } from '../api';
import { hrefOf, stackRoute } from '../router';
import { fleetOf, STANDING_LABELS, STANDINGS, type FleetEntry } from '../standing';
import { DataTable, Link, ProblemBox, StateBadge, useEvery, useLoaded, When } from '../ui';
import type { Environment, Page, Run } from '../views';

/** Every page of environments (the fleet page counts them all). */
async function allEnvironments(): Promise<Environment[]> {
  const { items } = await allPages((cursor) => read<Page<Environment>>(client.GET('/runtime-cloud/environments', { params: { query: { limit: 200, ...(cursor ? { cursor } : {}) } }, ...AS_TEXT })));
  return items;
}

async function recentRuns(): Promise<Run[]> {
  const page = await read<Page<Run>>(client.GET('/runtime-cloud/runs', { params: { query: { limit: 500, order: 'newest' } }, ...AS_TEXT }));
  return [...page.items].sort((a, b) => b.updatedAt.localeCompare(a.updatedAt));
}

/** The fleet at a glance: environments grouped by where they stand, what needs attention and why, recent activity. */
export function Fleet() {
  const [loaded, reload] = useLoaded(async () => {
    const [environments, runs] = await Promise.all([allEnvironments(), recentRuns()]);
    return { fleet: fleetOf(environments, runs), runs };
  }, 'fleet');
  useEvery(5000, reload);
  if (loaded.state === 'loading') return <p className="muted">Loading the fleet…</p>;
  if (loaded.state === 'failed') return <ProblemBox problem={loaded.problem} onRetry={reload} />;
  const { fleet, runs } = loaded.value;
  const attention = fleet.filter((e) => e.standing === 'needs-attention' || e.standing === 'waiting-for-approval' || e.standing === 'drifted' || e.standing === 'stale');
  return (
    <>
      <h1>Fleet</h1>
      <ul className="counts" aria-label="Environments by standing">
        {STANDINGS.map((standing) => (
          <li key={standing} className={`count standing-${standing}`}>
            <span className="count-value">{fleet.filter((e) => e.standing === standing).length}</span>
            <span className="count-label">{STANDING_LABELS[standing]}</span>
          </li>
        ))}
      </ul>
      <section aria-labelledby="attention-title" className="card">
        <h2 id="attention-title">Needs attention</h2>
        {attention.length === 0 ? <p className="muted">Nothing needs attention.</p> : <EnvironmentTable entries={attention} labelledBy="attention-title" />}
      </section>
      <section aria-labelledby="all-title" className="card">
        <h2 id="all-title">All environments</h2>
        {fleet.length === 0 ? <p className="muted">No environment yet: send a promotion.</p> : <EnvironmentTable entries={fleet} labelledBy="all-title" />}
      </section>
      <section aria-labelledby="activity-title" className="card">
        <h2 id="activity-title">Recent activity</h2>
        {runs.length === 0 ? (
          <p className="muted">No run yet.</p>
        ) : (
          <ol className="timeline">
            {runs.slice(0, 15).map((run) => (
              <li key={run.runId}>
                <When at={run.updatedAt} /> <StateBadge state={run.state} />{' '}
                <Link href={hrefOf({ page: 'run', runId: run.runId })}>
                  {run.release ? `${run.release.name} ${run.release.version}` : run.reason} → {run.environment.name}
                </Link>{' '}
                <span className="muted">{run.tenant}</span>
              </li>
            ))}
          </ol>
        )}
      </section>
    </>
  );
}

function EnvironmentTable({ entries, labelledBy }: { entries: readonly FleetEntry[]; labelledBy: string }) {
  return (
    <DataTable labelledBy={labelledBy} columns={['Environment', 'Standing', 'Why', 'Release', 'Last scan']}>
      {entries.map((entry) => (
        <tr key={entry.key}>
          <th scope="row">
            {entry.name} <span className="muted">{entry.tenant} · {entry.tier}</span>
            <StackCell qualifiedStack={entry.qualifiedStack} />
          </th>
          <td>
            <StateBadge state={entry.standing === 'waiting-for-approval' ? 'awaiting-approval' : entry.standing === 'needs-attention' ? 'failed' : entry.standing} label={STANDING_LABELS[entry.standing]} />
          </td>
          <td>
            {entry.run ? <Link href={hrefOf({ page: 'run', runId: entry.run.runId })}>{entry.why}</Link> : entry.why}
          </td>
          <td>{entry.environment?.desiredRelease ? `${entry.environment.desiredRelease.name} ${entry.environment.desiredRelease.version}` : <span className="muted">none applied</span>}</td>
          <td>
            <When at={entry.environment?.drift?.lastScanAt} />
          </td>
        </tr>
      ))}
    </DataTable>
  );
}

function StackCell({ qualifiedStack }: { qualifiedStack: string }) {
  if (!qualifiedStack) return null;
  const route = stackRoute(qualifiedStack);
  return <span className="row-link">stack {route ? <Link href={hrefOf(route)}>{qualifiedStack}</Link> : qualifiedStack}</span>;
}
