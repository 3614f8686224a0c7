import { createHash } from 'node:crypto';
import type { TokenCredential } from '@azure/identity';
import type { ContainerClient } from '@azure/storage-blob';
import type { EventPublisher } from './event-publisher';
import type { OutgoingMessage } from './queue';
import { managedIdentity } from './service-bus-client';

/*
 * CLAIM CHECK. An event whose CloudEvent JSON is larger than a threshold (`RuntimeCloud__Outbox__ClaimCheckBytes`,
 * 192 KiB: Service Bus Standard takes 256 KiB a message, properties included) is published as an envelope: the same
 * CloudEvent attributes without `data`, plus `dataref` (where its data is stored), `datadigest` (`sha256:<hex>` of the
 * stored bytes) and `datasize`. The data is stored, per tenant, under a name made of the tenant and the event id, by
 * the publish that sends the envelope (`claimCheckingPublisher`): a publish that dies between storing and sending is
 * done again by the next relay run, which stores the same bytes under the same name and sends the same messageId, so
 * nothing is lost and nothing is published twice. Every consumer opens a message with `openEvent`, which reads the
 * data back under the name its envelope's tenant and id give (never one the message chooses) and checks the digest.
 * Changing the envelope is a breaking change for every consumer (asyncapi.json documents it).
 */

/** Where a claim-checked event's data is stored: the tenant's own prefix, the event id. */
export interface EventBodyKey {
  readonly tenant?: string;
  readonly eventId: string;
}

/** Port: the store of claim-checked event data (Blob storage; Azurite on the local host). */
export interface EventBodyStore {
  /** Stores the data under its key; storing the same key again with the same bytes changes nothing. */
  put(key: EventBodyKey, data: string, abortSignal?: AbortSignal): Promise<void>;
  /** The data stored under the key, or undefined when there is none; rejects when the store does not answer. */
  get(key: EventBodyKey): Promise<string | undefined>;
}

/** What a consumer needs of the store: reading. */
export type EventBodyReader = Pick<EventBodyStore, 'get'>;

/** The Blob container of claim-checked event data (infra makes it; a host makes it when missing). */
export const EVENT_BODIES_CONTAINER = 'runtime-cloud-event-bodies';

/** Default claim-check threshold: an event's CloudEvent JSON larger than this is published as an envelope. */
export const DEFAULT_CLAIM_CHECK_BYTES = 192 * 1024;

/** Why a claim-checked message cannot be read; each is permanent: redelivering the message changes nothing. */
export const EventBodyErrors = {
  missing: 'EVENTS.BODY_MISSING',
  digestMismatch: 'EVENTS.BODY_DIGEST_MISMATCH',
  foreignRef: 'EVENTS.BODY_REF_INVALID',
  noStore: 'EVENTS.BODY_STORE_NOT_CONFIGURED',
} as const;

/**
 * The name a key's data is stored under: tenants never share a prefix, and an event without a tenant (a host-wide
 * one) has its own. Encoded so no tenant or id can reach into another's prefix.
 */
export function eventBodyName(key: EventBodyKey): string {
  const owner = key.tenant !== undefined ? `tenants/${encodeURIComponent(key.tenant)}` : 'host';
  return `${owner}/events/${encodeURIComponent(key.eventId)}.json`;
}

/** `sha256:<hex>` of the UTF-8 bytes. */
export function digestOf(data: string): string {
  return `sha256:${createHash('sha256').update(data, 'utf8').digest('hex')}`;
}

/** Options of the claim check. */
export interface ClaimCheckOptions {
  readonly store: EventBodyStore;
  /** A body larger than this many bytes is claim-checked. Example: `196608`. */
  readonly thresholdBytes: number;
  /** How long the stores of one publish may take together, retries included; then it fails. Example: `30000`. */
  readonly storeBudgetMs?: number;
}

/** Default `storeBudgetMs`: the Blob storage SDK's own retries of a put fit in it several times over. */
export const DEFAULT_STORE_BUDGET_MS = 30_000;

/**
 * A publisher that claim-checks every JSON body over the threshold (the data stored, the envelope sent) and hands
 * the messages to `inner` in the same order. A store that does not answer fails the publish (the relay retries it).
 */
export function claimCheckingPublisher(inner: EventPublisher, options: ClaimCheckOptions): EventPublisher {
  const storeBudgetMs = options.storeBudgetMs ?? DEFAULT_STORE_BUDGET_MS;
  return {
    name: inner.name,
    // The relay's claim outlasts the stores and the send together (outbox-relay.service.ts).
    publishBudgetMs: storeBudgetMs + inner.publishBudgetMs,
    async publish(topic, messages) {
      const deadline = AbortSignal.timeout(storeBudgetMs);
      const checked: OutgoingMessage[] = [];
      for (const message of messages) checked.push(await claimCheck(message, options, deadline));
      await inner.publish(topic, checked);
    },
    close: () => inner.close(),
  };
}

