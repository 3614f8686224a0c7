import { hostApp, registeredHttpRoutes } from '../app';
import { endpoint } from '../http/endpoint';
import { API_VERSION, openApiDocument } from '../http/openapi';

let document: Record<string, unknown> | undefined;

/** The OpenAPI 3.1 document of this host's HTTP routes (the modules it runs), built once from their schemas. */
export const openApi = endpoint({ scope: 'factory.meta.read', summary: 'The OpenAPI document of this host' }, async () => {
  document ??= openApiDocument(registeredHttpRoutes(), API_VERSION);
  return { status: 200, headers: { 'cache-control': 'no-store' }, jsonBody: document };
});

hostApp.http('RuntimeCloudOpenApi', { route: 'runtime-cloud/openapi.json', methods: ['GET'], authLevel: 'anonymous', handler: openApi });
