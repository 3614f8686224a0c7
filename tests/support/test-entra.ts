import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AccessToken, TokenCredential } from '@azure/identity';
import { generateKeyPair, SignJWT, type CryptoKey } from 'jose';

/**
 * A stand-in for Microsoft Entra: JWTs signed with a key made at test time, whose `aud` is the resource the scope
 * names as Entra derives it (scope minus `/.default`: `https://servicebus.azure.net//.default` →
 * `https://servicebus.azure.net/`). What a token is checked against is up to the service (the AMQP peer).
 */
export interface TestEntra {
  readonly issuer: string;
  readonly publicKey: CryptoKey;
  /**
   * Signs a token for `audience`, valid for `lifetimeSeconds` from now (negative: already expired), issued to the
   * identity whose client id is `appid` (default the host's).
   */
  issue(audience: string, lifetimeSeconds?: number, appid?: string): Promise<AccessToken>;
  /**
   * A TokenCredential issuing tokens for the scope it is asked for, or for `audience` whatever it is asked for;
   * `scopes` records each request.
   */
  credential(options?: { readonly audience?: string; readonly lifetimeSeconds?: number }): TokenCredential & { readonly scopes: (string | string[])[] };
}

export async function startTestEntra(): Promise<TestEntra> {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  const issuer = 'https://sts.windows.net/00000000-0000-0000-0000-00000000test/';
  const issue = async (audience: string, lifetimeSeconds = 3600, appid = 'runtime-cloud-host'): Promise<AccessToken> => {
    const now = Math.floor(Date.now() / 1000);
    const exp = now + lifetimeSeconds;
    const token = await new SignJWT({ appid, oid: appid === 'runtime-cloud-host' ? 'host-identity' : `${appid}-identity` })
      .setProtectedHeader({ alg: 'ES256', typ: 'JWT' })
      .setIssuer(issuer)
      .setAudience(audience)
      .setIssuedAt(Math.min(now, exp - 60))
      .setNotBefore(Math.min(now, exp - 60))
      .setExpirationTime(exp)
      .sign(privateKey);
    return { token, expiresOnTimestamp: exp * 1000 };
  };
  return {
    issuer,
    publicKey,
    issue,
    credential(options = {}) {
      const scopes: (string | string[])[] = [];
      return {
        scopes,
        async getToken(scope: string | string[]) {
          scopes.push(scope);
          return issue(options.audience ?? resourceOf(scope), options.lifetimeSeconds);
        },
      };
    },
  };
}

/** The resource a scope names, as Entra and @azure/identity map it. */
export function resourceOf(scope: string | string[]): string {
  const one = Array.isArray(scope) ? (scope[0] ?? '') : scope;
  return one.endsWith('/.default') ? one.slice(0, -'/.default'.length) : one;
}

export interface IdentityEndpoint {
  /** `IDENTITY_ENDPOINT` and `IDENTITY_HEADER` as App Service sets them for its managed identity. */
  readonly env: { readonly IDENTITY_ENDPOINT: string; readonly IDENTITY_HEADER: string };
  /** Each token request: the resource and client id asked for. */
  readonly asked: { readonly resource: string | null; readonly clientId: string | null }[];
  close(): Promise<void>;
}

/**
 * The App Service managed identity endpoint (protocol 2019-08-01) issuing `entra` tokens for the resource asked
 * for: what `DefaultAzureCredential` reaches on a Function App.
 */
export async function startIdentityEndpoint(entra: TestEntra): Promise<IdentityEndpoint> {
  const header = 'identity-header-secret';
  const asked: { resource: string | null; clientId: string | null }[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    const resource = url.searchParams.get('resource');
    const clientId = url.searchParams.get('client_id');
    asked.push({ resource, clientId });
    if (request.headers['x-identity-header'] !== header || !resource) {
      response.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'invalid_request' }));
      return;
    }
    // A user-assigned identity's token is issued to its client id.
    void entra.issue(resource, undefined, clientId ?? undefined).then(({ token, expiresOnTimestamp }) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ access_token: token, expires_on: String(expiresOnTimestamp / 1000), resource, token_type: 'Bearer' }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    env: { IDENTITY_ENDPOINT: `http://127.0.0.1:${(server.address() as AddressInfo).port}/msi/token`, IDENTITY_HEADER: header },
    asked,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
