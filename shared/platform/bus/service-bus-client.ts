import type { TokenCredential } from '@azure/identity';
import type { RetryOptions, ServiceBusClient } from '@azure/service-bus';

/** How the host reaches its Service Bus namespace: shared by the event publisher and the inbox lag reader. */
export interface ServiceBusConnectionOptions {
  /**
   * A connection string (`Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=…;SharedAccessKey=…`) or a
   * fully qualified namespace (`ns.servicebus.windows.net`, Entra auth through `credential`).
   */
  readonly connection: string;
  /**
   * The Entra credential for a namespace given by name; ignored with a connection string. Default: the host's managed
   * identity through `DefaultAzureCredential` (the system-assigned one; `AZURE_CLIENT_ID` names a user-assigned one).
   * The SDK asks it for scope `https://servicebus.azure.net//.default` and hands the token to the namespace's `$cbs`.
   * Example: `new ManagedIdentityCredential({ clientId: '…' })`.
   */
  readonly credential?: TokenCredential;
  /**
   * Where to open the AMQP connection instead of the namespace's own host (an application gateway, a proxy); the
   * namespace stays the AMQP host name and the address of every token. TLS either way. Example:
   * `sb://bus-gateway.contoso.net:5671`.
   */
  readonly customEndpointAddress?: string;
  readonly retryOptions?: RetryOptions;
}

/** A client of the SDK; the SDK is loaded here, i.e. only on a host configured for Service Bus. */
export function createServiceBusClient(options: ServiceBusConnectionOptions): ServiceBusClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { ServiceBusClient } = require('@azure/service-bus') as typeof import('@azure/service-bus');
  const clientOptions = {
    ...(options.retryOptions ? { retryOptions: options.retryOptions } : {}),
    ...(options.customEndpointAddress ? { customEndpointAddress: options.customEndpointAddress } : {}),
  };
  return options.connection.includes('Endpoint=')
    ? new ServiceBusClient(options.connection, clientOptions)
    : new ServiceBusClient(options.connection, options.credential ?? managedIdentity(), clientOptions);
}

/** The host's managed identity (Entra); @azure/identity is loaded only here. */
export function managedIdentity(): TokenCredential {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { DefaultAzureCredential } = require('@azure/identity') as typeof import('@azure/identity');
  return new DefaultAzureCredential();
}
