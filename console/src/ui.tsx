import { useEffect, useId, useRef, useState, type ReactNode } from 'react';
import { Problem } from './api';
import { navigate } from './router';

/** A link inside the console: followed without reloading the page, and shareable as it is. */
export function Link({ href, children, className }: { href: string; children: ReactNode; className?: string }) {
  return (
    <a
      href={href}
      className={className}
      onClick={(event) => {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        navigate(href);
      }}
    >
      {children}
    </a>
  );
}

/**
 * A table that scrolls sideways where the screen is narrower than it: focusable, so that a keyboard can scroll it too
 * (axe's scrollable-region-focusable), and named by its section's heading.
 */
export function TableScroll({ labelledBy, children }: { labelledBy: string; children: ReactNode }) {
  return (
    <div className="table-scroll" tabIndex={0} role="group" aria-labelledby={labelledBy}>
      {children}
    </div>
  );
}

/** A table under its section's heading: the column headings, then the rows given. */
export function DataTable({ labelledBy, columns, children }: { labelledBy: string; columns: readonly string[]; children: ReactNode }) {
  return (
    <TableScroll labelledBy={labelledBy}>
      <table>
        <thead>
          <tr>
            {columns.map((column) => (
              <th key={column} scope="col">
                {column}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </TableScroll>
  );
}

/** What the API said went wrong: the problem's title and detail, never a blank screen. */
export function ProblemBox({ problem, onRetry }: { problem: unknown; onRetry?: () => void }) {
  const known = problem instanceof Problem ? problem : new Problem(0, 'Something went wrong', problem instanceof Error ? problem.message : String(problem));
  return (
    <div className="problem" role="alert">
      <strong>{known.title}</strong>
      {known.detail && <p>{known.detail}</p>}
      {known.code && <p className="muted">Code {known.code}{known.status ? ` · HTTP ${known.status}` : ''}</p>}
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Try again
        </button>
      )}
    </div>
  );
}

export type Loaded<T> = { readonly state: 'loading' } | { readonly state: 'failed'; readonly problem: unknown } | { readonly state: 'ready'; readonly value: T };

/** Loads `load()` again whenever `key` changes, or when `reload` is called. */
export function useLoaded<T>(load: () => Promise<T>, key: string): [Loaded<T>, () => void] {
  const [loaded, setLoaded] = useState<Loaded<T>>({ state: 'loading' });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    load().then(
      (value) => current && setLoaded({ state: 'ready', value }),
      (problem: unknown) => current && setLoaded({ state: 'failed', problem }),
    );
    return () => {
      current = false;
    };
  }, [key, round]);
  return [loaded, () => setRound((r) => r + 1)];
}

/** Calls `tick` every `ms` while the page is shown. */
export function useEvery(ms: number, tick: () => void): void {
  const saved = useRef(tick);
  saved.current = tick;
  useEffect(() => {
    const timer = setInterval(() => saved.current(), ms);
    return () => clearInterval(timer);
  }, [ms]);
}

const STATE_TONES: Record<string, string> = {
  applied: 'good',
  'in-sync': 'good',
  failed: 'bad',
  rejected: 'bad',
  drifted: 'warn',
  'awaiting-approval': 'wait',
  stale: 'muted',
  superseded: 'muted',
  canceled: 'muted',
  queued: 'busy',
  planning: 'busy',
  applying: 'busy',
  active: 'busy',
  released: 'muted',
  expired: 'warn',
  locked: 'wait',
  'not-locked': 'muted',
  online: 'good',
  offline: 'muted',
};

export function StateBadge({ state, label }: { state: string; label?: string }) {
  return <span className={`badge tone-${STATE_TONES[state] ?? 'muted'}`}>{label ?? state.replace(/-/g, ' ')}</span>;
}

