import type { z } from 'zod';
import { parseQualifiedStackName } from '../platform/iac/stack-ref';
import { lazySchema } from '../platform/validation/lazy-schema';
import { CAPACITY_KINDS } from './pool';

// Built on first use (lazySchema): the administration endpoints name these schemas when the functions register.

const kindLimit = lazySchema((z) =>
  z.object({
    maxUnits: z.number().int().min(0),
    maxTtlSeconds: z.number().int().positive(),
    /** How long a request may wait in a pool's queue (`wait.seconds` of `POST /leases`); default 300. */
    maxWaitSeconds: z.number().int().min(0).max(86_400).optional(),
  }),
);

/** Body of `PUT /pools/{id}` and a pool of the seed file. Changing this shape is a breaking change for clients. */
export const poolSpecSchema = lazySchema((z) =>
  z.object({
    kind: z.enum(CAPACITY_KINDS),
    target: z.string().min(1).max(200),
    capacity: z.number().int().min(0),
    min: z.number().int().min(0).optional(),
    max: z.number().int().min(0).optional(),
    labels: z.record(z.string().min(1).max(100), z.string().max(200)).optional(),
    /** The provisioning stack that sizes the pool, named `tenant/project/stack`. */
    iacStack: z
      .string()
      .min(1)
      .max(200)
      .refine((name) => parseQualifiedStackName(name) !== undefined, 'a stack is named tenant/project/stack')
      .optional(),
  }),
);

/**
 * Body of `PUT /editions/{name}`: per-kind limits (a kind left out gets no capacity) and the weight of its tenants'
 * fair share of a pool's queue (default 1).
 */
export const editionSpecSchema = lazySchema((z) =>
  z.object({
    limits: z.partialRecord(z.enum(CAPACITY_KINDS), kindLimit()),
    weight: z.number().int().min(1).max(1000).optional(),
  }),
);

/** Body of `PUT /tenants/{id}`. */
export const tenantSpecSchema = lazySchema((z) => z.object({ edition: z.string().min(1).max(200) }));

/**
 * The capacity seed file (RuntimeCloud__Capacity__SeedFile): editions, pools and tenants upserted at start-up.
 * Changing this shape is a breaking change for installations that keep their own seed file.
 */
export const capacitySeedSchema = lazySchema((z) =>
  z.object({
    editions: z.record(z.string().min(1).max(200), editionSpecSchema()).default({}),
    pools: z.record(z.string().min(1).max(200), poolSpecSchema()).default({}),
    tenants: z.record(z.string().min(1).max(200), tenantSpecSchema()).default({}),
  }),
);
export type CapacitySeed = z.infer<ReturnType<typeof capacitySeedSchema>>;
