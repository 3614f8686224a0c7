import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../support/eventually';
import { startTestHost, type TestHost } from '../support/local-host';
import { aStackPromotion, EXAMPLE_TENANT, provisioningExample, sendToPromotions, writeExampleReferences } from '../support/provisioning';

/**
 * The response schemas openapi.json declares are what the host answers: real answers of a local host, with a run
 * applied (its receipts), one awaiting approval, drift with a proposal, an ignore rule and a lease, each checked with
 * ajv against the schema the checked-in document gives its operation. The schemas are strict (an object has exactly
 * the members described), so a field the code sends that the document lacks fails here, as does one it stops sending.
 */

const document = JSON.parse(fs.readFileSync(join(__dirname, '..', '..', 'openapi.json'), 'utf8')) as {
  paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: object }> }> }>>;
};
const ajv = new Ajv2020({ allErrors: true, strict: false });
addFormats(ajv);

/** The validator of an operation's success body, as the document declares it (a test fails when it declares none). */
function successSchema(method: string, path: string): ValidateFunction {
  const schema = document.paths[path]?.[method]?.responses['2XX']?.content?.['application/json']?.schema;
  if (!schema) throw new Error(`openapi.json declares no JSON body for ${method.toUpperCase()} ${path}`);
  return ajv.compile(schema);
}

