import { createHash } from 'node:crypto';
import type { TokenCredential } from '@azure/core-auth';
import type { HttpClient } from '@azure/core-rest-pipeline';
import type { CryptographyClient, KeyClient, KeyVaultKey } from '@azure/keyvault-keys';
import type { JWK } from 'jose';
import type { Clock } from '../time/clock';
import type { SigningKey, SigningKeys } from './signing-keys';

export interface KeyVaultSigningKeysOptions {
  /** The key, without a version: its versions are the ring. Example: `https://kv-rch-prod.vault.azure.net/keys/lease-certificates`. */
  readonly keyUrl: string;
  readonly credential: TokenCredential;
  readonly clock: Clock;
  /**
   * How long the versions read from Key Vault are kept before they are listed again, and how long a new version is
   * published before it signs, so that every host's JWKS lists a key before any certificate names it.
   * Example: `300_000` (the default).
   */
  readonly refreshMs?: number;
  /** How many enabled versions, newest first, are published. Example: `3` (the default). */
  readonly published?: number;
  /** Key Vault's transport (tests). */
  readonly httpClient?: HttpClient;
}

interface Version {
  readonly version: string;
  readonly createdOn: number;
  readonly key: KeyVaultKey;
  readonly jwk: JWK;
}

/**
 * Signing keys in Azure Key Vault: the versions of one EC P-256 key. Private keys never leave the vault: each
 * signature is Key Vault's `sign` (ES256) of the input's SHA-256 digest. The JWKS is built from the public parts of
 * the newest enabled, unexpired versions. A rotation (a new version, by hand or by the key's rotation policy) signs
 * only once it has been listed for `refreshMs`, so a certificate never names a key a host's JWKS does not list yet;
 * certificates of the previous version verify while it stays enabled and among the published ones.
 */
export function keyVaultSigningKeys(options: KeyVaultSigningKeysOptions): SigningKeys {
  const { vaultUrl, name } = keyOfUrl(options.keyUrl);
  const refreshMs = options.refreshMs ?? 300_000;
  const published = options.published ?? 3;
  const transport = options.httpClient ? { httpClient: options.httpClient } : {};
  /* eslint-disable @typescript-eslint/no-require-imports -- loaded with the first certificate, not at registration */
  const sdk = () => require('@azure/keyvault-keys') as typeof import('@azure/keyvault-keys');
  /* eslint-enable @typescript-eslint/no-require-imports */
  let client: KeyClient | undefined;
  let read: { at: number; versions: Promise<Version[]> } | undefined;
  const signers = new Map<string, CryptographyClient>();

  const listVersions = async (): Promise<Version[]> => {
    client ??= new (sdk().KeyClient)(vaultUrl, options.credential, transport);
    const now = options.clock.now().getTime();
    const usable: { version: string; createdOn: number }[] = [];
    for await (const p of client.listPropertiesOfKeyVersions(name)) {
      if (!p.version || p.enabled === false) continue;
      if ((p.expiresOn && p.expiresOn.getTime() <= now) || (p.notBefore && p.notBefore.getTime() > now)) continue;
      usable.push({ version: p.version, createdOn: p.createdOn?.getTime() ?? 0 });
    }
    const newest = usable.sort((a, b) => b.createdOn - a.createdOn || b.version.localeCompare(a.version)).slice(0, published);
    return Promise.all(
      newest.map(async ({ version, createdOn }) => {
        const key = await client!.getKey(name, { version });
        return { version, createdOn, key, jwk: publicJwk(key, `${name}/${version}`) };
      }),
    );
  };
  const versions = (): Promise<Version[]> => {
    const now = options.clock.now().getTime();
    if (!read || now - read.at >= refreshMs) {
      const reading = { at: now, versions: listVersions() };
      // A failed read is not kept: the next call reads again.
      reading.versions.catch(() => {
        if (read === reading) read = undefined;
      });
      read = reading;
    }
    return read.versions;
  };

  return {
    async current(): Promise<SigningKey> {
      const all = await versions();
      const now = options.clock.now().getTime();
      // The newest version published long enough; the oldest published one while every version is new (a first key).
      const signing = all.find((v) => now - v.createdOn >= refreshMs) ?? all.at(-1);
      if (!signing) throw new Error(`Key Vault key ${options.keyUrl} has no enabled version`);
      let signer = signers.get(signing.version);
      if (!signer) {
        signer = new (sdk().CryptographyClient)(signing.key, options.credential, transport);
        signers.set(signing.version, signer);
      }
      const chosen = signer;
      return {
        kid: signing.jwk.kid ?? signing.version,
        async sign(input) {
          const digest = createHash('sha256').update(input).digest();
          return (await chosen.sign('ES256', digest)).result;
        },
      };
    },
    async publicKeys() {
      return { keys: (await versions()).map((v) => v.jwk) };
    },
  };
}

function keyOfUrl(keyUrl: string): { vaultUrl: string; name: string } {
  const url = new URL(keyUrl);
  const [keys, name, ...rest] = url.pathname.split('/').slice(1);
  if (url.protocol !== 'https:' || keys !== 'keys' || !name || rest.length > 0) throw new Error(`${keyUrl} is not a versionless Key Vault key URL (https://<vault>/keys/<name>)`);
  return { vaultUrl: url.origin, name };
}

/** The public part of an EC P-256 Key Vault key as a JWK, or a clear failure for any other key. */
function publicJwk(key: KeyVaultKey, kid: string): JWK {
  const { kty, crv, x, y } = key.key ?? {};
  if ((kty !== 'EC' && kty !== 'EC-HSM') || crv !== 'P-256' || !x || !y) {
    throw new Error(`Key Vault key ${key.id ?? kid} is ${kty ?? 'no key'} ${crv ?? ''}: lease certificates need an EC P-256 key`);
  }
  return { kty: 'EC', crv: 'P-256', x: Buffer.from(x).toString('base64url'), y: Buffer.from(y).toString('base64url'), kid, alg: 'ES256', use: 'sig' };
}
