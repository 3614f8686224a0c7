import { createServer as createHttpServer } from 'node:http';
import { createServer as createHttp2Server } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { createContextValues } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { leaseServiceRoutes } from '../../functions/capacity/lease-rpc';
import { MAX_BODY_BYTES } from '../../functions/http/endpoint';
import { RPC_LOG } from '../../functions/rpc/rpc-errors';
import type { HostComponent, HostContext } from '../host';

/** The first bytes an HTTP/2 client sends on a cleartext connection (RFC 9113, section 3.4). */
const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/**
 * The local host's gRPC port (seed: grpc 8132; `RuntimeCloud__Local__GrpcPort`): the LeaseService
 * (functions/capacity/lease-rpc.ts) for gRPC, gRPC-Web and Connect clients, over HTTP/2 without TLS (h2c, as the
 * peers' stand-ins) and, on the same port, HTTP/1.1 for Connect and gRPC-Web clients that do not speak HTTP/2 (curl, a
 * browser): each connection goes to the server of the protocol its first bytes show. Loopback only, as the HTTP port.
 * Started only where the capacity module is enabled.
 */
export class LeaseGrpcServer implements HostComponent {
  readonly name = 'lease-grpc';
  #server: Server | undefined;
  #url: URL | undefined;
  readonly #sockets = new Set<Socket>();

  /** Whether it listens (not where the capacity module is disabled). */
  get serving(): boolean {
    return this.#url !== undefined;
  }

  /** `http://127.0.0.1:<port>`, once started. */
  get url(): URL {
    if (!this.#url) throw new Error('the gRPC server is not listening');
    return this.#url;
  }

  async start(context: HostContext): Promise<void> {
    if (!context.config.host.enabledModules.includes('capacity')) return;
    const handler = connectNodeAdapter({
      routes: leaseServiceRoutes({ deps: () => Promise.resolve(context.deps), streams: true }),
      readMaxBytes: MAX_BODY_BYTES,
      contextValues: () => createContextValues().set(RPC_LOG, (message, error) => context.log('error', 'LeaseService', message, error)),
    });
    const http2 = createHttp2Server(handler);
    const http1 = createHttpServer(handler);
    const server = createNetServer((socket) => {
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
      socket.once('readable', () => {
        const first = socket.read() as Buffer | null;
        if (first === null) return;
        socket.unshift(first);
        const length = Math.min(first.length, HTTP2_PREFACE.length);
        const h2 = first.subarray(0, length).equals(HTTP2_PREFACE.subarray(0, length));
        (h2 ? http2 : http1).emit('connection', socket);
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(context.config.local.grpcPort, '127.0.0.1', () => resolve());
    });
    this.#server = server;
    this.#url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }

  /** Stops listening; calls still open (a watch of a ticket) end with their connection. */
  async stop(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    await closed;
    this.#server = undefined;
  }
}
