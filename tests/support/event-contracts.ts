import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join } from 'node:path';
import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import type { Kysely } from 'kysely';
import { EVENT_TYPES } from '../../shared/platform/bus/events';
import type { OutboxTables } from '../../shared/platform/bus/outbox';
import { createSqlStore } from '../../shared/platform/sql/database';

/**
 * The message contract of asyncapi.json, as the tests apply it: every event a test store's `outbox` holds when the
 * store is dropped (tests/support/databases.ts) or its local host stopped (tests/support/local-host.ts) must be valid
 * against the message of its `type`, so an event the code produces that drifts from the published contract fails
 * the test file that produced it.
 */
export const ASYNCAPI_FILE = join(__dirname, '../../asyncapi.json');

/** The id the document gets inside ajv, so `#/components/schemas/…` references resolve within it. */
const DOCUMENT_ID = 'urn:runtime-cloud:asyncapi';

interface AsyncApiDocument {
  readonly components: { readonly schemas: Readonly<Record<string, unknown>>; readonly messages: Readonly<Record<string, { readonly payload: unknown }>> };
}

export interface ContractValidators {
  readonly document: AsyncApiDocument & Readonly<Record<string, unknown>>;
  /** Validates a CloudEvent (parsed JSON) against the message of its `type`. */
  readonly event: (type: string) => ValidateFunction | undefined;
  readonly promotionApproved: ValidateFunction;
  /** Validates a claim-checked event's envelope (the message as published, its data stored apart). */
  readonly claimCheckEnvelope: ValidateFunction;
}

let validators: ContractValidators | undefined;

/** Built once per test process; each validator is compiled on first use. A message whose payload is not a schema of the document gets no validator. */
export function contractValidators(): ContractValidators {
  if (validators) return validators;
  const document = JSON.parse(readFileSync(ASYNCAPI_FILE, 'utf8')) as ContractValidators['document'];
  // Strict about unknown keywords and formats (a typo would silently check nothing); not about `required` naming
  // members that a sibling schema of an allOf defines, which is how the event schemas compose. The meta-schema check
  // is left to tests/integration/asyncapi.test.ts (the AsyncAPI schema checks every Schema Object): it would cost
  // every test file ~70 ms.
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, strictTypes: false, validateSchema: false });
  addFormats(ajv);
  // The schemas are given to ajv under the document's own pointer (`#/components/schemas/…`), so the references
  // between them resolve as written; `components` is declared a keyword so that strict mode takes the wrapper.
  ajv.addKeyword('components');
  ajv.addSchema({ $id: DOCUMENT_ID, components: { schemas: document.components.schemas } });
  // Compiled on first use: a file whose outbox holds one event type pays for that one.
  const byType = new Map<string, ValidateFunction>();
  const event = (type: string): ValidateFunction | undefined => {
    const known = byType.get(type);
    if (known) return known;
    const payload = (EVENT_TYPES as readonly string[]).includes(type) ? (document.components.messages[type]?.payload as { $ref?: string } | undefined) : undefined;
    if (!payload?.$ref?.startsWith('#/components/schemas/')) return undefined;
    const compiled = ajv.compile({ $ref: `${DOCUMENT_ID}${payload.$ref}` });
    byType.set(type, compiled);
    return compiled;
  };
  const promotion = document.components.messages.PromotionApproved?.payload as { schema?: { $ref?: string } } | undefined;
  const promotionFile = promotion?.schema?.$ref;
  if (!promotionFile) throw new Error('asyncapi.json: the PromotionApproved payload must reference its schema file');
  const promotionSchema = JSON.parse(readFileSync(join(dirname(ASYNCAPI_FILE), promotionFile), 'utf8')) as object;
  let promotionApproved: ValidateFunction | undefined;
  let claimCheckEnvelope: ValidateFunction | undefined;
  validators = {
    document,
    event,
    get claimCheckEnvelope() {
      claimCheckEnvelope ??= ajv.compile({ $ref: `${DOCUMENT_ID}#/components/schemas/ClaimCheckEnvelope` });
      return claimCheckEnvelope;
    },
    get promotionApproved() {
      promotionApproved ??= ajv.compile(promotionSchema);
      return promotionApproved;
    },
  };
  return validators;
}

/** One event that breaks the contract: enough to find it (id, type) and to see why (ajv's errors). */
export interface ContractViolation {
  readonly eventId: string;
  readonly type: string;
  readonly errors: readonly string[];
}

