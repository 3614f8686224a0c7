import { expect } from 'vitest';

/** A problem+json body as the host answers it. */
export interface Problem {
  code: string;
  status: number;
  errors?: { field: string; message: string }[];
  [member: string]: unknown;
}

/** Asserts that `response` is a problem+json answer with `status` and `code`, and returns its body. */
export async function expectProblem(response: Response, status: number, code: string): Promise<Problem> {
  expect(response.status).toBe(status);
  expect(response.headers.get('content-type')).toBe('application/problem+json');
  const problem = (await response.json()) as Problem;
  expect(problem).toMatchObject({ status, code });
  return problem;
}

/** The fields a validation problem names, sorted. */
export function fieldsOf(problem: Problem): string[] {
  return (problem.errors ?? []).map((e) => e.field).sort();
}
