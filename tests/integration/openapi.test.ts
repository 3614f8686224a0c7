import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Document as SpectralDocument, Spectral, type RulesetDefinition } from '@stoplight/spectral-core';
import { Json } from '@stoplight/spectral-parsers';
import { oas } from '@stoplight/spectral-rulesets';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registeredHttpRoutes } from '../../functions/app';
import { endpointSpec, isFileServer } from '../../functions/http/endpoint';
import { API_VERSION, openApiDocument } from '../../functions/http/openapi';
import { registeredFunctions, triggerOf } from '../../local/functions-core/registry';
import { startTestHost, type TestHost } from '../support/local-host';

/** The operations anyone may call without a token. */
const PUBLIC = ['GET /runtime-cloud/.well-known/lease-jwks.json'];

type Operation = {
  operationId: string;
  tags?: string[];
  summary?: string;
  description?: string;
  security?: Record<string, string[]>[];
  'x-required-scope'?: string;
  requestBody?: unknown;
  parameters?: { name: string; in: string }[];
};
type Document = {
  tags?: { name: string; description?: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, { type: string; flows?: { clientCredentials?: { tokenUrl: string; scopes: Record<string, string> } } }> };
};

const root = join(__dirname, '../..');

/**
 * The repository's Spectral ruleset (.spectral.yaml, which `npm run check` lints openapi.json with): spectral:oas and
 * the file's own rule settings. (Spectral's ruleset loader is not used here: its types declare the DOM's globals.)
 */
function repositoryRuleset(): RulesetDefinition {
  const file = parse(readFileSync(join(root, '.spectral.yaml'), 'utf8')) as { extends?: unknown; rules?: Record<string, unknown> };
  expect(file.extends).toEqual(['spectral:oas']);
  return { extends: [oas], rules: file.rules ?? {} } as RulesetDefinition;
}

/**
 * The OpenAPI document: generated from the handlers' own zod schemas, checked into the repository as openapi.json,
 * valid OpenAPI 3.1, and complete (every registered HTTP function is in it). This file owns a host with every module.
 */
