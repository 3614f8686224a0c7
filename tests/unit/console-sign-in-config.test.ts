import { HttpRequest } from '@azure/functions';
import { describe, expect, it } from 'vitest';
import { serveConsole } from '../../functions/host/console';
import { provideRuntime } from '../../functions/runtime';
import { parseConfig } from '../../shared/platform/config/config';
import type { Deps } from '../../shared/deps';

/**
 * GET /runtime-cloud/console/config.json: how the console signs people in, from the host's settings (docs/console.md,
 * "Signing in"). The route reads the configuration only; the host's dependencies are never built.
 */
const DIRECTORY = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const CONSOLE_APP = '5b7d2c1e-0f3a-4c8e-9a6b-1d2e3f4a5b6c';

async function configAnswer(settings: Record<string, string>): Promise<{ status: number; headers: Record<string, string>; body: unknown }> {
  provideRuntime({ config: parseConfig(settings), deps: new Promise<Deps>(() => undefined) });
  const answer = await serveConsole(new HttpRequest({ method: 'GET', url: 'http://127.0.0.1/runtime-cloud/console/config.json', params: { path: 'config.json' } }));
  return { status: answer.status ?? 200, headers: answer.headers as Record<string, string>, body: JSON.parse(answer.body as string) };
}

describe('the console sign-in config route', () => {
  it('when the host names no console app registration, then the console signs in with the local issuer', async () => {
    const answer = await configAnswer({});
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toBe('application/json');
    expect(answer.body).toEqual({ signIn: 'local' });
  });

  it("when the host names the console's app registration, then Entra with its client id, authority and the API's scope", async () => {
    const answer = await configAnswer({
      RuntimeCloud__Console__ClientId: CONSOLE_APP,
      RuntimeCloud__Console__Authority: `https://login.microsoftonline.com/${DIRECTORY}`,
      RuntimeCloud__Console__ApiScope: 'api://runtime-cloud/user_impersonation',
    });
    expect(answer.body).toEqual({ signIn: 'entra', clientId: CONSOLE_APP, authority: `https://login.microsoftonline.com/${DIRECTORY}`, scopes: ['api://runtime-cloud/user_impersonation'] });
    expect(answer.headers['cache-control']).toBe('no-cache');
    expect(answer.headers['content-security-policy']).toContain('connect-src');
  });

  it("when only the client id is set, then the authority is the issuer's directory and the scope the API audience's .default", async () => {
    const answer = await configAnswer({
      RuntimeCloud__Console__ClientId: CONSOLE_APP,
      RuntimeCloud__Auth__Issuer: `https://login.microsoftonline.com/${DIRECTORY}/v2.0`,
      RuntimeCloud__Auth__Audience: 'api://runtime-cloud-prod',
    });
    expect(answer.body).toEqual({ signIn: 'entra', clientId: CONSOLE_APP, authority: `https://login.microsoftonline.com/${DIRECTORY}`, scopes: ['api://runtime-cloud-prod/.default'] });
  });

  it('when the client id is not an application id or the authority not an Entra one, then the configuration is refused naming the setting', () => {
    expect(() => parseConfig({ RuntimeCloud__Console__ClientId: 'console' })).toThrow(/RuntimeCloud__Console__ClientId/);
    expect(() => parseConfig({ RuntimeCloud__Console__ClientId: CONSOLE_APP, RuntimeCloud__Console__Authority: 'https://evil.example.com/tenant' })).toThrow(/RuntimeCloud__Console__Authority/);
  });
});
