import type { Route } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { browserAvailable, ConsoleUnderTest, screenshot, violationsOf } from '../support/browser';

/**
 * The console on a host that names its Entra app registration (RuntimeCloud__Console__*): signing in sends the
 * browser to the directory's authority with the authorization code flow and PKCE. Entra itself is never reached:
 * every request to login.microsoftonline.com is answered here (its metadata, and a stand-in page for the authorize
 * endpoint), and any other request off this machine fails the test.
 */
const DIRECTORY = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const AUTHORITY = `https://login.microsoftonline.com/${DIRECTORY}`;
const CONSOLE_APP = '5b7d2c1e-0f3a-4c8e-9a6b-1d2e3f4a5b6c';
const API_SCOPE = 'api://runtime-cloud/.default';

/** The directory's OpenID metadata as Entra publishes it, for the endpoints MSAL reads. */
const METADATA = {
  issuer: `${AUTHORITY}/v2.0`,
  authorization_endpoint: `${AUTHORITY}/oauth2/v2.0/authorize`,
  token_endpoint: `${AUTHORITY}/oauth2/v2.0/token`,
  end_session_endpoint: `${AUTHORITY}/oauth2/v2.0/logout`,
  jwks_uri: `${AUTHORITY}/discovery/v2.0/keys`,
  response_modes_supported: ['query', 'fragment', 'form_post'],
  code_challenge_methods_supported: ['S256'],
};
const INSTANCE_DISCOVERY = {
  tenant_discovery_endpoint: `${AUTHORITY}/v2.0/.well-known/openid-configuration`,
  'api-version': '1.1',
  metadata: [{ preferred_network: 'login.microsoftonline.com', preferred_cache: 'login.windows.net', aliases: ['login.microsoftonline.com', 'login.windows.net', 'login.microsoft.com', 'sts.windows.net'] }],
};

describe.runIf(browserAvailable())('the operator console signing in with Entra (a real host with the console app registration)', () => {
  const ui = new ConsoleUnderTest('console-entra', /^entra-/, {
    RuntimeCloud__Console__ClientId: CONSOLE_APP,
    RuntimeCloud__Console__Authority: AUTHORITY,
    RuntimeCloud__Console__ApiScope: API_SCOPE,
  });

  beforeAll(() => ui.start(), 120_000);
  afterAll(() => ui.stop());
  afterEach((test) => ui.after(test));

  it("when a person signs in, then the browser goes to the authority's /oauth2/v2.0/authorize with the console's client id, the API scope and an S256 PKCE challenge", async () => {
    // Arrange: Entra answered here; anything else off this machine refused and recorded.
    const page = await ui.newPage(1280);
    const offMachine: string[] = [];
    let authorize: URL | undefined;
    await page.context().route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, async (route: Route) => {
      const url = new URL(route.request().url());
      if (url.host !== 'login.microsoftonline.com') {
        offMachine.push(url.href);
        return route.abort();
      }
      if (url.pathname.endsWith('/.well-known/openid-configuration')) return route.fulfill({ json: METADATA });
      if (url.pathname.endsWith('/discovery/instance')) return route.fulfill({ json: INSTANCE_DISCOVERY });
      if (url.pathname === `/${DIRECTORY}/oauth2/v2.0/authorize`) {
        authorize = url;
        return route.fulfill({ contentType: 'text/html', body: '<!doctype html><title>Entra stand-in</title><h1>Entra stand-in</h1>' });
      }
      offMachine.push(url.href);
      return route.abort();
    });

    // Act
    await page.goto(ui.url('/runtime-cloud/console/runs'));
    await page.waitForURL(/\/sign-in/);
    await page.getByRole('heading', { name: 'Sign in', level: 1 }).waitFor();
    expect(await violationsOf(page, 'sign-in (Entra)')).toEqual([]);
    await screenshot(page, 'entra-sign-in-1280');
    await page.getByRole('button', { name: 'Sign in with Microsoft' }).click();
    await page.getByRole('heading', { name: 'Entra stand-in' }).waitFor();

    // Assert
    expect(authorize).toBeDefined();
    const query = authorize!.searchParams;
    expect(`${authorize!.origin}${authorize!.pathname}`).toBe(`${AUTHORITY}/oauth2/v2.0/authorize`);
    expect(query.get('response_type')).toBe('code');
    expect(query.get('code_challenge_method')).toBe('S256');
    expect(query.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(query.get('client_id')).toBe(CONSOLE_APP);
    expect(query.get('redirect_uri')).toBe(ui.url('/runtime-cloud/console/'));
    expect(query.get('scope')?.split(' ')).toContain(API_SCOPE);
    expect(offMachine).toEqual([]);
  }, 60_000);
});
