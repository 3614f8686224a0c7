import { useState, type FormEvent } from 'react';
import { Problem, readLocal } from '../api';
import { saveSession } from '../session';
import { BASE, navigate } from '../router';
import { ProblemBox, useLoaded } from '../ui';

interface SignInOptions {
  readonly roles: readonly string[];
  readonly expiresInSeconds: number;
}

/**
 * "Sign in as": the local host's issuer gives the console a token for the person, role and tenant picked here
 * (POST /runtime-cloud/local/sign-in). A host in Azure has no such route: there the console signs in with Entra.
 */
export function SignIn({ next }: { next: string }) {
  const [options] = useLoaded(() => fetchOptions(), 'sign-in');
  const [name, setName] = useState('operator-1');
  const [role, setRole] = useState('Operator');
  const [tenant, setTenant] = useState('demo-team');
  const [problem, setProblem] = useState<unknown>();
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setProblem(undefined);
    try {
      const body = await readLocal<{ token: string; expiresInSeconds: number }>('/runtime-cloud/local/sign-in', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name, role, ...(tenant.trim() ? { tenant: tenant.trim() } : {}) }),
      });
      saveSession({ token: body.token, name, role, ...(tenant.trim() ? { tenant: tenant.trim() } : {}), expiresAt: Date.now() + body.expiresInSeconds * 1000 });
      navigate(next.startsWith(BASE) && !next.startsWith(`${BASE}/sign-in`) ? next : `${BASE}/`);
    } catch (error) {
      setProblem(error);
    }
  };
  if (options.state === 'loading') return <p className="muted">Loading…</p>;
  if (options.state === 'failed') return <ProblemBox problem={options.problem} />;
  return (
    <section className="sign-in card" aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Sign in</h1>
      <p className="muted">The local host signs you in with its own issuer, as the person, role and tenant you pick.</p>
      <form onSubmit={(event) => void submit(event)}>
        <label className="field">
          Your name
          <input name="name" value={name} onChange={(event) => setName(event.target.value)} autoComplete="username" required />
        </label>
        <label className="field">
          Role
          <select name="role" value={role} onChange={(event) => setRole(event.target.value)}>
            {options.value.roles.map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
        </label>
        <label className="field">
          Tenant {role === 'PlatformAdmin' && <span className="muted">(empty: across tenants)</span>}
          <input name="tenant" value={tenant} onChange={(event) => setTenant(event.target.value)} />
        </label>
        {problem !== undefined && <ProblemBox problem={problem} />}
        <button type="submit" className="button-primary">
          Sign in
        </button>
      </form>
    </section>
  );
}

async function fetchOptions(): Promise<SignInOptions> {
  try {
    return await readLocal<SignInOptions>('/runtime-cloud/local/sign-in');
  } catch (problem) {
    if (problem instanceof Problem && problem.status === 404) {
      throw new Problem(404, 'Sign-in with Microsoft Entra is not built yet', 'This host has no local issuer: call its API with a token from Entra (docs/console.md).');
    }
    throw problem;
  }
}
