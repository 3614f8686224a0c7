import { hostApp, registeredHttpRoutes } from '../app';
import { endpoint } from '../http/endpoint';

let document: Record<string, unknown> | undefined;

/** The OpenAPI 3.1 document of this host's HTTP routes (the modules it runs), built once from their schemas. */
export const openApi = endpoint({ scope: 'factory.meta.read', summary: 'The OpenAPI document of this host' }, async () => {
  if (!document) {
    // The document's builder (zod's JSON Schema, the error catalogues) loads on the first request for it, not when
    // the functions register (docs/benchmarks.md, "Cold start").
    const { API_VERSION, openApiDocument } = await import('../http/openapi.js');
    document = openApiDocument(registeredHttpRoutes(), API_VERSION);
  }
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: document };
});

hostApp.http('RuntimeCloudOpenApi', { route: 'runtime-cloud/openapi.json', methods: ['GET'], authLevel: 'anonymous', handler: openApi });
