import type { CapacitySeed } from '../../shared/capacity/capacity.seed';
import type { Lease, LeaseRequest } from '../../shared/capacity/lease';
import type { Edition, KindLimit, Pool, PoolSpec } from '../../shared/capacity/pool';
import type { IgnoreRule, ResourceState } from '../../shared/inventory/drift';
import type { PromotionApproved } from '../../shared/provisioning/promotion';

/** Test data builders: sensible defaults, override what the test is about. */

export function aLease(overrides: Partial<Lease> = {}): Lease {
  return {
    id: 'lease_1',
    tenant: 'tenant-a',
    kind: 'attempt',
    pool: 'pool-attempt',
    units: 1,
    holder: 'worker-1',
    fencingToken: 1,
    grantedAt: new Date('2026-01-01T00:00:00.000Z'),
    expiresAt: new Date('2026-01-01T00:01:00.000Z'),
    state: 'active',
    ...overrides,
  };
}

export function aLeaseRequest(overrides: Partial<LeaseRequest> = {}): LeaseRequest {
  return { tenant: 'tenant-a', kind: 'attempt', units: 1, ttlSeconds: 60, holder: 'worker-1', ...overrides };
}

export function aPoolSpec(overrides: Partial<PoolSpec> = {}): PoolSpec {
  return { kind: 'attempt', target: 'local', capacity: 10, min: 0, max: 1000, labels: {}, ...overrides };
}

export function aPool(overrides: Partial<Pool> = {}): Pool {
  return { id: 'pool-attempt', kind: 'attempt', target: 'local', capacity: 10, min: 0, max: 1000, labels: {}, used: 0, ...overrides };
}

export function aKindLimit(overrides: Partial<KindLimit> = {}): KindLimit {
  return { maxUnits: 10, maxTtlSeconds: 3600, ...overrides };
}

export function anEdition(overrides: Partial<Edition> = {}): Edition {
  const limit = aKindLimit();
  return {
    name: 'team',
    limits: { attempt: limit, sandbox: limit, build: limit, 'browser-session': limit },
    ...overrides,
  };
}

/**
 * A capacity seed with one edition (`limit` units of every kind), `tenants` on it and one pool per entry of
 * `pools` (id → capacity, kind attempt unless the id names another kind first: `sandbox-1`).
 */
export function aCapacitySeed(options: { limit?: number; maxTtlSeconds?: number; tenants?: string[]; pools?: Record<string, number> } = {}): CapacitySeed {
  const limit = { maxUnits: options.limit ?? 1000, maxTtlSeconds: options.maxTtlSeconds ?? 3600 };
  const kinds = ['attempt', 'sandbox', 'build', 'browser-session'] as const;
  return {
    editions: { standard: { limits: Object.fromEntries(kinds.map((k) => [k, limit])) } },
    tenants: Object.fromEntries((options.tenants ?? ['tenant-a', 'tenant-b']).map((t) => [t, { edition: 'standard' }])),
    pools: Object.fromEntries(
      Object.entries(options.pools ?? { 'pool-attempt': 10 }).map(([id, capacity]) => [
        id,
        { kind: kinds.find((k) => id.startsWith(k)) ?? 'attempt', target: 'local', capacity },
      ]),
    ),
  };
}

/** A valid `PromotionApproved` for a development environment; override the parts the test is about. */
export function aPromotion(overrides: Partial<PromotionApproved> = {}): PromotionApproved {
  return {
    promotionId: 'prom_1',
    tenantId: 'tenant-a',
    environment: { id: 'env-dev', name: 'development', tier: 'development' },
    release: { name: 'demo-app', version: '1.0.0' },
    desiredState: {
      repository: 'https://git.example.com/tenant-a/desired-state.git',
      commit: '3f1c2b7a9d4e5f60718293a4b5c6d7e8f9012345',
      path: 'app',
      stack: 'development',
    },
    requestedBy: 'delivery-host',
    approvedAt: '2026-03-01T09:30:00.000Z',
    ...overrides,
  };
}

/** A web app as an applied plan would desire it: a few nested properties, an array of settings. */
export function aResource(overrides: Partial<ResourceState> = {}): ResourceState {
  return {
    type: 'azure-native:web:WebApp',
    properties: {
      name: 'app-1',
      location: 'westeurope',
      sku: { name: 'P1v3', tier: 'PremiumV3', capacity: 2 },
      tags: { env: 'dev', owner: 'team-a' },
      siteConfig: { alwaysOn: true, appSettings: [{ name: 'MODE', value: 'a' }, { name: 'LEVEL', value: '1' }] },
    },
    ...overrides,
  };
}

export function anIgnoreRule(overrides: Partial<IgnoreRule> = {}): IgnoreRule {
  return {
    id: 'ir_1',
    scope: { type: 'azure-native:web:WebApp' },
    path: 'tags.*',
    reason: 'tags are set by the cost tool',
    owner: 'platform-team',
    expiresAt: '2026-02-01T00:00:00.000Z',
    holdsOnApply: false,
    ...overrides,
  };
}
