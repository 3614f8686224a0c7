import { X509Certificate, generateKeyPairSync, randomBytes, sign } from 'node:crypto';

/** A TLS key and certificate (PEM) made at test time, for `localhost` and `127.0.0.1`. */
export interface TestCertificate {
  readonly key: string;
  readonly cert: string;
}

/**
 * A self-signed P-256 certificate for `localhost` and `127.0.0.1`, valid for a day, written in DER by hand: Node can
 * sign but not build a certificate, and no package for it is a dependency. It is its own CA (basicConstraints
 * CA:TRUE), so a client trusts it by passing it as `ca`.
 */
export function selfSignedCertificate(): TestCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const ecdsaWithSha256 = seq(oid('1.2.840.10045.4.3.2'));
  const name = seq(set(seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from('runtime-cloud test')))));
  const now = Date.now();
  const serial = randomBytes(16);
  // Positive, and its first byte not zero: DER allows no leading zero byte before one under 0x80 ("illegal padding").
  serial[0] = (serial[0]! & 0x7f) | 0x40;
  const tbs = seq(
    tlv(0xa0, integer(Buffer.from([2]))),
    integer(serial),
    ecdsaWithSha256,
    name,
    seq(utcTime(new Date(now - 60_000)), utcTime(new Date(now + 24 * 60 * 60_000))),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
    tlv(
      0xa3,
      seq(
        // subjectAltName: DNS localhost, IP 127.0.0.1
        seq(oid('2.5.29.17'), tlv(0x04, seq(tlv(0x82, Buffer.from('localhost')), tlv(0x87, Buffer.from([127, 0, 0, 1]))))),
        // basicConstraints, critical: CA
        seq(oid('2.5.29.19'), tlv(0x01, Buffer.from([0xff])), tlv(0x04, seq(tlv(0x01, Buffer.from([0xff]))))),
      ),
    ),
  );
  const signature = sign('sha256', tbs, { key: privateKey, dsaEncoding: 'der' });
  const der = seq(tbs, ecdsaWithSha256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const cert = `-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n?$/, '\n')}-----END CERTIFICATE-----\n`;
  // Fails here, rather than in a handshake, if the encoding is wrong.
  if (!new X509Certificate(cert).verify(publicKey)) throw new Error('the test certificate does not verify');
  return { key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), cert };
}

function tlv(tag: number, content: Buffer): Buffer {
  const length = content.length;
  const header =
    length < 0x80 ? Buffer.from([tag, length]) : length < 0x100 ? Buffer.from([tag, 0x81, length]) : Buffer.from([tag, 0x82, length >> 8, length & 0xff]);
  return Buffer.concat([header, content]);
}

function seq(...parts: Buffer[]): Buffer {
  return tlv(0x30, Buffer.concat(parts));
}

function set(...parts: Buffer[]): Buffer {
  return tlv(0x31, Buffer.concat(parts));
}

function integer(bytes: Buffer): Buffer {
  return tlv(0x02, bytes[0]! & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes);
}

function oid(dotted: string): Buffer {
  const [first, second, ...rest] = dotted.split('.').map(Number);
  const bytes = [first! * 40 + second!];
  for (const value of rest) {
    const base128 = [value & 0x7f];
    for (let v = value >> 7; v > 0; v >>= 7) base128.unshift((v & 0x7f) | 0x80);
    bytes.push(...base128);
  }
  return tlv(0x06, Buffer.from(bytes));
}

function utcTime(date: Date): Buffer {
  const text = date.toISOString().replace(/[-:T]/g, '').slice(2, 14);
  return tlv(0x17, Buffer.from(`${text}Z`));
}
