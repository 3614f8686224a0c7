import { capacitySeedComponent } from './capacity-seed';
import { localDurable } from './durable/durable-component';
import { exampleDesiredStateComponent } from './example-repository';
import type { HostComponent } from './host';
import { BusEndpoints } from './local-endpoints/bus-endpoints';
import { LocalCloudEndpoints } from './local-endpoints/cloud-endpoints';
import { LocalExternalServicesEndpoints } from './local-endpoints/external-services-endpoints';
import { SignInEndpoints } from './local-endpoints/sign-in-endpoints';
import { ServiceBusBinding } from './service-bus/service-bus-binding';
import { LocalRunnerAgents } from './runner-agents';
import { LeaseGrpcServer } from './grpc/lease-grpc-server';
import { TimerBinding } from './timers/timer-binding';

/**
 * The components of a local host, in start order: for this project's app, all of them; for another app
 * (`runtime-cloud start --app`), what any Functions app's triggers need (Durable, Service Bus and its local endpoints,
 * timers) and nothing of this product (its seeds, local cloud, external services' endpoints, runner agents).
 */
export function localComponents(app: 'runtime-cloud' | 'other' = 'runtime-cloud'): HostComponent[] {
  // The Durable runner first: it provides the durable client input that functions of any trigger may declare.
  if (app === 'other') return [localDurable(), new BusEndpoints(), new ServiceBusBinding(), new TimerBinding()];
  // The seeds before the queue and timer bindings, so the first promotion taken finds tenants and the example.
  return [localDurable(), capacitySeedComponent(), exampleDesiredStateComponent(), new BusEndpoints(), new LocalCloudEndpoints(), new LocalExternalServicesEndpoints(), new SignInEndpoints(), new LeaseGrpcServer(), new ServiceBusBinding(), new TimerBinding(), new LocalRunnerAgents()];
}
