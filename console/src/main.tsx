import { StrictMode, useEffect } from 'react';
import { createRoot } from 'react-dom/client';
import { DriftPage } from './pages/drift';
import { CapacityPage } from './pages/capacity';
import { Fleet } from './pages/fleet';
import { RunPage } from './pages/run';
import { RunsPage } from './pages/runs';
import { SignIn } from './pages/sign-in';
import { StackPage } from './pages/stack';
import { BASE, hrefOf, navigate, routeOf, useRoute, type Route } from './router';
import { currentSession, signOut } from './session';
import { completeEntraSignIn, signInConfig } from './sign-in-config';
import { Link } from './ui';
import './styles.css';

function App() {
  const route = useRoute();
  const session = currentSession();
  const needsSignIn = !session && route.page !== 'sign-in';
  useEffect(() => {
    // Read from location, not the render: React runs an effect twice in development, and the first run has moved on.
    if (needsSignIn && routeOf(location).page !== 'sign-in') navigate(hrefOf({ page: 'sign-in', next: location.pathname + location.search }));
  }, [needsSignIn]);
  useEffect(() => {
    document.title = `${titleOf(route)} · RuntimeCloudHost`;
  }, [route]);
  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <Link href={`${BASE}/`} className="brand">
          RuntimeCloudHost
        </Link>
        <nav aria-label="Console">
          <Link href={`${BASE}/`}>Fleet</Link>
          <Link href={hrefOf({ page: 'runs', status: '', environment: '' })}>Runs</Link>
          <Link href={hrefOf({ page: 'drift' })}>Drift</Link>
          <Link href={hrefOf({ page: 'capacity' })}>Capacity</Link>
        </nav>
        {session && (
          <div className="who">
            <span>
              {session.name} · {session.role}
              {session.tenant ? ` · ${session.tenant}` : ''}
            </span>
            <button
              type="button"
              className="button-plain"
              onClick={() => {
                signOut();
                navigate(hrefOf({ page: 'sign-in', next: '' }));
              }}
            >
              Sign out
            </button>
          </div>
        )}
      </header>
      <main id="main">{needsSignIn ? null : <Page route={route} />}</main>
    </>
  );
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case 'fleet':
      return <Fleet />;
    case 'run':
      return <RunPage runId={route.runId} />;
    case 'drift':
      return <DriftPage />;
    case 'runs':
      return <RunsPage status={route.status} environment={route.environment} />;
    case 'capacity':
      return <CapacityPage />;
    case 'stack':
      return <StackPage tenant={route.tenant} project={route.project} stack={route.stack} />;
    case 'sign-in':
      return <SignIn next={route.next} />;
    case 'not-found':
      return (
        <div className="problem" role="alert">
          <strong>No such page</strong>
          <p>The console has no page at {route.path}.</p>
        </div>
      );
  }
}

function titleOf(route: Route): string {
  const titles: Record<Exclude<Route['page'], 'run' | 'stack'>, string> = {
    fleet: 'Fleet',
    runs: 'Runs',
    drift: 'Drift',
    capacity: 'Capacity and runners',
    'sign-in': 'Sign in',
    'not-found': 'Not found',
  };
  if (route.page === 'run') return `Run ${route.runId}`;
  if (route.page === 'stack') return `Stack ${route.tenant}/${route.project}/${route.stack}`;
  return titles[route.page];
}

/**
 * Back from Entra (a host that signs in with Entra), the session is made from the code before the first render, and
 * the console goes where the person was going; a failed return shows on the sign-in page.
 */
async function start(): Promise<void> {
  const config = await signInConfig().catch(() => undefined);
  if (config?.signIn === 'entra') {
    const next = await completeEntraSignIn(config).catch(() => undefined);
    if (next) history.replaceState(null, '', next);
  }
  createRoot(document.getElementById('root')!).render(
    <StrictMode>
      <App />
    </StrictMode>,
  );
}

void start();
