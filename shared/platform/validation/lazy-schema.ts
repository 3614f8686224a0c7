import type * as Zod from 'zod';

/** The `z` of zod, as a schema's build function receives it. */
export type Z = typeof Zod.z;

/** A zod schema built on its first use and kept: call it to get the schema. */
export type LazySchema<S extends Zod.z.ZodType = Zod.z.ZodType> = () => S;

/**
 * A schema built on first use rather than when its module loads, memoized: loading zod and building schemas costs
 * more than the rest of the functions' registration, which needs neither (docs/benchmarks.md, "Cold start").
 * Modules loaded when the functions register declare their schemas this way and import zod's types only.
 * Example: `const unlockBody = lazySchema((z) => z.object({ reason: z.string().min(1) }));` then `unlockBody().parse(x)`.
 */
export function lazySchema<S extends Zod.z.ZodType>(build: (z: Z) => S): LazySchema<S> {
  let schema: S | undefined;
  return () => (schema ??= build(zod()));
}

/** zod itself, loaded on the first call (the module system keeps it), for what uses it beyond a schema (`z.toJSONSchema`). */
export function zod(): Z {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('zod') as typeof Zod).z;
}
