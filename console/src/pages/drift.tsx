import { useState, type ReactNode } from 'react';
import { allPages, AS_TEXT, client, read } from '../api';
import { hrefOf } from '../router';
import { currentSession } from '../session';
import { ConfirmAction, DataTable, Link, ProblemBox, StateBadge, useEvery, useLoaded, When } from '../ui';
import type { Drift, Environment, IgnoreRule, Page, Proposal, ResourceFindings } from '../views';

const SEVERITIES = ['high', 'medium', 'low'] as const;
/** The environments whose drift the page reads at once (each is one request); the rest are listed without detail. */
const DETAILED = 50;

interface DriftView {
  readonly environments: readonly Environment[];
  readonly details: ReadonlyMap<string, Drift>;
  readonly rules: ReadonlyMap<string, readonly IgnoreRule[]>;
  readonly proposals: readonly Proposal[];
}

async function loadDrift(): Promise<DriftView> {
  const [environments, proposals] = await Promise.all([
    allPages((cursor) => read<Page<Environment>>(client.GET('/runtime-cloud/environments', { params: { query: { limit: 200, ...(cursor ? { cursor } : {}) } }, ...AS_TEXT }))),
    allPages((cursor) => read<Page<Proposal>>(client.GET('/runtime-cloud/proposals', { params: { query: { status: 'open', limit: 200, ...(cursor ? { cursor } : {}) } }, ...AS_TEXT }))),
  ]);
  const detailed = environments.items.slice(0, DETAILED);
  const [details, rules] = await Promise.all([
    Promise.all(detailed.map((e) => read<Drift>(client.GET('/runtime-cloud/environments/{id}/drift', { params: { path: { id: e.id } }, ...inTenantOf(e), ...AS_TEXT })))),
    Promise.all(detailed.map((e) => read<Page<IgnoreRule>>(client.GET('/runtime-cloud/environments/{id}/ignore-rules', { params: { path: { id: e.id } }, ...inTenantOf(e), ...AS_TEXT })))),
  ]);
  return {
    environments: environments.items,
    details: new Map(detailed.map((e, i) => [keyOf(e), details[i]!])),
    rules: new Map(detailed.map((e, i) => [keyOf(e), rules[i]?.items ?? []])),
    proposals: proposals.items,
  };
}

/**
 * Environment ids are a tenant's own: two tenants may both have `env-production`. A PlatformAdmin sees every tenant's,
 * so each environment is keyed, and asked for, in its tenant (`X-Tenant-Id`).
 */
function keyOf(environment: Environment): string {
  return `${environment.tenantId}/${environment.id}`;
}

function inTenantOf(environment: Environment) {
  return { headers: { 'x-tenant-id': environment.tenantId } };
}

/** Drift across the fleet: each environment's status and findings, open proposals grouped by cause, ignore rules. */
export function DriftPage() {
  const [loaded, reload] = useLoaded(loadDrift, 'drift');
  const [notice, setNotice] = useState<ReactNode>();
  useEvery(5000, reload);
  if (loaded.state === 'loading') return <p className="muted">Loading drift…</p>;
  if (loaded.state === 'failed') return <ProblemBox problem={loaded.problem} onRetry={reload} />;
  const { environments, details, rules, proposals } = loaded.value;
  const operate = currentSession()?.role !== 'Observer';
  return (
    <>
      <h1>Drift</h1>
      <section className="card" aria-labelledby="environments-title">
        <h2 id="environments-title">Environments</h2>
        {environments.length === 0 ? (
          <p className="muted">No environment yet: drift is scanned once a run has applied to one.</p>
        ) : (
          <DataTable labelledBy="environments-title" columns={['Environment', 'Status', 'Findings', 'Last scan', 'Next scan', ...(operate ? ['Scan'] : [])]}>
            {environments.map((environment) => (
              <EnvironmentRow key={keyOf(environment)} environment={environment} drift={details.get(keyOf(environment))} operate={operate} onDone={reload} />
            ))}
          </DataTable>
        )}
      </section>
      <section className="card" aria-labelledby="proposals-title">
        <h2 id="proposals-title">Open proposals by cause</h2>
        {notice !== undefined && (
          <p className="outcome" role="status">
            {notice}
          </p>
        )}
        {proposals.length === 0 ? <p className="muted">No open proposal.</p> : byCause(proposals).map(([cause, group]) => <CauseGroup key={cause} cause={cause} proposals={group} environments={environments} operate={operate} onDone={reload} onOutcome={setNotice} />)}
      </section>
      <section className="card" aria-labelledby="rules-title">
        <h2 id="rules-title">Ignore rules</h2>
        <RulesTable environments={environments} rules={rules} operate={operate} onDone={reload} />
      </section>
    </>
  );
}

