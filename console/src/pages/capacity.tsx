import { useState } from 'react';
import { AS_TEXT, client, read } from '../api';
import { hrefOf, stackRoute } from '../router';
import { currentSession } from '../session';
import { Countdown, DataTable, Link, ProblemBox, StateBadge, TableScroll, useEvery, useLoaded, useNow, When } from '../ui';
import { LeaseQueues } from './lease-queue';
import type { CapacityPool, CapacitySummary, Lease, Page, RunnerAgent, RunnerPool, TenantUse } from '../views';

const LEASE_PAGE = 50;
const LEASE_STATES = ['active', 'released', 'expired'] as const;

/**
 * Capacity and runners: the pools of each kind with their use, each visible tenant's use against its quota, the
 * requests waiting in the pools' queues, the tenant's leases, and the runner agent pools with their agents. Read-only: capacity is administered through the API.
 */
export function CapacityPage() {
  const [loaded, reload] = useLoaded(() => read<CapacitySummary>(client.GET('/runtime-cloud/capacity', { ...AS_TEXT })), 'capacity');
  useEvery(5000, reload);
  return (
    <>
      <h1>Capacity and runners</h1>
      {loaded.state === 'loading' && <p className="muted">Loading capacity…</p>}
      {loaded.state === 'failed' && <ProblemBox problem={loaded.problem} onRetry={reload} />}
      {loaded.state === 'ready' && (
        <>
          <Kinds summary={loaded.value} />
          <Quotas tenants={loaded.value.tenants ?? []} kinds={loaded.value.kinds.map((k) => k.kind)} />
          <Pools pools={loaded.value.pools} />
        </>
      )}
      <LeaseQueues />
      <Leases />
      <section className="card" aria-labelledby="refusals-title">
        <h2 id="refusals-title">Refusals</h2>
        <p className="muted">
          The API keeps no record of refused lease requests: a refusal is answered only to whoever asked (429 CAPACITY.QUOTA_EXCEEDED or
          CAPACITY.EXHAUSTED, with its reason), and counted by code and kind in each host&apos;s metrics. Requests that may wait are in the
          queues above, each with why it waits.
        </p>
      </section>
      <RunnerPools />
    </>
  );
}

function UseMeter({ used, capacity, label }: { used: number; capacity: number; label: string }) {
  if (capacity <= 0) return null;
  return <meter className="use" min={0} max={capacity} value={Math.min(used, capacity)} aria-label={`${label}: ${used} of ${capacity} used`} />;
}

function Kinds({ summary }: { summary: CapacitySummary }) {
  return (
    <section className="card" aria-labelledby="kinds-title">
      <h2 id="kinds-title">Capacity by kind</h2>
      <DataTable labelledBy="kinds-title" columns={['Kind', 'Used', 'Free', 'Capacity']}>
        {summary.kinds.map((kind) => (
          <tr key={kind.kind}>
            <th scope="row">{kind.kind}</th>
            <td>
              {kind.used} <UseMeter used={kind.used} capacity={kind.capacity} label={kind.kind} />
            </td>
            <td>{kind.free}</td>
            <td>{kind.capacity}</td>
          </tr>
        ))}
      </DataTable>
    </section>
  );
}

