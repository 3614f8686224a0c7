import { configFromEnvironment, type Config } from '../shared/platform/config/config';
import { createDeps, type Deps } from '../shared/deps';

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

export function getConfig(): Config {
  return (config ??= configFromEnvironment());
}

export function getDeps(): Promise<Deps> {
  if (!deps) {
    const created = createDeps(getConfig());
    // A failed start (store unreachable) is retried by the next invocation rather than cached forever.
    created.catch(() => {
      if (deps === created) deps = undefined;
    });
    deps = created;
  }
  return deps;
}
