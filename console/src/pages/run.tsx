import { reasonText } from './lease-queue';
import { useState, type ReactNode } from 'react';
import { AS_TEXT, client, read } from '../api';
import { hrefOf, stackRoute } from '../router';
import { currentSession } from '../session';
import { ConfirmAction, Link, ProblemBox, StateBadge, useEvery, useLoaded, When } from '../ui';
import type { Run, RunEvent, WaitingFor } from '../views';
import { PlanDiff } from './plan-diff';

const ENDED = ['applied', 'failed', 'rejected', 'superseded', 'canceled'];

/** One run: where it is, what it waits for, its plan as a diff, the decisions on it, its receipts and events. */
export function RunPage({ runId }: { runId: string }) {
  const [loaded, reload] = useLoaded(async () => {
    const [run, events] = await Promise.all([
      read<Run>(client.GET('/runtime-cloud/runs/{id}', { params: { path: { id: runId } }, ...AS_TEXT })),
      read<{ items: RunEvent[] }>(client.GET('/runtime-cloud/runs/{id}/events', { params: { path: { id: runId } }, ...AS_TEXT })),
    ]);
    return { run, events: events.items };
  }, runId);
  useEvery(2000, () => {
    if (loaded.state !== 'ready' || !ENDED.includes(loaded.value.run.state)) reload();
  });
  if (loaded.state === 'loading') return <p className="muted">Loading run {runId}…</p>;
  if (loaded.state === 'failed') return <ProblemBox problem={loaded.problem} onRetry={reload} />;
  const { run, events } = loaded.value;
  return (
    <>
      <header className="page-header">
        <h1>
          {run.release ? `${run.release.name} ${run.release.version}` : run.reason} → {run.environment.name}
        </h1>
        <StateBadge state={run.state} />
        <p className="muted">
          <StackLink qualifiedStack={run.qualifiedStack} /> · {run.tenant} · requested by {run.requestedBy ?? 'unknown'} · <code>{run.runId}</code>
        </p>
      </header>
      <StageRail run={run} />
      <Waiting run={run} />
      <Actions run={run} onDone={reload} />
      {run.planReceipt && <PlanDiff steps={run.planReceipt.plan.steps} counts={run.planReceipt.plan.counts} />}
      <section className="card" aria-labelledby="policy-title">
        <h2 id="policy-title">Policy</h2>
        {run.planReceipt?.policy ? (
          <>
            <p>
              Decision: <StateBadge state={run.planReceipt.policy.decision === 'allow' ? 'applied' : 'failed'} label={run.planReceipt.policy.decision} />
            </p>
            {run.planReceipt.policy.decision === 'allow' ? (
              run.planReceipt.policy.policies.length > 0 && <p>Allowed by {run.planReceipt.policy.policies.join(', ')}.</p>
            ) : (
              <p>
                Denied by {run.planReceipt.policy.policy}: <span className="muted">{run.planReceipt.policy.reason}</span>
              </p>
            )}
            {run.planReceipt.approvalReasons && <p>Approval needed because: {run.planReceipt.approvalReasons.join(', ')}.</p>}
          </>
        ) : (
          <p className="muted">No policy verdict yet.</p>
        )}
        {run.decision && (
          <p>
            {run.decision.decision === 'approved' ? 'Approved' : run.decision.decision} by <strong>{run.decision.by}</strong> <When at={run.decision.at} />
            {run.decision.planDigest && <> for plan <code>{short(run.decision.planDigest)}</code></>}
            {run.decision.comment && <>: “{run.decision.comment}”</>}
          </p>
        )}
      </section>
      <Receipts run={run} />
      <section className="card" aria-labelledby="events-title">
        <h2 id="events-title">Events published</h2>
        {events.length === 0 ? (
          <p className="muted">None yet.</p>
        ) : (
          <ul className="events">
            {events.map((event) => (
              <li key={event.eventId}>
                <strong>{event.type}</strong> <When at={event.time} />{' '}
                <span className="muted">{event.publishedAt ? 'published' : 'waiting to be published'} · {event.eventId}</span>
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  );
}

/** The run's stack, linked to its page; a run refused before its project was read names none. */
function StackLink({ qualifiedStack }: { qualifiedStack: string | undefined }) {
  const route = stackRoute(qualifiedStack);
  return route ? <Link href={hrefOf(route)}>{qualifiedStack}</Link> : <>{qualifiedStack ?? 'no stack'}</>;
}

function short(digest: string): string {
  return digest.length > 23 ? `${digest.slice(0, 19)}…${digest.slice(-4)}` : digest;
}

function StageRail({ run }: { run: Run }) {
  const failed = ['failed', 'rejected', 'canceled', 'superseded'].includes(run.state);
  const stages: { name: string; at?: string; reached: boolean; current: boolean }[] = [
    { name: 'Queued', at: run.createdAt, reached: true, current: run.state === 'queued' },
    { name: 'Planning', at: run.planReceipt?.startedAt, reached: run.state !== 'queued', current: run.state === 'planning' },
    { name: 'Policy', at: run.planReceipt?.finishedAt, reached: Boolean(run.planReceipt?.policy), current: false },
    ...(run.approvalRequired
      ? [{ name: 'Awaiting approval', at: run.decision?.at, reached: Boolean(run.planReceipt) && run.state !== 'planning', current: run.state === 'awaiting-approval' || run.state === 'stale' }]
      : []),
    { name: 'Applying', at: run.applyReceipt?.result.startedAt, reached: run.state === 'applying' || Boolean(run.applyReceipt), current: run.state === 'applying' },
    { name: failed ? capitalize(run.state) : 'Applied', at: run.finishedAt, reached: ENDED.includes(run.state), current: ENDED.includes(run.state) },
  ];
  return (
    <ol className="stage-rail" aria-label="Stages">
      {stages.map((stage) => (
        <li key={stage.name} className={`stage${stage.reached ? ' reached' : ''}${stage.current ? ' current' : ''}${stage.current && failed ? ' failed' : ''}`} aria-current={stage.current ? 'step' : undefined}>
          <span className="stage-name">{stage.name}</span>
          <span className="stage-time">{stage.at ? <When at={stage.at} /> : '—'}</span>
        </li>
      ))}
    </ol>
  );
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function Waiting({ run }: { run: Run }) {
  if (run.state === 'failed' && run.error) {
    return (
      <div className="problem" role="status">
        <strong>Failed: {run.error.code}</strong>
        <p>{run.error.message}</p>
      </div>
    );
  }
  const waiting = run.waitingFor;
  if (!waiting) return null;
  return (
    <div className="waiting" role="status">
      <WaitingReason waiting={waiting} />
    </div>
  );
}

/** What the run waits for, and why, in the words of its kind. */
function WaitingReason({ waiting }: { waiting: WaitingFor }) {
  const runLink = (runId: string) => <Link href={hrefOf({ page: 'run', runId })}>{runId}</Link>;
  switch (waiting.kind) {
    case 'approval':
      return (
        <>
          <strong>Waits for a second person's approval of the plan below.</strong>
          <p>
            Plan <code>{waiting.planDigest}</code>: whoever asked for the run cannot approve it.
          </p>
        </>
      );
    case 'replan':
      return (
        <>
          <strong>Its plan went stale before it was approved.</strong>
          <p>Replan it (the new plan needs its own approval) or reject it.</p>
        </>
      );
    case 'policy':
      return (
        <>
          <strong>Waits for the GovernanceHost's policy check of its plan.</strong>
          <p>
            Check {waiting.checkId}, asked for <When at={waiting.since} />.
          </p>
        </>
      );
    case 'runner':
      return (
        <>
          <strong>Waits for an agent of runner pool {waiting.pool} to take its job.</strong>
          <p>
            Job {waiting.jobId}
            {waiting.position !== undefined ? `, number ${waiting.position} in the pool's queue` : ''}.
          </p>
          {waiting.reason && <p>Why: {reasonText(waiting.reason)}.</p>}
        </>
      );
    case 'stack-lock':
      return (
        <>
          <strong>Waits for stack {waiting.stack}: one run of a stack at a time.</strong>
          <p>
            {waiting.heldBy ? <>Run {runLink(waiting.heldBy)} holds its lock.</> : waiting.queuedBehind ? <>Run {runLink(waiting.queuedBehind)} goes first.</> : 'Its lock is being handed over.'}
          </p>
        </>
      );
  }
}

function Actions({ run, onDone }: { run: Run; onDone: () => void }) {
  const [notice, setNotice] = useState<ReactNode>();
  const session = currentSession();
  // Observers read; deciding on a run takes an Operator (the API refuses anyone else whatever the console shows).
  if (!session || session.role === 'Observer') return null;
  const id = { params: { path: { id: run.runId } }, ...AS_TEXT };
  const done = (message: string) => {
    onDone();
    return message;
  };
  // Said here, not beside the button: a decision changes the run's state, and its buttons go with it.
  const said = notice === undefined ? null : (
    <p className="outcome" role="status">
      {notice}
    </p>
  );
  const digest = (run.waitingFor?.kind === 'approval' ? run.waitingFor.planDigest : undefined) ?? run.planDigest;
  const decidable = (run.state === 'awaiting-approval' && digest) || run.state === 'stale' || run.state === 'queued';
  if (!decidable && notice === undefined) return null;
  return (
    <section className="card actions" aria-label="Actions">
      {said}
      {run.state === 'awaiting-approval' && digest && (
        <>
          <ConfirmAction
            label="Approve"
            title="Approve this plan"
            confirmLabel="Approve plan"
            onOutcome={setNotice}
            onConfirm={async () => done((await read<unknown>(client.POST('/runtime-cloud/runs/{id}/approve', { ...id, body: { planDigest: digest } })), `Approved plan ${short(digest)}.`))}
          >
            <p>
              The console sends the digest of the plan shown on this page, <code>{digest}</code>. The host applies exactly that
              plan, and refuses the approval if the plan has changed since.
            </p>
          </ConfirmAction>
          <ConfirmAction
            label="Reject"
            title="Reject this plan"
            confirmLabel="Reject plan"
            onOutcome={setNotice}
            tone="danger"
            reason="Why (recorded with the decision)"
            onConfirm={async (reason) => done((await read<unknown>(client.POST('/runtime-cloud/runs/{id}/reject', { ...id, body: { reason } })), 'Rejected.'))}
          >
            <p>The run ends without changing anything.</p>
          </ConfirmAction>
        </>
      )}
      {run.state === 'stale' && (
        <ConfirmAction label="Replan" title="Plan again" confirmLabel="Replan" onOutcome={setNotice} onConfirm={async () => done((await read<unknown>(client.POST('/runtime-cloud/runs/{id}/replan', id)), 'Planning again.'))}>
          <p>The plan expired before it was approved. The host plans the same commit again; the new plan needs its own approval.</p>
        </ConfirmAction>
      )}
      {run.state === 'queued' && (
        <ConfirmAction label="Cancel run" title="Cancel this run" confirmLabel="Cancel run" onOutcome={setNotice} tone="danger" onConfirm={async () => done((await read<unknown>(client.POST('/runtime-cloud/runs/{id}/cancel', id)), 'Canceled.'))}>
          <p>The run ends before it starts and changes nothing. A run that has started can no longer be canceled: reject its plan instead.</p>
        </ConfirmAction>
      )}
    </section>
  );
}

function Receipts({ run }: { run: Run }) {
  const plan = run.planReceipt;
  const apply = run.applyReceipt;
  return (
    <section className="card" aria-labelledby="receipts-title">
      <h2 id="receipts-title">Receipts</h2>
      <div className="receipts">
        <div>
          <h3>Plan receipt</h3>
          {plan ? (
            <dl>
              <dt>Digest</dt>
              <dd>
                <code>{plan.plan.digest}</code>
              </dd>
              <dt>Planned</dt>
              <dd>
                <When at={plan.finishedAt} /> by {plan.runner?.name} {plan.runner?.agent && <>on agent {plan.runner.agent}</>}
              </dd>
              <dt>Expires</dt>
              <dd>
                <When at={plan.expiresAt} />
              </dd>
            </dl>
          ) : (
            <p className="muted">Not planned yet.</p>
          )}
        </div>
        <div>
          <h3>Apply receipt</h3>
          {apply ? (
            <dl>
              <dt>Result</dt>
              <dd>
                <StateBadge state={apply.result.status} />
              </dd>
              <dt>Resources</dt>
              <dd>{apply.result.resources?.length ?? 0}</dd>
              <dt>State serial</dt>
              <dd>{apply.result.serial ?? '—'}</dd>
            </dl>
          ) : (
            <p className="muted">Not applied.</p>
          )}
        </div>
      </div>
    </section>
  );
}
