import { vi } from 'vitest';

// The events topic as tests read it. Apart from provisioning.ts, which the benches load outside vitest.

/** The events a run ends with, one per promotion. */
export const TERMINAL_EVENT_TYPES: readonly string[] = ['ProvisioningApplied', 'ProvisioningFailed'];

/** A message of the events topic as the local topic endpoint lists it (the members these checks read). */
export interface TopicEvent {
  readonly messageId: string;
  readonly body: { readonly type: string; readonly data: { readonly promotionId?: string } };
}

/** Reads the events topic (`read`) until every one of `promotionIds` has a terminal event; returns the last read. */
export function untilEveryPromotionEnded<T extends TopicEvent>(read: () => Promise<readonly T[]>, promotionIds: readonly string[], timeoutMs = 90_000): Promise<readonly T[]> {
  return vi.waitFor(
    async () => {
      const items = await read();
      const ended = new Set(items.filter((m) => TERMINAL_EVENT_TYPES.includes(m.body.type)).map((m) => m.body.data.promotionId));
      const open = promotionIds.filter((id) => !ended.has(id));
      if (open.length > 0) throw new Error(`${promotionIds.length - open.length} of ${promotionIds.length} promotions ended`);
      return items;
    },
    { timeout: timeoutMs, interval: 200 },
  );
}
