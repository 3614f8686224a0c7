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
  close(): Promise<void>;
}

/** The link state rhea keeps but does not declare in its typings. */
interface LinkState {
  readonly name: string;
  readonly remote: { readonly attach?: { readonly target?: { readonly address?: string }; readonly source?: { readonly address?: string } } };
  readonly local: { attach: { max_message_size?: number } };
}

/** Service Bus's batched-message format: the body's data sections each hold one encoded message. */
const BATCH_FORMAT = 0x80013700;
const CBS = '$cbs';
const MANAGEMENT_SUFFIX = '/$management';
const MESSAGE_STATES = { active: 0, deferred: 1, scheduled: 2 } as const;

/**
 * A small AMQP 1.0 peer built with rhea that the real @azure/service-bus SDK talks to (see verified-facts.md): SASL
 * ANONYMOUS, `$cbs` put-token (answered 200, or checked as Service Bus does for Entra with `entra`), receiver links
 * advertising a max message size, batched sends decoded per data section, and `com.microsoft:peek-message` on
 * `<queue>/$management` answered from the queues filled with `enqueue`.
 */
export async function startAmqpPeer(options: AmqpPeerOptions = {}): Promise<AmqpPeer> {
  const { entra } = options;
  const maxMessageBytes = options.maxMessageBytes ?? STANDARD_MAX_MESSAGE_BYTES;
  const container = rhea.create_container({ id: 'amqp-peer' });
  const received: PeerMessage[] = [];
  const putTokens: PutToken[] = [];
  const queues = new Map<string, (QueuedMessage & { sequenceNumber: number })[]>();
  let sequenceNumber = 0;
  const waiters: { count: number; resolve: (m: PeerMessage[]) => void }[] = [];
  // Per connection, the entities a put-token authorized (lower-cased path, '' for the namespace) and until when.
  const grants = new WeakMap<Connection, Map<string, number>>();
  const authorized = (connection: Connection, address: string): boolean => {
    if (!entra || address === CBS) return true;
    const path = address.toLowerCase();
    for (const [entity, until] of grants.get(connection) ?? []) {
      const covers = entity === '' || path === entity || path.startsWith(`${entity}/`);
      if (covers && until > Date.now()) return true;
    }
    return false;
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
    if (!authorized(context.connection, address)) {
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
    if (sender && !authorized(context.connection, address)) sender.close(refusal('Listen', address));
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
    if (!authorized(context.connection, address)) {
      delivery.reject(refusal(address.endsWith(MANAGEMENT_SUFFIX) ? 'Listen' : 'Send', address));
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
    for (const one of unbatch(context)) received.push(toPeerMessage(address, one));
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
      const forConnection = grants.get(connection) ?? new Map<string, number>();
      forConnection.set(entity, (payload.exp ?? 0) * 1000);
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
    const peeked = (queues.get(entity) ?? []).filter((m) => m.sequenceNumber >= from).slice(0, count);
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
    enqueue(queue, message) {
      const messages = queues.get(queue) ?? [];
      messages.push({ ...message, sequenceNumber: ++sequenceNumber });
      queues.set(queue, messages);
    },
    settleOldest(queue) {
      queues.get(queue)?.shift();
    },
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
