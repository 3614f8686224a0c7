import type { TokenCredential } from '@azure/identity';
import { MethodOptions_IdempotencyLevel } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type Interceptor, type Transport } from '@connectrpc/connect';
import { retry } from '../time/retry';

/**
 * How this host calls the gRPC peers whose contracts it owns (contracts/README.md): ConnectRPC's gRPC protocol over
 * HTTP/2 (TLS outside loopback: the settings refuse `http://` elsewhere), a bearer token for the peer's audience on
 * every call, a deadline per call, and retries only of calls the contract marks idempotent
 * (`idempotency_level = NO_SIDE_EFFECTS | IDEMPOTENT`), only when the peer was unavailable.
 */

/** A bearer token the peer of `audience` accepts. */
export type PeerTokens = (audience: string) => Promise<string>;

export interface PeerOptions {
  /** The peer's base URL. Example: `https://governance.factory.internal`. */
  readonly url: string;
  readonly audience: string;
  readonly tokens: PeerTokens;
  /** Each call's deadline. */
  readonly deadlineMs: number;
  /** Attempts of an idempotent call whose peer was unavailable (default 3). */
  readonly attempts?: number;
}

export function peerTransport(options: PeerOptions): Transport {
  // Loaded with the first peer, not when the module is imported (registering the functions stays light).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { createGrpcTransport } = require('@connectrpc/connect-node') as typeof import('@connectrpc/connect-node');
  return createGrpcTransport({
    baseUrl: options.url,
    defaultTimeoutMs: options.deadlineMs,
    interceptors: [retryingIdempotent(options.attempts ?? 3), bearer(options.audience, options.tokens)],
  });
}

function bearer(audience: string, tokens: PeerTokens): Interceptor {
  return (next) => async (request) => {
    request.header.set('authorization', `Bearer ${await tokens(audience)}`);
    return next(request);
  };
}

const IDEMPOTENT = new Set([MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS, MethodOptions_IdempotencyLevel.IDEMPOTENT]);

/** Retries an idempotent call the peer did not answer (UNAVAILABLE), with a short backoff, within its deadline. */
export function retryingIdempotent(attempts: number): Interceptor {
  return (next) => async (request) => {
    const idempotent = IDEMPOTENT.has(request.method.idempotency);
    return retry(
      async () => {
        try {
          return await next(request);
        } catch (thrown) {
          throw ConnectError.from(thrown);
        }
      },
      {
        attempts,
        backoff: { firstMs: 50 },
        retryIf: (error) => idempotent && (error as ConnectError).code === Code.Unavailable,
        signal: request.signal,
      },
    );
  };
}

/**
 * Tokens from Entra through `@azure/identity` (the host's managed identity in Azure): `<audience>/.default`, kept
 * until five minutes before they expire.
 */
export function entraTokens(credential: TokenCredential): PeerTokens {
  const cache = new Map<string, { token: string; refreshAt: number }>();
  return async (audience) => {
    const cached = cache.get(audience);
    if (cached && Date.now() < cached.refreshAt) return cached.token;
    const scope = `${audience.replace(/\/+$/, '')}/.default`;
    const issued = await credential.getToken(scope);
    if (!issued) throw new ConnectError(`no token for ${scope}`, Code.Unauthenticated);
    cache.set(audience, { token: issued.token, refreshAt: issued.expiresOnTimestamp - 5 * 60_000 });
    return issued.token;
  };
}

/**
 * The host's tokens for its peers: Entra tokens of the user-assigned identity `clientId`, else of the default
 * chain. `@azure/identity` loads with the first token asked for, not at start (a host on its embedded defaults
 * never asks).
 */
export function hostPeerTokens(clientId: string): PeerTokens {
  let tokens: PeerTokens | undefined;
  return (audience) => {
    if (!tokens) {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const identity = require('@azure/identity') as typeof import('@azure/identity');
      tokens = entraTokens(clientId ? new identity.ManagedIdentityCredential({ clientId }) : new identity.DefaultAzureCredential());
    }
    return tokens(audience);
  };
}
