import type { JSONWebKeySet } from 'jose';

/**
 * The host's signing keys, behind a port: a key ring of ES256 keys whose newest usable key signs, and whose public
 * keys, current and previous, are published as a JWKS. A rotation adds a key; what the previous key signed still
 * verifies while the ring publishes it. Production: a Key Vault key's versions (key-vault-signing-keys.adapter.ts);
 * the local host: a ring in its state dir.
 */
export interface SigningKeys {
  /** The key that signs now. */
  current(): Promise<SigningKey>;
  /** The public keys of the ring (current first), each with its `kid`, `alg` ES256 and `use` sig. */
  publicKeys(): Promise<JSONWebKeySet>;
}

export interface SigningKey {
  /** Example: `'lease-certificates/8f3c0d…'`. */
  readonly kid: string;
  /** The ES256 signature of `input` (SHA-256, P-256), as JWS carries it: r and s, 32 bytes each. */
  sign(input: Uint8Array): Promise<Uint8Array>;
}

/** A compact JWS of `claims` signed with the ring's current key, its `kid` and `typ` in the protected header. */
export async function signCompactJws(keys: SigningKeys, typ: string, claims: Readonly<Record<string, unknown>>): Promise<string> {
  const key = await keys.current();
  const header = Buffer.from(JSON.stringify({ alg: 'ES256', typ, kid: key.kid })).toString('base64url');
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
  const input = `${header}.${payload}`;
  const signature = await key.sign(Buffer.from(input, 'ascii'));
  return `${input}.${Buffer.from(signature).toString('base64url')}`;
}
