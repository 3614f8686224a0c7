import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AppError, type ErrorKind } from '../../shared/platform/errors/app-error';
import { errorProblem, internalProblem, problemResponse } from '../../shared/platform/http/problem';
import { describeFieldProblems, fieldProblems, parseJsonBody, parseQueryParams } from '../../shared/platform/validation/validation';

function thrownBy(run: () => unknown): AppError {
  try {
    run();
  } catch (error) {
    if (error instanceof AppError) return error;
    throw error;
  }
  throw new Error('nothing was thrown');
}

/** Typed as a record of every kind, so a new kind does not compile until its status is stated here. */
const EXPECTED_STATUS: Readonly<Record<ErrorKind, number>> = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  'not-found': 404,
  conflict: 409,
  gone: 410,
  'too-large': 413,
  unprocessable: 422,
  limit: 429,
  internal: 500,
  unavailable: 503,
};

describe('problem+json', () => {
  it.each(Object.entries(EXPECTED_STATUS) as [ErrorKind, number][])('when an AppError of kind %s is answered, then status %i with type, title, status and code', (kind, status) => {
    const response = errorProblem(new AppError('SOME.THING_FAILED', kind, 'it failed', { used: 3 }));
    expect(response.status).toBe(status);
    expect(response.headers['content-type']).toBe('application/problem+json');
    expect(JSON.parse(response.body)).toEqual({
      type: 'https://runtime-cloud.dev/problems/some-thing-failed',
      title: 'it failed',
      status,
      code: 'SOME.THING_FAILED',
      used: 3,
    });
  });

  it('when the store reports contention, then 503 with Retry-After in whole seconds and STORE.CONTENTION', () => {
    const response = errorProblem(new AppError('STORE.CONTENTION', 'unavailable', 'the store is busy', { retryAfterSeconds: 0.2 }));
    expect(response.status).toBe(503);
    expect(response.headers['retry-after']).toBe('1');
    expect(JSON.parse(response.body)).toMatchObject({ status: 503, code: 'STORE.CONTENTION', retryAfterSeconds: 0.2 });
  });

  it('when the token is refused, then WWW-Authenticate carries the reason', () => {
    const response = errorProblem(new AppError('AUTH.TOKEN_INVALID', 'unauthorized', 'claim "aud" is not valid'));
    expect(response.headers['www-authenticate']).toBe(`Bearer error="invalid_token", error_description="claim 'aud' is not valid"`);
  });

  it('when an extension member is named like a standard member, then the standard member is kept', () => {
    const response = problemResponse({ status: 405, code: 'HTTP.METHOD_NOT_ALLOWED', title: 'Method not allowed', extensions: { status: 200, code: 'X' } });
    expect(JSON.parse(response.body)).toEqual({
      type: 'https://runtime-cloud.dev/problems/http-method-not-allowed',
      title: 'Method not allowed',
      status: 405,
      code: 'HTTP.METHOD_NOT_ALLOWED',
    });
  });

  it('when a failure is unexpected, then 500 with a code and the correlation id only', () => {
    const response = internalProblem('c-1');
    expect(response.status).toBe(500);
    expect(JSON.parse(response.body)).toEqual({
      type: 'https://runtime-cloud.dev/problems/internal-unexpected',
      title: 'Internal error',
      status: 500,
      code: 'INTERNAL.UNEXPECTED',
      detail: 'the request failed unexpectedly; quote the correlation id when reporting it',
      correlationId: 'c-1',
    });
  });
});

describe('request validation', () => {
  const schema = z.object({ name: z.string().min(1), limits: z.object({ maxUnits: z.number().int() }) });

  it('when a zod parse fails, then each issue becomes a dotted field with its message; a whole-input issue names the root', () => {
    const nested = schema.safeParse({ name: '', limits: { maxUnits: 1.5 } });
    expect(nested.success).toBe(false);
    expect(fieldProblems(nested.error!).map((p) => p.field)).toEqual(['name', 'limits.maxUnits']);
    const whole = schema.safeParse(7);
    expect(fieldProblems(whole.error!, '(file)').map((p) => p.field)).toEqual(['(file)']);
    expect(describeFieldProblems([{ field: 'a.b', message: 'bad' }, { field: 'c', message: 'worse' }])).toBe('a.b: bad; c: worse');
  });

  it('when a body is not JSON, then REQUEST.MALFORMED_JSON; when fields are invalid, then REQUEST.INVALID listing them', () => {
    expect(thrownBy(() => parseJsonBody('{"name":', schema))).toMatchObject({ kind: 'validation', code: 'REQUEST.MALFORMED_JSON' });
    expect(thrownBy(() => parseJsonBody('{"name":""}', schema))).toMatchObject({
      kind: 'validation',
      code: 'REQUEST.INVALID',
      details: { errors: [{ field: 'name' }, { field: 'limits' }] },
    });
    expect(parseJsonBody('{"name":"x","limits":{"maxUnits":2}}', schema)).toEqual({ name: 'x', limits: { maxUnits: 2 } });
    expect(parseJsonBody('', z.object({ dryRun: z.boolean().optional() }))).toEqual({});
  });

  it('when query parameters are invalid, then REQUEST.INVALID_QUERY listing them', () => {
    const query = z.object({ limit: z.coerce.number().int().max(1000) });
    expect(parseQueryParams(new URLSearchParams('limit=5'), query)).toEqual({ limit: 5 });
    expect(thrownBy(() => parseQueryParams(new URLSearchParams('limit=5000'), query))).toMatchObject({
      code: 'REQUEST.INVALID_QUERY',
      details: { errors: [{ field: 'limit' }] },
    });
  });
});
