import { InvocationContext } from '@azure/functions';
import { describe, expect, it } from 'vitest';
import { logOf } from '../../functions/log';
import { logLine, parseLogLine, redactCredentials } from '../../shared/platform/logging/log';

const JWT = 'eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLXZhbHVl';

describe('structured logs', () => {
  it('when a line is made, then it is one JSON object with time, level, message and the ids given, and empty ids are left out', () => {
    const line = logLine({ level: 'warning', message: 'rejected', runId: 'run-1', leaseId: '' }, new Date('2026-01-01T00:00:00Z'));
    expect(JSON.parse(line)).toEqual({ time: '2026-01-01T00:00:00.000Z', level: 'warning', message: 'rejected', runId: 'run-1' });
    expect(parseLogLine(line)).toMatchObject({ level: 'warning', runId: 'run-1' });
    expect(parseLogLine('plain text')).toBeUndefined();
  });

  it('when a text holds a bearer token or a JWT, then it is masked wherever it appears', () => {
    expect(redactCredentials(`Authorization: Bearer ${JWT}`)).toBe('Authorization: Bearer [redacted]');
    expect(redactCredentials(`token ${JWT} refused`)).toBe('token [redacted] refused');
    expect(logLine({ level: 'error', message: 'failed', error: `bad header bearer abc.def` }, new Date())).not.toContain('abc.def');
  });

  it('when a function logs, then the line carries its invocation id, its name and the correlation ids, through the invocation context', () => {
    const written: { level: string; text: string }[] = [];
    const context = new InvocationContext({ invocationId: 'inv-1', functionName: 'promotionIntake', logHandler: (level, ...args) => written.push({ level, text: String(args[0]) }) });
    logOf(context, { messageId: 'msg-1' }).warn('message rejected', { promotionId: 'p-1' }, new Error(`token ${JWT}`));
    expect(written).toHaveLength(1);
    expect(written[0]!.level).toBe('warning');
    expect(JSON.parse(written[0]!.text)).toMatchObject({
      level: 'warning',
      message: 'message rejected',
      invocationId: 'inv-1',
      function: 'promotionIntake',
      messageId: 'msg-1',
      promotionId: 'p-1',
      error: 'token [redacted]',
    });
  });
});
