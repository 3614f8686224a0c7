import type { JSONWebKeySet } from 'jose';
import { signCompactJws, type SigningKeys } from '../platform/signing/signing-keys';
import { problemError } from '../platform/errors/catalogue';
import type { Clock } from '../platform/time/clock';
import { CapacityErrors } from './errors';
import { effectiveState, type Lease } from './lease';

/**
 * Lease certificates: with every grant and renewal the holder gets a short-lived compact JWS of its lease (id,
 * tenant, pool, kind, holder, units, fencing token), signed with the host's signing keys. A protected resource
 * checks it offline against the host's published keys with the verifier (verifier/lease-certificate/) and refuses a
 * fencing token below the highest it has seen for the pool, so a holder that lost its lease is refused even while
 * the host cannot be reached.
 *
 * BREAKING-CHANGE SHAPE: the certificate's header and claims are read by the verifier in every protected resource.
 */
export const LEASE_CERTIFICATE_TYPE = 'lease-cert+jwt';

export interface LeaseCertificates {
  readonly keys: SigningKeys;
  /** The certificates' `iss`: the host's API audience. Example: `'api://runtime-cloud'`. */
  readonly issuer: string;
  /** The longest a certificate is valid; never past its lease's expiry. Example: `300`. */
  readonly lifetimeSeconds: number;
}

/** A certificate of an active lease, valid until the lease expires or the lifetime ends, whichever is first. */
export async function certifyLease(certificates: LeaseCertificates, clock: Clock, lease: Lease): Promise<string | undefined> {
  const now = clock.now();
  if (effectiveState(lease, now) !== 'active') return undefined;
  const issuedAt = Math.floor(now.getTime() / 1000);
  const expiresAt = Math.min(Math.floor(lease.expiresAt.getTime() / 1000), issuedAt + certificates.lifetimeSeconds);
  return signCompactJws(certificates.keys, LEASE_CERTIFICATE_TYPE, {
    iss: certificates.issuer,
    sub: lease.id,
    tenant: lease.tenant,
    pool: lease.pool,
    kind: lease.kind,
    holder: lease.holder,
    units: lease.units,
    fencingToken: lease.fencingToken,
    iat: issuedAt,
    exp: expiresAt,
  });
}

/** The public keys certificates are checked with, current and previous; a host without signing keys has none. */
export async function certificateKeys(certificates: LeaseCertificates | undefined): Promise<JSONWebKeySet> {
  if (!certificates) throw problemError(CapacityErrors.certificatesOff, 'this host issues no lease certificates: no signing key is configured (RuntimeCloud__Capacity__CertificateKey)');
  try {
    return await certificates.keys.publicKeys();
  } catch {
    // Where the keys live (a vault's name, its error) is not for anonymous callers.
    throw problemError(CapacityErrors.certificateKeysUnavailable, 'the lease certificate keys cannot be read now; try again shortly');
  }
}