/** Each tenant the caller may see (a tenant's person: their own) against its edition's quota, per kind. */
function Quotas({ tenants, kinds }: { tenants: readonly TenantUse[]; kinds: readonly string[] }) {
  return (
    <section className="card" aria-labelledby="quotas-title">
      <h2 id="quotas-title">Quota use by tenant</h2>
      {tenants.length === 0 ? (
        <p className="muted">No tenant with an edition is visible to you.</p>
      ) : (
        <TableScroll labelledBy="quotas-title">
          <table>
            <thead>
              <tr>
                <th scope="col">Tenant</th>
                {kinds.map((kind) => (
                  <th key={kind} scope="col">
                    {kind}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {tenants.map((tenant) => (
                <tr key={tenant.tenant}>
                  <th scope="row">
                    {tenant.tenant} <span className="muted">{tenant.edition} edition</span>
                  </th>
                  {kinds.map((kind) => {
                    const use = tenant.usage.find((u) => u.kind === kind);
                    return (
                      <td key={kind}>
                        {!use ? (
                          <span className="muted">—</span>
                        ) : use.limit === null ? (
                          <span className="muted">{use.used} held · none in edition</span>
                        ) : (
                          <>
                            {use.used} of {use.limit} <UseMeter used={use.used} capacity={use.limit} label={`${tenant.tenant} ${kind} quota`} />
                          </>
                        )}
                      </td>
                    );
                  })}
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </section>
  );
}

function Pools({ pools }: { pools: readonly CapacityPool[] }) {
  const sorted = [...pools].sort((a, b) => a.kind.localeCompare(b.kind) || a.id.localeCompare(b.id));
  return (
    <section className="card" aria-labelledby="pools-title">
      <h2 id="pools-title">Pools</h2>
      {sorted.length === 0 ? (
        <p className="muted">No pool yet.</p>
      ) : (
        <DataTable labelledBy="pools-title" columns={['Pool', 'Kind', 'Used', 'Free', 'Capacity', 'Sized by']}>
          {sorted.map((pool) => {
            const stack = stackRoute(pool.iacStack);
            const labels = Object.entries(pool.labels).map(([key, value]) => `${key}=${value}`);
            return (
              <tr key={pool.id}>
                <th scope="row">
                  {pool.id}{' '}
                  <span className="muted">
                    target {pool.target}
                    {labels.length > 0 ? ` · ${labels.join(', ')}` : ''}
                  </span>
                </th>
                <td>{pool.kind}</td>
                <td>
                  {pool.used} <UseMeter used={pool.used} capacity={pool.capacity} label={pool.id} />
                </td>
                <td>{pool.free}</td>
                <td>
                  {pool.capacity} <span className="muted">bounds {pool.min}–{pool.max}</span>
                </td>
                <td>{stack ? <Link href={hrefOf(stack)}>{pool.iacStack}</Link> : <span className="muted">administered</span>}</td>
              </tr>
            );
          })}
        </DataTable>
      )}
    </section>
  );
}

function leasePage(state: string, cursor?: string): Promise<Page<Lease>> {
  const query = { limit: LEASE_PAGE, ...(state ? { state: state as Lease['state'] } : {}), ...(cursor ? { cursor } : {}) };
  return read<Page<Lease>>(client.GET('/runtime-cloud/leases', { params: { query }, ...AS_TEXT }));
}

/** Further pages of leases, after the first page they continue. */
interface MorePages {
  readonly after: Page<Lease>;
  readonly items: readonly Lease[];
  readonly nextCursor?: string;
}

/** The caller's tenant's leases (a PlatformAdmin's: every tenant's), a page at a time; expiry counts down each second. */
function Leases() {
  const acrossTenants = !currentSession()?.tenant;
  const [state, setState] = useState('');
  const [first, reload] = useLoaded(() => leasePage(state), `leases:${state}`);
  const [more, setMore] = useState<MorePages>();
  const [loadingMore, setLoadingMore] = useState(false);
  const [moreProblem, setMoreProblem] = useState<unknown>();
  const now = useNow(1000);
  const extra = first.state === 'ready' && more?.after === first.value ? more : undefined;
  // The first page follows new grants on its own; once more pages are shown, Refresh starts again from the first.
  useEvery(5000, () => {
    if (!extra && !loadingMore) reload();
  });
  const loadMore = async (page: Page<Lease>, cursor: string) => {
    setLoadingMore(true);
    setMoreProblem(undefined);
    try {
      const next = await leasePage(state, cursor);
      setMore((known) => ({ after: page, items: [...(known?.after === page ? known.items : []), ...next.items], nextCursor: next.nextCursor }));
    } catch (problem) {
      setMoreProblem(problem);
    } finally {
      setLoadingMore(false);
    }
  };
  return (
    <section className="card" aria-labelledby="leases-title">
      <h2 id="leases-title">Leases</h2>
      <div className="filters narrow">
        <label className="field">
          Lease state
          <select value={state} onChange={(event) => setState(event.target.value)}>
            <option value="">all</option>
            {LEASE_STATES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
      </div>
      {first.state === 'loading' && <p className="muted">Loading leases…</p>}
      {first.state === 'failed' && <ProblemBox problem={first.problem} onRetry={reload} />}
      {first.state === 'ready' &&
        (() => {
          const leases = [...first.value.items, ...(extra?.items ?? [])];
          const cursor = extra ? extra.nextCursor : first.value.nextCursor;
          return (
            <>
              {leases.length === 0 ? (
                <p className="muted">No lease{state ? ` ${state}` : ''}.</p>
              ) : (
                <DataTable labelledBy="leases-title" columns={['Holder', 'State', 'Kind and pool', 'Units', 'Fencing token', 'Granted', 'Expires']}>
                  {leases.map((lease) => (
                    <LeaseRow key={lease.leaseId} lease={lease} now={now} acrossTenants={acrossTenants} />
                  ))}
                </DataTable>
              )}
              <p className="muted">
                {leases.length} shown{cursor ? ', more remain' : ''}, in the API&apos;s order (by lease id).
              </p>
              {moreProblem !== undefined && <ProblemBox problem={moreProblem} />}
              <div className="actions">
                {cursor && (
                  <button type="button" className="button-plain" disabled={loadingMore} onClick={() => void loadMore(first.value, cursor)}>
                    {loadingMore ? 'Loading…' : 'Load more'}
                  </button>
                )}
                {extra && (
                  <button type="button" className="button-plain" onClick={reload}>
                    Refresh
                  </button>
                )}
              </div>
            </>
          );
        })()}
    </section>
  );
}

function LeaseRow({ lease, now, acrossTenants }: { lease: Lease; now: number; acrossTenants: boolean }) {
  // Expired from its expiresAt on, as the API counts it, also before the next refresh says so.
  const state = lease.state === 'active' && Date.parse(lease.expiresAt) <= now ? 'expired' : lease.state;
  return (
    <tr>
      <th scope="row">
        {lease.holder}{' '}
        <span className="muted">
          {acrossTenants ? `${lease.tenant} · ` : ''}
          {lease.leaseId}
        </span>
      </th>
      <td>
        <StateBadge state={state} />
      </td>
      <td>
        {lease.kind} <span className="muted">{lease.pool}</span>
      </td>
      <td>{lease.units}</td>
      <td>
        <code>{lease.fencingToken}</code>
      </td>
      <td>
        <When at={lease.grantedAt} />
        {lease.renewedAt && (
          <span className="muted">
            {' '}
            · renewed <When at={lease.renewedAt} />
          </span>
        )}
      </td>
      <td>{state === 'active' ? <Countdown until={lease.expiresAt} now={now} /> : state === 'expired' ? <When at={lease.expiresAt} /> : <span className="muted">—</span>}</td>
    </tr>
  );
}

async function runnerPools(): Promise<{ pool: RunnerPool; agents: readonly RunnerAgent[] }[]> {
  const pools = await read<{ items: RunnerPool[] }>(client.GET('/runtime-cloud/runner-pools', { ...AS_TEXT }));
  const agents = await Promise.all(
    pools.items.map((pool) => read<{ items: RunnerAgent[] }>(client.GET('/runtime-cloud/runner-pools/{pool}/agents', { params: { path: { pool: pool.pool } }, ...AS_TEXT }))),
  );
  return pools.items.map((pool, i) => ({ pool, agents: agents[i]?.items ?? [] }));
}

/** The runner agent pools that serve the caller's tenant (a PlatformAdmin's: all), with their agents. */
function RunnerPools() {
  const [loaded, reload] = useLoaded(runnerPools, 'runner-pools');
  useEvery(5000, reload);
  return (
    <section className="card" aria-labelledby="runners-title">
      <h2 id="runners-title">Runner pools</h2>
      {loaded.state === 'loading' && <p className="muted">Loading runner pools…</p>}
      {loaded.state === 'failed' && <ProblemBox problem={loaded.problem} onRetry={reload} />}
      {loaded.state === 'ready' &&
        (loaded.value.length === 0 ? (
          <p className="muted">No runner pool to show: a tenant&apos;s own pool is listed while it has open jobs or agents online.</p>
        ) : (
          <DataTable labelledBy="runners-title" columns={['Pool', 'Tenants', 'Agents online', 'Jobs running', 'Jobs waiting', 'Agents']}>
            {loaded.value.map(({ pool, agents }) => (
              <tr key={pool.pool}>
                <th scope="row">
                  {pool.pool}{' '}
                  <span className="muted">
                    target {pool.target} · {pool.engine} · capacity pool {pool.capacityPool}
                  </span>
                </th>
                <td>{pool.tenants.join(', ')}</td>
                <td>{pool.agentsOnline}</td>
                <td>{pool.jobsRunning}</td>
                <td>{pool.jobsWaiting}</td>
                <td>
                  {agents.length === 0 ? (
                    <span className="muted">none</span>
                  ) : (
                    <ul className="agents">
                      {agents.map((agent) => (
                        <li key={agent.agent}>
                          <StateBadge state={agent.online ? 'online' : 'offline'} /> {agent.agent}{' '}
                          <span className="muted">
                            {agent.jobId ? `job ${agent.jobId} · ` : 'no job · '}last beat <When at={agent.lastHeartbeat} />
                          </span>
                        </li>
                      ))}
                    </ul>
                  )}
                </td>
              </tr>
            ))}
          </DataTable>
        ))}
    </section>
  );
}
