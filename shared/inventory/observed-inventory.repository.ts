import { odata, type TableClient, type TransactionAction } from '@azure/data-tables';
import { createHash } from 'node:crypto';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { TableStore } from '../platform/tables/tables';
import { canonicalJson, type JsonValue } from './drift';
import type { EnvironmentKey } from './environment';

/**
 * The observed inventory in Table storage: a partition per environment of a tenant (environment ids are unique per
 * tenant only), a row per observed resource, and a second table of scan records (newest first).
 *
 * Table limits, and how rows stay within them: a string property holds at most 64 KiB (32 K UTF-16 characters) and
 * an entity at most 1 MiB. A resource's properties are stored as canonical JSON split over `p0`, `p1`, … of
 * 30,000 characters each, up to 15 parts (450,000 characters, under 1 MiB in UTF-16). A larger property bag is
 * summarised instead (`summary`: its size, sha-256 and top-level keys) and drift is computed from the observation in
 * memory, never from the stored copy. Keys may not contain `/ \ # ?` or control characters, so those are
 * percent-encoded, and a key longer than 512 characters is replaced by its sha-256.
 *
 * A row is rewritten only when the resource changed (a sha-256 of its stored form is kept on the row), so an
 * unchanged fleet costs one read per environment and scan; `changedAt` is when the row last changed, and every row
 * of a partition was seen by the environment's last successful observation (`lastObservedAt`).
 */

export const INVENTORY_TABLE = 'RuntimeCloudInventory';
export const SCANS_TABLE = 'RuntimeCloudScans';

const PART_CHARS = 30_000;
const MAX_PARTS = 15;
/** Table transactions take at most 100 operations of one partition and 4 MiB; stay well under the latter. */
const BATCH_OPERATIONS = 100;
const BATCH_CHARS = 1_000_000;
/** Table storage answers a query with at most 1,000 entities, and refuses a larger `$top`. */
const QUERY_PAGE_MAX = 1_000;

/** A resource as inventory stores and shows it. Serialized shape (HTTP API): changing it is a breaking change. */
export interface StoredResource {
  readonly urn: string;
  readonly type: string;
  readonly id: string;
  /** Absent when the properties were too large to store; `summary` describes them instead. */
  readonly properties?: { readonly [key: string]: JsonValue };
  readonly summary?: { readonly bytes: number; readonly sha256: string; readonly keys: readonly string[] };
  /** ISO-8601: when this row last changed. */
  readonly changedAt: string;
}

/** One scan of one environment. Serialized shape (HTTP API): changing it is a breaking change. */
export interface ScanRecord {
  readonly scanId: string;
  readonly tenantId: string;
  readonly environmentId: string;
  /** timer | manual | applied */
  readonly trigger: string;
  /** completed | failed | skipped */
  readonly outcome: 'completed' | 'failed' | 'skipped';
  /** Why it failed or was skipped. */
  readonly reason?: string;
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly resources?: number;
  readonly findings?: number;
  readonly driftStatus?: string;
  /** Rows of the observed inventory this scan wrote and deleted. */
  readonly written?: number;
  readonly deleted?: number;
}

/** A stored resource and where it stands in its environment's key order. */
export interface KeyedResource {
  /**
   * Opaque: the row's key (the urn percent-encoded, or its sha-256 past 512 characters). A page after it starts
   * with the next row; the urn cannot stand in for it, since a hashed key does not map back to its urn.
   */
  readonly key: string;
  readonly resource: StoredResource;
}

export interface ObservedInventory {
  /** Makes the environment's partition hold exactly `resources`; returns the rows written and deleted. */
  replace(environment: EnvironmentKey, resources: readonly { urn: string; type: string; id: string; properties: { readonly [key: string]: JsonValue } }[], at: Date): Promise<{ written: number; deleted: number }>;
  /**
   * At most `limit` (1 or more) resources of the environment whose key comes after `after` (from the first without
   * it), in key order, which is Table storage's own order within a partition and not urn order. Reads about `limit`
   * rows, however large the partition.
   */
  listPage(environment: EnvironmentKey, page: { readonly after?: string; readonly limit: number }): Promise<KeyedResource[]>;
  recordScan(record: ScanRecord): Promise<void>;
  /** The newest `limit` scans of the environment, newest first. */
  scans(environment: EnvironmentKey, limit: number): Promise<ScanRecord[]>;
}

