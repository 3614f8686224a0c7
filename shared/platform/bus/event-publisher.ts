import type { OutgoingMessage } from './queue';

/**
 * Port: hands messages to a topic. `publish` resolves only once the bus has accepted every message (the relay
 * marks outbox rows published after that), and it may be called again with the same messages after a crash:
 * adapters rely on messageId duplicate detection, so a republish is harmless.
 */
export interface EventPublisher {
  /** `embedded-topic` or `service-bus`. */
  readonly name: string;
  /**
   * The longest one `publish` call takes before it resolves or throws, every retry included: the relay's claim
   * outlasts it (outbox-relay.service.ts), so no second relay publishes a lane while this one may still send.
   */
  readonly publishBudgetMs: number;
  /**
   * Hands the messages over in order. When the bus refuses one for good (too large), throws `messageRefused` naming
   * it and how many before it were accepted; any other failure throws as it is, and the whole call may be retried.
   */
  publish(topic: string, messages: readonly OutgoingMessage[]): Promise<void>;
  close(): Promise<void>;
}
