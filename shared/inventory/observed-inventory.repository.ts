import { odata, type TableClient, type TransactionAction } from '@azure/data-tables';
import { createHash } from 'node:crypto';
import { AppError, ensureError } from '../platform/errors/app-error';
import type { TableStore } from '../platform/tables/tables';
import { retry } from '../platform/time/retry';
import { canonicalJson, type JsonValue } from './drift';
import type { EnvironmentKey } from './environment';
import { problemError } from '../platform/errors/catalogue';
import { InventoryErrors } from './errors';

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
 * unchanged fleet costs one read and one write (the head row, below) per environment and scan; `changedAt` is when
 * the row last changed.
 *
 * Several hosts scan one environment at once (the timer on one, the scan endpoint on another, the scan after an
 * apply on a third), and an older observation must never overwrite a newer one. Each partition has a head row
 * (`HEAD_ROW`) naming the observation its rows are (`observedAt`, `scanId`) and, once every row of it is written,
 * its `digest`. Every write is conditional: each batch updates the head with If-Match on the ETag this writer last
 * saw (or creates it, create-only), rows are updated with If-Match on the ETag they were read with and inserted
 * create-only, so a batch is refused whole (412 or 409) when another writer got in between. Then the head is read
 * again and decided on: a newer observation there wins and this one is dropped (`superseded`); otherwise the
 * partition is read again and the rest written. (The SDK's transaction sends deletes with If-Match `*`: they are
 * fenced by the head in the same batch.)
 */

export const INVENTORY_TABLE = 'RuntimeCloudInventory';
export const SCANS_TABLE = 'RuntimeCloudScans';

const PART_CHARS = 30_000;
const MAX_PARTS = 15;
/** Table transactions take at most 100 operations of one partition and 4 MiB; stay well under the latter. */
const BATCH_OPERATIONS = 100;
const BATCH_CHARS = 1_000_000;
/**
 * The head row's key: `tableKey` never makes it (it writes `%` only before two hex digits), and it is not empty
 * (Azurite cannot delete an entity with an empty key, and the Cosmos DB Table API refuses one).
 */
const HEAD_ROW = '%head';
const HEAD_CHARS = 500;
/** Conflicts with other writers before a store gives up (each is another writer's progress). */
const REPLACE_ATTEMPTS = 5;
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

/** An observed resource as a scan hands it to be stored. */
export interface ObservedRow {
  readonly urn: string;
  readonly type: string;
  readonly id: string;
  readonly properties: { readonly [key: string]: JsonValue };
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

/** One observation of an environment: when it began (what orders observations) and the scan that made it. */
export interface Observation {
  readonly at: Date;
  readonly scanId: string;
}

/** What `replace` did: stored the observation, or left a newer one in place. */
export type ReplaceOutcome =
  /** The partition holds exactly this observation; `digest` names it (sha-256 over its rows). */
  | { readonly outcome: 'stored'; readonly written: number; readonly deleted: number; readonly digest: string }
  /** A newer observation is stored; this one was not written (its older rows never replace newer ones). */
  | { readonly outcome: 'superseded'; readonly by: { readonly scanId: string; readonly observedAt: string } };

export interface ObservedInventory {
  /**
   * Makes the environment's partition hold exactly `resources`, unless an observation newer than this one is stored
   * there (then nothing is written). Conditional throughout: see the comment at the top of this file.
   */
  replace(environment: EnvironmentKey, resources: readonly ObservedRow[], observation: Observation): Promise<ReplaceOutcome>;
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
    async replace(environment, resources, observation) {
      const table = await tableCall(() => tables.table(INVENTORY_TABLE));
      const partitionKey = environmentPartition(environment);
      const rows = resources.map((resource) => toEntity(partitionKey, tableKey(resource.urn), resource, observation.at));
      const digest = partitionDigest(rows);
      // Another writer changed the partition after this one read it: read the head again and decide.
      const attempt = async (): Promise<ReplaceOutcome> => {
        const head = await tableCall(() => readHead(table, partitionKey));
        if (head && Date.parse(head.observedAt) > observation.at.getTime()) {
          return { outcome: 'superseded', by: { scanId: head.scanId, observedAt: head.observedAt } };
        }
        try {
          return { outcome: 'stored', ...(await writeObservation(table, partitionKey, head, rows, { ...observation, digest })), digest };
        } catch (thrown) {
          throw isConditionFailure(thrown) ? thrown : unavailable(thrown);
        }
      };
      try {
        return await retry(attempt, { attempts: REPLACE_ATTEMPTS, backoff: { kind: 'fixed', firstMs: 0 }, retryIf: isConditionFailure });
      } catch (thrown) {
        if (!isConditionFailure(thrown)) throw thrown;
        throw problemError(InventoryErrors.observationConflict, `the observed inventory kept changing under ${REPLACE_ATTEMPTS} attempts to store this observation`, { retryAfterSeconds: 5 });
      }
    },

