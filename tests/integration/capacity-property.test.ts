import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { AppError } from '../../shared/platform/errors/app-error';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase } from '../support/databases';

/**
 * Random sequences of acquire, renew, release, sweep and clock advances, checked step by step against a reference
 * model that is simple enough to be obviously right: lists of leases, sums and comparisons.
 */
const POOLS = { p1: 3, p2: 5 } as const;
const QUOTA = { t1: 4, t2: 6 } as const;
const MAX_TTL = 100;
type PoolId = keyof typeof POOLS;
type TenantId = keyof typeof QUOTA;

interface ModelLease {
  id: string;
  tenant: TenantId;
  pool: PoolId;
  units: number;
  token: number;
  expiresAt: number;
  ttl: number;
  state: 'active' | 'released' | 'expired';
}

type Command =
  | { op: 'acquire'; tenant: TenantId; pool: PoolId | 'any'; units: number; ttl: number }
  | { op: 'renew'; pick: number; ttl: number | undefined; wrongToken: boolean }
  | { op: 'release'; pick: number }
  | { op: 'sweep' }
  | { op: 'advance'; ms: number };

const command: fc.Arbitrary<Command> = fc.oneof(
  fc.record({
    op: fc.constant('acquire' as const),
    tenant: fc.constantFrom<TenantId>('t1', 't2'),
    pool: fc.constantFrom<PoolId | 'any'>('p1', 'p2', 'any'),
    units: fc.integer({ min: 1, max: 3 }),
    ttl: fc.integer({ min: 1, max: MAX_TTL + 10 }),
  }),
  fc.record({
    op: fc.constant('renew' as const),
    pick: fc.nat(),
    ttl: fc.option(fc.integer({ min: 1, max: MAX_TTL }), { nil: undefined }),
    wrongToken: fc.boolean(),
  }),
  fc.record({ op: fc.constant('release' as const), pick: fc.nat() }),
  fc.constant({ op: 'sweep' as const }),
  fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 60_000 }) }),
);

async function outcome<T>(promise: Promise<T>): Promise<{ ok: T } | { error: AppError }> {
  try {
    return { ok: await promise };
  } catch (thrown) {
    if (thrown instanceof AppError) return { error: thrown };
    throw thrown;
  }
}

describe('capacity against a reference model (SQLite)', () => {
  it('when random operations run, then grants, refusals, fencing and usage match the model after every step', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 40 }), async (commands) => {
        const database = await createTestDatabase('sqlite');
        try {
          const clock = new ManualClock('2026-01-01T00:00:00Z');
          const capacity = createCapacityService({ store: database.store, clock, ids: randomIds });
          const limits = { maxUnits: 0, maxTtlSeconds: MAX_TTL };
          await capacity.putEdition({ name: 'small', limits: { attempt: { ...limits, maxUnits: QUOTA.t1 } } });
          await capacity.putEdition({ name: 'large', limits: { attempt: { ...limits, maxUnits: QUOTA.t2 } } });
          await capacity.putTenant({ id: 't1', edition: 'small' });
          await capacity.putTenant({ id: 't2', edition: 'large' });
          for (const [id, size] of Object.entries(POOLS)) await capacity.putPool(id, { kind: 'attempt', target: 'local', capacity: size });

          const leases: ModelLease[] = [];
          const lastToken: Record<PoolId, number> = { p1: 0, p2: 0 };
          const held = (f: (l: ModelLease) => boolean) => leases.filter((l) => l.state === 'active' && f(l)).reduce((s, l) => s + l.units, 0);

          for (const c of commands) {
            const now = clock.now().getTime();
            if (c.op === 'advance') clock.advance(c.ms);
            else if (c.op === 'acquire') {
              const result = await outcome(capacity.acquire({ tenant: c.tenant, kind: 'attempt', units: c.units, ttlSeconds: c.ttl, holder: 'h', ...(c.pool !== 'any' ? { pool: c.pool } : {}) }));
              const candidates = (c.pool === 'any' ? (['p1', 'p2'] as const) : [c.pool]).filter((p) => held((l) => l.pool === p) + c.units <= POOLS[p]);
              if (c.ttl > MAX_TTL) expect(result).toMatchObject({ error: { code: 'CAPACITY.TTL_TOO_LONG' } });
              else if (held((l) => l.tenant === c.tenant) + c.units > QUOTA[c.tenant]) expect(result).toMatchObject({ error: { code: 'CAPACITY.QUOTA_EXCEEDED' } });
              else if (candidates.length === 0) expect(result).toMatchObject({ error: { code: 'CAPACITY.EXHAUSTED' } });
              else {
                if (!('ok' in result)) throw new Error(`expected a grant, got ${result.error.code}`);
                const lease = result.ok.lease;
                expect(candidates).toContain(lease.pool);
                const pool = lease.pool as PoolId;
                // Fencing tokens strictly increase per pool.
                expect(lease.fencingToken).toBeGreaterThan(lastToken[pool]);
                lastToken[pool] = lease.fencingToken;
                leases.push({ id: lease.id, tenant: c.tenant, pool, units: c.units, token: lease.fencingToken, expiresAt: now + c.ttl * 1000, ttl: c.ttl, state: 'active' });
              }
            } else if (c.op === 'renew' || c.op === 'release') {
              const lease = leases[c.pick % Math.max(1, leases.length)];
              if (!lease) continue;
              const live = lease.state === 'active' && lease.expiresAt > now;
              if (c.op === 'renew') {
                const result = await outcome(capacity.renew({ kind: 'one', tenant: lease.tenant }, lease.id, c.wrongToken ? lease.token + 1000 : lease.token, c.ttl));
                if (!live) expect(result).toMatchObject({ error: { kind: 'gone' } });
                else if (c.wrongToken) expect(result).toMatchObject({ error: { kind: 'conflict' } });
                else {
                  lease.ttl = c.ttl ?? lease.ttl;
                  lease.expiresAt = now + lease.ttl * 1000;
                  expect(result).toMatchObject({ ok: { expiresAt: new Date(lease.expiresAt) } });
                }
              } else {
                const result = await outcome(capacity.release({ kind: 'one', tenant: lease.tenant }, lease.id));
                if (live) {
                  expect(result).toEqual({ ok: { outcome: 'released' } });
                  lease.state = 'released';
                } else if (lease.state === 'released') expect(result).toEqual({ ok: { outcome: 'already-released' } });
                else expect(result).toMatchObject({ error: { kind: 'gone' } });
              }
            } else {
              const due = leases.filter((l) => l.state === 'active' && l.expiresAt <= now);
              expect((await capacity.sweepExpired({ batchSize: 2 })).expired).toBe(due.length);
              for (const l of due) l.state = 'expired';
            }

            // Invariants after every step: the store's counters equal the model's sums and never pass a limit.
            const summary = await capacity.summary({ kind: 'all' });
            for (const pool of summary.pools) {
              expect(pool.used).toBe(held((l) => l.pool === pool.id));
              expect(pool.used).toBeLessThanOrEqual(pool.capacity);
            }
            for (const tenant of summary.tenants) {
              const used = tenant.usage.find((u) => u.kind === 'attempt')?.used;
              expect(used).toBe(held((l) => l.tenant === tenant.tenant));
              expect(used).toBeLessThanOrEqual(QUOTA[tenant.tenant as TenantId]);
            }
          }
        } finally {
          await database.drop();
        }
      }),
      { numRuns: 100 },
    );
  }, 120_000);
});
