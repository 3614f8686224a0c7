import { useState } from 'react';
import type { PlanStep } from '../views';

const ACTIONS = ['create', 'update', 'replace', 'delete', 'same'] as const;

/** The plan as a diff per resource: action badges, each changed path with its old and new value, the inputs applied. */
export function PlanDiff({ steps, counts }: { steps: readonly PlanStep[]; counts: Record<string, number> }) {
  const [address, setAddress] = useState('');
  const [action, setAction] = useState('');
  const shown = steps.filter((s) => (action === '' || s.op === action) && (address === '' || s.urn.toLowerCase().includes(address.toLowerCase())));
  return (
    <section className="card" aria-labelledby="plan-title">
      <h2 id="plan-title">Plan</h2>
      <p>
        {ACTIONS.filter((a) => (counts[a] ?? 0) > 0).map((a) => (
          <span key={a} className={`badge op-${a}`}>
            {counts[a]} {a}
          </span>
        ))}
      </p>
      <div className="filters">
        <label className="field">
          Filter by address
          <input type="search" value={address} onChange={(event) => setAddress(event.target.value)} placeholder="name, type or urn" />
        </label>
        <label className="field">
          Filter by action
          <select value={action} onChange={(event) => setAction(event.target.value)}>
            <option value="">all</option>
            {ACTIONS.map((a) => (
              <option key={a}>{a}</option>
            ))}
          </select>
        </label>
      </div>
      <ul className="steps">
        {shown.map((step) => (
          <li key={step.urn} className="step">
            <div className="step-head">
              <span className={`badge op-${step.op}`}>{step.op}</span> <strong>{step.name}</strong> <span className="muted">{step.type}</span>
              {step.protect && <span className="badge tone-muted">protected</span>}
            </div>
            {step.changedPaths.length > 0 && <Changes step={step} />}
            {step.inputs && (
              <dl className="inputs">
                {flatten(step.inputs).map(([path, value]) => (
                  <div key={path} className={step.changedPaths.some((p) => path === p || path.startsWith(`${p}.`)) ? 'changed' : undefined}>
                    <dt>{path}</dt>
                    <dd>{value}</dd>
                  </div>
                ))}
              </dl>
            )}
          </li>
        ))}
        {shown.length === 0 && <li className="muted">No step matches.</li>}
      </ul>
    </section>
  );
}

/** Inputs as path → shown value; a secret is shown by its reference only, never a value. */
function flatten(value: unknown, path = ''): [string, string][] {
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    const object = value as Record<string, unknown>;
    if (typeof object.secretRef === 'string') return [[path, `secret · ${object.secretRef}`]];
    if (typeof object.configRef === 'string') return [[path, `config · ${object.configRef}`]];
    return Object.entries(object).flatMap(([key, inner]) => flatten(inner, path ? `${path}.${key}` : key));
  }
  if (typeof value === 'string' && /^\[secret\]$|^\*+$/.test(value)) return [[path, 'secret']];
  return [[path, JSON.stringify(value)]];
}


/**
 * Each changed path with what the stack state held there (the step's `oldValues`) and what the step applies. A
 * plan recorded before plans carried old values has none: "not recorded", never a guess.
 */
function Changes({ step }: { step: PlanStep }) {
  return (
    <div className="table-scroll">
      <table className="changes">
        <caption className="muted">Changes of {step.name}</caption>
        <thead>
          <tr>
            <th scope="col">path</th>
            <th scope="col">old</th>
            <th scope="col">new</th>
          </tr>
        </thead>
        <tbody>
          {step.changedPaths.map((path) => {
            const before = step.oldValues ? (path in step.oldValues ? shown(step.oldValues[path]) : 'none') : 'not recorded';
            const after = step.inputs ? valueAt(step.inputs, path) : undefined;
            return (
              <tr key={path}>
                <th scope="row">{path}</th>
                <td className="old">{before}</td>
                <td className="new">{after === undefined ? 'removed' : shown(after)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

/** The value at a plan path (`tags.env`, `rules[0].port`, `tags["a b"]`), or undefined. */
function valueAt(root: unknown, path: string): unknown {
  let current = root;
  for (const match of path.matchAll(/\.?([A-Za-z_][\w-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]/g)) {
    const key: string | number = match[1] ?? (match[2] !== undefined ? Number(match[2]) : (JSON.parse(match[3] ?? '""') as string));
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string | number, unknown>)[key];
  }
  return current;
}

/** One value as the plan shows it: a secret by its reference only, or `secret`. */
function shown(value: unknown): string {
  const [only, ...more] = flatten(value);
  return only && more.length === 0 && only[0] === '' ? only[1] : JSON.stringify(value);
}
