import { expect } from 'vitest';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { anyUnpack } from '@bufbuild/protobuf/wkt';
import { createRegistry, fromBinary, type Message } from '@bufbuild/protobuf';
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from '../../contracts/gen/google/rpc/error_details_pb';
import { StatusSchema } from '../../contracts/gen/google/rpc/status_pb';

/**
 * A client of the LeaseService that shares no code with the host: `@grpc/grpc-js` with the contract's .proto file
 * loaded at run time by `@grpc/proto-loader` (int64 as strings, enums by name, defaults filled in, oneofs named).
 */
const CONTRACTS = join(__dirname, '..', '..', 'contracts');
const PROTO = join(CONTRACTS, 'connectsoft', 'runtimecloud', 'capacity', 'v1', 'capacity.proto');

export interface GrpcLeaseClient {
  /** A unary call with the bearer token (and the tenant named with `x-tenant-id`); rejects with the ServiceError. */
  call<T = Record<string, unknown>>(method: string, request: object, auth?: { token?: string; tenant?: string }): Promise<T>;
  /** A server-streaming call's messages until it ends; rejects with the ServiceError. */
  stream<T = Record<string, unknown>>(method: string, request: object, auth: { token: string }, onMessage?: (message: T) => void): Promise<T[]>;
  close(): void;
}

export function grpcLeaseClient(url: URL): GrpcLeaseClient {
  const definition = protoLoader.loadSync(PROTO, { includeDirs: [CONTRACTS], longs: String, enums: String, defaults: true, oneofs: true });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    connectsoft: { runtimecloud: { capacity: { v1: { LeaseService: grpc.ServiceClientConstructor } } } };
  };
  const client = new loaded.connectsoft.runtimecloud.capacity.v1.LeaseService(url.host, grpc.credentials.createInsecure());
  const metadataOf = (auth: { token?: string; tenant?: string } = {}) => {
    const metadata = new grpc.Metadata();
    if (auth.token !== undefined) metadata.set('authorization', `Bearer ${auth.token}`);
    if (auth.tenant !== undefined) metadata.set('x-tenant-id', auth.tenant);
    return metadata;
  };
  type Unary = (request: object, metadata: grpc.Metadata, callback: (error: grpc.ServiceError | null, response: unknown) => void) => void;
  type Streaming = (request: object, metadata: grpc.Metadata) => grpc.ClientReadableStream<unknown>;
  const unary = client as unknown as Record<string, Unary>;
  const streaming = client as unknown as Record<string, Streaming>;
  return {
    call: <T>(method: string, request: object, auth?: { token?: string; tenant?: string }) =>
      new Promise<T>((resolve, reject) => {
        unary[method]!.call(client, request, metadataOf(auth), (error, response) => (error ? reject(error) : resolve(response as T)));
      }),
    stream: <T>(method: string, request: object, auth: { token: string }, onMessage?: (message: T) => void) =>
      new Promise<T[]>((resolve, reject) => {
        const messages: T[] = [];
        const call = streaming[method]!.call(client, request, metadataOf(auth));
        call.on('data', (message: T) => {
          messages.push(message);
          onMessage?.(message);
        });
        call.on('error', reject);
        call.on('end', () => resolve(messages));
      }),
    close: () => client.close(),
  };
}

/** The status details a failed call carries in `grpc-status-details-bin` (google.rpc.Status), by type. */
export function statusDetails(error: grpc.ServiceError): { reason?: string; metadata?: Record<string, string>; retrySeconds?: number; fields?: string[] } {
  const [bin] = error.metadata.get('grpc-status-details-bin');
  if (!(bin instanceof Buffer)) return {};
  const status = fromBinary(StatusSchema, bin);
  expect(status.code).toBe(error.code);
  const registry = createRegistry(ErrorInfoSchema, RetryInfoSchema, BadRequestSchema);
  const found: { reason?: string; metadata?: Record<string, string>; retrySeconds?: number; fields?: string[] } = {};
  for (const detail of status.details) {
    const message = anyUnpack(detail, registry) as (Message & Record<string, unknown>) | undefined;
    if (message?.$typeName === 'google.rpc.ErrorInfo') Object.assign(found, { reason: message.reason, metadata: message.metadata });
    if (message?.$typeName === 'google.rpc.RetryInfo') found.retrySeconds = Number((message.retryDelay as { seconds: bigint }).seconds);
    if (message?.$typeName === 'google.rpc.BadRequest') found.fields = (message.fieldViolations as { field: string }[]).map((v) => v.field);
  }
  return found;
}

/** The ServiceError a call was refused with (fails the test when the call succeeded). */
export async function refusal(call: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await call;
  } catch (error) {
    return error as grpc.ServiceError;
  }
  throw new Error('the call succeeded; a refusal was expected');
}

export { grpc };
