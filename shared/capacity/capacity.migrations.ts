import { sql, type CreateTableBuilder, type Kysely, type Migration } from 'kysely';
import { dropColumns, sqlTypes, type MigrationSource } from '../platform/sql/migrations';
import { FREE_SLOT, poolScope, quotaScope } from './slots';
import { DEFAULT_MAX_WAIT_SECONDS } from './pool';

/** The capacity module's schema: pools, editions and their limits, tenants and their usage, leases. */
type MigrationDialect = Parameters<MigrationSource>[0];

export const capacityMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const migration: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('capacity_pools')
        .addColumn('id', t.key, (c) => c.primaryKey())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('target', t.key, (c) => c.notNull())
        .addColumn('capacity', 'integer', (c) => c.notNull())
        .addColumn('min_units', 'integer', (c) => c.notNull())
        .addColumn('max_units', 'integer', (c) => c.notNull())
        .addColumn('labels', t.text, (c) => c.notNull())
        .addColumn('iac_stack', t.key)
        .addColumn('used', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('fencing_counter', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('capacity_pools_kind').on('capacity_pools').columns(['kind']).execute();
      await db.schema
        .createTable('capacity_editions')
        .addColumn('name', t.key, (c) => c.primaryKey())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('capacity_edition_limits')
        .addColumn('edition', t.key, (c) => c.notNull())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('max_units', 'integer', (c) => c.notNull())
        .addColumn('max_ttl_seconds', 'integer', (c) => c.notNull())
        .addPrimaryKeyConstraint('capacity_edition_limits_pk', ['edition', 'kind'])
        .execute();
      await db.schema
        .createTable('capacity_tenants')
        .addColumn('id', t.key, (c) => c.primaryKey())
        .addColumn('edition', t.key, (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('capacity_tenant_usage')
        .addColumn('tenant_id', t.key, (c) => c.notNull())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('used', 'integer', (c) => c.notNull().defaultTo(0))
        .addPrimaryKeyConstraint('capacity_tenant_usage_pk', ['tenant_id', 'kind'])
        .execute();
      await leaseColumns(db.schema.createTable('capacity_leases').addColumn('id', t.key, (c) => c.primaryKey()), t)
        // SQLite: the lease row lives in its primary-key b-tree, one page fewer to write per grant and release.
        .$call((table) => (dialect === 'sqlite' ? table.modifyEnd(sql`without rowid`) : table))
        .execute();
      await createLeaseIndexes(db);
      // Tenant-filtered lists page by id. Few indexes on purpose: every index is one more page written per grant.
      await db.schema.createIndex('capacity_leases_tenant').on('capacity_leases').columns(['tenant_id', 'id']).execute();
    },
  };
  return {
    '20261130-10-capacity-tables': migration,
    '20261130-20-capacity-slots': slotsMigration(dialect),
    '20261130-30-capacity-leases-by-tenant': leasesByTenantMigration(dialect),
    '20261207-10-capacity-lease-queue': leaseQueueMigration(dialect),
  };
};

/** The columns of a lease row after its id (whose key differs by migration and dialect), but the request digest. */
function leaseColumns(table: CreateTableBuilder<string, string>, t: ReturnType<typeof sqlTypes>): CreateTableBuilder<string, string> {
  return table
    .addColumn('tenant_id', t.key, (c) => c.notNull())
    .addColumn('kind', t.key, (c) => c.notNull())
    .addColumn('pool_id', t.key, (c) => c.notNull())
    .addColumn('units', 'integer', (c) => c.notNull())
    .addColumn('holder', t.key, (c) => c.notNull())
    .addColumn('fencing_token', 'bigint', (c) => c.notNull())
    .addColumn('ttl_seconds', 'integer', (c) => c.notNull())
    .addColumn('granted_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('renewed_at', 'bigint')
    .addColumn('ended_at', 'bigint')
    .addColumn('state', t.key, (c) => c.notNull())
    .addColumn('idempotency_key', t.key);
}

async function createLeaseIndexes(db: Kysely<unknown>): Promise<void> {
  // The sweep reads only active leases past expiry: its cost follows the expired leases, not all leases.
  await db.schema.createIndex('capacity_leases_due').on('capacity_leases').columns(['state', 'expires_at']).execute();
  // A retried acquire finds its lease; a concurrent duplicate fails here instead of granting twice.
  await db.schema
    .createIndex('capacity_leases_idempotency')
    .on('capacity_leases')
    .columns(['tenant_id', 'idempotency_key'])
    .unique()
    .where('idempotency_key', 'is not', null)
    .execute();
}

/**
 * SQLite: leases are kept by (tenant, id), and the (tenant_id, id) index goes. Every request of a tenant-bound caller
 * finds its leases by that key, as before through the index; a grant now writes two b-trees of leases instead of
 * three (the capacity bench: about 10 % more grants a second, one WAL page fewer per commit). What a caller of all
 * tenants (a PlatformAdmin) pays: a lease by id alone is looked for under each tenant (`leaseTenant`), and its list
 * of every tenant's leases sorts them by id. PostgreSQL and Azure SQL keep the lease by id: a grant there writes
 * the (tenant_id, id) index beside rows of other tables anyway, and admin lookups stay by key.
 */
function leasesByTenantMigration(dialect: MigrationDialect): Migration {
  const t = sqlTypes(dialect);
  return {
    async up(db: Kysely<unknown>) {
      if (dialect !== 'sqlite') return;
      await leaseColumns(db.schema.createTable('capacity_leases_by_tenant').addColumn('id', t.key, (c) => c.notNull()), t)
        .addColumn('request_digest', t.key)
        .addPrimaryKeyConstraint('capacity_leases_pk', ['tenant_id', 'id'])
        .modifyEnd(sql`without rowid`)
        .execute();
      const columns = sql.join(
        ['id', 'tenant_id', 'kind', 'pool_id', 'units', 'holder', 'fencing_token', 'ttl_seconds', 'granted_at', 'expires_at', 'renewed_at', 'ended_at', 'state', 'idempotency_key', 'request_digest'].map((c) => sql.ref(c)),
      );
      await sql`insert into capacity_leases_by_tenant (${columns}) select ${columns} from capacity_leases`.execute(db);
      await db.schema.dropTable('capacity_leases').execute();
      await db.schema.alterTable('capacity_leases_by_tenant').renameTo('capacity_leases').execute();
      await createLeaseIndexes(db);
    },
  };
}

/**
 * Moves capacity to the ledgers of capacity-ledger.repository.ts. On PostgreSQL and Azure SQL the per-pool and
 * per-tenant counter rows, which every grant updated (one hot row serializing all grants on a shared database),
 * become a row per unit of capacity, and the per-pool fencing counters one sequence. On SQLite, where one writer
 * at a time is the rule, they become one counter row per scope. Existing leases keep their units either way.
 */
function slotsMigration(dialect: MigrationDialect): Migration {
  const t = sqlTypes(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('capacity_leases').addColumn('request_digest', t.key).execute();
      const pools = (await sql<{ id: string; capacity: number; fencing_counter: number }>`select id, capacity, fencing_counter from capacity_pools`.execute(db)).rows;
      const quotas = (
        await sql<{ tenant: string; kind: string; max_units: number }>`select t.id as tenant, l.kind, l.max_units from capacity_tenants t join capacity_edition_limits l on l.edition = t.edition`.execute(db)
      ).rows;
      const leases = (
        await sql<{ id: string; tenant_id: string; kind: string; pool_id: string; units: number }>`select id, tenant_id, kind, pool_id, units from capacity_leases where state = 'active'`.execute(db)
      ).rows;
      const scopes = new Map<string, { capacity: number; fencing: number; held: string[] }>();
      for (const p of pools) scopes.set(poolScope(p.id), { capacity: Number(p.capacity), fencing: Number(p.fencing_counter), held: [] });
      for (const q of quotas) scopes.set(quotaScope(q.tenant, q.kind), { capacity: Number(q.max_units), fencing: 0, held: [] });
      for (const lease of leases) {
        for (const scope of [poolScope(lease.pool_id), quotaScope(lease.tenant_id, lease.kind)]) {
          const entry = scopes.get(scope) ?? { capacity: 0, fencing: 0, held: [] };
          for (let unit = 0; unit < Number(lease.units); unit++) entry.held.push(lease.id);
          scopes.set(scope, entry);
        }
      }

      if (dialect === 'sqlite') {
        await db.schema
          .createTable('capacity_scope_counters')
          .addColumn('scope', t.key, (c) => c.primaryKey())
          .addColumn('capacity', 'integer', (c) => c.notNull())
          .addColumn('used', 'integer', (c) => c.notNull())
          .addColumn('fencing', 'bigint', (c) => c.notNull())
          .modifyEnd(sql`without rowid`)
          .execute();
        const rows = [...scopes].map(([scope, { capacity, fencing, held }]) => ({ scope, capacity, used: held.length, fencing }));
        for (let i = 0; i < rows.length; i += 500) await db.insertInto('capacity_scope_counters' as never).values(rows.slice(i, i + 500)).execute();
      } else {
        await db.schema
          .createTable('capacity_slots')
          .addColumn('scope', t.key, (c) => c.notNull())
          // The lease holding the row, or '' when free (not NULL: it is part of the key).
          .addColumn('lease_id', t.key, (c) => c.notNull())
          .addColumn('slot', 'integer', (c) => c.notNull())
          .addColumn('retiring', 'integer', (c) => c.notNull())
          // One key serves both paths: a grant reads (scope, '') for free rows, a release (scope, lease) for its own.
          // A claim or release moves the row within it; no other index is written on the hot path.
          .addPrimaryKeyConstraint('capacity_slots_pk', ['scope', 'lease_id', 'slot'])
          .execute();
        await db.schema.createIndex('capacity_slots_retiring').on('capacity_slots').columns(['scope']).where(sql.ref('retiring'), '=', 1).execute();
        const rows = [...scopes].flatMap(([scope, { capacity, held }]) => [
          ...held.map((lease_id, slot) => ({ scope, slot, lease_id, retiring: slot >= capacity ? 1 : 0 })),
          ...Array.from({ length: Math.max(0, capacity - held.length) }, (_, i) => ({ scope, slot: held.length + i, lease_id: FREE_SLOT, retiring: 0 })),
        ]);
        // Azure SQL takes at most 2,100 parameters a statement.
        for (let i = 0; i < rows.length; i += 500) await db.insertInto('capacity_slots' as never).values(rows.slice(i, i + 500)).execute();
        const start = Math.max(0, ...pools.map((p) => Number(p.fencing_counter))) + 1;
        const type = dialect === 'mssql' ? sql` as bigint` : sql``;
        await sql`create sequence capacity_fencing${type} start with ${sql.raw(String(start))}`.execute(db);
      }
      await db.schema.dropTable('capacity_tenant_usage').execute();
      await dropColumns(db, dialect, 'capacity_pools', ['used', 'fencing_counter']);
    },
  };
}

/**
 * Lease requests that wait in a pool's queue, and the editions' weights and longest waits. A pool's waiting
 * requests are read in arrival order by (pool, state, requested_at); a repeated request finds its ticket by
 * (tenant, idempotency key), which is unique while the request lives, so a retry joins the queue once.
 */
function leaseQueueMigration(dialect: MigrationDialect): Migration {
  const t = sqlTypes(dialect);
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('capacity_editions').addColumn('weight', 'integer', (c) => c.notNull().defaultTo(1)).execute();
      await db.schema.alterTable('capacity_edition_limits').addColumn('max_wait_seconds', 'integer', (c) => c.notNull().defaultTo(DEFAULT_MAX_WAIT_SECONDS)).execute();
      await db.schema
        .createTable('capacity_lease_requests')
        .addColumn('id', t.key, (c) => c.primaryKey())
        .addColumn('tenant_id', t.key, (c) => c.notNull())
        .addColumn('kind', t.key, (c) => c.notNull())
        .addColumn('pool_id', t.key, (c) => c.notNull())
        .addColumn('units', 'integer', (c) => c.notNull())
        .addColumn('ttl_seconds', 'integer', (c) => c.notNull())
        .addColumn('holder', t.key, (c) => c.notNull())
        .addColumn('idempotency_key', t.key, (c) => c.notNull())
        .addColumn('request_digest', t.key, (c) => c.notNull())
        .addColumn('requested_at', 'bigint', (c) => c.notNull())
        .addColumn('deadline', 'bigint', (c) => c.notNull())
        .addColumn('state', t.key, (c) => c.notNull())
        .addColumn('lease_id', t.key, (c) => c.notNull())
        .addColumn('fencing_token', 'bigint')
        .addColumn('ended_at', 'bigint')
        .execute();
      await db.schema.createIndex('capacity_lease_requests_queue').on('capacity_lease_requests').columns(['pool_id', 'state', 'requested_at']).execute();
      await db.schema.createIndex('capacity_lease_requests_key').on('capacity_lease_requests').columns(['tenant_id', 'idempotency_key']).unique().execute();
    },
  };
}
