/**
 * News, inside one process, that messages arrived on an embedded queue or topic of a store (keyed by its Kysely
 * instance), so the local host's receivers in this process look at once instead of at their next poll. Receivers of
 * other processes sharing the store still find the messages by polling: this only shortens the wait.
 */
type Listener = (entity: string) => void;

const listeners = new WeakMap<object, Set<Listener>>();

/** Calls `listener` with the queue or topic name each time messages arrived on it in `db`. Returns the undo. */
export function onArrival(db: object, listener: Listener): () => void {
  let set = listeners.get(db);
  if (!set) {
    set = new Set();
    listeners.set(db, set);
  }
  set.add(listener);
  return () => set.delete(listener);
}

/** Tells this process's listeners that messages arrived on `entity` (a queue, or a topic: its subscriptions), once committed. */
export function announceArrival(db: object, entity: string): void {
  for (const listener of listeners.get(db) ?? []) listener(entity);
}
