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

/** Lanes one pass takes at most (a bound on the statement's parameters). */
const MAX_LANES_PER_PASS = 200;

/**
 * `RuntimeCloud__Outbox__Publish=after-commit`: each transaction run by `inTransaction` on `db` that appended events
 * has its lanes published right after it commits, so its events reach the bus within a round trip of the commit
 * instead of at the relay's next tick. Passes run one at a time: the lanes of the commits made while a pass runs wait
 * for it and go together in the next one (under load, one pass of a few statements publishes the events of many
 * commits, instead of one pass each). It takes the same lane claims as the relay, so order and claims hold as ever; a
 * lane another relay holds is left to it, and a publish that fails keeps its rows pending (with the back-off) for
 * the relay's timer, which stays the fallback for all this misses. A republish is harmless: messageId = event id.
 */
export function startAfterCommitPublish(db: Kysely<OutboxTables>, publisher: EventPublisher, options: RelayOptions): AfterCommitPublish {
  const waiting = new Set<number>();
  let running: Promise<void> = Promise.resolve();
  /** The pass that will take the lanes now waiting, once the running one ends. */
  let next: Promise<void> | undefined;
  let stopped = false;
  const pass = async (): Promise<void> => {
    await running;
    next = undefined;
    while (waiting.size > 0 && !stopped) {
      const lanes = [...waiting].slice(0, MAX_LANES_PER_PASS);
      for (const lane of lanes) waiting.delete(lane);
      // A store fault leaves the rows pending for the relay's timer.
      await relayOutbox(db, publisher, { ...options, lanes, maxBatches: Math.ceil(lanes.length / 20) }).catch(() => undefined);
    }
  };
  const undo = publishAfterCommit(db, (lanes) => {
    if (stopped) return Promise.resolve();
    for (const lane of lanes) waiting.add(lane);
    if (!next) {
      next = pass();
      running = next;
    }
    return next;
  });
  return {
    settled: () => running,
    async stop() {
      undo();
      stopped = true;
      await running;
    },
  };
}
