import type { AddressInfo, Server } from 'node:net';
import rhea, { type EventContext, type Message } from 'rhea';

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

export interface AmqpPeer {
  readonly port: number;
  /** A Service Bus connection string that points `@azure/service-bus` at this peer over plain TCP. */
  readonly connectionString: string;
  readonly received: PeerMessage[];
  /** Resolves once `count` messages have arrived. */
  waitFor(count: number): Promise<PeerMessage[]>;
  /** While set, every transfer is rejected (the bus refuses the send). */
  rejectSends: boolean;
  close(): Promise<void>;
}

/** The link state rhea keeps but does not declare in its typings. */
interface LinkState {
  readonly remote: { readonly attach?: { readonly target?: { readonly address?: string } } };
  readonly local: { attach: { max_message_size?: number } };
}

/** Service Bus's batched-message format: the body's data sections each hold one encoded message. */
const BATCH_FORMAT = 0x80013700;

/**
 * A small AMQP 1.0 peer built with rhea that the real @azure/service-bus SDK can send to (see verified-facts.md):
 * SASL ANONYMOUS, `$cbs` put-token answered 200, receiver links advertising a max message size, batched sends
 * decoded per data section.
 */
export async function startAmqpPeer(): Promise<AmqpPeer> {
  const container = rhea.create_container({ id: 'amqp-peer' });
  const received: PeerMessage[] = [];
  const waiters: { count: number; resolve: (m: PeerMessage[]) => void }[] = [];
  container.on('receiver_open', (context: EventContext) => {
    const receiver = context.receiver;
    if (!receiver) return;
    const link = receiver as unknown as LinkState;
    receiver.set_target({ address: link.remote.attach?.target?.address ?? '' });
    // Without max_message_size on our attach the SDK cannot size a batch.
    link.local.attach.max_message_size = 1024 * 1024;
  });
  container.on('message', (context: EventContext) => {
    const message = context.message;
    const delivery = context.delivery;
    const link = context.receiver as unknown as LinkState | undefined;
    const address = context.receiver?.target?.address ?? link?.remote.attach?.target?.address ?? '';
    if (!message || !delivery) return;
    if (address === '$cbs') {
      // The answer goes back on the link the SDK opened from `$cbs` (addressed by reply_to) on this connection.
      const replyTo = message.reply_to;
      const sender = context.connection.find_sender(
        (s: rhea.Sender) => s.source?.address === replyTo || s.source?.address === '$cbs',
      );
      sender?.send({
        correlation_id: message.message_id,
        application_properties: { 'status-code': 200, 'status-description': 'OK' },
        body: '',
      });
      delivery.accept();
      return;
    }
    if (peer.rejectSends) {
      delivery.reject({ condition: 'amqp:internal-error', description: 'the peer refuses sends' });
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

  const server: Server = container.listen({ port: 0, host: '127.0.0.1' });
  await new Promise<void>((resolve) => (server.listening ? resolve() : server.once('listening', () => resolve())));
  const port = (server.address() as AddressInfo).port;
  const peer: AmqpPeer = {
    port,
    connectionString: `Endpoint=sb://127.0.0.1:${port};SharedAccessKeyName=peer;SharedAccessKey=cGVlcg==;UseDevelopmentEmulator=true`,
    received,
    rejectSends: false,
    waitFor(count) {
      if (received.length >= count) return Promise.resolve(received.slice());
      return new Promise((resolve) => waiters.push({ count, resolve }));
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return peer;
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
