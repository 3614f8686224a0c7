import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parsePromotion, promotionApprovedSchema } from '../../shared/provisioning/promotion';
import { aPromotion } from '../support/builders';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';

const schemaFile = join(__dirname, '../../shared/provisioning/schemas/promotion-approved.schema.json');
const jsonSchema = JSON.parse(readFileSync(schemaFile, 'utf8')) as Record<string, unknown>;

// Strict: a keyword or format ajv does not know is an error, so the schema cannot grow one that checks nothing.
// ajv-formats asserts `format` (date-time), as the zod schema does.
const ajv = new Ajv2020({ allErrors: true, strict: true });
addFormats(ajv);
const validate = ajv.compile(jsonSchema);

/** Where `value` breaks the published schema (`/desiredState/commit must match pattern …`); empty when it is valid. */
function schemaErrors(value: unknown): string[] {
  return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? e.keyword}`);
}

/** Keywords that only describe; what remains is what a schema asserts, comparable with another schema. */
const ANNOTATIONS = new Set(['$schema', '$id', '$comment', 'title', 'description', 'examples']);

function withoutAnnotations(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutAnnotations);
  if (typeof schema !== 'object' || schema === null) return schema;
  return Object.fromEntries(
    Object.entries(schema)
      .filter(([keyword]) => !ANNOTATIONS.has(keyword))
      .map(([keyword, value]) => [
        keyword,
        keyword === 'properties' ? Object.fromEntries(Object.entries(value as object).map(([k, v]) => [k, withoutAnnotations(v)])) : withoutAnnotations(value),
      ]),
  );
}

/** A promotion with one field replaced (or removed, with `undefined`) at a dotted path. */
function withField(path: string, value: unknown): Record<string, unknown> {
  const copy = structuredClone(aPromotion()) as unknown as Record<string, unknown>;
  const keys = path.split('.');
  const last = keys.pop()!;
  const parent = keys.reduce<Record<string, unknown>>((node, key) => node[key] as Record<string, unknown>, copy);
  if (value === undefined) delete parent[last];
  else parent[last] = value;
  return copy;
}

const validCases: [string, unknown][] = [
  ['the builder default', aPromotion()],
  ['a staging tier', withField('environment.tier', 'staging')],
  ['a production tier', withField('environment.tier', 'production')],
  ['approvedAt with milliseconds', withField('approvedAt', '2026-03-01T09:30:00.123Z')],
  ['approvedAt with an offset', withField('approvedAt', '2026-03-01T11:30:00+02:00')],
  ['approvedAt on a leap day', withField('approvedAt', '2028-02-29T00:00:00Z')],
  ['a stack with dots, dashes and underscores', withField('desiredState.stack', 'eu.prod-2_a')],
  ['the repository root as path', withField('desiredState.path', '.')],
  ['an unknown extra field (a producer added an optional field)', { ...aPromotion(), traceparent: '00-abc' }],
  ['an unknown extra nested field', withField('release.notes', 'first release')],
  ['the longest promotionId allowed', withField('promotionId', 'p'.repeat(200))],
];

const invalidCases: [string, unknown][] = [
  ['null', null],
  ['an array', [aPromotion()]],
  ['a string', 'promotion'],
  ['an empty object', {}],
  ['a missing promotionId', withField('promotionId', undefined)],
  ['an empty promotionId', withField('promotionId', '')],
  ['a promotionId one past the limit', withField('promotionId', 'p'.repeat(201))],
  ['a numeric tenantId', withField('tenantId', 42)],
  ['a missing environment', withField('environment', undefined)],
  ['an unknown tier', withField('environment.tier', 'qa')],
  ['a tier in capitals', withField('environment.tier', 'Production')],
  ['a missing environment id', withField('environment.id', undefined)],
  ['a missing release version', withField('release.version', undefined)],
  ['a short sha', withField('desiredState.commit', '3f1c2b7')],
  ['a sha in capitals', withField('desiredState.commit', '3F1C2B7A9D4E5F60718293A4B5C6D7E8F9012345')],
  ['a 41-character sha', withField('desiredState.commit', '3f1c2b7a9d4e5f60718293a4b5c6d7e8f90123456')],
  ['a branch name for the commit', withField('desiredState.commit', 'main')],
  ['an empty path', withField('desiredState.path', '')],
  ['a missing repository', withField('desiredState.repository', undefined)],
  ['a stack with a slash', withField('desiredState.stack', 'org/prod')],
  ['a stack with a space', withField('desiredState.stack', 'prod 1')],
  ['a missing requestedBy', withField('requestedBy', undefined)],
  ['approvedAt without a zone', withField('approvedAt', '2026-03-01T09:30:00')],
  ['approvedAt without seconds', withField('approvedAt', '2026-03-01T09:30Z')],
  ['approvedAt as a date only', withField('approvedAt', '2026-03-01')],
  ['approvedAt on a day that does not exist', withField('approvedAt', '2026-02-30T00:00:00Z')],
  ['approvedAt as epoch milliseconds', withField('approvedAt', 1_772_357_400_000)],
];

describe('PromotionApproved contract', () => {
  it('when the JSON Schema file is compared with the zod schema, then they assert the same fields, types, enums, lengths and patterns', () => {
    // Arrange
    const fromZod = z.toJSONSchema(promotionApprovedSchema, { io: 'input' });

    // Act
    const published = withoutAnnotations(jsonSchema);
    const validated = withoutAnnotations(fromZod);

    // Assert
    expect(published).toEqual(validated);
  });

  it.each(validCases)('when the message is %s, then both schemas accept it', (_name, sample) => {
    // Act
    const zodAccepts = promotionApprovedSchema.safeParse(sample).success;
    const jsonSchemaErrors = schemaErrors(sample);

    // Assert
    expect(jsonSchemaErrors).toEqual([]);
    expect(zodAccepts).toBe(true);
  });

  it.each(invalidCases)('when the message has %s, then both schemas refuse it', (_name, sample) => {
    // Act
    const zodAccepts = promotionApprovedSchema.safeParse(sample).success;
    const jsonSchemaErrors = schemaErrors(sample);

    // Assert
    expect(jsonSchemaErrors).not.toEqual([]);
    expect(zodAccepts).toBe(false);
  });

  it('when the schema file shows an example, then the example is a valid promotion', () => {
    // Arrange
    const examples = jsonSchema.examples as unknown[];

    // Act
    const results = examples.map((example) => parsePromotion(example).outcome);

    // Assert
    expect(results).toEqual(['valid']);
  });
});

describe('parsePromotion', () => {
  it('when the message is valid, then the promotion is returned without the unknown fields', () => {
    // Arrange
    const body = { ...aPromotion(), unknownField: 'ignored' };

    // Act
    const result = parsePromotion(body);

    // Assert
    expect(result).toEqual({ outcome: 'valid', promotion: aPromotion() });
  });

  it('when several fields are wrong, then every problem is listed with its field path', () => {
    // Arrange
    const body = {
      ...withField('desiredState.commit', 'main'),
      environment: { id: 'env-1', name: 'production', tier: 'qa' },
      approvedAt: 'yesterday',
      requestedBy: undefined,
    };

    // Act
    const result = parsePromotion(body);

    // Assert
    expect(result.outcome).toBe('invalid');
    const fields = result.outcome === 'invalid' ? result.problems.map((p) => p.field).sort() : [];
    expect(fields).toEqual(['approvedAt', 'desiredState.commit', 'environment.tier', 'requestedBy']);
  });

  it('when the body is JSON text or bytes, then it is parsed before it is checked', () => {
    // Arrange
    const text = JSON.stringify(aPromotion());

    // Act
    const fromText = parsePromotion(text);
    const fromBytes = parsePromotion(new TextEncoder().encode(text));

    // Assert
    expect(fromText).toEqual({ outcome: 'valid', promotion: aPromotion() });
    expect(fromBytes).toEqual({ outcome: 'valid', promotion: aPromotion() });
  });

  it('when the body is not JSON, then it is invalid with one problem about the whole message', () => {
    // Act
    const result = parsePromotion('{"promotionId": ');

    // Assert
    expect(result).toEqual({ outcome: 'invalid', problems: [{ field: '(message)', message: 'the message body is not valid JSON' }] });
  });

  it.each([undefined, null, 0, true, [], 'null', Symbol('x'), () => 1])('when the body is %s, then it is invalid and nothing throws', (body) => {
    // Act
    const result = parsePromotion(body);

    // Assert
    expect(result.outcome).toBe('invalid');
    expect(result.outcome === 'invalid' && result.problems.length).toBeGreaterThan(0);
  });
});
