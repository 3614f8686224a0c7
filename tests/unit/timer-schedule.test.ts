import { describe, expect, it } from 'vitest';
import { parseSchedule } from '../../local/timers/timer-binding';
import { bodyForHandler } from '../../shared/platform/bus/queue';

describe('timer schedules (NCRONTAB with seconds)', () => {
  it('when the schedule has six fields, then the first is seconds and times are UTC', () => {
    const every15s = parseSchedule('*/15 * * * * *');
    const dailyAt0930 = parseSchedule('0 30 9 * * *');

    expect(every15s.nextAfter(new Date('2026-11-30T10:00:07Z'))?.toISOString()).toBe('2026-11-30T10:00:15.000Z');
    expect(dailyAt0930.nextAfter(new Date('2026-11-30T10:00:00Z'))?.toISOString()).toBe('2026-12-01T09:30:00.000Z');
  });

  it('when the schedule is a TimeSpan, then it repeats at that interval', () => {
    expect(parseSchedule('00:00:05').nextAfter(new Date('2026-11-30T10:00:00Z'))?.toISOString()).toBe('2026-11-30T10:00:05.000Z');
  });

  it('when the schedule has five fields (no seconds), then it is refused as the Functions host refuses it', () => {
    expect(() => parseSchedule('*/5 * * * *')).toThrow();
  });
});

describe('queue message bodies for handlers', () => {
  it('when the body is JSON, then the handler gets it parsed; otherwise the text', () => {
    expect(bodyForHandler({ body: '{"a":1}' })).toEqual({ a: 1 });
    expect(bodyForHandler({ body: '42' })).toBe(42);
    expect(bodyForHandler({ body: 'plain text' })).toBe('plain text');
  });
});
