import { AS_TEXT, client, read } from '../api';
import { currentSession } from '../session';
import { DataTable, ProblemBox, useEvery, useLoaded, When } from '../ui';
import type { Answer } from '../views';

type LeaseQueue = Answer<'/runtime-cloud/capacity/queue', 'get'>;
type Waiting = LeaseQueue['pools'][number]['waiting'][number];

/** Why a request waits, in the capacity queue's vocabulary (docs/capacity.md, "Waiting in the queue"), with its figures. */
export function reasonText(reason: { code: string; [figure: string]: unknown } | undefined): string {
  if (!reason) return '—';
  const n = (key: string) => {
    const figure = reason[key];
    return typeof figure === 'number' || typeof figure === 'string' ? String(figure) : '?';
  };
  switch (reason.code) {
    case 'TENANT_QUOTA':
      return `tenant quota: ${n('used')} of ${n('quota')} used`;
    case 'POOL_FULL':
      return `pool full: ${n('used')} of ${n('capacity')} in use`;
    case 'BEHIND_FAIR_SHARE':
      return `behind fair share: share ${n('share')} at weight ${n('weight')} (fair ${n('fairShare')})`;
    case 'QUEUED_BEHIND':
      return `queued behind: number ${n('position')}`;
    case 'POOL_RESIZING':
      return `pool resizing: ${n('used')} in use, capacity ${n('capacity')}`;
    case 'RECOVERING':
      return `recovering after a restore until ${n('until')}`;
    default:
      return reason.code;
  }
}

/**
 * The pools' lease queues: each waiting request in the order it will be granted, with why it waits, its tenant's
 * share against its weight, and how long it has waited. A tenant's person sees only their tenant's requests; the
 * positions count every tenant's.
 */
export function LeaseQueues() {
  const acrossTenants = !currentSession()?.tenant;
  const [loaded, reload] = useLoaded(() => read<LeaseQueue>(client.GET('/runtime-cloud/capacity/queue', { ...AS_TEXT })), 'lease-queue');
  useEvery(5000, reload);
  return (
    <section className="card" aria-labelledby="queue-title">
      <h2 id="queue-title">Waiting for capacity</h2>
      {loaded.state === 'loading' && <p className="muted">Loading the queues…</p>}
      {loaded.state === 'failed' && <ProblemBox problem={loaded.problem} onRetry={reload} />}
      {loaded.state === 'ready' &&
        (loaded.value.pools.length === 0 ? (
          <p className="muted">No lease request is waiting{acrossTenants ? '' : ' for your tenant'}.</p>
        ) : (
          loaded.value.pools.map(({ pool, waiting }) => (
            <div key={pool}>
              <h3 id={`queue-${pool}`}>
                {pool} <span className="muted">{waiting.length} waiting</span>
              </h3>
              <DataTable labelledBy={`queue-${pool}`} columns={['Position', 'Holder', 'Units', 'Why it waits', 'Share / weight', 'Waiting since', 'Estimated grant']}>
                {waiting.map((request) => (
                  <QueueRow key={request.requestId} request={request} acrossTenants={acrossTenants} />
                ))}
              </DataTable>
            </div>
          ))
        ))}
    </section>
  );
}

function QueueRow({ request, acrossTenants }: { request: Waiting; acrossTenants: boolean }) {
  return (
    <tr>
      <td>{request.position ?? '—'}</td>
      <th scope="row">
        {request.holder}{' '}
        <span className="muted">
          {acrossTenants ? `${request.tenant} · ` : ''}
          {request.requestId}
        </span>
      </th>
      <td>
        {request.units} <span className="muted">{request.kind}</span>
      </td>
      <td>{reasonText(request.reason)}</td>
      <td>
        {request.share} / {request.weight}
      </td>
      <td>
        <When at={request.requestedAt} /> <span className="muted">{request.waitedSeconds} s</span>
      </td>
      <td>{request.estimatedGrantAt ? <When at={request.estimatedGrantAt} /> : <span className="muted">not foreseen</span>}</td>
    </tr>
  );
}