describe('the OpenAPI document', () => {
  let host: TestHost;
  const checkedIn = JSON.parse(readFileSync(join(root, 'openapi.json'), 'utf8')) as Document;

  beforeAll(async () => {
    host = await startTestHost();
  });
  afterAll(async () => {
    await host?.stop();
  });

  it('when the document is generated from the registered handlers, then it equals the checked-in openapi.json (regenerate with npm run -s openapi > openapi.json)', () => {
    expect(openApiDocument(registeredHttpRoutes(), API_VERSION)).toEqual(checkedIn);
  });

  it('when the host registers an HTTP function, then its route and methods are in the document', () => {
    const localOnly = new Set(registeredHttpRoutes().filter((r) => endpointSpec(r.handler)?.localOnly).map((r) => r.name));
    const files = new Set(registeredHttpRoutes().filter((r) => isFileServer(r.handler)).map((r) => r.name));
    const http = registeredFunctions().filter((r) => triggerOf(r).type === 'httpTrigger' && !localOnly.has(r.metadata.name) && !files.has(r.metadata.name));
    // The local cloud's job routes are the local host's own (local/cloud/job-target-functions.ts), not the API's;
    // the console's files (functions/host/console.ts) are no API.
    expect([...localOnly].sort()).toEqual(['getRunnerJobState', 'putRunnerJobState', 'runnerJobTargetCall']);
    expect([...files]).toEqual(['RuntimeCloudConsole']);
    expect(http.length).toBeGreaterThan(25);
    const missing = http.flatMap((r) => {
      const trigger = triggerOf(r) as { route?: string; methods?: string[] };
      const operations = checkedIn.paths[`/${trigger.route ?? r.metadata.name}`] ?? {};
      return (trigger.methods ?? []).filter((m) => operations[m.toLowerCase()] === undefined).map((m) => `${m} ${trigger.route ?? ''}`);
    });
    expect(missing).toEqual([]);
  });

  it('when the document is validated, then it is valid OpenAPI 3.1', async () => {
    const result = await new Validator().validate(checkedIn);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it("when the generated document is linted with the repository's Spectral ruleset (.spectral.yaml, spectral:oas), then there is no finding", async () => {
    const spectral = new Spectral();
    spectral.setRuleset(repositoryRuleset());
    const generated = JSON.stringify(openApiDocument(registeredHttpRoutes(), API_VERSION), null, 2);
    const findings = await spectral.run(new SpectralDocument(generated, Json, 'openapi.json'));
    expect(findings.map((f) => `${f.code} at ${f.path.join('.')}: ${f.message}`)).toEqual([]);
  });

  it('when an operation is described, then it has a declared tag, a summary, a description and the OAuth 2.0 scope it checks (x-required-scope), or it is one of the public ones with security []', () => {
    const declaredTags = new Set((checkedIn.tags ?? []).map((t) => t.name));
    const scheme = checkedIn.components.securitySchemes.oauth2;
    const scopes = scheme?.flows?.clientCredentials?.scopes ?? {};
    expect(scheme?.type).toBe('oauth2');
    expect(scheme?.flows?.clientCredentials?.tokenUrl).toMatch(/^https:\/\/login\.microsoftonline\.com\/[^/]+\/oauth2\/v2\.0\/token$/);
    const required = new Set<string>();
    const usedTags = new Set<string>();
    const operations = Object.entries(checkedIn.paths).flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ at: `${method.toUpperCase()} ${path}`, op })));
    expect(operations.length).toBeGreaterThan(25);
    for (const { at, op } of operations) {
      expect(op.tags?.length, at).toBe(1);
      expect(declaredTags.has(op.tags?.[0] ?? ''), `${at} is listed under ${op.tags?.[0]}, which the document declares`).toBe(true);
      expect(op.summary?.length ?? 0, at).toBeGreaterThan(10);
      // A description says more than the summary: what it answers, who may call it, its failures.
      expect(op.description?.length ?? 0, at).toBeGreaterThan(op.summary?.length ?? 0);
      for (const tag of op.tags ?? []) usedTags.add(tag);
      // Anyone may read the keys lease certificates are checked with; every other operation needs a scope.
      if (PUBLIC.includes(at)) {
        expect(op.security, at).toEqual([]);
        expect(op['x-required-scope'], at).toBeUndefined();
        continue;
      }
      expect(op.security, at).toEqual([{ oauth2: [op['x-required-scope']] }]);
      expect(scopes[op['x-required-scope'] ?? ''], `${at}: its scope is declared with a description`).toEqual(expect.any(String));
      required.add(op['x-required-scope'] ?? '');
    }
    expect(operations.filter(({ op }) => op.security?.length === 0).map(({ at }) => at)).toEqual(PUBLIC);
    // Every scope, tag and security scheme the document declares is used by an operation.
    expect(Object.keys(scopes).sort()).toEqual([...required].sort());
    expect([...declaredTags].sort()).toEqual([...usedTags].sort());
    expect((checkedIn.tags ?? []).every((t) => (t.description ?? '').length > 0)).toBe(true);
    expect(Object.keys(checkedIn.components.securitySchemes)).toEqual(['oauth2']);
  });

  it('when a handler validates a body or a query, then the document carries that schema', () => {
    const acquire = checkedIn.paths['/runtime-cloud/leases']!.post!;
    expect(acquire.requestBody).toMatchObject({ content: { 'application/json': { schema: { properties: { kind: { enum: ['attempt', 'sandbox', 'build', 'browser-session', 'runner'] } }, required: expect.arrayContaining(['kind', 'ttlSeconds', 'holder']) } } } });
    expect(checkedIn.paths['/runtime-cloud/proposals']!.get!.parameters!.map((p) => `${p.in}:${p.name}`)).toEqual(expect.arrayContaining(['query:status', 'query:limit', 'query:cursor']));
    expect(checkedIn.paths['/runtime-cloud/runs/{id}/approve']!.post!.parameters).toEqual([expect.objectContaining({ name: 'id', in: 'path' })]);
  });

  it("when a runner job's call is described, then it needs the agent's pool credential (scope factory.runner.agent) and the job's token header", () => {
    for (const [path, method] of [['heartbeat', 'post'], ['result', 'post']] as const) {
      const operation = checkedIn.paths[`/runtime-cloud/runner-jobs/{id}/${path}`]![method] as { parameters?: { name: string; in: string; required?: boolean }[]; 'x-required-scope'?: string };
      expect(operation['x-required-scope'], `${method} ${path}`).toBe('factory.runner.agent');
      expect(operation.parameters, `${method} ${path}`).toContainEqual(expect.objectContaining({ name: 'x-runner-job-token', in: 'header', required: true }));
    }
  });

  it('when the document is asked for over HTTP with factory.meta.read, then the host serves the same document', async () => {
    const response = await host.fetch('/runtime-cloud/openapi.json', { claims: { scopes: ['factory.meta.read'] } });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(checkedIn);
    expect((await host.fetch('/runtime-cloud/openapi.json')).status).toBe(401);
  });
});
