/**
 * Structured log lines: one JSON object per line with the correlation ids in play, so a run, a promotion, a lease,
 * a proposal or an invocation can be followed across functions and hosts by filtering on one member. Pure.
 *
 * Credentials never reach a line: bearer tokens and JWTs are masked in every text member, whatever wrote them.
 */

export type LogLevel = 'trace' | 'debug' | 'information' | 'warning' | 'error' | 'critical';

/** The ids a log line can carry. Serialized names: log queries filter on them; renaming one breaks those. */
export interface Correlation {
  readonly invocationId?: string;
  /** The function that logged. */
  readonly function?: string;
  readonly runId?: string;
  readonly promotionId?: string;
  readonly leaseId?: string;
  readonly proposalId?: string;
  readonly environmentId?: string;
  readonly stack?: string;
  readonly scanId?: string;
  /** The inbound message (Service Bus messageId) or event (CloudEvent id). */
  readonly messageId?: string;
  readonly eventId?: string;
  /** Security events (security-events.ts): whose run, which runner job, pool and agent. */
  readonly tenant?: string;
  readonly jobId?: string;
  readonly pool?: string;
  readonly agent?: string;
}

export interface LogEntry extends Correlation {
  readonly level: LogLevel;
  readonly message: string;
  /** The error's message, when one is logged. */
  readonly error?: string;
  /** The stable code of what happened (security events). */
  readonly code?: string;
}

const JWT = /\beyJ[\w-]*\.[\w-]+\.[\w-]*/g;
const BEARER = /\b(bearer\s+)[^\s"',;]+/gi;

/** The text with bearer tokens and JWTs replaced by `[redacted]`. */
export function redactCredentials(text: string): string {
  return text.replace(BEARER, '$1[redacted]').replace(JWT, '[redacted]');
}

/** One log line: `time` first, then level, message, the correlation ids present and the error; credentials masked. */
export function logLine(entry: LogEntry, time: Date): string {
  const line: Record<string, string> = { time: time.toISOString() };
  for (const [key, value] of Object.entries(entry)) {
    if (typeof value === 'string' && value !== '') line[key] = redactCredentials(value);
  }
  return JSON.stringify(line);
}

/** The entry a line made by `logLine` holds, or undefined for any other text. */
export function parseLogLine(text: string): (LogEntry & { time: string }) | undefined {
  if (!text.startsWith('{"time":')) return undefined;
  try {
    return JSON.parse(text) as LogEntry & { time: string };
  } catch {
    return undefined;
  }
}
