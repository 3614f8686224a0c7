import Module from 'node:module';
import { join } from 'node:path';

const CORE_MODULE = '@azure/functions-core';

/**
 * Makes `require('@azure/functions-core')` resolve to the local host's module. Must run before
 * `@azure/functions` or `durable-functions` is first loaded: the library looks the module up once and otherwise
 * stays in "test mode", skipping every registration. `_resolveFilename` is used because module-cache tricks
 * do not survive tsx's loader.
 */
export function installFunctionsCore(): void {
  type Resolve = ((request: string, ...rest: unknown[]) => string) & { runtimeCloudCore?: true };
  const moduleWithResolve = Module as unknown as { _resolveFilename: Resolve };
  const original = moduleWithResolve._resolveFilename;
  if (original.runtimeCloudCore) return;
  const target = join(__dirname, 'core-module.cjs');
  const patched: Resolve = function resolveFunctionsCore(this: unknown, request: string, ...rest: unknown[]) {
    return request === CORE_MODULE ? target : original.call(this, request, ...rest);
  };
  patched.runtimeCloudCore = true;
  moduleWithResolve._resolveFilename = patched;
}
