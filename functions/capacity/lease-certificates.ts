import { publicEndpoint } from '../http/endpoint';
import { moduleApp } from '../app';

/**
 * The public keys lease certificates are checked with, as a JWKS: what the verifier (verifier/lease-certificate/)
 * fetches once and keeps. Anonymous and cacheable: a resource needs it before it can trust anything the host says.
 */
export const leaseCertificateKeys = publicEndpoint({
  tag: 'Leases',
  summary: 'Get the keys lease certificates are signed with',
  description:
    "The host's public keys for lease certificates, as a JSON Web Key Set (RFC 7517): the current key and the previous ones, each with " +
    'its `kid` (a certificate names its key in its header), `alg` ES256 and `use` sig. A protected resource fetches it once, keeps it and ' +
    'checks certificates offline; it fetches again only for a certificate naming a key it does not have (after a rotation). Anonymous, ' +
    'cacheable for 5 minutes. 404 `CAPACITY.CERTIFICATES_OFF` on a host that issues no certificates (no signing key configured); 503 ' +
    '`CAPACITY.CERTIFICATE_KEYS_UNAVAILABLE` while the keys cannot be read (Key Vault unreachable).',
}, async ({ deps }) => {
  const keys = await deps.capacity.certificateKeys();
  return { status: 200, headers: { 'cache-control': 'public, max-age=300', 'content-type': 'application/jwk-set+json' }, body: JSON.stringify(keys) };
});

moduleApp('capacity').http('leaseCertificateKeys', { route: 'runtime-cloud/.well-known/lease-jwks.json', methods: ['GET'], authLevel: 'anonymous', handler: leaseCertificateKeys });
