import { describe, expect, it } from 'vitest';
import { randomIds, uuidV7 } from '../../shared/platform/time/clock';

describe('ids', () => {
  it('when ids are made in sequence, then they are UUIDv7, unique and sort in the order made', () => {
    const ids = Array.from({ length: 5000 }, () => uuidV7());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
  });

  it('when the clock stands still for many ids, then order holds past the sequence range', () => {
    const ids = Array.from({ length: 6000 }, () => uuidV7(1_700_000_000_000));
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('when a time is given (an injected clock), then the id carries that millisecond', () => {
    const at = Date.parse('2026-01-01T00:00:00.000Z');
    const id = uuidV7(at);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(at);
    expect(uuidV7(at + 1) > id).toBe(true);
  });

  it('when a prefix is given, then it leads the id', () => {
    expect(randomIds.next('lease')).toMatch(/^lease_[0-9a-f-]{36}$/);
  });
});
