import type { z } from 'zod';
import { AppError } from '../errors/app-error';

/** One invalid field of an input: its dotted path and what is wrong with it. */
export interface FieldProblem {
  /** Example: `limits.attempt.maxUnits`; `root` when the problem is the whole input. */
  readonly field: string;
  readonly message: string;
}

/** The problems of a failed zod parse, one per issue. `root` names an issue about the whole input. */
export function fieldProblems(error: z.ZodError, root = '(body)'): FieldProblem[] {
  return error.issues.map((issue) => ({ field: issue.path.map(String).join('.') || root, message: issue.message }));
}

/** Field problems as one line for people: `field: message; field: message`. */
export function describeFieldProblems(problems: readonly FieldProblem[]): string {
  return problems.map((p) => `${p.field}: ${p.message}`).join('; ');
}

/** Parses JSON text sent by a client; text that is not JSON is 400 `REQUEST.MALFORMED_JSON`. */
export function parseJsonText(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new AppError('REQUEST.MALFORMED_JSON', 'validation', 'the request body is not valid JSON');
  }
}

/**
 * A JSON request body checked against `schema`: malformed JSON is `REQUEST.MALFORMED_JSON`, invalid fields are
 * `REQUEST.INVALID` listing each one (both 400). An empty body is read as `{}`, so a schema with only optional
 * fields accepts it.
 */
export function parseJsonBody<B>(text: string, schema: z.ZodType<B>): B {
  const parsed = schema.safeParse(text.length === 0 ? {} : parseJsonText(text));
  if (!parsed.success) {
    throw new AppError('REQUEST.INVALID', 'validation', 'the request body is not valid', { errors: fieldProblems(parsed.error) });
  }
  return parsed.data;
}

/**
 * The fields of a call that is not JSON over HTTP (a gRPC or Connect request, mapped to plain values) checked against
 * `schema`: invalid fields are 400 `REQUEST.INVALID` listing each one; `root` names the field when `value` is one field.
 */
export function parseInput<T>(value: unknown, schema: z.ZodType<T>, root = '(request)'): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new AppError('REQUEST.INVALID', 'validation', 'the request is not valid', { errors: fieldProblems(parsed.error, root) });
  }
  return parsed.data;
}

/** Query parameters checked against `schema`; failures are 400 `REQUEST.INVALID_QUERY` listing the fields. */
export function parseQueryParams<Q>(params: Iterable<readonly [string, string]>, schema: z.ZodType<Q>): Q {
  const parsed = schema.safeParse(Object.fromEntries(params));
  if (!parsed.success) {
    throw new AppError('REQUEST.INVALID_QUERY', 'validation', 'the query is not valid', { errors: fieldProblems(parsed.error, '(query)') });
  }
  return parsed.data;
}
