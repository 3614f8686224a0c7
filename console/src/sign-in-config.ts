import { PublicClientApplication, type AuthenticationResult } from '@azure/msal-browser';
import { BASE } from './router';
import { saveSession, type Session } from './session';

/**
 * How this host signs people in to the console, as it says at `GET /runtime-cloud/console/config.json`
 * (functions/host/console.ts `signInConfig`): the local host's "sign in as", or Entra ID with the console's app
 * registration, the directory's authority and the scope of the host's API (docs/console.md, "Signing in").
 */
export type SignInConfig = { readonly signIn: 'local' } | { readonly signIn: 'entra'; readonly clientId: string; readonly authority: string; readonly scopes: readonly string[] };

let loaded: Promise<SignInConfig> | undefined;

export function signInConfig(): Promise<SignInConfig> {
  loaded ??= fetch(`${BASE}/config.json`).then(async (response) => {
    if (!response.ok) throw new Error(`the host answered ${response.status} for the console's settings`);
    return (await response.json()) as SignInConfig;
  });
  return loaded;
}

type EntraConfig = Extract<SignInConfig, { signIn: 'entra' }>;
let client: Promise<PublicClientApplication> | undefined;

/** MSAL's public client for the console's app registration; its cache, like the session, lasts the tab only. */
function msal(config: EntraConfig): Promise<PublicClientApplication> {
  client ??= (async () => {
    const app = new PublicClientApplication({
      auth: { clientId: config.clientId, authority: config.authority, redirectUri: `${location.origin}${BASE}/` },
      cache: { cacheLocation: 'sessionStorage' },
    });
    await app.initialize();
    return app;
  })();
  return client;
}

/**
 * Sends the browser to Entra to sign in: the authorization code flow with PKCE (MSAL makes the verifier and its S256
 * challenge), asking for a token of the host's API; `next` is where the console goes once back.
 */
export async function signInWithEntra(config: EntraConfig, next: string): Promise<void> {
  await (await msal(config)).loginRedirect({ scopes: [...config.scopes], state: next });
}

/** Back from Entra: the session from the code MSAL redeemed, and where to go next; undefined when this was no return. */
export async function completeEntraSignIn(config: EntraConfig): Promise<string | undefined> {
  const result = await (await msal(config)).handleRedirectPromise();
  if (!result) return undefined;
  saveSession(sessionOf(result));
  return result.state || `${BASE}/`;
}

/** The person's session: the API token, their name, and the roles the token grants them (Entra puts no tenant in it). */
function sessionOf(result: AuthenticationResult): Session {
  const roles = claimsOf(result.accessToken).roles;
  return {
    token: result.accessToken,
    name: result.account.name ?? result.account.username,
    role: Array.isArray(roles) && roles.length > 0 ? roles.join(', ') : 'no role',
    expiresAt: result.expiresOn?.getTime() ?? Date.now() + 60 * 60 * 1000,
  };
}

/** The claims of a JWT, read for display only: the API validates the token itself. */
function claimsOf(token: string): { roles?: unknown } {
  try {
    const payload = token.split('.')[1] ?? '';
    return JSON.parse(atob(payload.replace(/-/g, '+').replace(/_/g, '/'))) as { roles?: unknown };
  } catch {
    return {};
  }
}
