import { randomBytes } from 'node:crypto';
import type { AddressInfo, Server, Socket } from 'node:net';
import { errors as joseErrors, jwtVerify, type CryptoKey, type KeyObject } from 'jose';
import rhea, { type Connection, type EventContext, type Message } from 'rhea';
import { selfSignedCertificate } from './self-signed-certificate';

/** A message as the peer received it on a link (an address: a queue or topic name). */
export interface PeerMessage {
  readonly address: string;
  readonly messageId: string | undefined;
  readonly correlationId: string | undefined;
  readonly contentType: string | undefined;
  readonly subject: string | undefined;
  readonly applicationProperties: Record<string, unknown>;
  readonly body: unknown;
}

/** A message waiting in one of the peer's queues, as peek shows it. */
export interface QueuedMessage {
  readonly messageId: string;
  readonly body: unknown;
  readonly enqueuedAt: Date;
  /** Service Bus's `x-opt-message-state`; default active. */
  readonly state?: 'active' | 'deferred' | 'scheduled';
  readonly contentType?: string;
  readonly applicationProperties?: Record<string, unknown>;
}

/** A message a receiver dead-lettered, with the reason and description it gave. */
export interface DeadLettered {
  readonly messageId: string;
  readonly reason: unknown;
  readonly description: unknown;
}

/** A `$cbs` put-token request as the peer answered it. */
export interface PutToken {
  readonly name: string;
  readonly type: string;
  readonly statusCode: number;
  readonly statusDescription: string;
}

/** The audience of Entra tokens for Service Bus (`aud`; Entra writes it with a trailing slash when asked for `https://servicebus.azure.net//.default`). */
export const SERVICE_BUS_AUDIENCE = 'https://servicebus.azure.net';

/**
 * Service Bus's Entra (AAD) authorization: a put-token must carry a JWT (`type: jwt`) signed by `key`, issued by
 * `issuer`, with audience {@link SERVICE_BUS_AUDIENCE}, not expired, and `name` must address an entity of
 * `namespace` (`sb://<namespace>/<entity>`); a link attaches, and a transfer is accepted, only for an entity so
 * authorized on that connection.
 */
export interface EntraAuthorization {
  /** Example: `rc-bus.servicebus.windows.net`. */
  readonly namespace: string;
  readonly issuer: string;
  readonly key: CryptoKey | KeyObject;
  /**
   * Role assignments: whether the identity a token was issued to (its `appid`, the client id) holds the claim on
   * the entity (lower-cased path, e.g. `runtime-cloud-events/subscriptions/runner-a`). Default: every identity
   * holds every claim.
   */
  readonly permits?: (appid: string, entity: string, claim: 'Send' | 'Listen') => boolean;
}

/**
 * Service Bus Standard's limits (the quotas page: "256 KB for Standard tier"; "the maximum size for batches is 256 KB
 * for the Standard tier"), properties and payload counted together. A Standard namespace advertises it as the
 * `max-message-size` of a sender's link and refuses a larger transfer with `amqp:link:message-size-exceeded`.
 */
export const STANDARD_MAX_MESSAGE_BYTES = 256 * 1024;

export interface AmqpPeerOptions {
  /** Authorize as Service Bus does for Entra; the peer then listens with TLS, the only transport the SDK uses for a namespace given by name. */
  readonly entra?: EntraAuthorization;
  /** The largest transfer (one message, or one batch) accepted; default Service Bus Standard's, {@link STANDARD_MAX_MESSAGE_BYTES}. */
  readonly maxMessageBytes?: number;
  /**
   * The `max-message-size` advertised on a sender's link, which the SDK sizes its batches by; default `maxMessageBytes`.
   * Larger than that, the SDK sends what the peer then refuses (the namespace counting bytes the SDK did not).
   */
  readonly advertisedMaxMessageBytes?: number;
}

