import type { z } from 'zod';
import type { HttpRoute } from '../app';
import { CapacityErrors } from '../../shared/capacity/errors';
import { InventoryErrors } from '../../shared/inventory/errors';
import type { ProblemCatalogue } from '../../shared/platform/errors/catalogue';
import { problemTypeUri, STATUS_BY_KIND } from '../../shared/platform/http/problem';
import { ProvisioningErrors } from '../../shared/provisioning/errors';
import { SCOPES, type Scope } from '../../shared/platform/auth/auth';
import { zod } from '../../shared/platform/validation/lazy-schema';
import { API_TAGS, type ApiTag } from './api-tags';
import { endpointSpec, isFileServer, publicSpec } from './endpoint';

/** The modules' error catalogues, whose problems the document lists (`components.x-problem-types`). */
export const PROBLEM_CATALOGUES: readonly ProblemCatalogue[] = [CapacityErrors, InventoryErrors, ProvisioningErrors];

/**
 * The OpenAPI 3.1 document of the registered HTTP functions, built from the same zod schemas their handlers
 * validate with (`endpoint({ body, query })`): one operation per route and method, path parameters from the route
 * template, query parameters and the request body as JSON Schema 2020-12, its group, summary and description (written
 * beside the handler, `endpoint({ tag, summary, description })`), the OAuth 2.0 scope each needs, and problem+json for
 * every failure, and the JSON body of a success where the endpoint declares its schema (`endpoint({ response })`).
 *
 * The checked-in `openapi.json` is this document for a host with every module enabled (a test compares them);
 * `npm run -s openapi > openapi.json` writes it again, and `npm run check` lints it with Spectral (`.spectral.yaml`).
 */
/** The version of the HTTP API the document describes; a breaking change of a route or schema bumps it (2: job calls carry the pool credential besides the job token). */
export const API_VERSION = '2.0.0';

