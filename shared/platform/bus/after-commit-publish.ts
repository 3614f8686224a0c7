import type { Kysely } from 'kysely';
import type { EventPublisher } from './event-publisher';
import { publishAfterCommit, type OutboxTables } from './outbox';
import { relayOutbox, type RelayOptions } from './outbox-relay.service';

/** The after-commit publish of a host, as `startAfterCommitPublish` set it up. */
export interface AfterCommitPublish {
  /** Resolves once every publish started so far has ended (tests; shutdown). */
  settled(): Promise<void>;
  /** No new publish starts; resolves once the running ones have ended. */
  stop(): Promise<void>;
}

/**
 * `RuntimeCloud__Outbox__Publish=after-commit`: each transaction run by `inTransaction` on `db` that appended events
 * runs one relay pass over its own lanes right after it commits, so its events reach the bus within a round trip of
 * the commit instead of at the relay's next tick. It takes the same lane claims as the relay, so order and claims
 * hold as ever; a lane another relay holds is left to it, and a publish that fails keeps its rows pending (with the
 * back-off) for the relay's timer, which stays the fallback for all this misses. A republish is harmless:
 * messageId = event id.
 */
export function startAfterCommitPublish(db: Kysely<OutboxTables>, publisher: EventPublisher, options: RelayOptions): AfterCommitPublish {
  const running = new Set<Promise<unknown>>();
  const undo = publishAfterCommit(db, (lanes) => {
    // A store fault leaves the rows pending for the relay's timer.
    const pass = relayOutbox(db, publisher, { ...options, lanes, maxBatches: 1 }).catch(() => undefined);
    running.add(pass);
    void pass.finally(() => running.delete(pass));
    return pass.then(() => undefined);
  });
  const settled = async () => {
    while (running.size > 0) await Promise.allSettled([...running]);
  };
  return {
    settled,
    async stop() {
      undo();
      await settled();
    },
  };
}