function describeErrors(errors: readonly ErrorObject[] | null | undefined): string[] {
  return (errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`);
}

/** What is wrong with one outbox payload (the CloudEvent JSON); undefined when it is valid. */
export function eventViolation(eventId: string, payload: string): ContractViolation | undefined {
  let event: unknown;
  try {
    event = JSON.parse(payload) as unknown;
  } catch {
    return { eventId, type: '(unknown)', errors: ['the payload is not JSON'] };
  }
  const type = typeof event === 'object' && event !== null && typeof (event as { type?: unknown }).type === 'string' ? (event as { type: string }).type : '(none)';
  const validate = contractValidators().event(type);
  if (!validate) return { eventId, type, errors: [`asyncapi.json has no message for type ${type}`] };
  return validate(event) ? undefined : { eventId, type, errors: describeErrors(validate.errors) };
}

/**
 * Test files that put hand-made events into an outbox to exercise the bus itself (order, batching, publishing),
 * not events the code produces; only those exact fixtures are let through, and only in that file. Making the
 * fixtures valid events would let this list go.
 */
const BUS_FIXTURES: readonly { readonly file: string; readonly fixture: (event: Record<string, unknown> | undefined, payload: string) => boolean }[] = [
  // `{ type: 'LeaseExpired', data: { n } }`: numbered events whose order and batching the relay tests check.
  { file: 'outbox-relay.test.ts', fixture: (e) => e?.type === 'LeaseExpired' && onlyMember(e.data, 'n') },
  { file: 'service-bus-local-host.test.ts', fixture: (e) => e?.type === 'LeaseExpired' && onlyMember(e.data, 'n') },
  // One event with `data: { runId }` that the Service Bus publisher test sends.
  { file: 'service-bus-publisher.test.ts', fixture: (e) => e?.type === 'ProvisioningApplied' && onlyMember(e.data, 'runId') },
  // A row with payload `{}` that proves a migration keeps existing outbox rows.
  { file: 'store-migrations.test.ts', fixture: (_e, payload) => payload === '{}' },
];

function onlyMember(data: unknown, name: string): boolean {
  return typeof data === 'object' && data !== null && Object.keys(data).length === 1 && name in data;
}

function isBusFixture(payload: string, file: string): boolean {
  const rules = BUS_FIXTURES.filter((r) => r.file === file);
  if (rules.length === 0) return false;
  let event: Record<string, unknown> | undefined;
  try {
    const parsed = JSON.parse(payload) as unknown;
    event = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    event = undefined;
  }
  return rules.some((r) => r.fixture(event, payload));
}

/**
 * The running test file's name. vitest is imported only inside a test run: the benchmarks load these helpers under
 * plain Node, where vitest cannot be required.
 */
async function currentTestFile(): Promise<string> {
  if (process.env.VITEST === undefined) return '';
  const { expect } = await import('vitest');
  const testPath = expect.getState().testPath;
  return testPath === undefined ? '' : basename(testPath);
}

/** True for the errors of a store whose `outbox` table was never created (a store left unmigrated on purpose). */
function isMissingTable(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  return /no such table: outbox|relation "outbox" does not exist/i.test(message);
}

/**
 * Reads every row of the store's `outbox` (nothing when the table does not exist) and throws one error listing every
 * event that breaks asyncapi.json, with its id, type and ajv's errors. `where` names the store in the message.
 */
export async function assertOutboxMatchesContract(db: Kysely<OutboxTables>, where: string): Promise<void> {
  let rows: { event_id: string; payload: string }[];
  try {
    rows = await db.selectFrom('outbox').select(['event_id', 'payload']).orderBy('seq').execute();
  } catch (error) {
    if (isMissingTable(error)) return;
    throw error;
  }
  const file = await currentTestFile();
  const violations = rows.flatMap((row) => {
    const violation = eventViolation(row.event_id, row.payload);
    return violation && !isBusFixture(row.payload, file) ? [violation] : [];
  });
  if (violations.length === 0) return;
  const lines = violations.map((v) => `- ${v.type} ${v.eventId}:\n    ${v.errors.join('\n    ')}`);
  throw new Error(`${violations.length} event(s) in the outbox of ${where} break asyncapi.json:\n${lines.join('\n')}`);
}

/**
 * The same check for a host's own SQLite store in its state dir (a host given a test database by settings is
 * checked when that database is dropped). `connection` is the store setting, relative to `stateDir` unless absolute.
 */
export async function assertHostStoreMatchesContract(store: { readonly dialect: string; readonly connection: string }, stateDir: string, where: string): Promise<void> {
  if (store.dialect !== 'sqlite' || store.connection === ':memory:' || isAbsolute(store.connection)) return;
  const file = join(stateDir, store.connection);
  if (!existsSync(file)) return;
  const reader = createSqlStore({ dialect: 'sqlite', connection: file });
  try {
    await assertOutboxMatchesContract(reader.db as Kysely<OutboxTables>, `${where} (${file})`);
  } finally {
    await reader.close();
  }
}
