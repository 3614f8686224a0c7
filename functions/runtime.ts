import type { Config } from '../shared/platform/config/config';
import { enabledModulesFromEnvironment, type ModuleName } from '../shared/platform/config/modules';
import type { Deps } from '../shared/deps';

/**
 * The host's configuration and dependencies, shared by every function of this worker. In Azure they are built
 * from app settings on first use; the local host and tests provide their own before loading the functions.
 */
let config: Config | undefined;
let deps: Promise<Deps> | undefined;

export function provideRuntime(provided: { config: Config; deps: Deps | Promise<Deps> }): void {
  config = provided.config;
  deps = Promise.resolve(provided.deps);
}

/** The modules whose functions register here: from the provided config, else that one setting alone. */
export function enabledModules(): readonly ModuleName[] {
  // A name of no module is refused by the configuration's own check, with the error a host's start gives.
  return config?.host.enabledModules ?? enabledModulesFromEnvironment() ?? loadConfigModule().enabledModulesFromEnvironment();
}

/** The configuration from the app settings, parsed on first use: registering the functions needs none of it. */
export function getConfig(): Config {
  return (config ??= loadConfigModule().configFromEnvironment());
}

/** The configuration's module (its schema: zod, semver), loaded on first use rather than with the functions. */
function loadConfigModule(): typeof import('../shared/platform/config/config') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('../shared/platform/config/config') as typeof import('../shared/platform/config/config');
}

export function getDeps(): Promise<Deps> {
  if (!deps) {
    // The composition root (stores, drivers, SDKs) is loaded on the first invocation, not when the host loads the
    // functions: registering them must stay as cheap as loading @azure/functions itself (issue 10, cold start).
    const created = import('../shared/deps.js').then(({ createDeps }) => createDeps(getConfig()));
    // A failed start (store unreachable) is retried by the next invocation rather than cached forever.
    created.catch(() => {
      if (deps === created) deps = undefined;
    });
    deps = created;
  }
  return deps;
}
