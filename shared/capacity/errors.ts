import type { ProblemCatalogue } from '../platform/errors/catalogue';

/** Every problem the capacity module answers with (its codes start `CAPACITY.`). */
export const CapacityErrors = {
  invalidUnits: { code: 'CAPACITY.INVALID_UNITS', kind: 'validation', title: 'Units must be a positive integer' },
  invalidTtl: { code: 'CAPACITY.INVALID_TTL', kind: 'validation', title: 'ttlSeconds must be a positive integer' },
  ttlTooLong: { code: 'CAPACITY.TTL_TOO_LONG', kind: 'validation', title: "TTL longer than the edition allows" },
  ttlRequired: { code: 'CAPACITY.TTL_REQUIRED', kind: 'validation', title: 'Re-registering a lease needs its ttlSeconds' },
  invalidPool: { code: 'CAPACITY.INVALID_POOL', kind: 'validation', title: 'Pool not valid' },
  poolKindMismatch: { code: 'CAPACITY.POOL_KIND_MISMATCH', kind: 'validation', title: 'Pool holds another kind of units' },
  editionNotFound: { code: 'CAPACITY.EDITION_NOT_FOUND', kind: 'validation', title: 'Edition not found' },
  kindNotInEdition: { code: 'CAPACITY.KIND_NOT_IN_EDITION', kind: 'forbidden', title: 'Edition grants no capacity of this kind' },
  tenantUnknown: { code: 'CAPACITY.TENANT_UNKNOWN', kind: 'not-found', title: 'Tenant has no capacity edition' },
  poolNotFound: { code: 'CAPACITY.POOL_NOT_FOUND', kind: 'not-found', title: 'Pool not found' },
  leaseNotFound: { code: 'CAPACITY.LEASE_NOT_FOUND', kind: 'not-found', title: 'Lease not found' },
  leaseGone: { code: 'CAPACITY.LEASE_GONE', kind: 'gone', title: 'Lease released or expired' },
  fencingMismatch: { code: 'CAPACITY.FENCING_MISMATCH', kind: 'conflict', title: 'Fencing token mismatch' },
  leaseConflict: { code: 'CAPACITY.LEASE_CONFLICT', kind: 'conflict', title: 'Lease cannot be re-registered' },
  poolInUse: { code: 'CAPACITY.POOL_IN_USE', kind: 'conflict', title: 'Pool holds leased units' },
  quotaExceeded: { code: 'CAPACITY.QUOTA_EXCEEDED', kind: 'limit', title: 'Quota exceeded' },
  exhausted: { code: 'CAPACITY.EXHAUSTED', kind: 'limit', title: 'No pool has the units free' },
  waitTooLong: { code: 'CAPACITY.WAIT_TOO_LONG', kind: 'validation', title: 'Wait longer than the edition allows' },
  ticketNotFound: { code: 'CAPACITY.LEASE_REQUEST_NOT_FOUND', kind: 'not-found', title: 'Lease request not found' },
  ticketGranted: { code: 'CAPACITY.LEASE_REQUEST_GRANTED', kind: 'conflict', title: 'Lease request already granted' },
  certificatesOff: { code: 'CAPACITY.CERTIFICATES_OFF', kind: 'not-found', title: 'Host issues no lease certificates' },
  certificateKeysUnavailable: { code: 'CAPACITY.CERTIFICATE_KEYS_UNAVAILABLE', kind: 'unavailable', title: 'Lease certificate keys cannot be read now' },
  recovering: { code: 'CAPACITY.RECOVERING', kind: 'unavailable', title: 'Capacity recovering after a restore' },
} as const satisfies ProblemCatalogue;
