import { problemResponse } from '../../functions/http/endpoint';
import { requireScope, type TokenValidator } from '../../shared/platform/auth/auth';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import type { RawRequest, RawResponse } from './http-binding';

/** An AppError as the same problem+json the product's HTTP functions answer with. */
export function rawProblem(error: AppError): RawResponse {
  const response = problemResponse(error);
  return {
    status: response.status ?? 500,
    headers: response.headers as Record<string, string>,
    body: typeof response.body === 'string' ? response.body : undefined,
  };
}

/** Runs a raw route's work, answering AppErrors as problem+json; anything else is a host defect (500). */
export async function answeringProblems(run: () => Promise<RawResponse>): Promise<RawResponse> {
  try {
    return await run();
  } catch (thrown) {
    const error = ensureError(thrown);
    if (error instanceof AppError) return rawProblem(error);
    throw error;
  }
}

/** A local-only endpoint: a PlatformAdmin token or the scope `factory.runtime.admin` (PlatformAdmin grants it). */
export function adminOnly(auth: TokenValidator, request: RawRequest, run: () => Promise<RawResponse>): Promise<RawResponse> {
  return answeringProblems(async () => {
    const header = request.headers.authorization;
    requireScope(await auth.authenticate(Array.isArray(header) ? header[0] : header), 'factory.runtime.admin');
    return run();
  });
}
