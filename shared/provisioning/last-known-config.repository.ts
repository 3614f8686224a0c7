import type { TableStore } from '../platform/tables/tables';
import type { JsonValue } from '../platform/iac/iac-values';
import type { LastKnownConfig } from './external-services.client';

/** The table of last known Config Platform values: one partition per tenant, one row per reference. */
export const LAST_KNOWN_CONFIG_TABLE = 'configlastknown';

/**
 * The last value the Config Platform gave for each tenant's reference, in Table storage (Azurite locally), so an
 * apply on any host, after any restart, can degrade to it while the platform does not answer. A tenant's values
 * are in its own partition: another tenant's reference of the same name is another row.
 */
export function tableLastKnownConfig(tables: TableStore): LastKnownConfig {
  return {
    async get(tenant, reference) {
      const table = await tables.table(LAST_KNOWN_CONFIG_TABLE);
      try {
        const entity = await table.getEntity<{ value: string; at: string }>(tenant, rowKeyOf(reference));
        return { value: JSON.parse(entity.value) as JsonValue, at: new Date(entity.at) };
      } catch (thrown) {
        if ((thrown as { statusCode?: unknown }).statusCode === 404) return undefined;
        throw thrown;
      }
    },
    async put(tenant, reference, value, at) {
      const table = await tables.table(LAST_KNOWN_CONFIG_TABLE);
      await table.upsertEntity({ partitionKey: tenant, rowKey: rowKeyOf(reference), reference, value: JSON.stringify(value), at: at.toISOString() }, 'Replace');
    },
  };
}

/** Row keys cannot hold `/`, `\`, `#`, `?` or control characters; a reference can. */
function rowKeyOf(reference: string): string {
  return Buffer.from(reference, 'utf8').toString('base64url');
}
