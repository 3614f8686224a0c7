/**
 * The modules a host may enable, and which ones `RuntimeCloud__Host__EnabledModules` enables: all that registering
 * the functions needs of the configuration, without loading the configuration's schema (zod, semver: cold start).
 */
export const MODULES = ['provisioning', 'inventory', 'capacity'] as const;
export type ModuleName = (typeof MODULES)[number];

/**
 * Only `RuntimeCloud__Host__EnabledModules` of the process environment (all modules when unset or empty); undefined
 * when it names a module there is none of (the configuration's own check says which: config.ts).
 */
export function enabledModulesFromEnvironment(): readonly ModuleName[] | undefined {
  const value = process.env.RuntimeCloud__Host__EnabledModules;
  const names = (value === undefined || value === '' ? MODULES.join(',') : value)
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name.length > 0);
  return names.every((name): name is ModuleName => (MODULES as readonly string[]).includes(name)) ? [...new Set(names)] : undefined;
}