    async listPage(environment, { after, limit }) {
      return tableCall(async () => {
        const table = await tables.table(INVENTORY_TABLE);
        const partitionKey = environmentPartition(environment);
        const filter =
          after === undefined
            ? odata`PartitionKey eq ${partitionKey} and RowKey ne ${HEAD_ROW}`
            : odata`PartitionKey eq ${partitionKey} and RowKey gt ${after} and RowKey ne ${HEAD_ROW}`;
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
    throw unavailable(thrown);
  }
}

function unavailable(thrown: unknown): AppError {
  const error = ensureError(thrown);
  if (error instanceof AppError) return error;
  return problemError(InventoryErrors.tablesUnavailable, `Table storage did not answer: ${error.message}`, { retryAfterSeconds: 5 });
}

/** 412 (an ETag that no longer matches) or 409 (a create-only row that exists): another writer got in first. */
function isConditionFailure(thrown: unknown): boolean {
  const status = (thrown as { statusCode?: unknown } | undefined)?.statusCode;
  return status === 412 || status === 409;
}

/** The head row of a partition as read, with its ETag. */
interface Head {
  readonly etag: string;
  readonly observedAt: string;
  readonly scanId: string;
  /** Empty while the observation's rows are being written. */
  readonly digest: string;
}

async function readHead(table: TableClient, partitionKey: string): Promise<Head | undefined> {
  try {
    const row = await table.getEntity<{ observedAt: string; scanId: string; digest: string }>(partitionKey, HEAD_ROW);
    return { etag: row.etag, observedAt: row.observedAt, scanId: row.scanId, digest: row.digest };
  } catch (thrown) {
    if ((thrown as { statusCode?: unknown }).statusCode === 404) return undefined;
    throw thrown;
  }
}

/**
 * Writes the observation over what the partition holds, in batches of one partition, each led by the head row
 * (If-Match on the ETag of this writer's last write of it, or create-only when there is none): a batch is refused
 * whole when anyone else wrote the head since. The head's digest is set by the last batch only, so a writer that
 * stops half way leaves a head that no later writer takes for complete.
 */
async function writeObservation(
  table: TableClient,
  partitionKey: string,
  head: Head | undefined,
  rows: readonly RowEntity[],
  observation: Observation & { readonly digest: string },
): Promise<{ written: number; deleted: number }> {
  let etag = head?.etag;
  const fence = (complete: boolean): TransactionAction => {
    const entity = { partitionKey, rowKey: HEAD_ROW, observedAt: observation.at.toISOString(), scanId: observation.scanId, digest: complete ? observation.digest : '' };
    return etag === undefined ? ['create', entity] : ['update', entity, 'Replace', { etag }];
  };
  const actions: { action: TransactionAction; chars: number }[] = [];
  let deleted = 0;
  // The same rows as the head says: only the head moves on to this observation.
  if (head?.digest !== observation.digest) {
    const existing = new Map<string, { digest: string; etag: string }>();
    const listed = table.listEntities<{ digest?: string }>({ queryOptions: { filter: odata`PartitionKey eq ${partitionKey} and RowKey ne ${HEAD_ROW}`, select: ['RowKey', 'digest'] } });
    for await (const row of listed) existing.set(row.rowKey!, { digest: row.digest ?? '', etag: row.etag });
    for (const { entity, chars } of rows) {
      const known = existing.get(entity.rowKey);
      existing.delete(entity.rowKey);
      if (known?.digest === entity.digest) continue;
      actions.push({ action: known ? ['update', entity, 'Replace', { etag: known.etag }] : ['create', entity], chars });
    }
    for (const rowKey of existing.keys()) actions.push({ action: ['delete', { partitionKey, rowKey }], chars: 100 });
    deleted = existing.size;
  }
  const batches = inBatches(actions);
  for (let i = 0; i < batches.length; i++) {
    const response = await table.submitTransaction([fence(i === batches.length - 1), ...batches[i]!]);
    etag = response.subResponses[0]?.etag;
  }
  return { written: actions.length - deleted, deleted };
}

/** Batches of one Table transaction each, with room for the head row; at least one (the head alone). */
function inBatches(actions: readonly { action: TransactionAction; chars: number }[]): TransactionAction[][] {
  const batches: TransactionAction[][] = [[]];
  let chars = HEAD_CHARS;
  for (const { action, chars: size } of actions) {
    const batch = batches[batches.length - 1]!;
    if (batch.length > 0 && (batch.length + 1 >= BATCH_OPERATIONS || chars + size > BATCH_CHARS)) {
      batches.push([action]);
      chars = HEAD_CHARS + size;
      continue;
    }
    batch.push(action);
    chars += size;
  }
  return batches;
}

/** Names what a partition holds: sha-256 over its rows' keys and digests, in key order. */
function partitionDigest(rows: readonly RowEntity[]): string {
  const lines = rows.map((r) => `${r.entity.rowKey}\n${r.entity.digest}`).sort();
  return createHash('sha256').update(lines.join('\n')).digest('hex');
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

/** A resource's row, and about how many characters it takes in a batch. */
interface RowEntity {
  readonly entity: Record<string, unknown> & { partitionKey: string; rowKey: string; digest: string };
  readonly chars: number;
}

function toEntity(partitionKey: string, rowKey: string, resource: ObservedRow, at: Date): RowEntity {
  const json = canonicalJson(resource.properties);
  const digest = createHash('sha256').update(`${resource.type}\n${resource.id}\n${json}`).digest('hex');
  const base = { partitionKey, rowKey, urn: resource.urn, type: resource.type, id: resource.id, digest, changedAt: at.toISOString() };
  if (json.length > PART_CHARS * MAX_PARTS) {
    const summary = { bytes: Buffer.byteLength(json), sha256: createHash('sha256').update(json).digest('hex'), keys: Object.keys(resource.properties).sort().slice(0, 200) };
    return { entity: { ...base, summary: JSON.stringify(summary), parts: 0 }, chars: 2_000 };
  }
  const parts: Record<string, string> = {};
  const count = Math.max(1, Math.ceil(json.length / PART_CHARS));
  for (let i = 0; i < count; i++) parts[`p${i}`] = json.slice(i * PART_CHARS, (i + 1) * PART_CHARS);
  return { entity: { ...base, ...parts, parts: count }, chars: json.length + 500 };
}

function fromEntity(row: Record<string, unknown>): StoredResource {
  const base = { urn: String(row.urn), type: String(row.type), id: String(row.id), changedAt: String(row.changedAt) };
  const parts = Number(row.parts ?? 0);
  if (parts === 0) return { ...base, summary: JSON.parse(String(row.summary)) as StoredResource['summary'] & object };
  let json = '';
  for (let i = 0; i < parts; i++) json += typeof row[`p${i}`] === 'string' ? (row[`p${i}`] as string) : '';
  return { ...base, properties: JSON.parse(json) as { [key: string]: JsonValue } };
}
