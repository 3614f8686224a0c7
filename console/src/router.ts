import { useEffect, useState } from 'react';

/** The console's pages live under this path; every page has a URL of its own that can be shared and reloaded. */
export const BASE = '/runtime-cloud/console';

export type Route =
  | { readonly page: 'fleet' }
  | { readonly page: 'drift' }
  | { readonly page: 'runs'; readonly status: string; readonly environment: string }
  | { readonly page: 'run'; readonly runId: string }
  | { readonly page: 'capacity' }
  | { readonly page: 'stack'; readonly tenant: string; readonly project: string; readonly stack: string }
  | { readonly page: 'sign-in'; readonly next: string }
  | { readonly page: 'not-found'; readonly path: string };

export function routeOf(location: Location): Route {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : location.pathname;
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return { page: 'fleet' };
  if (parts[0] === 'runs' && parts.length === 2 && parts[1]) return { page: 'run', runId: parts[1] };
  if (parts[0] === 'drift' && parts.length === 1) return { page: 'drift' };
  if (parts[0] === 'runs' && parts.length === 1) {
    const query = new URLSearchParams(location.search);
    return { page: 'runs', status: query.get('status') ?? '', environment: query.get('environment') ?? '' };
  }
  if (parts[0] === 'capacity' && parts.length === 1) return { page: 'capacity' };
  if (parts[0] === 'stacks' && parts.length === 4 && parts[1] && parts[2] && parts[3]) return { page: 'stack', tenant: parts[1], project: parts[2], stack: parts[3] };
  if (parts[0] === 'sign-in' && parts.length === 1) return { page: 'sign-in', next: new URLSearchParams(location.search).get('next') ?? '' };
  return { page: 'not-found', path };
}

export function hrefOf(route: Route): string {
  switch (route.page) {
    case 'fleet':
      return `${BASE}/`;
    case 'run':
      return `${BASE}/runs/${encodeURIComponent(route.runId)}`;
    case 'drift':
      return `${BASE}/drift`;
    case 'runs': {
      const query = new URLSearchParams();
      if (route.status) query.set('status', route.status);
      if (route.environment) query.set('environment', route.environment);
      return `${BASE}/runs${query.size ? `?${query.toString()}` : ''}`;
    }
    case 'capacity':
      return `${BASE}/capacity`;
    case 'stack':
      return `${BASE}/stacks/${[route.tenant, route.project, route.stack].map(encodeURIComponent).join('/')}`;
    case 'sign-in':
      return `${BASE}/sign-in${route.next ? `?next=${encodeURIComponent(route.next)}` : ''}`;
    case 'not-found':
      return `${BASE}${route.path}`;
  }
}

/** The page of a stack named `tenant/project/stack` (a run's or an environment's `qualifiedStack`), if it is one. */
export function stackRoute(qualifiedStack: string | undefined): Route | undefined {
  const [tenant, project, stack, ...more] = (qualifiedStack ?? '').split('/');
  return tenant && project && stack && more.length === 0 ? { page: 'stack', tenant, project, stack } : undefined;
}

export function navigate(href: string): void {
  history.pushState(null, '', href);
  dispatchEvent(new PopStateEvent('popstate'));
}

/** The current route, following links and the browser's back and forward buttons. */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => routeOf(location));
  useEffect(() => {
    const changed = () => setRoute(routeOf(location));
    addEventListener('popstate', changed);
    return () => removeEventListener('popstate', changed);
  }, []);
  return route;
}
