import { CAPACITY_KINDS } from '../../shared/capacity/pool';
import { MAX_HOLD_SECONDS } from '../../shared/capacity/lease-queue';
import { lazySchema } from '../../shared/platform/validation/lazy-schema';
import { idempotencyKey } from '../http/endpoint';

/**
 * What acquiring and renewing a lease take, checked alike whichever protocol carries them: the HTTP API's bodies
 * (leases.ts) and the LeaseService's requests (lease-rpc.ts, mapped to these shapes first).
 */

/** Body of `POST /leases`. Changing this shape is a breaking change for workers and the tool executor. */
export const acquireBody = lazySchema((z) =>
  z
    .object({
      kind: z.enum(CAPACITY_KINDS),
      units: z.number().int().positive().default(1),
      ttlSeconds: z.number().int().positive(),
      holder: z.string().min(1).max(200),
      idempotencyKey: idempotencyKey().optional(),
      pool: z.string().min(1).max(200).optional(),
      labels: z.record(z.string().min(1).max(100), z.string().max(200)).optional(),
      /** Wait in the pool's queue for up to `seconds` (at most the edition's `maxWaitSeconds`) instead of a refusal. */
      wait: z
        .object({
          seconds: z.number().int().min(1).max(86_400),
          /** How long this call waits for the grant before it answers 202 with the ticket (default: up to 20 s). */
          holdSeconds: z.number().int().min(0).max(MAX_HOLD_SECONDS).optional(),
        })
        .strict()
        .optional(),
    })
    .refine((b) => b.pool === undefined || b.labels === undefined, { message: 'name a pool or labels, not both', path: ['pool'] }),
);

/**
 * Body of `POST /leases/{id}/renew`. Changing this shape is a breaking change for workers and the tool executor.
 * `lease` (what the holder holds) is read only in the recovery window after a restore of the store, to re-register
 * a lease the restored store does not know; holders send it with every renew so a restore needs nothing new of them.
 */
export const renewBody = lazySchema((z) =>
  z.object({
    fencingToken: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    ttlSeconds: z.number().int().positive().optional(),
    lease: z
      .object({
        kind: z.enum(CAPACITY_KINDS),
        pool: z.string().min(1).max(200),
        units: z.number().int().positive().default(1),
        holder: z.string().min(1).max(200),
      })
      .optional(),
  }),
);
