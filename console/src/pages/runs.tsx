import { useEffect, useState } from 'react';
import { AS_TEXT, client, read } from '../api';
import { hrefOf, navigate } from '../router';
import { DataTable, Link, ProblemBox, StateBadge, When } from '../ui';
import type { Page, Run, RunState } from '../views';

const STATES: readonly RunState[] = ['queued', 'planning', 'awaiting-approval', 'applying', 'stale', 'applied', 'failed', 'rejected', 'superseded', 'canceled'];
const PAGE = 50;

/** Every run of the tenant, newest first, a page at a time (the API's cursor), filtered by state and environment. */
export function RunsPage({ status, environment }: { status: string; environment: string }) {
  const [runs, setRuns] = useState<readonly Run[]>([]);
  const [cursor, setCursor] = useState<string | undefined>();
  const [problem, setProblem] = useState<unknown>();
  const [loading, setLoading] = useState(true);

  const load = async (after: string | undefined) => {
    setLoading(true);
    setProblem(undefined);
    try {
      const query = { limit: PAGE, order: 'newest' as const, ...(status ? { status: status as RunState } : {}), ...(environment ? { environment } : {}), ...(after ? { cursor: after } : {}) };
      const page = await read<Page<Run>>(client.GET('/runtime-cloud/runs', { params: { query }, ...AS_TEXT }));
      setRuns((shown) => (after ? [...shown, ...page.items] : page.items));
      setCursor(page.nextCursor);
    } catch (error) {
      setProblem(error);
    } finally {
      setLoading(false);
    }
  };
  useEffect(() => {
    // A new filter is a new list.
    void load(undefined);
  }, [status, environment]);

  const filter = (next: { status?: string; environment?: string }) => {
    const query = new URLSearchParams();
    const chosen = { status, environment, ...next };
    if (chosen.status) query.set('status', chosen.status);
    if (chosen.environment) query.set('environment', chosen.environment);
    navigate(`${hrefOf({ page: 'runs', status: '', environment: '' })}${query.size ? `?${query.toString()}` : ''}`);
  };

  return (
    <>
      <h1>Runs</h1>
      <div className="filters card">
        <label className="field">
          State
          <select value={status} onChange={(event) => filter({ status: event.target.value })}>
            <option value="">any</option>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s.replace(/-/g, ' ')}
              </option>
            ))}
          </select>
        </label>
        <label className="field">
          Environment (id or name)
          <input key={environment} type="search" defaultValue={environment} onKeyDown={(event) => event.key === 'Enter' && filter({ environment: event.currentTarget.value.trim() })} onBlur={(event) => event.currentTarget.value.trim() !== environment && filter({ environment: event.currentTarget.value.trim() })} />
        </label>
      </div>
      {problem !== undefined && <ProblemBox problem={problem} onRetry={() => void load(undefined)} />}
      <section className="card" aria-labelledby="runs-title">
        <h2 id="runs-title">{runs.length} run{runs.length === 1 ? '' : 's'}{cursor ? ' so far' : ''}</h2>
        <DataTable labelledBy="runs-title" columns={['Run', 'State', 'Environment', 'Requested by', 'Updated']}>
          {runs.map((run) => (
            <tr key={run.runId}>
              <th scope="row">
                <Link href={hrefOf({ page: 'run', runId: run.runId })}>{run.release ? `${run.release.name} ${run.release.version}` : run.reason}</Link>
                <span className="muted">{run.qualifiedStack}</span>
              </th>
              <td>
                <StateBadge state={run.state} />
              </td>
              <td>
                {run.environment.name} <span className="muted">{run.environment.tier}</span>
              </td>
              <td>{run.requestedBy ?? '—'}</td>
              <td>
                <When at={run.updatedAt} />
              </td>
            </tr>
          ))}
        </DataTable>
        {!loading && runs.length === 0 && <p className="muted">No run matches.</p>}
        {loading && <p className="muted">Loading…</p>}
        {cursor && !loading && (
          <button type="button" className="button-plain" onClick={() => void load(cursor)}>
            Load {PAGE} more
          </button>
        )}
      </section>
    </>
  );
}
