import { app } from '@azure/functions';
import type { ModuleName } from '../shared/platform/config/settings';
import { enabledModules } from './runtime';

type App = typeof app;

/**
 * The `app` of one module: its registrations take effect only when RuntimeCloud__Host__EnabledModules names the
 * module, so a host composes exactly the modules it is configured for. Use it at the bottom of a function file
 * as `moduleApp('capacity').http('acquireLease', { … })`.
 */
export function moduleApp(module: ModuleName): Pick<App, 'http' | 'timer' | 'serviceBusQueue' | 'serviceBusTopic' | 'generic'> {
  if (moduleEnabled(module)) return hostApp;
  const skip = () => undefined;
  return { http: skip, timer: skip, serviceBusQueue: skip, serviceBusTopic: skip, generic: skip };
}

/** An HTTP function as it was registered: what the OpenAPI document describes. */
export interface HttpRoute {
  readonly name: string;
  readonly route: string;
  readonly methods: readonly string[];
  readonly handler: object;
}

const routes: HttpRoute[] = [];

/** The HTTP functions registered in this process, in registration order. */
export function registeredHttpRoutes(): readonly HttpRoute[] {
  return routes;
}

/** `app`, recording HTTP registrations; host functions (health, targets) register through it directly. */
export const hostApp: Pick<App, 'http' | 'timer' | 'serviceBusQueue' | 'serviceBusTopic' | 'generic'> = {
  http(name, options) {
    routes.push({ name, route: options.route ?? name, methods: options.methods ?? ['GET', 'POST'], handler: options.handler });
    app.http(name, options);
  },
  timer: (name, options) => app.timer(name, options),
  serviceBusQueue: (name, options) => app.serviceBusQueue(name, options),
  serviceBusTopic: (name, options) => app.serviceBusTopic(name, options),
  generic: (name, options) => app.generic(name, options),
};

/**
 * Whether a module's functions register on this host, for registrations that do not go through `app`: Durable
 * orchestrations and activities (`df.app.*`). Example: `if (moduleEnabled('provisioning')) df.app.activity(…)`.
 */
export function moduleEnabled(module: ModuleName): boolean {
  return enabledModules().includes(module);
}
