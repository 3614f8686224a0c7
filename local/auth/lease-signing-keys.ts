import { createPrivateKey, generateKeyPairSync, randomUUID, sign, type JsonWebKey, type KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { JWK } from 'jose';
import type { SigningKey, SigningKeys } from '../../shared/platform/signing/signing-keys';

/**
 * The local host's lease certificate keys: a ring of ES256 keys in its state dir, newest last, made on first use.
 * `runtime-cloud lease-keys rotate` adds a key; the host signs with the newest and publishes the last `KEPT` ones,
 * so a certificate of the previous key verifies until it expires. The host reads the ring again whenever the file
 * changed, so a rotation takes effect without a restart. Never used in Azure (Key Vault there).
 */
const RING_FILE = 'keys/lease-certificates.json';
const KEPT = 3;

interface RingFile {
  readonly keys: readonly { readonly kid: string; readonly privateJwk: JsonWebKey; readonly createdAt: string }[];
}

export function localLeaseSigningKeys(stateDir: string): SigningKeys {
  const file = join(stateDir, RING_FILE);
  ensureRing(file);
  let read: { version: string; ring: { kid: string; key: KeyObject; publicJwk: JWK }[] } | undefined;
  // The file is replaced by a rename on rotation: a new inode or time is a new ring.
  const ring = () => {
    const stat = statSync(file);
    const version = `${stat.ino}:${stat.mtimeMs}:${stat.size}`;
    if (read?.version !== version) {
      const { keys } = JSON.parse(readFileSync(file, 'utf8')) as RingFile;
      read = {
        version,
        ring: keys.map(({ kid, privateJwk }) => {
          const { d: _private, ...publicJwk } = privateJwk;
          return { kid, key: createPrivateKey({ key: privateJwk, format: 'jwk' }), publicJwk: { ...publicJwk, kid, alg: 'ES256', use: 'sig' } };
        }),
      };
    }
    return read.ring;
  };
  return {
    current() {
      const newest = ring().at(-1);
      if (!newest) return Promise.reject(new Error(`${file} holds no key`));
      const key: SigningKey = { kid: newest.kid, sign: (input) => Promise.resolve(sign('sha256', input, { key: newest.key, dsaEncoding: 'ieee-p1363' })) };
      return Promise.resolve(key);
    },
    publicKeys: () => Promise.resolve({ keys: ring().map((k) => k.publicJwk).reverse() }),
  };
}

/** Adds a new key to the ring, which signs from now on; the oldest beyond the last three leave it. Answers its kid. */
export function rotateLeaseSigningKey(stateDir: string): string {
  const file = join(stateDir, RING_FILE);
  ensureRing(file);
  const { keys } = JSON.parse(readFileSync(file, 'utf8')) as RingFile;
  const added = newKey();
  writeRing(file, { keys: [...keys, added].slice(-KEPT) });
  return added.kid;
}

function ensureRing(file: string): void {
  if (existsSync(file)) return;
  mkdirSync(dirname(file), { recursive: true });
  writeRing(file, { keys: [newKey()] }, { onlyIfAbsent: true });
}

function newKey() {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { kid: randomUUID(), privateJwk: privateKey.export({ format: 'jwk' }), createdAt: new Date().toISOString() };
}

// Write then rename, so a host reading the ring never reads half a file, and two processes starting at once keep one.
function writeRing(file: string, ring: RingFile, options: { onlyIfAbsent?: boolean } = {}): void {
  const temporary = `${file}.${process.pid}.${randomUUID()}.tmp`;
  writeFileSync(temporary, JSON.stringify(ring), { mode: 0o600 });
  if (options.onlyIfAbsent && existsSync(file)) rmSync(temporary);
  else renameSync(temporary, file);
}
