import type { TenantFilter } from '../platform/auth/auth';
import { inTransaction } from '../platform/sql/transaction';
import { appendEvents, type CapacityContext, type CapacitySummary } from './capacity.context';
import { editionExists, getPool, listEditions as listEditionRows, listPools, tenantUse, upsertEdition, upsertPool, upsertTenant } from './capacity.repository';
import type { CapacitySeed } from './capacity.seed';
import { CAPACITY_KINDS, freeUnits, needsResizeRequest, poolSpecProblems, type Edition, type Pool, type PoolSpec, type Tenant } from './pool';
import { problemError } from '../platform/errors/catalogue';
import { CapacityErrors } from './errors';

/** The kinds' capacity and use, the pools, and each tenant's use against its edition's limits. */
export async function summary(ctx: CapacityContext, tenants: TenantFilter): Promise<CapacitySummary> {
  const pools = await listPools(ctx.db, ctx.ledger);
  const kinds = CAPACITY_KINDS.map((kind) => {
    const ofKind = pools.filter((p) => p.kind === kind);
    const capacity = ofKind.reduce((sum, p) => sum + p.capacity, 0);
    const used = ofKind.reduce((sum, p) => sum + p.used, 0);
    return { kind, capacity, used, free: ofKind.reduce((sum, p) => sum + freeUnits(p), 0) };
  });
  const byTenant = new Map<string, { tenant: string; edition: string; usage: { kind: string; used: number; limit: number | null }[] }>();
  for (const row of await tenantUse(ctx.db, ctx.ledger, tenants)) {
    const entry = byTenant.get(row.tenant) ?? { tenant: row.tenant, edition: row.edition, usage: [] };
    entry.usage.push({ kind: row.kind, used: row.used, limit: row.maxUnits });
    byTenant.set(row.tenant, entry);
  }
  return { kinds, pools: pools.map((p) => ({ ...p, free: freeUnits(p) })), tenants: [...byTenant.values()] };
}

/** Creates or changes a pool; a change of capacity of a pool with an IaC stack records `PoolResizeRequested`. */
export async function putPool(ctx: CapacityContext, id: string, spec: PoolSpec): Promise<{ created: boolean; pool: Pool; resizeRequested: boolean }> {
  const problems = poolSpecProblems(spec);
  if (problems.length > 0) {
    throw problemError(CapacityErrors.invalidPool, 'the pool is not valid', { errors: problems });
  }
  const now = ctx.clock.now().getTime();
  return inTransaction(ctx.db, async (trx) => {
    const before = await upsertPool(trx, ctx.dialect, ctx.ledger, id, spec, now);
    if (before && before.kind !== spec.kind && before.used > 0) {
      throw problemError(CapacityErrors.poolInUse, `pool ${id} holds ${before.used} leased units; its kind cannot change`);
    }
    const resizeRequested = needsResizeRequest(before, spec);
    if (resizeRequested && before) {
      await appendEvents(ctx, trx, [
        {
          type: 'PoolResizeRequested',
          subject: `pools/${id}`,
          correlationId: id,
          data: {
            pool: id,
            kind: spec.kind,
            target: spec.target,
            iacStack: spec.iacStack,
            fromCapacity: before.capacity,
            toCapacity: spec.capacity,
            used: before.used,
          },
        },
      ]);
    }
    const pool = await getPool(trx, ctx.ledger, id);
    if (!pool) throw new Error(`pool ${id} vanished inside its own transaction`);
    return { created: before === undefined, pool, resizeRequested };
  });
}

export async function putEdition(ctx: CapacityContext, edition: Edition): Promise<{ created: boolean }> {
  const now = ctx.clock.now().getTime();
  return inTransaction(ctx.db, async (trx) => {
    const existed = await editionExists(trx, edition.name);
    await upsertEdition(trx, ctx.dialect, ctx.ledger, edition, now);
    return { created: !existed };
  });
}

export async function putTenant(ctx: CapacityContext, tenant: Tenant): Promise<{ created: boolean }> {
  const now = ctx.clock.now().getTime();
  return inTransaction(ctx.db, async (trx) => {
    if (!(await editionExists(trx, tenant.edition))) {
      throw problemError(CapacityErrors.editionNotFound, `edition ${tenant.edition} does not exist`);
    }
    const existed = (await trx.selectFrom('capacity_tenants').select('id').where('id', '=', tenant.id).executeTakeFirst()) !== undefined;
    await upsertTenant(trx, ctx.dialect, ctx.ledger, tenant, now);
    return { created: !existed };
  });
}

export function listEditions(ctx: CapacityContext): Promise<Edition[]> {
  return listEditionRows(ctx.db);
}

/** Upserts the editions, then the tenants and pools of a seed file; running it again changes nothing. */
export async function applySeed(ctx: CapacityContext, seed: CapacitySeed): Promise<void> {
  for (const [name, spec] of Object.entries(seed.editions)) await putEdition(ctx, { name, limits: spec.limits, ...(spec.weight !== undefined ? { weight: spec.weight } : {}) });
  for (const [id, spec] of Object.entries(seed.tenants)) await putTenant(ctx, { id, edition: spec.edition });
  for (const [id, spec] of Object.entries(seed.pools)) await putPool(ctx, id, spec);
}
