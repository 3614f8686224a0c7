import { requirePlatformPrincipal, requireScope } from '../../shared/platform/auth/auth';
import type { TokenValidator } from '../../shared/platform/auth/token-validator';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import { errorProblem } from '../../shared/platform/http/problem';
import type { RawRequest, RawResponse } from './http-binding';

/**
 * Runs a raw route's work, answering AppErrors as the same problem+json the product's HTTP functions answer with;
 * anything else is a host defect (500).
 */
export async function answeringProblems(run: () => Promise<RawResponse>): Promise<RawResponse> {
  try {
    return await run();
  } catch (thrown) {
    const error = ensureError(thrown);
    if (error instanceof AppError) return errorProblem(error);
    throw error;
  }
}

/**
 * A local-only endpoint: a PlatformAdmin token or the scope `factory.runtime.admin` (PlatformAdmin grants it), not
 * bound to a tenant, since the host's queues, topic and orchestrations serve every tenant.
 */
export function adminOnly(auth: TokenValidator, request: RawRequest, run: () => Promise<RawResponse>): Promise<RawResponse> {
  return answeringProblems(async () => {
    const header = request.headers.authorization;
    const principal = await auth.authenticate(Array.isArray(header) ? header[0] : header);
    requireScope(principal, 'factory.runtime.admin');
    requirePlatformPrincipal(principal);
    return run();
  });
}
