import type { Kysely, Migration } from 'kysely';
import { sqlTypes, withSeq, type MigrationSource } from '../sql/migrations';

/** The local cloud: the resources of each target, whether a target answers, and a log of the applies it took. */
export const localCloudMigrations: MigrationSource = (dialect) => {
  const t = sqlTypes(dialect);
  const tables: Migration = {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('local_cloud_resources')
        .addColumn('target', t.key, (c) => c.notNull())
        .addColumn('id', t.key, (c) => c.notNull())
        .addColumn('urn', t.text, (c) => c.notNull())
        .addColumn('type', t.key, (c) => c.notNull())
        // JSON object of the resource's properties.
        .addColumn('properties', t.text, (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        // Lists by target read the key in order; no other index is needed.
        .addPrimaryKeyConstraint('local_cloud_resources_pk', ['target', 'id'])
        .execute();
      await db.schema
        .createTable('local_cloud_targets')
        .addColumn('target', t.key, (c) => c.primaryKey())
        // 1 or 0; a target without a row answers.
        .addColumn('reachable', 'integer', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      // Insert-only, so concurrent applies never update one counter row.
      await withSeq(db.schema.createTable('local_cloud_applies'), dialect)
        .addColumn('target', t.key, (c) => c.notNull())
        .addColumn('stack', t.key, (c) => c.notNull())
        .addColumn('plan_digest', t.key, (c) => c.notNull())
        .addColumn('applied_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('local_cloud_applies_stack').on('local_cloud_applies').columns(['target', 'stack']).execute();
    },
  };
  return { '20261130-30-local-cloud-tables': tables };
};
