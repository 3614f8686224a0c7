import type { Kysely, Transaction } from 'kysely';
import { AppError, ensureError } from '../errors/app-error';
import { retry } from '../time/retry';

/**
 * THE LOCK ORDER. Every transaction of every module that waits for row locks on more than one kind of row takes
 * them in this order, so no two of them can wait for each other (a deadlock):
 *
 *   1. definitions: capacity pools, editions, tenants (administration only; pool rows by id)
 *   2. provisioning stacks and runs (stack lock rows by stack name, then run rows); inventory environments (one
 *      environment row, then its proposals): no transaction holds rows of both modules
 *   3. capacity leases (one lease, or a sweep batch in expiry order)
 *   4. capacity slots, in (scope, slot) order; grants claim them with SKIP LOCKED / READPAST and never wait
 *   5. the outbox and the inbox: outbox lanes in lane order (an update of each lane appended to, held until the
 *      commit, so a lane's writers commit in `seq` order: outbox.ts, PUBLISH ORDER), then inserts only
 *   6. the embedded topic (local host): a publish's own transaction locks the topic's head row, then inserts only
 *      (held until the commit, so a topic's messages become visible in `seq` order: topic.repository.ts)
 *
 * An upsert (`upsertRow`) locks the row of its key as a row of its kind, also when there is none yet: on Azure SQL
 * its MERGE holds the key's range (HOLDLOCK) until the transaction ends.
 *
 * Slot claims that skip locked rows never wait, so they may come before the lease row of the grant they belong
 * to (that row is new and nobody else can lock it). Anything that cannot follow the order (or meets a writer of
 * another process on SQLite) is covered by `inTransaction`, which retries deadlocks and serialization failures.
 */

export interface RetryOptions {
  /** Attempts in all, the first included. Example: `8`. */
  readonly attempts?: number;
  /** Upper bound of the first backoff; it doubles per attempt up to `maxDelayMs`. Example: `4`. */
  readonly baseDelayMs?: number;
  /** Example: `200`. */
  readonly maxDelayMs?: number;
}

const DEFAULTS = { attempts: 8, baseDelayMs: 4, maxDelayMs: 200 } as const;

/** Work registered in a transaction to run once it has committed; it gets the store the transaction ran on. */
export type AfterCommit = (db: object) => Promise<void> | undefined;

const afterCommits = new WeakMap<object, AfterCommit[]>();

/**
 * Runs `hook` once the transaction `trx` (run by `inTransaction`) has committed, never when it rolls back; a
 * transaction not run by `inTransaction` (or no transaction) runs no hooks. Hooks are started, not awaited: the
 * caller's answer does not wait for them, and what they do must be covered by something else if they fail or the
 * process ends first (the outbox's relay, for its after-commit publish).
 */
export function afterCommit(trx: object, hook: AfterCommit): void {
  afterCommits.get(trx)?.push(hook);
}

/**
 * Runs `work` in a transaction and runs it again, after a jittered backoff, when the store reports a deadlock, a
 * serialization failure or a lock timeout. `work` must therefore be safe
 * to repeat: everything it did is rolled back before the next attempt. When the attempts run out, contention
 * becomes `STORE.CONTENTION` (503 with Retry-After), never a 500. Once it committed, its `afterCommit` hooks start.
 */
export async function inTransaction<DB, T>(db: Kysely<DB>, work: (trx: Transaction<DB>) => Promise<T>, options: RetryOptions = {}): Promise<T> {
  let hooks: AfterCommit[] = [];
  const result = await retryingContention(
    () =>
      db.transaction().execute((trx) => {
        // A fresh list per attempt: the hooks of an attempt that rolled back are dropped with it.
        hooks = [];
        afterCommits.set(trx, hooks);
        return work(trx);
      }),
    options,
  );
  // A hook that fails is dropped: what it does is covered elsewhere (see afterCommit).
  for (const hook of hooks) void (async () => hook(db))().catch(() => undefined);
  return result;
}

/** The retry of `inTransaction`, for work that is one autocommitted statement (no explicit transaction). */
export async function retryingContention<T>(work: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const { attempts, baseDelayMs, maxDelayMs } = { ...DEFAULTS, ...options };
  try {
    // Full jitter: competing transactions that failed together do not come back together.
    return await retry(work, { attempts, backoff: { firstMs: baseDelayMs, maxMs: maxDelayMs, jitter: 'full' }, retryIf: isContention });
  } catch (thrown) {
    const error = ensureError(thrown);
    if (!isContention(error)) throw error;
    throw new AppError('STORE.CONTENTION', 'unavailable', 'the store is busy with conflicting requests; retry shortly', { retryAfterSeconds: 1 });
  }
}

/**
 * Deadlock, serialization failure or lock timeout, on any of the three dialects: PostgreSQL 40P01 and 40001
 * (and 55P03, lock_not_available), SQL Server 1205 (deadlock victim) and 1222 (lock request time out), SQLite
 * BUSY (another process held the write lock past the busy timeout).
 */
export function isContention(error: Error): boolean {
  const { code, number } = error as { code?: unknown; number?: unknown };
  if (code === '40P01' || code === '40001' || code === '55P03') return true;
  if (number === 1205 || number === 1222) return true;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

/**
 * The store cannot be reached or dropped the connection: PostgreSQL's connection and shutdown classes (08xxx;
 * 57P01 admin shutdown, as `pg_terminate_backend` sends; 57P02 crash shutdown; 57P03 cannot connect now), the
 * socket errors of a server that went away, the pg driver's "Connection terminated", and SQL Server's ESOCKET,
 * ECONNCLOSED and ETIMEOUT. A request that meets it is answered 503 `STORE.UNAVAILABLE` with Retry-After (whether
 * its last statement committed is unknown, so it is not retried here: every write the API takes is idempotent by
 * key or guarded by state, and the client's retry is safe).
 */
export function isStoreUnavailable(error: Error): boolean {
  const { code } = error as { code?: unknown };
  if (typeof code === 'string' && (/^08[0-9A-Z]{3}$/.test(code) || code === '57P01' || code === '57P02' || code === '57P03')) return true;
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'EPIPE' || code === 'ETIMEDOUT' || code === 'ESOCKET' || code === 'ECONNCLOSED' || code === 'ETIMEOUT') return true;
  return /^Connection terminated|^Client has encountered a connection error|^timeout exceeded when trying to connect|^Connection is closed/.test(error.message);
}

/**
 * The level to log a failed background step at (a receive, a timer, a durable episode or activity record): a
 * warning when the store was out of reach, a fault of the environment that the step's retry recovers from; an
 * error otherwise.
 */
export function faultLevel(error: Error): 'warning' | 'error' {
  return isStoreUnavailable(error) ? 'warning' : 'error';
}

/** The answer to a request that met `isStoreUnavailable`. */
export function storeUnavailable(): AppError {
  return new AppError('STORE.UNAVAILABLE', 'unavailable', 'the store is not reachable just now; retry shortly', { retryAfterSeconds: 2 });
}
