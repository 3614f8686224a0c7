import { useState, type FormEvent } from 'react';
import { Problem, readLocal } from '../api';
import { saveSession } from '../session';
import { signInConfig, signInWithEntra, type SignInConfig } from '../sign-in-config';
import { BASE, navigate } from '../router';
import { ProblemBox, useLoaded } from '../ui';

interface SignInOptions {
  readonly roles: readonly string[];
  readonly expiresInSeconds: number;
}

type Options = { readonly entra: Extract<SignInConfig, { signIn: 'entra' }> } | { readonly local: SignInOptions };

/**
 * Signing in as the host says (its config.json): in Azure, with Entra (MSAL, authorization code with PKCE); on the
 * local host, "sign in as": its issuer gives the console a token for the person, role and tenant picked here
 * (POST /runtime-cloud/local/sign-in).
 */
export function SignIn({ next }: { next: string }) {
  const [options] = useLoaded(() => fetchOptions(), 'sign-in');
  if (options.state === 'loading') return <p className="muted">Loading…</p>;
  if (options.state === 'failed') return <ProblemBox problem={options.problem} />;
  if ('entra' in options.value) return <EntraSignIn config={options.value.entra} next={next} />;
  return <LocalSignIn options={options.value.local} next={next} />;
}

function EntraSignIn({ config, next }: { config: Extract<SignInConfig, { signIn: 'entra' }>; next: string }) {
  const [problem, setProblem] = useState<unknown>();
  const signIn = async () => {
    setProblem(undefined);
    try {
      await signInWithEntra(config, afterSignIn(next));
    } catch (error) {
      setProblem(new Problem(0, 'Sign-in with Microsoft Entra did not start', error instanceof Error ? error.message : String(error)));
    }
  };
  return (
    <section className="sign-in card" aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Sign in</h1>
      <p className="muted">This host signs you in with your organization's Microsoft Entra account; the API decides what your roles let you see and do.</p>
      {problem !== undefined && <ProblemBox problem={problem} />}
      <button type="button" className="button-primary" onClick={() => void signIn()}>
        Sign in with Microsoft
      </button>
    </section>
  );
}

/** Where to go once signed in: the page asked for, if it is the console's and not the sign-in page. */
function afterSignIn(next: string): string {
  return next.startsWith(BASE) && !next.startsWith(`${BASE}/sign-in`) ? next : `${BASE}/`;
}

function LocalSignIn({ options, next }: { options: SignInOptions; next: string }) {
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
      navigate(afterSignIn(next));
    } catch (error) {
      setProblem(error);
    }
  };
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
            {options.roles.map((r) => (
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

async function fetchOptions(): Promise<Options> {
  const config = await signInConfig();
  if (config.signIn === 'entra') return { entra: config };
  try {
    return { local: await readLocal<SignInOptions>('/runtime-cloud/local/sign-in') };
  } catch (problem) {
    if (problem instanceof Problem && problem.status === 404) {
      throw new Problem(404, 'Sign-in is not configured on this host', 'It has no local issuer and no console app registration (RuntimeCloud__Console__ClientId): see docs/deploy-to-azure.md.');
    }
    throw problem;
  }
}
