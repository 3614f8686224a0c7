import type { InvocationContext } from '@azure/functions';
import { ensureError } from '../shared/platform/errors/app-error';
import { logLine, type Correlation, type LogLevel } from '../shared/platform/logging/log';

type Write = (message: string, correlation?: Correlation, error?: unknown) => void;

/**
 * A function's log: every line is JSON with the invocation id, the function's name and the correlation ids given
 * (`runId`, `promotionId`, `leaseId`, `proposalId`, …), written through the invocation context, so the Functions
 * host (Application Insights in Azure, the console locally) keeps it with the invocation.
 *
 * @example logOf(context).warn('message rejected', { messageId, promotionId }, thrown)
 */
export function logOf(context: InvocationContext, base: Correlation = {}): { info: Write; warn: Write; error: Write } {
  const write =
    (level: LogLevel, emit: (text: string) => void): Write =>
    (message, correlation = {}, error) =>
      emit(
        logLine(
          {
            level,
            message,
            invocationId: context.invocationId,
            function: context.functionName,
            ...base,
            ...correlation,
            ...(error !== undefined ? { error: ensureError(error).message } : {}),
          },
          new Date(),
        ),
      );
  return {
    info: write('information', (text) => context.log(text)),
    warn: write('warning', (text) => context.warn(text)),
    error: write('error', (text) => context.error(text)),
  };
}
