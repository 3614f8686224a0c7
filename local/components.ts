import { capacitySeedComponent } from './capacity-seed';
import { localDurable } from './durable/durable-component';
import { exampleDesiredStateComponent } from './example-repository';
import type { HostComponent } from './host';
import { BusEndpoints } from './local-endpoints/bus-endpoints';
import { LocalCloudEndpoints } from './local-endpoints/cloud-endpoints';
import { LocalExternalServicesEndpoints } from './local-endpoints/external-services-endpoints';
import { ServiceBusBinding } from './service-bus/service-bus-binding';
import { LocalRunnerAgents } from './runner-agents';
import { TimerBinding } from './timers/timer-binding';

/** The components of a full local host, in start order. */
export function localComponents(): HostComponent[] {
  // The Durable runner first: it provides the durable client input that functions of any trigger may declare.
  // The seeds before the queue and timer bindings, so the first promotion taken finds tenants and the example.
  return [localDurable(), capacitySeedComponent(), exampleDesiredStateComponent(), new BusEndpoints(), new LocalCloudEndpoints(), new LocalExternalServicesEndpoints(), new ServiceBusBinding(), new TimerBinding(), new LocalRunnerAgents()];
}