function EnvironmentRow({ environment, drift, operate, onDone }: { environment: Environment; drift: Drift | undefined; operate: boolean; onDone: () => void }) {
  const status = environment.drift?.stale || !environment.drift?.lastScanAt ? 'stale' : (environment.drift?.status ?? 'stale');
  const counts = SEVERITIES.map((severity) => [severity, drift?.findings.filter((f) => f.severity === severity).length ?? 0] as const).filter(([, n]) => n > 0);
  return (
    <tr>
      <th scope="row">
        {environment.name} <span className="muted">{environment.tenantId} · {environment.qualifiedStack}</span>
      </th>
      <td>
        {status === 'stale' ? (
          <StateBadge state="stale" label={`not checked since ${environment.drift?.lastObservedAt ? new Date(environment.drift.lastObservedAt).toLocaleString() : 'ever'}`} />
        ) : (
          <StateBadge state={status} />
        )}
      </td>
      <td>
        {counts.length === 0 ? (
          <span className="muted">none</span>
        ) : (
          counts.map(([severity, n]) => (
            <span key={severity} className={`badge severity-${severity}`}>
              {n} {severity}
            </span>
          ))
        )}
      </td>
      <td>
        <When at={environment.drift?.lastScanAt} />
      </td>
      <td>
        <When at={environment.scanning?.nextScanAt} />
      </td>
      {operate && (
        <td>
          <ConfirmAction
            label={`Scan ${environment.name} now`}
            title={`Scan ${environment.name} now`}
            confirmLabel="Scan now"
            tone="plain"
            onConfirm={async () => {
              const scan = await read<{ driftStatus?: string; outcome: string; reason?: string }>(client.POST('/runtime-cloud/environments/{id}/scan', { params: { path: { id: environment.id } }, ...inTenantOf(environment), ...AS_TEXT }));
              onDone();
              return scan.outcome === 'completed' ? `Scanned: ${scan.driftStatus ?? 'done'}.` : `The scan could not observe the environment: ${scan.reason ?? scan.outcome}.`;
            }}
          >
            <p>The host reads what runs in {environment.qualifiedStack} and compares it with what was applied. Nothing is changed.</p>
          </ConfirmAction>
        </td>
      )}
    </tr>
  );
}

/** What a proposal's drift is, the same across environments: the kinds of finding on the types and paths. */
function causeOf(proposal: Proposal): string {
  const parts = proposal.findings.flatMap((resource) => resource.findings.map((f) => `${f.kind} ${f.type}${f.kind === 'modified' && f.path.length > 0 ? ` ${f.path.join('.')}` : ''}`));
  return [...new Set(parts)].sort().join('; ') || 'no finding';
}

function byCause(proposals: readonly Proposal[]): [string, Proposal[]][] {
  const groups = new Map<string, Proposal[]>();
  for (const proposal of proposals) groups.set(causeOf(proposal), [...(groups.get(causeOf(proposal)) ?? []), proposal]);
  return [...groups].sort((a, b) => b[1].length - a[1].length || a[0].localeCompare(b[0]));
}