export function createObservedInventory(tables: TableStore): ObservedInventory {
  return {
    async replace(environment, resources, at) {
      const table = await tables.table(INVENTORY_TABLE);
      const partitionKey = environmentPartition(environment);
      const existing = new Map<string, string>();
      const rows = table.listEntities<{ digest?: string }>({ queryOptions: { filter: odata`PartitionKey eq ${partitionKey}`, select: ['RowKey', 'digest'] } });
      for await (const row of rows) existing.set(row.rowKey!, row.digest ?? '');
      const actions: { action: TransactionAction; chars: number }[] = [];
      const seen = new Set<string>();
      for (const resource of resources) {
        const rowKey = tableKey(resource.urn);
        seen.add(rowKey);
        const entity = toEntity(partitionKey, rowKey, resource, at);
        if (existing.get(rowKey) === entity.digest) continue;
        actions.push({ action: ['upsert', entity, 'Replace'], chars: entity.chars });
      }
      let deleted = 0;
      for (const rowKey of existing.keys()) {
        if (seen.has(rowKey)) continue;
        actions.push({ action: ['delete', { partitionKey, rowKey }], chars: 100 });
        deleted++;
      }
      await submitInBatches(table, actions);
      return { written: actions.length - deleted, deleted };
    },

    async listPage(environment, { after, limit }) {
      return tableCall(async () => {
        const table = await tables.table(INVENTORY_TABLE);
        const partitionKey = environmentPartition(environment);
        const filter = after === undefined ? odata`PartitionKey eq ${partitionKey}` : odata`PartitionKey eq ${partitionKey} and RowKey gt ${after}`;
        const out: KeyedResource[] = [];
        // A response may hold fewer rows than asked, with a continuation (Table storage stops a query after five
        // seconds), so pages are read until there are enough, and no further.
        const pages = table.listEntities<Record<string, unknown>>({ queryOptions: { filter } }).byPage({ maxPageSize: Math.min(limit, QUERY_PAGE_MAX) });
        for await (const page of pages) {
          for (const row of page) {
            if (out.length < limit) out.push({ key: row.rowKey!, resource: fromEntity(row) });
          }
          if (out.length >= limit) break;
        }
        return out;
      });
    },

    async recordScan(record) {
      // Newest first in RowKey order: the inverted start time, then the scan id to keep keys unique.
      const inverted = String(8_640_000_000_000_000 - Date.parse(record.startedAt)).padStart(16, '0');
      await tableCall(async () => {
        const table = await tables.table(SCANS_TABLE);
        await table.createEntity({ partitionKey: environmentPartition({ tenant: record.tenantId, id: record.environmentId }), rowKey: `${inverted}-${tableKey(record.scanId)}`, record: JSON.stringify(record) });
      });
    },

    async scans(environment, limit) {
      return tableCall(async () => {
        const table = await tables.table(SCANS_TABLE);
        const out: ScanRecord[] = [];
        const pages = table.listEntities<{ record: string }>({ queryOptions: { filter: odata`PartitionKey eq ${environmentPartition(environment)}` } }).byPage({ maxPageSize: limit });
        for await (const page of pages) {
          for (const row of page) {
            if (out.length < limit) out.push(JSON.parse(row.record) as ScanRecord);
          }
          if (out.length >= limit) break;
        }
        return out;
      });
    },
  };
}

/** A call to Table storage; a service that does not answer is a 503 for the API, not an unexpected error. */
async function tableCall<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (thrown) {
    throw new AppError('INVENTORY.TABLES_UNAVAILABLE', 'unavailable', `Table storage did not answer: ${ensureError(thrown).message}`, { retryAfterSeconds: 5 });
  }
}

/**
 * The partition of one environment of a tenant: `<tenant>:<environment id>`, each percent-encoded as a URI component
 * (so neither holds the `:` between them, nor a character a Table key may not), hashed past 512 characters.
 */
export function environmentPartition(environment: EnvironmentKey): string {
  return tableKey(`${encodeURIComponent(environment.tenant)}:${encodeURIComponent(environment.id)}`);
}

/** A Table key for any text: forbidden characters percent-encoded, overlong keys hashed. */
export function tableKey(text: string): string {
  const encoded = text.replace(/[%/\\#?\u0000-\u001f\u007f-\u009f]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  return encoded.length <= 512 ? encoded : `sha256-${createHash('sha256').update(text).digest('hex')}`;
}

function toEntity(
  partitionKey: string,
  rowKey: string,
  resource: { urn: string; type: string; id: string; properties: { readonly [key: string]: JsonValue } },
  at: Date,
): Record<string, unknown> & { partitionKey: string; rowKey: string; digest: string; chars: number } {
  const json = canonicalJson(resource.properties);
  const digest = createHash('sha256').update(`${resource.type}\n${resource.id}\n${json}`).digest('hex');
  const base = { partitionKey, rowKey, urn: resource.urn, type: resource.type, id: resource.id, digest, changedAt: at.toISOString() };
  if (json.length > PART_CHARS * MAX_PARTS) {
    const summary = { bytes: Buffer.byteLength(json), sha256: createHash('sha256').update(json).digest('hex'), keys: Object.keys(resource.properties).sort().slice(0, 200) };
    return { ...base, summary: JSON.stringify(summary), parts: 0, chars: 2_000 };
  }
  const parts: Record<string, string> = {};
  const count = Math.max(1, Math.ceil(json.length / PART_CHARS));
  for (let i = 0; i < count; i++) parts[`p${i}`] = json.slice(i * PART_CHARS, (i + 1) * PART_CHARS);
  return { ...base, ...parts, parts: count, chars: json.length + 500 };
}

function fromEntity(row: Record<string, unknown>): StoredResource {
  const base = { urn: String(row.urn), type: String(row.type), id: String(row.id), changedAt: String(row.changedAt) };
  const parts = Number(row.parts ?? 0);
  if (parts === 0) return { ...base, summary: JSON.parse(String(row.summary)) as StoredResource['summary'] & object };
  let json = '';
  for (let i = 0; i < parts; i++) json += typeof row[`p${i}`] === 'string' ? (row[`p${i}`] as string) : '';
  return { ...base, properties: JSON.parse(json) as { [key: string]: JsonValue } };
}

async function submitInBatches(table: TableClient, actions: readonly { action: TransactionAction; chars: number }[]): Promise<void> {
  let batch: TransactionAction[] = [];
  let chars = 0;
  for (const { action, chars: size } of actions) {
    if (batch.length > 0 && (batch.length >= BATCH_OPERATIONS || chars + size > BATCH_CHARS)) {
      await table.submitTransaction(batch);
      batch = [];
      chars = 0;
    }
    // The sizing member is not part of the stored entity.
    if (action[0] === 'upsert') delete (action[1] as { chars?: number }).chars;
    batch.push(action);
    chars += size;
  }
  if (batch.length > 0) await table.submitTransaction(batch);
}