/** A time as "3 min ago", with the exact time on hover and for screen readers in the element's datetime. */
export function When({ at }: { at: string | undefined }) {
  if (!at) return <span className="muted">never</span>;
  const date = new Date(at);
  return (
    <time dateTime={at} title={date.toLocaleString()}>
      {relative(date.getTime() - Date.now())}
    </time>
  );
}

export function relative(deltaMs: number): string {
  const future = deltaMs > 0;
  const seconds = Math.round(Math.abs(deltaMs) / 1000);
  const [value, unit] = seconds < 60 ? [seconds, 's'] : seconds < 3600 ? [Math.round(seconds / 60), 'min'] : seconds < 86400 ? [Math.round(seconds / 3600), 'h'] : [Math.round(seconds / 86400), 'd'];
  return future ? `in ${value} ${unit}` : seconds < 5 ? 'just now' : `${value} ${unit} ago`;
}

/** The time now, read again every `ms` while the page is shown: what a countdown renders from. */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now());
  useEvery(ms, () => setNow(Date.now()));
  return now;
}

/** The time left until `until` as of `now` ("4 min 05 s left"), or "expired" once it has passed; the exact time on hover. */
export function Countdown({ until, now }: { until: string; now: number }) {
  const left = new Date(until).getTime() - now;
  return (
    <time dateTime={until} title={new Date(until).toLocaleString()} className="countdown">
      {left > 0 ? `${duration(left)} left` : 'expired'}
    </time>
  );
}

export function duration(ms: number): string {
  const seconds = Math.ceil(ms / 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${two(seconds % 60)} s`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ${two(Math.floor((seconds % 3600) / 60))} min`;
  return `${Math.floor(seconds / 86400)} d ${Math.floor((seconds % 86400) / 3600)} h`;
}

/**
 * A button whose action changes something: it asks first (saying exactly what will be sent), then shows how it went.
 * `reason` lets the dialog ask for a reason. `onOutcome` hands the outcome to the page to show instead, for a button
 * that the action itself takes off the page (an approved run has no Approve button), which would take its outcome with it.
 */
export function ConfirmAction({
  label,
  title,
  children,
  confirmLabel,
  reason,
  tone = 'primary',
  onConfirm,
  onOutcome,
}: {
  label: string;
  title: string;
  children: ReactNode;
  confirmLabel: string;
  reason?: string;
  tone?: 'primary' | 'danger' | 'plain';
  onConfirm: (reason: string) => Promise<ReactNode>;
  onOutcome?: (outcome: ReactNode) => void;
}) {
  const dialog = useRef<HTMLDialogElement>(null);
  const id = useId();
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const [outcome, setOutcome] = useState<{ ok: boolean; message: ReactNode } | undefined>();
  const confirm = async () => {
    setBusy(true);
    try {
      const message = await onConfirm(text);
      dialog.current?.close();
      if (onOutcome) onOutcome(message);
      else setOutcome({ ok: true, message });
    } catch (problem) {
      setOutcome({ ok: false, message: <ProblemBox problem={problem} /> });
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" className={`button-${tone}`} onClick={() => { setOutcome(undefined); dialog.current?.showModal(); }}>
        {label}
      </button>
      {outcome?.ok && <p className="outcome" role="status">{outcome.message}</p>}
      <dialog ref={dialog} aria-labelledby={`${id}-title`}>
        <h2 id={`${id}-title`}>{title}</h2>
        {children}
        {reason !== undefined && (
          <label className="field">
            {reason}
            <textarea value={text} onChange={(event) => setText(event.target.value)} rows={3} required />
          </label>
        )}
        {outcome && !outcome.ok && outcome.message}
        <div className="dialog-actions">
          <button type="button" className="button-plain" onClick={() => dialog.current?.close()}>
            Cancel
          </button>
          <button type="button" className={`button-${tone}`} disabled={busy || (reason !== undefined && text.trim() === '')} onClick={() => void confirm()}>
            {busy ? 'Sending…' : confirmLabel}
          </button>
        </div>
      </dialog>
    </>
  );
}
