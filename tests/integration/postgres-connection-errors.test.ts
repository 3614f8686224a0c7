import { createServer, type Server, type Socket } from 'node:net';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqlStore } from '../../shared/platform/sql/database';

/**
 * A backend that ends a connection the moment it is made (`pg_terminate_backend` during a connect, a server going
 * down) can send ReadyForQuery and its FATAL ErrorResponse in one TCP segment: the driver hands the connection out
 * and then, in the same turn, the client emits 'error'. Found by the store-faults test, whose host died of that
 * event unheard. The peer here speaks PostgreSQL's wire protocol (v3) just far enough to do exactly that, so the
 * timing is certain; store-faults shows the same against a real server, when the timing falls that way.
 */
describe('PostgreSQL connections ended by the server as they open', () => {
  let server: Server;
  let url: string;
  const sockets = new Set<Socket>();

  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.add(socket);
      socket.once('data', () => {
        // The startup message answered in one write: AuthenticationOk, ReadyForQuery, then the FATAL error.
        socket.end(Buffer.concat([message('R', int32(0)), message('Z', Buffer.from('I')), message('E', errorFields({ S: 'FATAL', V: 'FATAL', C: '57P01', M: 'terminating connection due to administrator command' }))]));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    url = `postgres://postgres@127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/test`;
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it('when the server ends each connection right after it is ready, then queries fail as errors and the process hears every error event', async () => {
    const store = createSqlStore({ dialect: 'postgres', connection: url, poolSize: 2 });
    const unheard: unknown[] = [];
    const onUncaught = (error: unknown) => unheard.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      const outcomes = await Promise.allSettled(Array.from({ length: 5 }, () => sql`select 1`.execute(store.db)));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(outcomes.map((o) => o.status)).toEqual(Array(5).fill('rejected'));
      expect(unheard).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await store.close().catch(() => undefined);
    }
  });
});

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}

/** A backend message: its type byte, its length (itself included) and its body. */
function message(type: string, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from(type), int32(body.length + 4), body]);
}

function errorFields(fields: Record<string, string>): Buffer {
  return Buffer.concat([...Object.entries(fields).map(([code, value]) => Buffer.from(`${code}${value}\0`)), Buffer.from('\0')]);
}