export interface AmqpPeer {
  readonly port: number;
  /** A Service Bus connection string that points `@azure/service-bus` at this peer over plain TCP. */
  readonly connectionString: string;
  /** The SDK's `customEndpointAddress` that reaches this peer (TLS when `entra` is set). */
  readonly endpoint: string;
  readonly received: PeerMessage[];
  readonly putTokens: PutToken[];
  /** Resolves once `count` messages have arrived. */
  waitFor(count: number): Promise<PeerMessage[]>;
  /** While set, every transfer is rejected (the bus refuses the send). */
  rejectSends: boolean;
  /** Sizes of the transfers refused as larger than `maxMessageBytes`. */
  readonly refusedTooLarge: number[];
  /** Puts a message in a queue with the next sequence number (what peek-message answers from). */
  enqueue(queue: string, message: QueuedMessage): void;
  /** Takes the oldest message off a queue, as a completed receive would. */
  settleOldest(queue: string): void;
  /**
   * Declares a subscription of a topic: from then on every message sent to the topic that `takes` passes (its
   * application properties, as a SQL filter reads them) is copied to the entity `<topic>/Subscriptions/<name>`,
   * where receivers take it with peek-lock.
   */
  subscribe(topic: string, name: string, takes: (properties: Record<string, unknown>) => boolean): void;
  /** The messages of an entity not yet completed or dead-lettered (locked ones included), oldest first. */
  messagesOf(entity: string): QueuedMessage[];
  /** The messages receivers dead-lettered from an entity. */
  deadLetteredOf(entity: string): DeadLettered[];
  close(): Promise<void>;
}

/** The link state rhea keeps but does not declare in its typings. */
interface LinkState {
  readonly name: string;
  readonly remote: { readonly attach?: { readonly target?: { readonly address?: string }; readonly source?: { readonly address?: string } } };
  readonly local: { attach: { max_message_size?: number } };
}

/** rhea's outcome constructors, which its typings leave out. */
interface Outcomes {
  rejected(fields: object): { described(): unknown };
}

/** A message in one of the peer's entities: its sequence number, how often it was delivered, and the lock of its current delivery. */
type StoredMessage = QueuedMessage & { readonly sequenceNumber: number; deliveryCount: number; lock?: { readonly tag: Buffer; readonly on: rhea.Sender } | undefined };

/** Service Bus's batched-message format: the body's data sections each hold one encoded message. */
const BATCH_FORMAT = 0x80013700;
const CBS = '$cbs';
const MANAGEMENT_SUFFIX = '/$management';
const MESSAGE_STATES = { active: 0, deferred: 1, scheduled: 2 } as const;

/**
 * A small AMQP 1.0 peer built with rhea that the real @azure/service-bus SDK talks to over plain TCP (its connection
 * string saying `UseDevelopmentEmulator=true`): SASL ANONYMOUS, `$cbs` put-token (answered 200, or checked as Service
 * Bus does for Entra with `entra`), receiver links advertising a max message size, batched sends decoded per data
 * section, and `com.microsoft:peek-message` on `<queue>/$management` answered from the queues filled with `enqueue`.
 * Clients receive from a queue or a subscription with peek-lock: a delivery locks its message (the delivery tag is the
 * lock token) until the receiver completes it (accepted: gone), abandons it (modified/released: delivered again, its
 * delivery count one higher) or dead-letters it (rejected with `com.microsoft:dead-letter`: kept with its reason); a
 * drain is answered.
 */
