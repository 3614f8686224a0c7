import type { z } from 'zod';
import type { HttpRoute } from '../app';
import { CapacityErrors } from '../../shared/capacity/errors';
import { InventoryErrors } from '../../shared/inventory/errors';
import type { ProblemCatalogue } from '../../shared/platform/errors/catalogue';
import { problemTypeUri, STATUS_BY_KIND } from '../../shared/platform/http/problem';
import { ProvisioningErrors } from '../../shared/provisioning/errors';
import { zod } from '../../shared/platform/validation/lazy-schema';
import { endpointSpec } from './endpoint';

/** The modules' error catalogues, whose problems the document lists (`components.x-problem-types`). */
export const PROBLEM_CATALOGUES: readonly ProblemCatalogue[] = [CapacityErrors, InventoryErrors, ProvisioningErrors];

/**
 * The OpenAPI 3.1 document of the registered HTTP functions, built from the same zod schemas their handlers
 * validate with (`endpoint({ body, query })`): one operation per route and method, path parameters from the route
 * template, query parameters and the request body as JSON Schema 2020-12, the scope each needs, and problem+json
 * for every failure. Responses are described by status and media type only: the views are not zod schemas.
 *
 * The checked-in `openapi.json` is this document for a host with every module enabled (a test compares them);
 * `npm run -s openapi > openapi.json` writes it again.
 */
/** The version of the HTTP API the document describes; a breaking change of a route or schema bumps it (2: job calls carry the pool credential besides the job token). */
export const API_VERSION = '2.0.0';

export function openApiDocument(routes: readonly HttpRoute[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of [...routes].filter((r) => !endpointSpec(r.handler)?.localOnly).sort((a, b) => a.route.localeCompare(b.route) || a.name.localeCompare(b.name))) {
    const path = `/${route.route}`;
    const item = (paths[path] ??= {});
    for (const method of route.methods) {
      item[method.toLowerCase()] = operation(route, method, route.methods.length > 1);
    }
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'RuntimeCloudHost',
      version,
      description: 'Provisioning runs, inventory and drift, and execution capacity of the software factory. Errors are RFC 9457 problem+json.',
    },
    servers: [{ url: '/' }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A token of the identity platform; scopes are in its `scp` or `roles` claims.' } },
      schemas: { Problem: PROBLEM_SCHEMA },
      responses: {
        Problem: { description: 'A failure, as problem+json (RFC 9457) with a stable `code`.', content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } },
      },
      'x-problem-types': problemTypes(),
    },
  };
}

function operation(route: HttpRoute, method: string, severalMethods: boolean): Record<string, unknown> {
  const spec = endpointSpec(route.handler);
  const parameters: Record<string, unknown>[] = [...route.route.matchAll(/\{(\w+)\??\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
  for (const header of spec?.headers ?? []) parameters.push({ name: header.name, in: 'header', required: true, description: header.description, schema: { type: 'string' } });
  if (spec?.query) {
    const query = toSchema(spec.query()) as { properties?: Record<string, unknown>; required?: string[] };
    for (const [name, schema] of Object.entries(query.properties ?? {})) {
      parameters.push({ name, in: 'query', required: query.required?.includes(name) ?? false, schema });
    }
  }
  return {
    operationId: severalMethods ? `${route.name}${method[0]}${method.slice(1).toLowerCase()}` : route.name,
    ...(spec?.summary !== undefined ? { summary: spec.summary } : {}),
    ...(spec ? { security: [{ bearer: [spec.scope] }], 'x-required-scope': spec.scope, ...(spec.platformOnly ? { 'x-platform-only': true } : {}) } : {}),
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(spec?.body ? { requestBody: { required: true, content: { 'application/json': { schema: toSchema(spec.body()) } } } } : {}),
    responses: {
      '2XX': { description: 'Success; the body, if any, is JSON.' },
      default: { $ref: '#/components/responses/Problem' },
    },
  };
}

/** A zod schema as JSON Schema of what a client sends (before defaults and coercion), without the `$schema` line. */
function toSchema(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = zod().toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
}

/** Every catalogued problem by code: its `type` URI and HTTP status as a response carries them, and a title naming the problem (a response's `title` describes the occurrence). */
function problemTypes(): Record<string, { type: string; status: number; title: string }> {
  const entries = PROBLEM_CATALOGUES.flatMap((catalogue) => Object.values(catalogue)).sort((a, b) => a.code.localeCompare(b.code));
  return Object.fromEntries(entries.map((e) => [e.code, { type: problemTypeUri(e.code), status: STATUS_BY_KIND[e.kind], title: e.title }]));
}

const PROBLEM_SCHEMA = {
  type: 'object',
  required: ['type', 'title', 'status', 'code'],
  properties: {
    type: { type: 'string' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    code: { type: 'string', description: 'Stable error code, e.g. CAPACITY.QUOTA_EXCEEDED.' },
    errors: { type: 'array', items: { type: 'object', properties: { field: { type: 'string' }, message: { type: 'string' } } } },
  },
};
