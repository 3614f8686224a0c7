import { AppError } from '../../shared/platform/errors/app-error';

/** The AppError a promise is refused with; fails the test when it resolves or is refused with anything else. */
export async function refusal(promise: Promise<unknown>): Promise<AppError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof AppError)) throw new Error(`expected an AppError, got ${String(error)}`);
  return error;
}

/** The AppError `work` throws; fails the test when it throws nothing or something else. */
export function thrown(work: () => unknown): AppError {
  try {
    work();
  } catch (error) {
    if (error instanceof AppError) return error;
    throw error;
  }
  throw new Error('expected an AppError, nothing was thrown');
}