export function openApiDocument(routes: readonly HttpRoute[], version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const documented = [...routes].filter((r) => !endpointSpec(r.handler)?.localOnly && !isFileServer(r.handler)).sort((a, b) => a.route.localeCompare(b.route) || a.name.localeCompare(b.name));
  for (const route of documented) {
    const path = `/${route.route}`;
    const item = (paths[path] ??= {});
    for (const method of route.methods) {
      item[method.toLowerCase()] = operation(route, method, route.methods.length > 1);
    }
  }
  // Only the groups and scopes of this host's operations: a host runs the modules it is configured for.
  const specs = documented.map((r) => endpointSpec(r.handler));
  const tags = new Set<ApiTag | undefined>([...specs.map((spec) => spec?.tag), ...documented.map((r) => publicSpec(r.handler)?.tag)]);
  const scopes = new Set<Scope | undefined>(specs.map((spec) => spec?.scope));
  return {
    openapi: '3.1.0',
    info: {
      title: 'RuntimeCloudHost',
      version,
      description:
        'Provisioning runs, inventory and drift, and execution capacity of the software factory. Callers present an OAuth 2.0 ' +
        'access token (a JWT) as a bearer token; each operation needs one scope. A token bound to a tenant acts on that tenant only. ' +
        'Lists paginate with `?limit=&cursor=`. Errors are RFC 9457 problem+json with a stable `code` (`components.x-problem-types`).',
    },
    servers: [{ url: '/' }],
    tags: Object.entries(API_TAGS)
      .filter(([name]) => tags.has(name as ApiTag))
      .map(([name, description]) => ({ name, description })),
    paths,
    components: {
      securitySchemes: { [SECURITY_SCHEME]: oauth2Scheme(SCOPES.filter((scope) => scopes.has(scope))) },
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
  const open = publicSpec(route.handler);
  if (open) {
    return {
      operationId: severalMethods ? `${route.name}${method[0]}${method.slice(1).toLowerCase()}` : route.name,
      tags: [open.tag],
      summary: open.summary,
      description: open.description,
      // Anyone may read it: no token.
      security: [],
      responses: { '2XX': { description: 'Success; the body is JSON.' }, default: { $ref: '#/components/responses/Problem' } },
    };
  }
  return {
    operationId: severalMethods ? `${route.name}${method[0]}${method.slice(1).toLowerCase()}` : route.name,
    ...(spec?.tag !== undefined ? { tags: [spec.tag] } : {}),
    ...(spec?.summary !== undefined ? { summary: spec.summary } : {}),
    ...(spec?.description !== undefined ? { description: spec.platformOnly ? `${spec.description} ${PLATFORM_ONLY}` : spec.description } : {}),
    ...(spec ? { security: [{ [SECURITY_SCHEME]: [spec.scope] }], 'x-required-scope': spec.scope, ...(spec.platformOnly ? { 'x-platform-only': true } : {}) } : {}),
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(spec?.body ? { requestBody: { required: true, content: { 'application/json': { schema: toSchema(spec.body()) } } } } : {}),
    responses: {
      '2XX': spec?.response
        ? { description: 'Success, with the JSON body described.', content: { 'application/json': { schema: toSchema(spec.response(), 'output') } } }
        : { description: 'Success; the body, if any, is JSON.' },
      default: { $ref: '#/components/responses/Problem' },
    },
  };
}

/** What `platformOnly` means to a caller, after the description of such an operation. */
const PLATFORM_ONLY = 'Platform administration: a token bound to a tenant is refused 403 `AUTH.PLATFORM_ONLY`, whatever its scopes.';

/** The name of the document's security scheme, which every operation's `security` names with its scope. */
const SECURITY_SCHEME = 'oauth2';

/**
 * Where an Entra ID client gets a token with the client credentials grant. The document is the same for every
 * installation, so `directory-id` stands for the installation's directory (tenant) id; the scheme's description says so.
 */
const TOKEN_URL = 'https://login.microsoftonline.com/directory-id/oauth2/v2.0/token';

/** What each scope lets a caller do, and who holds it (docs/security.md). */
const SCOPE_DESCRIPTIONS: Readonly<Record<Scope, string>> = {
  'factory.health.read': "Read the host's dependency health and metrics. Held by Observer, Operator and PlatformAdmin.",
  'factory.meta.read': "Read the host's targets and its OpenAPI document. Held by Observer, Operator and PlatformAdmin.",
  'factory.runtime.read':
    "Read the tenant's runs, stack locks, runner pools, environments, inventory, drift, ignore rules, proposals, leases and capacity. Held by Observer, Operator and PlatformAdmin.",
  'factory.capacity.lease': 'Acquire, renew and release capacity leases. A service scope (runtime workers, the tool executor), granted to the application itself; no role holds it.',
  'factory.provisioning.operate':
    'Decide on provisioning: approve, reject, replan and cancel runs; accept and dismiss proposals; scan environments and pause their scans; add and delete ignore rules. Held by Operator and PlatformAdmin.',
  'factory.runtime.admin':
    'Platform administration across tenants: pools, editions, tenants, breaking stack locks. Held by PlatformAdmin; a token bound to a tenant is refused whatever its scopes.',
  'factory.runner.agent': "A runner agent's pool credential: claim its pool's jobs, and beat and post results for a job it claimed (with the job's token). Bound to one runner pool.",
};

/** OAuth 2.0 client credentials with Microsoft Entra ID, listing the given scopes. */
function oauth2Scheme(scopes: readonly Scope[]): Record<string, unknown> {
  return {
    type: 'oauth2',
    description:
      'A bearer JWT (`Authorization: Bearer <token>`), validated for issuer, audience and lifetime. In Azure the issuer is Microsoft ' +
      "Entra ID: a calling service gets a token with the client credentials grant at its directory's token endpoint, asking for " +
      '`scope=api://runtime-cloud/.default`, and the token carries the permissions it was granted (the roles Observer, Operator and ' +
      "PlatformAdmin, or single scopes) in `roles`; a person's delegated token carries them in `scp`. `directory-id` in the token URL " +
      "stands for the installation's directory (tenant) id, the one in its `RuntimeCloud__Auth__Issuer`: this document is the same for " +
      'every installation. The scopes below are what each operation checks. The local host has no token endpoint: its issuer signs ' +
      'tokens with `runtime-cloud token --scope <scope>` (`npm run -s token`). See docs/security.md.',
    flows: {
      clientCredentials: {
        tokenUrl: TOKEN_URL,
        scopes: Object.fromEntries(scopes.map((scope) => [scope, SCOPE_DESCRIPTIONS[scope]])),
      },
    },
  };
}

/**
 * A zod schema as JSON Schema, without the `$schema` line: of what a client sends (`input`: before defaults and
 * coercion), or of what the host answers (`output`: an object has exactly the members described).
 */
function toSchema(schema: z.ZodType, io: 'input' | 'output' = 'input'): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = zod().toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
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
