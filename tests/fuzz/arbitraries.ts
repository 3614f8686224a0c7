import fc from 'fast-check';

/** The subset of JSON Schema (as openapi.json's request bodies use it) that `valueOf` generates values for. */
export interface Schema {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  propertyNames?: Schema;
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
}

/** Values the schema allows, roughly (patterns are ignored: a near miss is as good a probe). */
export function valueOf(schema: Schema): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...schema.enum);
  const choices = schema.anyOf ?? schema.oneOf;
  if (choices) return fc.oneof(...choices.map(valueOf));
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'object':
      return objectOf(schema);
    case 'array':
      return fc.array(valueOf(schema.items ?? {}), { maxLength: 4 });
    case 'string':
      return fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.min(schema.maxLength ?? 40, 40) });
    case 'integer':
      return fc.integer({ min: Math.max(schema.minimum ?? -1000, -1e6), max: Math.min(schema.maximum ?? 1e6, 1e6) });
    case 'number':
      return fc.double({ min: schema.minimum ?? -1e6, max: schema.maximum ?? 1e6, noNaN: true });
    case 'boolean':
      return fc.boolean();
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

function objectOf(schema: Schema): fc.Arbitrary<unknown> {
  const properties = schema.properties ?? {};
  if (Object.keys(properties).length === 0 && schema.propertyNames?.enum) {
    const values = typeof schema.additionalProperties === 'object' ? valueOf(schema.additionalProperties) : fc.jsonValue({ maxDepth: 1 });
    return fc.dictionary(fc.constantFrom(...(schema.propertyNames.enum as string[])), values, { maxKeys: 4 });
  }
  const record = Object.fromEntries(Object.entries(properties).map(([k, v]) => [k, valueOf(v)]));
  return fc.record(record, { requiredKeys: (schema.required ?? []).filter((k) => k in properties) });
}

/** A value turned into a near miss: a key dropped, a value of the wrong type, an unknown key, or left as it is. */
export function mutated(value: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  const wrong = fc.oneof(fc.constant(null), fc.integer(), fc.string(), fc.boolean(), fc.constant([]), fc.constant({}), fc.double(), fc.constant(-1), fc.constant(2 ** 63));
  return fc.tuple(value, fc.nat(3), fc.string({ maxLength: 12 }), wrong).map(([v, how, key, w]) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return how === 0 ? w : v;
    const copy: Record<string, unknown> = { ...(v as Record<string, unknown>) };
    const keys = Object.keys(copy);
    const target = keys.length > 0 ? keys[key.length % keys.length]! : key;
    if (how === 0) delete copy[target];
    else if (how === 1) copy[target] = w;
    else if (how === 2) copy[key || '__proto__'] = w;
    return copy;
  });
}

/** JSON nested `depth` levels deep, as arrays or objects. */
export function deepJson(depth: number, kind: 'array' | 'object'): string {
  return kind === 'array' ? `${'['.repeat(depth)}${']'.repeat(depth)}` : `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
}

/** A body as bytes on the wire: valid-ish JSON, JSON of any shape, huge or deep JSON, broken JSON, binary. */
export function bodyOf(schema: Schema | undefined): fc.Arbitrary<string | Buffer | undefined> {
  const valid = schema ? valueOf(schema) : fc.jsonValue({ maxDepth: 2 });
  return fc.oneof(
    { weight: 6, arbitrary: mutated(valid).map((v) => JSON.stringify(v)) },
    { weight: 3, arbitrary: valid.map((v) => JSON.stringify(v)) },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 60 }) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
    { weight: 1, arbitrary: fc.constantFrom('{', '{"a":', 'null', '[]', '""', '{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":{"x":1}}}', '\uFEFF{}') },
    { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 1000, max: 20_000 }), fc.constantFrom('array' as const, 'object' as const)).map(([d, k]) => deepJson(d, k)) },
    // JSON.stringify({ reason: 'x'.repeat(n) }) byte for byte, without scanning megabytes for characters to escape.
    { weight: 1, arbitrary: fc.integer({ min: 100_000, max: 5_000_000 }).map((n) => `{"reason":"${'x'.repeat(n)}"}`) },
  );
}

/** A path parameter: plausible ids, traversal, encodings, unicode, control characters, very long. */
export const pathParam: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.stringMatching(/^[a-z0-9-]{1,20}$/) },
  { weight: 1, arbitrary: fc.constantFrom('..', '../..', '..%2F..%2Fetc%2Fpasswd', '%2e%2e', '%00', '%zz', '%', '%c0%af', '.', 'a%2Fb', '%20', 'contoso', 'fabrikam', 'local', 'env-dev-1') },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }).map(encodeURIComponent) },
  { weight: 1, arbitrary: fc.integer({ min: 300, max: 9000 }).map((n) => 'a'.repeat(n)) },
);

/** A query string of the list parameters with values of any kind. */
export const query: fc.Arbitrary<string> = fc
  .array(
    fc.tuple(
      fc.constantFrom('limit', 'cursor', 'state', 'environment', 'tenant', 'kind', 'pool', 'after', 'status', 'x'),
      fc.oneof(fc.constantFrom('0', '-1', '1001', '1e3', 'NaN', '', '100', 'queued', '%zz', 'Zm9v', '1'.repeat(40)), fc.string({ maxLength: 12 }).map(encodeURIComponent)),
    ),
    { maxLength: 3 },
  )
  .map((pairs) => (pairs.length === 0 ? '' : `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`));

/** A Content-Type header (absent, right, wrong, malformed). */
export const contentType: fc.Arbitrary<string | undefined> = fc.constantFrom(
  undefined,
  'application/json',
  'application/json',
  'application/json; charset=utf-8',
  'application/json; charset=utf-16',
  'text/plain',
  'application/xml',
  'multipart/form-data; boundary=x',
  'application/x-www-form-urlencoded',
  ';;;',
);

/** Extra headers: long values, unicode-free junk, repeated names the server must read as one. */
export const extraHeaders: fc.Arbitrary<Record<string, string>> = fc.record(
  {
    'idempotency-key': fc.oneof(fc.stringMatching(/^[A-Za-z0-9-]{1,40}$/), fc.integer({ min: 200, max: 6000 }).map((n) => 'k'.repeat(n))),
    'x-long': fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 100, max: 4000 }) }, { weight: 1, arbitrary: fc.integer({ min: 4000, max: 20_000 }) }).map((n) => 'v'.repeat(n)),
    accept: fc.constantFrom('*/*', 'application/xml', 'text/html'),
    'x-forwarded-for': fc.constantFrom('127.0.0.1', '::1, 10.0.0.1', 'junk'),
  },
  { requiredKeys: [] },
);
