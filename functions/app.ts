import { app } from '@azure/functions';
import type { ModuleName } from '../shared/platform/config/config';
import { getConfig } from './runtime';

type App = typeof app;

/**
 * The `app` of one module: its registrations take effect only when RuntimeCloud__Host__EnabledModules names the
 * module, so a host composes exactly the modules it is configured for. Use it at the bottom of a function file
 * as `moduleApp('capacity').http('acquireLease', { … })`.
 */
export function moduleApp(module: ModuleName): Pick<App, 'http' | 'timer' | 'serviceBusQueue' | 'serviceBusTopic' | 'generic'> {
  if (moduleEnabled(module)) return app;
  const skip = () => undefined;
  return { http: skip, timer: skip, serviceBusQueue: skip, serviceBusTopic: skip, generic: skip };
}

/**
 * Whether a module's functions register on this host, for registrations that do not go through `app`: Durable
 * orchestrations and activities (`df.app.*`). Example: `if (moduleEnabled('provisioning')) df.app.activity(…)`.
 */
export function moduleEnabled(module: ModuleName): boolean {
  return getConfig().host.enabledModules.includes(module);
}