async function claimCheck(message: OutgoingMessage, options: ClaimCheckOptions, deadline: AbortSignal): Promise<OutgoingMessage> {
  if (message.contentType !== 'application/json' || Buffer.byteLength(message.body, 'utf8') <= options.thresholdBytes) return message;
  const { data, ...attributes } = JSON.parse(message.body) as Record<string, unknown>;
  const stored = JSON.stringify(data ?? null);
  const key = keyOf(attributes);
  await options.store.put(key, stored, deadline);
  const envelope = { ...attributes, dataref: eventBodyName(key), datadigest: digestOf(stored), datasize: Buffer.byteLength(stored, 'utf8') };
  return { ...message, body: JSON.stringify(envelope) };
}

export type OpenedEvent =
  /** The event as published (a claim-checked one with its data back in place), for the consumer to validate. */
  | { readonly event: unknown }
  /** A claim-checked message whose data cannot be read back: permanent, with its code and reason. */
  | { readonly refused: EventRefusal };

/** Why a claim-checked message cannot be read back, and the event type its envelope names (when it names one). */
export interface EventRefusal {
  readonly code: string;
  readonly reason: string;
  readonly type?: string;
}

/**
 * How every consumer of the events topic reads a message: its body as the trigger gives it (parsed JSON, text or
 * bytes). A message without `dataref` is handed back as it is (JSON text parsed; anything else for the consumer to
 * refuse). A claim-checked one gets its data back from the store, read under the name its own tenant and id give,
 * and only if its digest matches. Rejects when the store does not answer (a redelivery may find it).
 */
export async function openEvent(body: unknown, store: EventBodyReader | undefined): Promise<OpenedEvent> {
  const value = jsonOf(body);
  if (typeof value !== 'object' || value === null || !('dataref' in value)) return { event: value };
  const { dataref, datadigest, datasize: _size, ...attributes } = value as Record<string, unknown>;
  const key = keyOf(attributes);
  const expected = eventBodyName(key);
  const refused = (code: string, reason: string): OpenedEvent => ({ refused: { code, reason, ...(typeof attributes.type === 'string' ? { type: attributes.type } : {}) } });
  if (dataref !== expected) {
    return refused(EventBodyErrors.foreignRef, `the event's dataref ${JSON.stringify(dataref)} is not where its data is stored (${expected})`);
  }
  if (!store) return refused(EventBodyErrors.noStore, `the event's data is stored at ${expected}, and this host has no event body store (RuntimeCloud__Outbox__Bodies__Connection)`);
  const stored = await store.get(key);
  if (stored === undefined) return refused(EventBodyErrors.missing, `the event's data is not stored at ${expected}`);
  const digest = digestOf(stored);
  if (digest !== datadigest) {
    return refused(EventBodyErrors.digestMismatch, `the data stored at ${expected} has digest ${digest}, the event says ${String(datadigest)}`);
  }
  return { event: { ...attributes, data: JSON.parse(stored) as unknown } };
}

/** The key of an event's data, from its own attributes. */
function keyOf(attributes: Record<string, unknown>): EventBodyKey {
  return { ...(typeof attributes.tenant === 'string' ? { tenant: attributes.tenant } : {}), eventId: String(attributes.id) };
}

/** The body as JSON: parsed already, or text or bytes to parse; the text itself when it is not JSON. */
function jsonOf(body: unknown): unknown {
  if (typeof body !== 'string' && !(body instanceof Uint8Array)) return body;
  const text = typeof body === 'string' ? body : new TextDecoder().decode(body);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * The store in Azure Blob storage, container {@link EVENT_BODIES_CONTAINER}: `connection` is a connection string
 * (Azurite's on the local host) or an account URL (`https://acct.blob.core.windows.net`) reached with `credential`
 * (default: the host's managed identity). The SDK is loaded when a store is created.
 */
export function blobEventBodies(connection: string, credential?: TokenCredential): EventBodyStore {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const blob = require('@azure/storage-blob') as typeof import('@azure/storage-blob');
  const service = connection.includes('=')
    ? blob.BlobServiceClient.fromConnectionString(connection)
    : new blob.BlobServiceClient(connection, credential ?? managedIdentity());
  const container = service.getContainerClient(EVENT_BODIES_CONTAINER);
  let made: Promise<unknown> | undefined;
  const ready = (): Promise<ContainerClient> => {
    made ??= container.createIfNotExists().catch((error: unknown) => {
      made = undefined;
      throw error;
    });
    return made.then(() => container);
  };
  return {
    async put(key, data, abortSignal) {
      const bytes = Buffer.from(data, 'utf8');
      const blob = (await ready()).getBlockBlobClient(eventBodyName(key));
      await blob.uploadData(bytes, { blobHTTPHeaders: { blobContentType: 'application/json' }, ...(abortSignal ? { abortSignal } : {}) });
    },
    async get(key) {
      try {
        return (await (await ready()).getBlockBlobClient(eventBodyName(key)).downloadToBuffer()).toString('utf8');
      } catch (thrown) {
        if ((thrown as { statusCode?: number }).statusCode === 404) return undefined;
        throw thrown;
      }
    },
  };
}