function problemsOf(validate: ValidateFunction, body: unknown): string[] {
  return validate(body) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

const operator = { tenant: EXAMPLE_TENANT, roles: ['Operator'], subject: 'operator-1' };
const admin = { roles: ['PlatformAdmin'] };
const DEV = 'env-openapi-dev';
const PROD = 'env-openapi-prod';

describe('openapi.json response schemas against real answers', () => {
  let host: TestHost;
  let root: string;
  /** Each checked answer, by `METHOD template`. */
  const answers = new Map<string, { path: string; body: unknown }>();

  async function call(method: string, template: string, path: string, options: { body?: unknown; claims?: object; status?: number } = {}): Promise<unknown> {
    const response = await host.fetch(path, {
      method,
      claims: options.claims ?? operator,
      ...(options.body !== undefined ? { body: JSON.stringify(options.body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await response.text();
    expect(response.status, `${method} ${path}: ${text}`).toBe(options.status ?? 200);
    const body = JSON.parse(text) as unknown;
    answers.set(`${method.toLowerCase()} ${template}`, { path, body });
    return body;
  }

  beforeAll(async () => {
    root = fs.mkdtempSync(join(tmpdir(), 'rch-openapi-responses-'));
    host = await startTestHost();
    const example = await provisioningExample(root, host.stateDir, 1);
    writeExampleReferences(host.stateDir);

    // A development run applied, its environment tampered with and scanned: drift, a proposal, an ignore rule.
    const dev = aStackPromotion(example.repository, 'development', { stack: 'development-1', environmentId: DEV });
    await sendToPromotions(host, dev, `openapi-${dev.promotionId}`);
    await eventually(async () => {
      const response = await host.fetch(`/runtime-cloud/environments/${DEV}`, { claims: operator });
      const body = response.status === 200 ? ((await response.json()) as { lastRun?: { state: string }; drift: { status: string } }) : undefined;
      return body?.lastRun?.state === 'applied' && body.drift.status === 'in-sync' ? body : undefined;
    });
    const cloud = (await (await host.fetch(`/runtime-cloud/local/cloud/resources?stack=development-1&tenant=${EXAMPLE_TENANT}`, { claims: admin })).json()) as { items: { urn: string; type: string }[] };
    const bucket = cloud.items.find((r) => r.type === 'local:storage:Bucket')!;
    await host.fetch(`/runtime-cloud/local/cloud/resources/${encodeURIComponent(bucket.urn)}`, { method: 'PATCH', claims: admin, body: JSON.stringify({ versioning: false }) });
    await call('POST', '/runtime-cloud/environments/{id}/scan', `/runtime-cloud/environments/${DEV}/scan`);
    await call('POST', '/runtime-cloud/environments/{id}/ignore-rules', `/runtime-cloud/environments/${DEV}/ignore-rules`, {
      body: { scope: { type: 'local:compute:Service' }, path: 'tags.*', reason: 'set by the cost tool', owner: 'platform-team', expiresAt: '2099-01-01T00:00:00Z', holdsOnApply: true },
      status: 201,
    });

    // A production run waiting for approval: a plan receipt, no apply receipt yet.
    const prod = aStackPromotion(example.repository, 'production', { stack: 'production-1', environmentId: PROD });
    await sendToPromotions(host, prod, `openapi-${prod.promotionId}`);
    await eventually(async () => {
      const response = await host.fetch(`/runtime-cloud/runs?environment=${PROD}`, { claims: operator });
      const page = (await response.json()) as { items: { state: string }[] };
      return page.items[0]?.state === 'awaiting-approval' ? true : undefined;
    });
  }, 120_000);

  afterAll(async () => {
    await host?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it("when the console's views and the main actions are called, then each answer is what openapi.json declares for its operation", async () => {
    // Arrange: the runs, newest first; the applied development run and the production run waiting.
    const runs = (await call('GET', '/runtime-cloud/runs', '/runtime-cloud/runs?order=newest')) as { items: { runId: string; environment: { id: string } }[] };
    const applied = runs.items.find((r) => r.environment.id === DEV)!;
    const waiting = runs.items.find((r) => r.environment.id === PROD)!;

    // Act
    await call('GET', '/runtime-cloud/runs/{id}', `/runtime-cloud/runs/${applied.runId}`);
    const detail = (await call('GET', '/runtime-cloud/runs/{id}', `/runtime-cloud/runs/${waiting.runId}`)) as { planReceipt?: unknown };
    await call('GET', '/runtime-cloud/runs/{id}/events', `/runtime-cloud/runs/${applied.runId}/events`);
    await call('GET', '/runtime-cloud/environments', '/runtime-cloud/environments');
    await call('GET', '/runtime-cloud/environments/{id}', `/runtime-cloud/environments/${DEV}`);
    await call('GET', '/runtime-cloud/environments/{id}/drift', `/runtime-cloud/environments/${DEV}/drift`);
    await call('GET', '/runtime-cloud/environments/{id}/ignore-rules', `/runtime-cloud/environments/${DEV}/ignore-rules`);
    const proposals = (await call('GET', '/runtime-cloud/proposals', `/runtime-cloud/proposals?environment=${DEV}`)) as { items: { id: string }[] };
    await call('POST', '/runtime-cloud/proposals/{id}/dismiss', `/runtime-cloud/proposals/${proposals.items[0]!.id}/dismiss`, { body: { reason: 'checked by hand' } });
    await call('GET', '/runtime-cloud/capacity', '/runtime-cloud/capacity', { claims: admin });
    const worker = { tenant: EXAMPLE_TENANT, roles: ['factory.capacity.lease'] };
    await call('POST', '/runtime-cloud/leases', '/runtime-cloud/leases', { body: { kind: 'attempt', ttlSeconds: 60, holder: 'openapi-worker' }, claims: worker, status: 201 });
    await call('GET', '/runtime-cloud/leases', '/runtime-cloud/leases', { claims: operator });
    await call('POST', '/runtime-cloud/runs/{id}/reject', `/runtime-cloud/runs/${waiting.runId}/reject`, { body: { reason: 'not today' } });

    // Assert: every answer matches its schema, and there was something to check in each.
    expect(detail.planReceipt).toBeDefined();
    expect(proposals.items).toHaveLength(1);
    const problems = [...answers].flatMap(([operation, { path, body }]) => {
      const [method, template] = operation.split(' ') as [string, string];
      return problemsOf(successSchema(method, template), body).map((p) => `${operation} (${path}): ${p}`);
    });
    expect(problems).toEqual([]);
    expect(answers.size).toBeGreaterThanOrEqual(15);
  });

  it('when an answer differs from the document (a member it lacks, one it requires missing, a value of another kind), then the check finds it', () => {
    const { body } = answers.get('get /runtime-cloud/runs/{id}')!;
    const run = body as Record<string, unknown>;
    const validate = successSchema('get', '/runtime-cloud/runs/{id}');
    expect(problemsOf(validate, run)).toEqual([]);
    expect(problemsOf(validate, { ...run, surprise: true }).join()).toContain('additional');
    const { state: _state, ...withoutState } = run;
    expect(problemsOf(validate, withoutState).join()).toContain('state');
    expect(problemsOf(validate, { ...run, createdAt: 17 }).join()).toContain('/createdAt');
  });
});