export async function startAmqpPeer(options: AmqpPeerOptions = {}): Promise<AmqpPeer> {
  const { entra } = options;
  const maxMessageBytes = options.maxMessageBytes ?? STANDARD_MAX_MESSAGE_BYTES;
  const container = rhea.create_container({ id: 'amqp-peer' });
  const received: PeerMessage[] = [];
  const putTokens: PutToken[] = [];
  const queues = new Map<string, StoredMessage[]>();
  const deadLettered = new Map<string, DeadLettered[]>();
  const subscriptions = new Map<string, { readonly entity: string; readonly takes: (properties: Record<string, unknown>) => boolean }[]>();
  // The links clients receive on, by entity (lower-cased, as Service Bus compares paths).
  const receivers = new Map<string, Set<rhea.Sender>>();
  let sequenceNumber = 0;
  const waiters: { count: number; resolve: (m: PeerMessage[]) => void }[] = [];
  // Per connection, the entities a put-token authorized (lower-cased path, '' for the namespace), until when and for whom.
  const grants = new WeakMap<Connection, Map<string, { until: number; appid: string }>>();
  const authorized = (connection: Connection, address: string, claim: 'Send' | 'Listen'): boolean => {
    if (!entra || address === CBS) return true;
    const path = address.toLowerCase();
    for (const [entity, { until, appid }] of grants.get(connection) ?? []) {
      const covers = entity === '' || path === entity || path.startsWith(`${entity}/`);
      // A role is held on the entity, and so on its management node.
      if (covers && until > Date.now() && (entra.permits?.(appid, path.replace(/\/\$management$/, ''), claim) ?? true)) return true;
    }
    return false;
  };
  const entityKey = (address: string) => address.toLowerCase();
  const store = (entity: string, message: QueuedMessage) => {
    const key = entityKey(entity);
    queues.set(key, [...(queues.get(key) ?? []), { ...message, sequenceNumber: ++sequenceNumber, deliveryCount: 0 }]);
    pump(key);
  };
  /** Hands each receiver of the entity with credit its next message that no one holds, locking it. */
  const pump = (key: string) => {
    for (const sender of receivers.get(key) ?? []) {
      for (;;) {
        const next = (queues.get(key) ?? []).find((m) => (m.state ?? 'active') === 'active' && !m.lock);
        if (!next || !sender.sendable()) break;
        next.lock = { tag: randomBytes(16), on: sender };
        next.deliveryCount++;
        sender.send(
          {
            message_id: next.messageId,
            ...(next.contentType ? { content_type: next.contentType } : {}),
            application_properties: next.applicationProperties ?? {},
            delivery_count: next.deliveryCount - 1,
            body: rhea.message.data_section(Buffer.from(typeof next.body === 'string' ? next.body : JSON.stringify(next.body))),
            message_annotations: { 'x-opt-sequence-number': rhea.types.wrap_long(next.sequenceNumber), 'x-opt-enqueued-time': next.enqueuedAt },
          },
          next.lock.tag,
        );
      }
    }
  };
  /** The stored message a delivery locked (its tag is the lock token); `ours` when the delivery was one of a receiver's. */
  const lockedBy = (context: EventContext) => {
    const key = entityKey((context.sender as unknown as LinkState | undefined)?.remote.attach?.source?.address ?? '');
    const tag = (context.delivery as unknown as { tag?: Buffer } | undefined)?.tag;
    const messages = queues.get(key) ?? [];
    const message = messages.find((m) => m.lock && tag && m.lock.tag.equals(tag));
    const ours = message !== undefined || (context.sender !== undefined && (receivers.get(key)?.has(context.sender) ?? false));
    // Settled with the outcome the receiver gave (a dead-letter's without its error, which the SDK would take for a failure).
    const state = context.delivery?.remote_state as { described?: () => unknown; error?: unknown } | undefined;
    const outcome = state?.error ? (rhea.message as unknown as Outcomes).rejected({}).described() : state?.described?.();
    return { key, messages, message, settle: () => ours && context.delivery?.update(true, outcome) };
  };
  const refusal = (claim: 'Send' | 'Listen', address: string) => ({
    condition: 'amqp:unauthorized-access',
    description: `Unauthorized access. '${claim}' claim(s) are required to perform this operation. Resource: 'sb://${entra?.namespace}/${address}'.`,
  });

  container.on('receiver_open', (context: EventContext) => {
    const receiver = context.receiver;
    if (!receiver) return;
    const link = receiver as unknown as LinkState;
    const address = link.remote.attach?.target?.address ?? '';
    // Service Bus answers the attach of a link it does not authorize and detaches it at once, with the error.
    if (!authorized(context.connection, address, 'Send')) {
      receiver.close(refusal('Send', address));
      return;
    }
    receiver.set_target({ address });
    // Without max_message_size on our attach the SDK cannot size a batch.
    link.local.attach.max_message_size = options.advertisedMaxMessageBytes ?? maxMessageBytes;
  });
  container.on('sender_open', (context: EventContext) => {
    const sender = context.sender;
    const address = (sender as unknown as LinkState | undefined)?.remote.attach?.source?.address ?? '';
    if (!sender) return;
    if (!authorized(context.connection, address, 'Listen')) {
      sender.close(refusal('Listen', address));
      return;
    }
    if (address === CBS || address.endsWith(MANAGEMENT_SUFFIX) || address.startsWith('$') || address === '') return;
    // A client receives from the entity: the peer sends its messages as credit allows.
    sender.set_source({ address });
    const key = entityKey(address);
    receivers.set(key, (receivers.get(key) ?? new Set()).add(sender));
  });
  container.on('sendable', (context: EventContext) => pump(entityKey((context.sender as unknown as LinkState | undefined)?.remote.attach?.source?.address ?? '')));
  // A drain asks for every message there is, then the rest of the credit back.
  container.on('sender_draining', (context: EventContext) => {
    pump(entityKey((context.sender as unknown as LinkState | undefined)?.remote.attach?.source?.address ?? ''));
    context.sender?.set_drained(true);
  });
  // Dispositions of peek-locked deliveries; each is settled back, which is what the SDK waits for.
  container.on('accepted', (context: EventContext) => {
    const { key, messages, message, settle } = lockedBy(context);
    if (message) queues.set(key, messages.filter((m) => m !== message));
    settle();
  });
  container.on('released', (context: EventContext) => {
    const { key, message, settle } = lockedBy(context);
    if (message) message.lock = undefined;
    settle();
    pump(key);
  });
  container.on('rejected', (context: EventContext) => {
    const { key, messages, message, settle } = lockedBy(context);
    const error = (context.delivery?.remote_state as { error?: { condition?: string; info?: Record<string, unknown> } } | undefined)?.error;
    if (message) {
      queues.set(key, messages.filter((m) => m !== message));
      deadLettered.set(key, [...(deadLettered.get(key) ?? []), { messageId: message.messageId, reason: error?.info?.DeadLetterReason, description: error?.info?.DeadLetterErrorDescription }]);
    }
    settle();
  });
  // A receiver gone: the locks it held lapse (Service Bus keeps them to their expiry; the peer has no clock for that).
  container.on('sender_close', (context: EventContext) => {
    const sender = context.sender;
    const key = entityKey((sender as unknown as LinkState | undefined)?.remote.attach?.source?.address ?? '');
    if (!sender || !receivers.get(key)?.delete(sender)) return;
    for (const message of queues.get(key) ?? []) if (message.lock?.on === sender) message.lock = undefined;
    pump(key);
  });
  container.on('message', (context: EventContext) => {
    const message = context.message;
    const delivery = context.delivery;
    const link = context.receiver as unknown as LinkState | undefined;
    const address = context.receiver?.target?.address ?? link?.remote.attach?.target?.address ?? '';
    if (!message || !delivery) return;
    if (address === CBS) {
      delivery.accept();
      void answerPutToken(context.connection, message).then((answer) => {
        putTokens.push(answer);
        reply(context.connection, message, { 'status-code': answer.statusCode, 'status-description': answer.statusDescription }, '');
      });
      return;
    }
    const claim = address.endsWith(MANAGEMENT_SUFFIX) ? 'Listen' : 'Send';
    if (!authorized(context.connection, address, claim)) {
      delivery.reject(refusal(claim, address));
      return;
    }
    if (address.endsWith(MANAGEMENT_SUFFIX)) {
      delivery.accept();
      answerManagement(context.connection, address.slice(0, -MANAGEMENT_SUFFIX.length), message);
      return;
    }
    if (peer.rejectSends) {
      delivery.reject({ condition: 'amqp:internal-error', description: 'the peer refuses sends' });
      return;
    }
    const size = transferSize(context);
    if (size > maxMessageBytes) {
      peer.refusedTooLarge.push(size);
      delivery.reject({ condition: 'amqp:link:message-size-exceeded', description: `The received message (size ${size} bytes) exceeds the limit (${maxMessageBytes} bytes) currently allowed on the link.` });
      return;
    }
    for (const one of unbatch(context)) {
      const message = toPeerMessage(address, one);
      received.push(message);
      for (const subscription of subscriptions.get(entityKey(address)) ?? []) {
        if (subscription.takes(message.applicationProperties)) store(subscription.entity, { messageId: message.messageId ?? '', body: message.body, enqueuedAt: new Date(), ...(message.contentType ? { contentType: message.contentType } : {}), applicationProperties: message.applicationProperties });
      }
    }
    delivery.accept();
    for (const waiter of [...waiters]) {
      if (received.length >= waiter.count) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(received.slice());
      }
    }
  });

  /** As Service Bus's `$cbs` answers a put-token; with `entra`, the checks Service Bus makes of an Entra token. */
  async function answerPutToken(connection: Connection, message: Message): Promise<PutToken> {
    const properties = (message.application_properties ?? {}) as Record<string, unknown>;
    const name = typeof properties.name === 'string' ? properties.name : '';
    const type = typeof properties.type === 'string' ? properties.type : '';
    const answer = (statusCode: number, statusDescription: string): PutToken => ({ name, type, statusCode, statusDescription });
    if (properties.operation !== 'put-token') return answer(400, `BadRequest: $cbs supports put-token, not ${String(properties.operation)}`);
    if (!entra) return answer(200, 'OK');
    if (type !== 'jwt') return answer(401, `InvalidToken: this namespace accepts Entra tokens (type jwt) only, not ${type}.`);
    const entity = entityOf(name, entra.namespace);
    if (entity === undefined) return answer(401, `InvalidAudience: the put-token name ${name} does not address an entity of sb://${entra.namespace}/.`);
    try {
      const { payload } = await jwtVerify(String(message.body), entra.key, { issuer: entra.issuer, requiredClaims: ['exp'] });
      const audiences = [payload.aud ?? []].flat();
      if (!audiences.some((aud) => aud.replace(/\/$/, '') === SERVICE_BUS_AUDIENCE)) {
        return answer(401, `InvalidAudience: The token has an invalid audience '${audiences.join(', ')}', expected '${SERVICE_BUS_AUDIENCE}'.`);
      }
      const forConnection = grants.get(connection) ?? new Map<string, { until: number; appid: string }>();
      forConnection.set(entity, { until: (payload.exp ?? 0) * 1000, appid: typeof payload.appid === 'string' ? payload.appid : '' });
      grants.set(connection, forConnection);
      return answer(200, 'OK');
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) return answer(401, 'ExpiredToken: The token is expired.');
      return answer(401, `InvalidToken: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  /** `com.microsoft:peek-message` as Service Bus answers it: 200 with the encoded messages from a sequence number on, 204 when none. */
  function answerManagement(connection: Connection, entity: string, request: Message): void {
    const operation = (request.application_properties as Record<string, unknown> | undefined)?.operation;
    if (operation !== 'com.microsoft:peek-message') {
      reply(connection, request, { statusCode: 501, statusDescription: `the peer does not implement ${String(operation)}` }, undefined);
      return;
    }
    const body = request.body as Record<string, unknown>;
    const from = Number(body['from-sequence-number']);
    const count = Number(body['message-count']);
    const peeked = (queues.get(entityKey(entity)) ?? []).filter((m) => m.sequenceNumber >= from).slice(0, count);
    if (peeked.length === 0) {
      reply(connection, request, { statusCode: 204, statusDescription: 'No Content' }, undefined);
      return;
    }
    const messages = peeked.map((m) => ({
      message: rhea.message.encode({
        message_id: m.messageId,
        content_type: 'application/json',
        body: rhea.message.data_section(Buffer.from(JSON.stringify(m.body))),
        message_annotations: {
          'x-opt-sequence-number': rhea.types.wrap_long(m.sequenceNumber),
          'x-opt-enqueued-time': m.enqueuedAt,
          'x-opt-message-state': MESSAGE_STATES[m.state ?? 'active'],
        },
      }),
    }));
    reply(connection, request, { statusCode: 200, statusDescription: 'OK' }, { messages });
  }

  const server: Server = entra
    ? container.listen({ port: 0, host: '127.0.0.1', transport: 'tls', ...selfSignedCertificate() })
    : container.listen({ port: 0, host: '127.0.0.1' });
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => (server.listening ? resolve() : server.once('listening', () => resolve())));
  const port = (server.address() as AddressInfo).port;
  const peer: AmqpPeer = {
    port,
    connectionString: `Endpoint=sb://127.0.0.1:${port};SharedAccessKeyName=peer;SharedAccessKey=cGVlcg==;UseDevelopmentEmulator=true`,
    endpoint: `sb://127.0.0.1:${port}`,
    received,
    putTokens,
    rejectSends: false,
    refusedTooLarge: [],
    waitFor(count) {
      if (received.length >= count) return Promise.resolve(received.slice());
      return new Promise((resolve) => waiters.push({ count, resolve }));
    },
    enqueue: store,
    settleOldest(queue) {
      queues.get(entityKey(queue))?.shift();
    },
    subscribe(topic, name, takes) {
      const key = entityKey(topic);
      subscriptions.set(key, [...(subscriptions.get(key) ?? []), { entity: `${topic}/Subscriptions/${name}`, takes }]);
    },
    messagesOf: (entity) => (queues.get(entityKey(entity)) ?? []).map(({ messageId, body, enqueuedAt, state, contentType, applicationProperties }) => ({ messageId, body, enqueuedAt, ...(state ? { state } : {}), ...(contentType ? { contentType } : {}), ...(applicationProperties ? { applicationProperties } : {}) })),
    deadLetteredOf: (entity) => [...(deadLettered.get(entityKey(entity)) ?? [])],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
  return peer;
}

/** The answer goes back on the link the client opened for it (named, and targeted, by the request's reply_to) on this connection. */
function reply(connection: Connection, request: Message, applicationProperties: Record<string, unknown>, body: unknown): void {
  const replyTo = request.reply_to;
  const sender = connection.find_sender((s: rhea.Sender) => {
    const link = s as unknown as LinkState;
    return link.name === replyTo || link.remote.attach?.target?.address === replyTo;
  });
  sender?.send({ correlation_id: request.message_id, application_properties: applicationProperties, body });
}

/** The entity path (lower-cased, '' for the namespace itself) a put-token name addresses, or undefined when it is not one of `namespace`. */
function entityOf(name: string, namespace: string): string | undefined {
  try {
    const url = new URL(name);
    if (url.protocol !== 'sb:' || url.hostname.toLowerCase() !== namespace.toLowerCase()) return undefined;
    return decodeURIComponent(url.pathname).replace(/^\/+|\/+$/g, '').toLowerCase();
  } catch {
    return undefined;
  }
}

/** The bytes of a transfer: a batch as it came, a single message as encoded again. */
function transferSize(context: EventContext): number {
  const raw = context.message as unknown;
  return Buffer.isBuffer(raw) ? raw.length : context.message ? rhea.message.encode(context.message).length : 0;
}

/** A batched transfer reaches rhea undecoded (a Buffer, non-zero format): its data sections each hold one message. */
function unbatch(context: EventContext): Message[] {
  const format = (context as unknown as { format?: number }).format;
  const raw = context.message as unknown;
  if (format !== BATCH_FORMAT || !Buffer.isBuffer(raw)) return context.message ? [context.message] : [];
  const envelope = rhea.message.decode(raw);
  const section = envelope.body as { content: Buffer | Buffer[]; multiple?: boolean };
  const contents = section.multiple ? (section.content as Buffer[]) : [section.content as Buffer];
  return contents.map((content) => rhea.message.decode(content) as unknown as Message);
}

function toPeerMessage(address: string, message: Message): PeerMessage {
  const raw = message.body as unknown;
  const content = raw && typeof raw === 'object' && 'content' in raw ? (raw as { content: Buffer }).content : raw;
  let body: unknown = content;
  if (Buffer.isBuffer(content)) {
    const text = content.toString('utf8');
    try {
      body = JSON.parse(text) as unknown;
    } catch {
      body = text;
    }
  }
  return {
    address,
    messageId: message.message_id === undefined ? undefined : String(message.message_id),
    correlationId: message.correlation_id === undefined ? undefined : String(message.correlation_id),
    contentType: message.content_type,
    subject: message.subject,
    applicationProperties: { ...(message.application_properties ?? {}) },
    body,
  };
}
