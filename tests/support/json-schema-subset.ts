/**
 * A JSON Schema (2020-12) validator for the keywords our message schemas use, so a test can run a schema file
 * itself on sample documents. No JSON Schema validator is a dependency of this package (ajv here is only eslint's
 * draft-07 copy). A keyword it does not know throws instead of being ignored, so a schema that grows a new keyword
 * fails loudly here rather than passing samples it never checked.
 */
export type JsonSchema = Readonly<Record<string, unknown>>;

/** Keywords that only describe; 2020-12 treats `format` as an annotation unless a vocabulary asserts it. */
const ANNOTATIONS = new Set(['$schema', '$id', '$comment', 'title', 'description', 'examples', 'format']);
const ASSERTIONS = new Set(['type', 'properties', 'required', 'additionalProperties', 'enum', 'pattern', 'minLength', 'maxLength']);

/** The paths (`desiredState.commit`, `(root)`) where `value` breaks `schema`; empty when it is valid. */
export function schemaErrors(schema: JsonSchema, value: unknown, path = ''): string[] {
  for (const keyword of Object.keys(schema)) {
    if (!ANNOTATIONS.has(keyword) && !ASSERTIONS.has(keyword)) throw new Error(`unsupported JSON Schema keyword ${keyword} at ${path || '(root)'}`);
  }
  const here = path || '(root)';
  const errors: string[] = [];
  const type = schema.type;
  if (type === 'object') {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return [`${here}: not an object`];
    const record = value as Record<string, unknown>;
    const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
    for (const name of (schema.required ?? []) as string[]) {
      if (!(name in record)) errors.push(`${path ? `${path}.` : ''}${name}: required`);
    }
    for (const [name, child] of Object.entries(record)) {
      const childPath = path ? `${path}.${name}` : name;
      const childSchema = properties[name];
      if (childSchema) errors.push(...schemaErrors(childSchema, child, childPath));
      else if (schema.additionalProperties === false) errors.push(`${childPath}: not allowed`);
    }
    return errors;
  }
  if (type === 'string') {
    if (typeof value !== 'string') return [`${here}: not a string`];
    // JSON Schema counts code points, not UTF-16 units.
    const length = [...value].length;
    if (typeof schema.minLength === 'number' && length < schema.minLength) errors.push(`${here}: shorter than ${schema.minLength}`);
    if (typeof schema.maxLength === 'number' && length > schema.maxLength) errors.push(`${here}: longer than ${schema.maxLength}`);
    // ECMA-262 regular expressions, unanchored, as the specification says.
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern, 'u').test(value)) errors.push(`${here}: does not match the pattern`);
    if (Array.isArray(schema.enum) && !schema.enum.includes(value)) errors.push(`${here}: not one of ${schema.enum.join(', ')}`);
    return errors;
  }
  throw new Error(`unsupported JSON Schema type ${JSON.stringify(type)} at ${here}`);
}

/** The schema without annotations: what remains is what it asserts, comparable with another schema. */
export function withoutAnnotations(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutAnnotations);
  if (typeof schema !== 'object' || schema === null) return schema;
  return Object.fromEntries(
    Object.entries(schema)
      .filter(([keyword]) => keyword === 'format' || !ANNOTATIONS.has(keyword))
      .map(([keyword, value]) => [keyword, keyword === 'properties' ? mapValues(value, withoutAnnotations) : withoutAnnotations(value)]),
  );
}

function mapValues(value: unknown, map: (v: unknown) => unknown): unknown {
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, map(v)]));
}