function CauseGroup({
  cause,
  proposals,
  environments,
  operate,
  onDone,
  onOutcome,
}: {
  cause: string;
  proposals: readonly Proposal[];
  environments: readonly Environment[];
  operate: boolean;
  onDone: () => void;
  onOutcome: (outcome: ReactNode) => void;
}) {
  const nameOf = (proposal: Proposal) => environments.find((e) => e.id === proposal.environmentId && e.tenantId === proposal.tenantId)?.name ?? proposal.environmentId;
  return (
    <div className="cause">
      <h3>
        {cause} <span className="muted">· {proposals.length} environment{proposals.length === 1 ? '' : 's'}</span>
      </h3>
      <ul className="proposals">
        {proposals.map((proposal) => (
          <li key={proposal.id}>
            <div>
              <strong>{nameOf(proposal)}</strong> <span className="muted">{proposal.tenantId} · since</span> <When at={proposal.createdAt} /> <Severities findings={proposal.findings} />
            </div>
            {operate && (
              <div className="row-actions">
                <ConfirmAction
                  label={`Accept for ${nameOf(proposal)}`}
                  title="Accept: reconcile the environment"
                  confirmLabel="Accept and start the run"
                  onOutcome={onOutcome}
                  onConfirm={async () => {
                    const accepted = await read<{ runId?: string }>(client.POST('/runtime-cloud/proposals/{id}/accept', { params: { path: { id: proposal.id } }, ...AS_TEXT }));
                    onDone();
                    return accepted.runId ? (
                      <>
                        Accepted: <Link href={hrefOf({ page: 'run', runId: accepted.runId })}>its reconciliation run</Link> restores it (a plan that needs approval waits for it there).
                      </>
                    ) : (
                      'Accepted.'
                    );
                  }}
                >
                  <p>A provisioning run applies the desired state again. Its reconciliation plan:</p>
                  <ReconciliationPlan proposal={proposal} />
                </ConfirmAction>
                <ConfirmAction
                  label={`Dismiss for ${nameOf(proposal)}`}
                  title="Dismiss this proposal"
                  confirmLabel="Dismiss"
                  onOutcome={onOutcome}
                  tone="danger"
                  reason="Why (recorded with the proposal)"
                  onConfirm={async (reason) => {
                    await read<unknown>(client.POST('/runtime-cloud/proposals/{id}/dismiss', { params: { path: { id: proposal.id } }, body: { reason }, ...AS_TEXT }));
                    onDone();
                    return 'Dismissed.';
                  }}
                >
                  <p>The drift stays; this proposal is closed. A later scan that finds other drift opens a new one.</p>
                </ConfirmAction>
              </div>
            )}
          </li>
        ))}
      </ul>
    </div>
  );
}

function Severities({ findings }: { findings: readonly ResourceFindings[] }) {
  return (
    <>
      {SEVERITIES.map((severity) => [severity, findings.filter((f) => f.severity === severity).length] as const)
        .filter(([, n]) => n > 0)
        .map(([severity, n]) => (
          <span key={severity} className={`badge severity-${severity}`}>
            {n} {severity}
          </span>
        ))}
    </>
  );
}

function ReconciliationPlan({ proposal }: { proposal: Proposal }) {
  return (
    <ul className="steps">
      {proposal.plan.steps.map((step) => (
        <li key={step.urn} className="step">
          <span className={`badge op-${step.op}`}>{step.op}</span> <strong>{step.urn.split('::').pop()}</strong> <span className="muted">{step.type}</span>
          {step.paths && step.paths.length > 0 && <p className="muted">Restores {step.paths.join(', ')}</p>}
        </li>
      ))}
      {proposal.plan.leftAlone.length > 0 && <li className="muted">{proposal.plan.leftAlone.length} resources left alone</li>}
      {proposal.plan.keptByRules.length > 0 && <li className="muted">{proposal.plan.keptByRules.length} values kept by ignore rules</li>}
    </ul>
  );
}

function RulesTable({ environments, rules, operate, onDone }: { environments: readonly Environment[]; rules: ReadonlyMap<string, readonly IgnoreRule[]>; operate: boolean; onDone: () => void }) {
  const rows = environments.flatMap((environment) => (rules.get(keyOf(environment)) ?? []).map((rule) => ({ environment, rule })));
  if (rows.length === 0) return <p className="muted">No ignore rule: every difference is reported.</p>;
  return (
    <DataTable labelledBy="rules-title" columns={['Environment', 'Ignores', 'Why', 'Owner', 'Expires', ...(operate ? ['Remove'] : [])]}>
      {rows.map(({ environment, rule }) => (
        <tr key={rule.id}>
          <th scope="row">{environment.name}</th>
          <td>
            <code>{'type' in rule.scope ? rule.scope.type : rule.scope.urn}</code> <code>{rule.path}</code>
            {rule.holdsOnApply && <span className="badge tone-muted">holds on apply</span>}
          </td>
          <td>{rule.reason}</td>
          <td>{rule.owner}</td>
          <td>
            <When at={rule.expiresAt} />
          </td>
          {operate && (
            <td>
              <ConfirmAction
                label={`Remove rule ${rule.path}`}
                title="Remove this ignore rule"
                confirmLabel="Remove rule"
                tone="danger"
                onConfirm={async () => {
                  await read<unknown>(client.DELETE('/runtime-cloud/environments/{id}/ignore-rules/{ruleId}', { params: { path: { id: environment.id, ruleId: rule.id } }, ...inTenantOf(environment), ...AS_TEXT }));
                  onDone();
                  return 'Removed: the next scan reports what it ignored.';
                }}
              >
                <p>The next scan reports differences on {rule.path} again.</p>
              </ConfirmAction>
            </td>
          )}
        </tr>
      ))}
    </DataTable>
  );
}

