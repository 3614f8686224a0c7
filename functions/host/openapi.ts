import { hostApp, registeredHttpRoutes } from '../app';
import { endpoint } from '../http/endpoint';

let document: Record<string, unknown> | undefined;

/** The OpenAPI 3.1 document of this host's HTTP routes (the modules it runs), built once from their schemas. */
export const openApi = endpoint({
  tag: 'Meta',
  summary: 'Get the OpenAPI document of this host',
  description:
    'This document, for the modules this host runs (a host configured with fewer modules describes fewer routes): every operation ' +
    'with the scope it needs, its parameters and request body as JSON Schema, and the problem types of every failure. Never cached.',
  scope: 'factory.meta.read',
}, async () => {
  if (!document) {
    // The document's builder (zod's JSON Schema, the error catalogues) loads on the first request for it, not when
    // the functions register (docs/benchmarks.md, "Cold start").
    const { API_VERSION, openApiDocument } = await import('../http/openapi.js');
    document = openApiDocument(registeredHttpRoutes(), API_VERSION);
  }
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: document };
});

hostApp.http('RuntimeCloudOpenApi', { route: 'runtime-cloud/openapi.json', methods: ['GET'], authLevel: 'anonymous', handler: openApi });
