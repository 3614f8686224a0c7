import { generateKeyPairSync, randomBytes, type JsonWebKey } from 'node:crypto';
import type { AccessToken, TokenCredential } from '@azure/core-auth';
import { createHttpHeaders, type HttpClient, type PipelineRequest, type PipelineResponse } from '@azure/core-rest-pipeline';

/**
 * A stand-in for Azure Key Vault's keys REST API, behind the real `@azure/keyvault-keys` SDK's
 * transport: the challenge an unauthenticated call gets, a key's versions, a version's public key, and `sign` of a
 * SHA-256 digest with ES256 as Key Vault does it (the digest signed as given, r and s concatenated). Node's crypto
 * signs messages, never a given digest, so the stand-in signs with ECDSA over P-256 written out below.
 */
export interface StandInVault {
  readonly url: string;
  readonly httpClient: HttpClient;
  readonly credential: TokenCredential;
  /** Adds a version of an EC P-256 key, created at `createdOn`; answers the version. */
  addVersion(name: string, createdOn: Date, options?: { enabled?: boolean; kty?: 'EC' | 'RSA' }): string;
  /** The calls the vault answered, as `METHOD path`. */
  readonly calls: string[];
}

export function standInVault(url = 'https://kv-stand-in.vault.azure.net'): StandInVault {
  const keys = new Map<string, { version: string; created: number; enabled: boolean; jwk: JsonWebKey }[]>();
  const calls: string[] = [];
  const answer = (request: PipelineRequest, status: number, body: unknown, headers: Record<string, string> = {}): PipelineResponse => ({
    request,
    status,
    headers: createHttpHeaders({ 'content-type': 'application/json; charset=utf-8', ...headers }),
    bodyAsText: JSON.stringify(body),
  });
  const versionView = (name: string, v: { version: string; created: number; enabled: boolean }) => ({
    kid: `${url}/keys/${name}/${v.version}`,
    attributes: { enabled: v.enabled, created: v.created, updated: v.created, recoveryLevel: 'Recoverable+Purgeable' },
  });
  const httpClient: HttpClient = {
    sendRequest(request) {
      const path = new URL(request.url).pathname;
      calls.push(`${request.method} ${path}`);
      if (!request.headers.has('authorization')) {
        return Promise.resolve(answer(request, 401, { error: { code: 'Unauthorized', message: 'AKV10000: Request is missing a Bearer or PoP token.' } }, {
          'www-authenticate': 'Bearer authorization="https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47", resource="https://vault.azure.net"',
        }));
      }
      const [, segment, name = '', version, action] = path.split('/');
      const versions = keys.get(name);
      if (segment !== 'keys' || !versions) return Promise.resolve(answer(request, 404, { error: { code: 'KeyNotFound', message: `A key with (name/id) ${name} was not found in this key vault.` } }));
      if (request.method === 'GET' && version === 'versions') {
        return Promise.resolve(answer(request, 200, { value: versions.map((v) => versionView(name, v)), nextLink: null }));
      }
      const found = versions.find((v) => v.version === version);
      if (!found) return Promise.resolve(answer(request, 404, { error: { code: 'KeyNotFound', message: `version ${version ?? ''} of ${name} was not found` } }));
      const { d: _private, ...publicJwk } = found.jwk;
      if (request.method === 'GET' && action === undefined) {
        return Promise.resolve(answer(request, 200, { key: { ...publicJwk, kid: `${url}/keys/${name}/${found.version}`, key_ops: ['sign', 'verify'] }, attributes: versionView(name, found).attributes }));
      }
      if (request.method === 'POST' && action === 'sign') {
        const { alg, value } = JSON.parse(typeof request.body === 'string' ? request.body : '{}') as { alg: string; value: string };
        if (alg !== 'ES256' || found.jwk.kty !== 'EC') return Promise.resolve(answer(request, 400, { error: { code: 'BadParameter', message: `${alg} is not valid for this key` } }));
        const signature = ecdsaP256(Buffer.from(value, 'base64url'), Buffer.from(found.jwk.d ?? '', 'base64url'));
        return Promise.resolve(answer(request, 200, { kid: `${url}/keys/${name}/${found.version}`, value: signature.toString('base64url') }));
      }
      return Promise.reject(new Error(`the stand-in vault does not answer ${request.method} ${path}`));
    },
  };
  const credential: TokenCredential = {
    getToken: (): Promise<AccessToken> => Promise.resolve({ token: 'stand-in-token', expiresOnTimestamp: Date.now() + 3_600_000 }),
  };
  return {
    url,
    httpClient,
    credential,
    calls,
    addVersion(name, createdOn, options = {}) {
      const version = randomBytes(16).toString('hex');
      const jwk =
        options.kty === 'RSA'
          ? generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' })
          : generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
      const list = keys.get(name) ?? [];
      list.push({ version, created: Math.floor(createdOn.getTime() / 1000), enabled: options.enabled ?? true, jwk });
      keys.set(name, list);
      return version;
    },
  };
}

// ECDSA over P-256 (FIPS 186-4, SEC 1) of a given digest, as Key Vault's `sign` does it.
const P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;
const G: Point = { x: 0x6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296n, y: 0x4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5n };
type Point = { x: bigint; y: bigint } | undefined;

const mod = (a: bigint, m: bigint) => ((a % m) + m) % m;
function power(base: bigint, exponent: bigint, m: bigint): bigint {
  let result = 1n;
  let b = mod(base, m);
  for (let e = exponent; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % m;
    b = (b * b) % m;
  }
  return result;
}
const inverse = (a: bigint, m: bigint) => power(a, m - 2n, m);

function add(p: Point, q: Point): Point {
  if (!p) return q;
  if (!q) return p;
  if (p.x === q.x && mod(p.y + q.y, P) === 0n) return undefined;
  const slope = p.x === q.x ? mod((3n * p.x * p.x - 3n) * inverse(2n * p.y, P), P) : mod((q.y - p.y) * inverse(q.x - p.x, P), P);
  const x = mod(slope * slope - p.x - q.x, P);
  return { x, y: mod(slope * (p.x - x) - p.y, P) };
}

function multiply(k: bigint, point: Point): Point {
  let result: Point;
  let addend = point;
  for (let n = k; n > 0n; n >>= 1n) {
    if (n & 1n) result = add(result, addend);
    addend = add(addend, addend);
  }
  return result;
}

const toBig = (bytes: Buffer) => BigInt(`0x${bytes.toString('hex') || '0'}`);
const to32 = (n: bigint) => Buffer.from(n.toString(16).padStart(64, '0'), 'hex');

function ecdsaP256(digest: Buffer, privateScalar: Buffer): Buffer {
  const z = toBig(digest);
  const d = toBig(privateScalar);
  for (;;) {
    const k = mod(toBig(randomBytes(32)), N - 1n) + 1n;
    const r = mod(multiply(k, G)?.x ?? 0n, N);
    const s = mod(inverse(k, N) * (z + r * d), N);
    if (r !== 0n && s !== 0n) return Buffer.concat([to32(r), to32(s)]);
  }
}
