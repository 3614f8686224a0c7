import type { HttpRequest, HttpResponseInit, InvocationContext } from '@azure/functions';
import { describeHandler } from '../http/endpoint';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';

/** The LeaseService's full name, the path its methods are called under. */
const SERVICE = 'connectsoft.runtimecloud.capacity.v1.LeaseService';
const PREFIX = '/runtime-cloud/connect';

let serving: Promise<(request: HttpRequest, context: InvocationContext) => Promise<HttpResponseInit>> | undefined;

/**
 * The LeaseService (lease-rpc.ts) over the Connect protocol in an HTTP trigger, for Azure, where the Functions host
 * serves HTTP requests only (the local host serves it on its gRPC port as well). The service and ConnectRPC are loaded on
 * the first call, so registering the functions loads neither.
 */
export async function leaseServiceConnect(request: HttpRequest, context: InvocationContext): Promise<HttpResponseInit> {
  serving ??= Promise.all([import('../rpc/connect-trigger.js'), import('./lease-rpc.js')]).then(([{ connectTrigger }, { leaseServiceRoutes }]) =>
    connectTrigger(leaseServiceRoutes({ deps: getDeps, streams: false }), { prefix: PREFIX }),
  );
  serving.catch(() => {
    serving = undefined;
  });
  return (await serving)(request, context);
}

describeHandler(leaseServiceConnect, {
  tag: 'Leases',
  summary: 'Call the LeaseService over the Connect protocol',
  description:
    'The gRPC contract `contracts/connectsoft/runtimecloud/capacity/v1/capacity.proto` (`Acquire`, `Renew`, `Release`, `GetLease`, ' +
    '`GetTicket`, `CancelTicket`) over the Connect protocol (`application/json` or `application/proto`) or gRPC-Web, unary calls only: ' +
    'the same leases, tokens, tenants (`X-Tenant-Id`), quotas and fencing as `/runtime-cloud/leases`, failures as Connect errors with ' +
    'the problem code in `google.rpc.ErrorInfo` (`RESOURCE_EXHAUSTED` carries `google.rpc.RetryInfo`). `WatchTicket` streams, so it is ' +
    'answered `unimplemented` here: follow a ticket with `GetTicket` and `waitSeconds`. Each method checks its own scope (`GetLease`: ' +
    '`factory.runtime.read`).',
  scope: 'factory.capacity.lease',
});

moduleApp('capacity').http('leaseServiceConnect', { route: `runtime-cloud/connect/${SERVICE}/{method}`, methods: ['POST'], authLevel: 'anonymous', handler: leaseServiceConnect });
