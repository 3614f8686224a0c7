import { createECDH, createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';
import { canonicalJson, isComputed, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import { unsupportedBecause } from './pulumi-yaml-resource';

/**
 * The providers that programs without a cloud use most, emulated by the local engine: `random` (values drawn
 * from a generator seeded by tenant, urn, inputs and fresh entropy: a password nobody can work out from the
 * stack's names, and two tenants with the same names never draw alike) and `tls` (keys from node:crypto). Outputs carry the providers' real
 * names (the Pulumi registry's random and tls schemas). The apply computes them once and the stack state keeps
 * them; a plan sees them from the state, or as computed values while the resource is still to be created.
 *
 * Every other type is a plain local cloud resource: its outputs are its inputs and `id`. `command:*` is refused:
 * it would run code on the host. Pure but for key generation (RSA keys cannot be drawn from a seed with
 * node:crypto: an RSA key is random, and kept in the state like every other output).
 */

/** What the emulation of one type knows. */
export interface Emulation {
  /** Outputs the provider computes, besides the inputs (`id` among them where the provider sets it). */
  readonly outputs: readonly string[];
  /** Outputs the provider marks secret: masked wherever values are shown. */
  readonly secret: readonly string[];
  /** Outputs the real provider has and the emulation does not compute: a reference to one fails the plan. */
  readonly notEmulated: readonly string[];
  /** The provider replaces the resource on any input change (every input of these types is ForceNew). */
  readonly replaceOnChange: boolean;
  /** The computed outputs, from the inputs as the target receives them (references resolved), at `now`. */
  generate(inputs: JsonObject, seed: Seed, now: Date): JsonObject;
}

/** What a resource's values are drawn from: the same seed draws the same values. */
export interface Seed {
  readonly tenant: string;
  readonly urn: string;
  /** The inputs as recorded (references unresolved), so the seed never holds a secret. */
  readonly inputs: JsonObject;
  /**
   * Random bytes of this creation (the apply draws them; tests fix them): without them a RandomPassword would be
   * a function of names anyone may know. What was drawn is kept in the state, so the resource keeps its values.
   */
  readonly entropy: Uint8Array;
}

/** The emulation of `type`, or undefined for a plain resource. */
export function emulationOf(type: string): Emulation | undefined {
  return Object.hasOwn(EMULATIONS, type) ? EMULATIONS[type] : undefined;
}

/** Throws `IAC.UNSUPPORTED` for a type the local engine must not carry out (`path` is the resource's type). */
export function assertTypeAllowed(type: string, path: string): void {
  if (type.startsWith('command:') || type === 'pulumi:providers:command') {
    throw unsupportedBecause(type, path, 'a command resource would run code on the host that applies the plan');
  }
}

/**
 * The outputs a resource has after an apply: its inputs, `id`, and what its emulation computed (which wins:
 * RandomPet's `id` is the pet name, as the provider has it).
 */
export function outputsFor(inputs: JsonObject, id: string, generated: JsonObject = {}): JsonObject {
  return { ...inputs, id, ...generated };
}

/** The outputs of `outputs` the emulation of `type` computed (for keeping them across a refresh). */
export function generatedOutputs(type: string, outputs: JsonObject): JsonObject {
  const emulation = emulationOf(type);
  if (!emulation) return {};
  return Object.fromEntries(emulation.outputs.filter((name) => outputs[name] !== undefined).map((name) => [name, outputs[name] as JsonValue]));
}

/**
 * The outputs with every named one masked as Pulumi prints a secret. A computed value stays: what reads it must
 * see that it is still unknown (and so changes when a replace draws a new secret), not a mask equal to the last.
 */
export function maskOutputs(outputs: JsonObject, names: readonly string[], mask: string): JsonObject {
  if (names.length === 0) return outputs;
  return Object.fromEntries(Object.entries(outputs).map(([k, v]) => [k, names.includes(k) && !isComputed(v) ? mask : v]));
}

// ---------------------------------------------------------------------------------------------------------------
// The generator

/** A deterministic byte stream: SHA-256 of the seed and a counter, block after block. */
class Draw {
  readonly #key: Buffer;
  #counter = 0;
  #buffer = Buffer.alloc(0);

  constructor(seed: Seed, purpose: string) {
    this.#key = createHash('sha256').update(`${purpose}\0${seed.tenant}\0${seed.urn}\0${canonicalJson(seed.inputs)}\0`).update(seed.entropy).digest();
  }

  bytes(count: number): Buffer {
    while (this.#buffer.length < count) {
      const block = createHash('sha256').update(this.#key).update(String(this.#counter++)).digest();
      this.#buffer = Buffer.concat([this.#buffer, block]);
    }
    const out = this.#buffer.subarray(0, count);
    this.#buffer = this.#buffer.subarray(count);
    return Buffer.from(out);
  }

  /** A uniform integer in [0, bound), by rejection: no modulo bias. */
  below(bound: number): number {
    if (bound <= 1) return 0;
    const limit = Math.floor(0x1_0000_0000 / bound) * bound;
    for (;;) {
      const value = this.bytes(4).readUInt32BE(0);
      if (value < limit) return value % bound;
    }
  }

  shuffle<T>(items: readonly T[]): T[] {
    const copy = [...items];
    for (let i = copy.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
    }
    return copy;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// random

const LOWER = 'abcdefghijklmnopqrstuvwxyz';
const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const NUMERIC = '0123456789';
/** The provider's default special characters. */
const SPECIAL = '!@#$%&*()-_=+[]{}<>:?';

function int(inputs: JsonObject, key: string, fallback?: number): number {
  const value = inputs[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new Error(`${key} must be an integer`);
  return value;
}

function bool(inputs: JsonObject, key: string, fallback: boolean): boolean {
  const value = inputs[key];
  return typeof value === 'boolean' ? value : fallback;
}

/** RandomString and RandomPassword: the provider's rules (min counts from each class first, then any, shuffled). */
function randomText(inputs: JsonObject, draw: Draw): string {
  const length = int(inputs, 'length');
  if (length < 1) throw new Error('length must be at least 1');
  const special = typeof inputs.overrideSpecial === 'string' ? inputs.overrideSpecial : SPECIAL;
  const numeric = bool(inputs, 'numeric', bool(inputs, 'number', true));
  const classes: [boolean, string, number][] = [
    [bool(inputs, 'lower', true), LOWER, int(inputs, 'minLower', 0)],
    [bool(inputs, 'upper', true), UPPER, int(inputs, 'minUpper', 0)],
    [numeric, NUMERIC, int(inputs, 'minNumeric', 0)],
    [bool(inputs, 'special', true), special, int(inputs, 'minSpecial', 0)],
  ];
  const all = classes.filter(([on]) => on).map(([, chars]) => chars).join('');
  if (all.length === 0) throw new Error('at least one character class must be enabled');
  const chars: string[] = [];
  for (const [on, set, min] of classes) for (let i = 0; on && i < min; i++) chars.push(set[draw.below(set.length)] as string);
  while (chars.length < length) chars.push(all[draw.below(all.length)] as string);
  return draw.shuffle(chars).join('');
}

const ADJECTIVES = ['amused', 'brave', 'calm', 'eager', 'fair', 'gentle', 'happy', 'jolly', 'kind', 'lively', 'merry', 'neat', 'proud', 'quick', 'quiet', 'smart', 'still', 'sunny', 'tidy', 'witty'];
const ADVERBS = ['boldly', 'briskly', 'calmly', 'deeply', 'firmly', 'freely', 'gladly', 'kindly', 'neatly', 'openly', 'really', 'simply', 'slowly', 'subtly', 'truly', 'vastly', 'warmly', 'wholly', 'wildly', 'wisely'];
const NAMES = ['badger', 'bison', 'crane', 'dingo', 'eagle', 'ferret', 'gecko', 'heron', 'ibis', 'koala', 'lemur', 'marten', 'newt', 'otter', 'panda', 'quail', 'raven', 'seal', 'tapir', 'walrus'];

function uuidOf(bytes: Buffer): string {
  const b = Buffer.from(bytes.subarray(0, 16));
  b[6] = ((b[6] as number) & 0x0f) | 0x40;
  b[8] = ((b[8] as number) & 0x3f) | 0x80;
  const hex = b.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const random = (outputs: string[], secret: string[], notEmulated: string[], generate: (inputs: JsonObject, draw: Draw) => JsonObject): Emulation => ({
  outputs,
  secret,
  notEmulated,
  replaceOnChange: true,
  generate: (inputs, seed) => generate(inputs, new Draw(seed, 'random')),
});

// ---------------------------------------------------------------------------------------------------------------
// tls

/** The curves of tls PrivateKey's `ecdsaCurve`, by node's name, with their private scalar length. */
const CURVES: Readonly<Record<string, { readonly name: string; readonly bytes: number; readonly oid: string; readonly ssh?: string }>> = {
  P224: { name: 'secp224r1', bytes: 28, oid: '1.3.132.0.33' },
  P256: { name: 'prime256v1', bytes: 32, oid: '1.2.840.10045.3.1.7', ssh: 'nistp256' },
  P384: { name: 'secp384r1', bytes: 48, oid: '1.3.132.0.34', ssh: 'nistp384' },
  P521: { name: 'secp521r1', bytes: 66, oid: '1.3.132.0.35', ssh: 'nistp521' },
};

/** A minimal DER encoder: enough for an EC private key (SEC1). */
function der(tag: number, content: Buffer): Buffer {
  const length = content.length;
  const header = length < 0x80 ? Buffer.from([tag, length]) : length < 0x100 ? Buffer.from([tag, 0x81, length]) : Buffer.from([tag, 0x82, length >> 8, length & 0xff]);
  return Buffer.concat([header, content]);
}

function derOid(oid: string): Buffer {
  const [a, b, ...rest] = oid.split('.').map(Number) as [number, number, ...number[]];
  const bytes = [40 * a + b];
  for (const part of rest) {
    const chunk: number[] = [];
    let value = part;
    do {
      chunk.unshift(value & 0x7f);
      value = Math.floor(value / 128);
    } while (value > 0);
    for (let i = 0; i < chunk.length - 1; i++) chunk[i] = (chunk[i] as number) | 0x80;
    bytes.push(...chunk);
  }
  return der(0x06, Buffer.from(bytes));
}

/** An ECDSA key whose private scalar is drawn from the seed (a drawn value past the curve's order is drawn again). */
function ecdsaKey(curve: (typeof CURVES)[string], draw: Draw): KeyObject {
  for (;;) {
    const scalar = draw.bytes(curve.bytes);
    if (curve.bytes === 66) scalar[0] = (scalar[0] as number) & 0x01;
    try {
      const ecdh = createECDH(curve.name);
      ecdh.setPrivateKey(scalar);
      const sec1 = der(
        0x30,
        Buffer.concat([
          der(0x02, Buffer.from([1])),
          der(0x04, scalar),
          der(0xa0, derOid(curve.oid)),
          der(0xa1, der(0x03, Buffer.concat([Buffer.from([0]), ecdh.getPublicKey()]))),
        ]),
      );
      return createPrivateKey({ key: sec1, format: 'der', type: 'sec1' });
    } catch {
      // Zero or not below the order: draw again (as likely as a hash collision for the larger curves).
    }
  }
}

/** An Ed25519 key from a drawn 32-byte seed (PKCS#8 of RFC 8410). */
function ed25519Key(draw: Draw): KeyObject {
  const prefix = Buffer.from('302e020100300506032b657004220420', 'hex');
  return createPrivateKey({ key: Buffer.concat([prefix, draw.bytes(32)]), format: 'der', type: 'pkcs8' });
}

function sshString(value: Buffer | string): Buffer {
  const bytes = typeof value === 'string' ? Buffer.from(value) : value;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

function sshMpint(value: Buffer): Buffer {
  let bytes = value;
  while (bytes.length > 1 && bytes[0] === 0) bytes = bytes.subarray(1);
  return sshString((bytes[0] as number) & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes);
}

/** The public key in OpenSSH's wire format (RFC 4253, 5656, 8709), or undefined (P224 has no OpenSSH name). */
function sshPublicKey(key: KeyObject, algorithm: string, curve?: (typeof CURVES)[string]): { type: string; blob: Buffer } | undefined {
  const jwk = createPublicKey(key).export({ format: 'jwk' });
  const b64 = (v: string | undefined) => Buffer.from(v ?? '', 'base64url');
  if (algorithm === 'ED25519') return { type: 'ssh-ed25519', blob: Buffer.concat([sshString('ssh-ed25519'), sshString(b64(jwk.x))]) };
  if (algorithm === 'RSA') return { type: 'ssh-rsa', blob: Buffer.concat([sshString('ssh-rsa'), sshMpint(b64(jwk.e)), sshMpint(b64(jwk.n))]) };
  if (!curve?.ssh) return undefined;
  const point = Buffer.concat([Buffer.from([4]), b64(jwk.x), b64(jwk.y)]);
  const type = `ecdsa-sha2-${curve.ssh}`;
  return { type, blob: Buffer.concat([sshString(type), sshString(curve.ssh), sshString(point)]) };
}

/**
 * The private key in OpenSSH's own format (PROTOCOL.key: unencrypted, one key), or '' where OpenSSH has no name for
 * the key (P224). The check integers come from the seed, so one key always writes the same text.
 */
function sshPrivateKey(key: KeyObject, ssh: { type: string; blob: Buffer } | undefined, curve: (typeof CURVES)[string] | undefined, draw: Draw): string {
  if (!ssh) return '';
  const jwk = key.export({ format: 'jwk' });
  const b64 = (v: string | undefined) => Buffer.from(v ?? '', 'base64url');
  let secret: Buffer;
  if (ssh.type === 'ssh-ed25519') secret = Buffer.concat([sshString(b64(jwk.x)), sshString(Buffer.concat([b64(jwk.d), b64(jwk.x)]))]);
  else if (ssh.type === 'ssh-rsa') secret = Buffer.concat([sshMpint(b64(jwk.n)), sshMpint(b64(jwk.e)), sshMpint(b64(jwk.d)), sshMpint(b64(jwk.qi)), sshMpint(b64(jwk.p)), sshMpint(b64(jwk.q))]);
  else secret = Buffer.concat([sshString(curve?.ssh ?? ''), sshString(Buffer.concat([Buffer.from([4]), b64(jwk.x), b64(jwk.y)])), sshMpint(b64(jwk.d))]);
  const check = draw.bytes(4);
  const body = Buffer.concat([check, check, sshString(ssh.type), secret, sshString('')]);
  const padding = Buffer.from(Array.from({ length: (8 - (body.length % 8)) % 8 }, (_, i) => i + 1));
  const none = sshString('none');
  const file = Buffer.concat([Buffer.from('openssh-key-v1\0'), none, none, sshString(''), Buffer.from([0, 0, 0, 1]), sshString(ssh.blob), sshString(Buffer.concat([body, padding]))]);
  return `-----BEGIN OPENSSH PRIVATE KEY-----\n${(file.toString('base64').match(/.{1,70}/g) ?? []).join('\n')}\n-----END OPENSSH PRIVATE KEY-----\n`;
}

function privateKey(inputs: JsonObject, seed: Seed): JsonObject {
  const algorithm = inputs.algorithm;
  const draw = new Draw(seed, 'tls');
  let key: KeyObject;
  let curve: (typeof CURVES)[string] | undefined;
  if (algorithm === 'ED25519') key = ed25519Key(draw);
  else if (algorithm === 'ECDSA') {
    const name = typeof inputs.ecdsaCurve === 'string' ? inputs.ecdsaCurve : 'P224';
    curve = CURVES[name];
    if (!curve) throw new Error(`ecdsaCurve must be one of ${Object.keys(CURVES).join(', ')}`);
    key = ecdsaKey(curve, draw);
  } else if (algorithm === 'RSA') {
    key = generateKeyPairSync('rsa', { modulusLength: int(inputs, 'rsaBits', 2048) }).privateKey;
  } else throw new Error('algorithm must be RSA, ECDSA or ED25519');
  const publicKey = createPublicKey(key);
  const pem = (value: string | Buffer) => value.toString();
  const traditional = algorithm === 'RSA' ? key.export({ format: 'pem', type: 'pkcs1' }) : algorithm === 'ECDSA' ? key.export({ format: 'pem', type: 'sec1' }) : key.export({ format: 'pem', type: 'pkcs8' });
  const ssh = sshPublicKey(key, algorithm, curve);
  return {
    privateKeyPem: pem(traditional),
    privateKeyPemPkcs8: pem(key.export({ format: 'pem', type: 'pkcs8' })),
    privateKeyOpenssh: sshPrivateKey(key, ssh, curve, draw),
    publicKeyPem: pem(publicKey.export({ format: 'pem', type: 'spki' })),
    publicKeyOpenssh: ssh ? `${ssh.type} ${ssh.blob.toString('base64')}\n` : '',
    publicKeyFingerprintMd5: ssh ? (createHash('md5').update(ssh.blob).digest('hex').match(/../g) ?? []).join(':') : '',
    publicKeyFingerprintSha256: ssh ? `SHA256:${createHash('sha256').update(ssh.blob).digest('base64').replace(/=+$/, '')}` : '',
    // The provider's id: the SHA-1 of the public key, hex.
    id: createHash('sha1').update(publicKey.export({ format: 'der', type: 'spki' })).digest('hex'),
  };
}


/** The DER of an unsigned integer (a leading zero keeps it positive). */
function derUnsigned(value: Buffer): Buffer {
  let bytes = value;
  while (bytes.length > 1 && bytes[0] === 0) bytes = bytes.subarray(1);
  return der(0x02, (bytes[0] as number) & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes);
}

const seq = (...items: Buffer[]) => der(0x30, Buffer.concat(items));

/** X.509 Time: UTCTime before 2050, GeneralizedTime from then on (RFC 5280 4.1.2.5). */
function derTime(at: Date): Buffer {
  const iso = at.toISOString().replace(/[-:T]/g, '').slice(0, 14);
  return at.getUTCFullYear() < 2050 ? der(0x17, Buffer.from(`${iso.slice(2)}Z`)) : der(0x18, Buffer.from(`${iso}Z`));
}

/** tls SelfSignedCert's `subject` members, with their attribute OIDs (PrintableString where X.520 says so). */
const SUBJECT: readonly [string, string, boolean][] = [
  ['country', '2.5.4.6', true],
  ['province', '2.5.4.8', false],
  ['locality', '2.5.4.7', false],
  ['streetAddresses', '2.5.4.9', false],
  ['postalCode', '2.5.4.17', false],
  ['organization', '2.5.4.10', false],
  ['organizationalUnit', '2.5.4.11', false],
  ['commonName', '2.5.4.3', false],
  ['serialNumber', '2.5.4.5', true],
];

function derName(subject: JsonValue | undefined): Buffer {
  const members = subject !== null && typeof subject === 'object' && !Array.isArray(subject) ? (subject as JsonObject) : {};
  const rdns: Buffer[] = [];
  for (const [key, oid, printable] of SUBJECT) {
    const value = members[key];
    const values = Array.isArray(value) ? (value as readonly JsonValue[]) : value === undefined ? [] : [value];
    for (const v of values) {
      if (typeof v !== 'string') throw new Error(`subject.${key} must be text`);
      rdns.push(der(0x31, seq(derOid(oid), der(printable ? 0x13 : 0x0c, Buffer.from(v)))));
    }
  }
  return seq(...rdns);
}

/** tls `allowedUses`: key usage bits (RFC 5280 4.2.1.3) and extended key usage OIDs (4.2.1.12). */
const KEY_USAGE_BITS: Readonly<Record<string, number>> = {
  digital_signature: 0,
  content_commitment: 1,
  key_encipherment: 2,
  data_encipherment: 3,
  key_agreement: 4,
  cert_signing: 5,
  crl_signing: 6,
  encipher_only: 7,
  decipher_only: 8,
};
const EXTENDED_KEY_USAGES: Readonly<Record<string, string>> = {
  any_extended: '2.5.29.37.0',
  server_auth: '1.3.6.1.5.5.7.3.1',
  client_auth: '1.3.6.1.5.5.7.3.2',
  code_signing: '1.3.6.1.5.5.7.3.3',
  email_protection: '1.3.6.1.5.5.7.3.4',
  ipsec_end_system: '1.3.6.1.5.5.7.3.5',
  ipsec_tunnel: '1.3.6.1.5.5.7.3.6',
  ipsec_user: '1.3.6.1.5.5.7.3.7',
  timestamping: '1.3.6.1.5.5.7.3.8',
  ocsp_signing: '1.3.6.1.5.5.7.3.9',
};

function extension(oid: string, critical: boolean, value: Buffer): Buffer {
  return seq(derOid(oid), ...(critical ? [Buffer.from([0x01, 0x01, 0xff])] : []), der(0x04, value));
}

function strings(inputs: JsonObject, key: string): string[] {
  const value = inputs[key] ?? [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw new Error(`${key} must be a list of strings`);
  return [...(value as readonly string[])];
}

/** The signature algorithm of a key, as X.509 names it, and the hash `crypto.sign` takes (null: the key's own). */
function signatureOf(key: KeyObject): { algorithm: Buffer; hash: string | null; name: string } {
  if (key.asymmetricKeyType === 'rsa') return { algorithm: seq(derOid('1.2.840.113549.1.1.11'), Buffer.from([0x05, 0x00])), hash: 'sha256', name: 'RSA' };
  if (key.asymmetricKeyType === 'ed25519') return { algorithm: seq(derOid('1.3.101.112')), hash: null, name: 'ED25519' };
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    const [oid, hash] = curve === 'secp384r1' ? ['1.2.840.10045.4.3.3', 'sha384'] : curve === 'secp521r1' ? ['1.2.840.10045.4.3.4', 'sha512'] : ['1.2.840.10045.4.3.2', 'sha256'];
    return { algorithm: seq(derOid(oid)), hash, name: 'ECDSA' };
  }
  throw new Error(`privateKeyPem holds a ${key.asymmetricKeyType ?? 'unknown'} key; RSA, ECDSA and ED25519 are supported`);
}

/** A self-signed X.509 v3 certificate, as the tls provider makes one, signed with `privateKeyPem`. */
function selfSignedCert(inputs: JsonObject, seed: Seed, now: Date): JsonObject {
  if (typeof inputs.privateKeyPem !== 'string') throw new Error('privateKeyPem must be a PEM private key');
  const key = createPrivateKey(inputs.privateKeyPem);
  const signature = signatureOf(key);
  const hours = int(inputs, 'validityPeriodHours');
  if (hours < 1) throw new Error('validityPeriodHours must be at least 1');
  const notBefore = new Date(Math.floor(now.getTime() / 1000) * 1000);
  const notAfter = new Date(notBefore.getTime() + hours * 3_600_000);
  const serial = new Draw(seed, 'tls-serial').bytes(16);
  serial[0] = (serial[0] as number) & 0x7f;
  const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });

  const uses = strings(inputs, 'allowedUses');
  const unknown = uses.find((u) => KEY_USAGE_BITS[u] === undefined && EXTENDED_KEY_USAGES[u] === undefined);
  if (unknown !== undefined) throw new Error(`allowedUses: ${unknown} is not a key usage`);
  const extensions: Buffer[] = [extension('2.5.29.19', true, inputs.isCaCertificate === true ? seq(Buffer.from([0x01, 0x01, 0xff])) : seq())];
  const bits = uses.map((u) => KEY_USAGE_BITS[u]).filter((b): b is number => b !== undefined);
  if (bits.length > 0) {
    const bytes = Buffer.alloc(Math.floor(Math.max(...bits) / 8) + 1);
    for (const bit of bits) bytes[bit >> 3] = (bytes[bit >> 3] as number) | (0x80 >> (bit & 7));
    const last = bytes[bytes.length - 1] as number;
    let unused = 0;
    while (unused < 7 && (last & (1 << unused)) === 0) unused++;
    extensions.push(extension('2.5.29.15', true, der(0x03, Buffer.concat([Buffer.from([unused]), bytes]))));
  }
  const extended = uses.map((u) => EXTENDED_KEY_USAGES[u]).filter((o): o is string => o !== undefined);
  if (extended.length > 0) extensions.push(extension('2.5.29.37', false, seq(...extended.map(derOid))));
  const names = [
    ...strings(inputs, 'dnsNames').map((n) => der(0x82, Buffer.from(n))),
    ...strings(inputs, 'ipAddresses').map((ip) => {
      if (isIP(ip) === 4) return der(0x87, Buffer.from(ip.split('.').map(Number)));
      throw new Error(`ipAddresses: ${ip} is not an IPv4 address (IPv6 is not emulated)`);
    }),
    ...strings(inputs, 'uris').map((u) => der(0x86, Buffer.from(u))),
  ];
  if (names.length > 0) extensions.push(extension('2.5.29.17', false, seq(...names)));
  if (inputs.setSubjectKeyId === true) {
    // RFC 5280 4.2.1.2 method 1: the SHA-1 of the subject public key bits.
    extensions.push(extension('2.5.29.14', false, der(0x04, createHash('sha1').update(publicKeyBits(key)).digest())));
  }

  const name = derName(inputs.subject);
  const tbs = seq(der(0xa0, der(0x02, Buffer.from([2]))), derUnsigned(serial), signature.algorithm, name, seq(derTime(notBefore), derTime(notAfter)), name, spki, der(0xa3, seq(...extensions)));
  const signed = sign(signature.hash, tbs, key);
  const certificate = seq(tbs, signature.algorithm, der(0x03, Buffer.concat([Buffer.from([0]), signed])));
  const early = typeof inputs.earlyRenewalHours === 'number' ? inputs.earlyRenewalHours : 0;
  return {
    certPem: `-----BEGIN CERTIFICATE-----\n${(certificate.toString('base64').match(/.{1,64}/g) ?? []).join('\n')}\n-----END CERTIFICATE-----\n`,
    keyAlgorithm: signature.name,
    validityStartTime: notBefore.toISOString().replace('.000Z', 'Z'),
    validityEndTime: notAfter.toISOString().replace('.000Z', 'Z'),
    readyForRenewal: now.getTime() >= notAfter.getTime() - early * 3_600_000,
    // The provider's id: the serial number in decimal.
    id: BigInt(`0x${serial.toString('hex')}`).toString(),
  };
}

/** The subject public key bits of an SPKI (RFC 5280 4.1.2.7): PKCS#1 for RSA, the point for EC, the key for Ed25519. */
function publicKeyBits(key: KeyObject): Buffer {
  const publicKey = createPublicKey(key);
  if (publicKey.asymmetricKeyType === 'rsa') return publicKey.export({ format: 'der', type: 'pkcs1' });
  const jwk = publicKey.export({ format: 'jwk' });
  const x = Buffer.from(jwk.x ?? '', 'base64url');
  return publicKey.asymmetricKeyType === 'ec' ? Buffer.concat([Buffer.from([4]), x, Buffer.from(jwk.y ?? '', 'base64url')]) : x;
}

// ---------------------------------------------------------------------------------------------------------------
// The table

const EMULATIONS: Readonly<Record<string, Emulation>> = {
  'random:index:RandomPassword': random(['result', 'id'], ['result'], ['bcryptHash'], (inputs, draw) => ({ result: randomText(inputs, draw), id: 'none' })),
  'random:index:RandomString': random(['result', 'id'], [], [], (inputs, draw) => {
    const result = randomText(inputs, draw);
    return { result, id: result };
  }),
  'random:index:RandomId': random(['hex', 'b64Std', 'b64Url', 'dec', 'id'], [], [], (inputs, draw) => {
    const bytes = draw.bytes(int(inputs, 'byteLength'));
    const prefix = typeof inputs.prefix === 'string' ? inputs.prefix : '';
    const b64Url = bytes.toString('base64url');
    return { hex: prefix + bytes.toString('hex'), b64Std: prefix + bytes.toString('base64'), b64Url: prefix + b64Url, dec: prefix + BigInt(`0x${bytes.toString('hex') || '0'}`).toString(), id: b64Url };
  }),
  'random:index:RandomInteger': random(['result', 'id'], [], [], (inputs, draw) => {
    const min = int(inputs, 'min');
    const max = int(inputs, 'max');
    if (max < min) throw new Error('max must not be less than min');
    const result = min + draw.below(max - min + 1);
    return { result, id: String(result) };
  }),
  'random:index:RandomPet': random(['id'], [], [], (inputs, draw) => {
    const length = int(inputs, 'length', 2);
    const separator = typeof inputs.separator === 'string' ? inputs.separator : '-';
    const words = [...Array.from({ length: Math.max(0, length - 2) }, () => ADVERBS[draw.below(ADVERBS.length)]), ...(length >= 2 ? [ADJECTIVES[draw.below(ADJECTIVES.length)]] : []), NAMES[draw.below(NAMES.length)]];
    const pet = words.join(separator);
    return { id: typeof inputs.prefix === 'string' ? `${inputs.prefix}${separator}${pet}` : pet };
  }),
  'random:index:RandomUuid': random(['result', 'id'], [], [], (_, draw) => {
    const result = uuidOf(draw.bytes(16));
    return { result, id: result };
  }),
  'random:index:RandomShuffle': random(['results', 'id'], [], [], (inputs, draw) => {
    const items = inputs.inputs;
    if (!Array.isArray(items) || !items.every((i) => typeof i === 'string')) throw new Error('inputs must be a list of strings');
    const shuffled = draw.shuffle(items);
    const count = inputs.resultCount === undefined ? shuffled.length : int(inputs, 'resultCount');
    return { results: shuffled.slice(0, count), id: '-' };
  }),
  // Pulumi's built-in Stash keeps the value its input had when it was created: an update changes `input`, never
  // `output` (the engine keeps generated outputs on update). Taken from the inputs as recorded, so a referenced
  // secret stays a reference in the state.
  'pulumi:index:Stash': {
    outputs: ['output'],
    secret: [],
    notEmulated: [],
    replaceOnChange: false,
    generate: (inputs, seed) => {
      if (inputs.passthrough === true) throw new Error('passthrough: true (an output that follows its input) is not emulated by the local engine');
      return { output: seed.inputs.input ?? null };
    },
  },
  'tls:index:PrivateKey': {
    outputs: ['id', 'privateKeyPem', 'privateKeyPemPkcs8', 'privateKeyOpenssh', 'publicKeyPem', 'publicKeyOpenssh', 'publicKeyFingerprintMd5', 'publicKeyFingerprintSha256'],
    secret: ['privateKeyPem', 'privateKeyPemPkcs8', 'privateKeyOpenssh'],
    notEmulated: [],
    replaceOnChange: true,
    generate: privateKey,
  },
  'tls:index:SelfSignedCert': {
    outputs: ['id', 'certPem', 'keyAlgorithm', 'validityStartTime', 'validityEndTime', 'readyForRenewal'],
    secret: [],
    notEmulated: [],
    replaceOnChange: true,
    generate: selfSignedCert,
  },
};

