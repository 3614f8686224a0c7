import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ResourceManagementClient } from '@azure/arm-resources';
import { createHttpHeaders, RestError, type HttpClient, type PipelineRequest, type PipelineResponse } from '@azure/core-rest-pipeline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { armResourceToObserved, createArmObserver, observerCredential, resourceCarriesTags, type ArmGenericResource } from '../../shared/inventory/arm-observer.adapter';
import type { ObservationScope, Observer } from '../../shared/inventory/observer';
import { refusal } from '../support/refusal';

/**
 * The Azure observer on RECORDED responses: Azure cannot be reached from a test run. The SDK itself runs (paging,
 * deserialization, its errors); only the transport is replaced: ARM's HTTP client answers from tests/fixtures/arm.
 * The Kubernetes observer is tested in inventory-kubernetes-observer.test.ts, on API server objects published upstream.
 */

const FIXTURES = join(__dirname, '..', 'fixtures');
function fixture<T = unknown>(path: string): T {
  return JSON.parse(readFileSync(join(FIXTURES, path), 'utf8')) as T;
}

interface ArmPage {
  readonly value: ArmGenericResource[];
  readonly nextLink?: string;
}
interface RecordedError {
  readonly headers: Record<string, string>;
  readonly body: unknown;
}

const SUBSCRIPTION = '6f1c2b7e-3d4a-4e8b-9a1f-2c5d7e9b0a13';
const RESOURCE_GROUP = 'rg-rch-dev';
const RG_ID = `/subscriptions/${SUBSCRIPTION}/resourceGroups/${RESOURCE_GROUP}/providers`;
const ARM_PAGE_1 = fixture<ArmPage>('arm/list-by-resource-group.page-1.json');
const ARM_PAGE_2 = fixture<ArmPage>('arm/list-by-resource-group.page-2.json');
const ARM_ERRORS = fixture<Record<string, RecordedError>>('arm/list-by-resource-group.errors.json');

/** The tenant, environment and stack every scope of these tests names. */
const DEV_SCOPE = { tenant: 'tenant-a', environmentId: 'env-dev', stack: { tenant: 'tenant-a', project: 'app', stack: 'dev' } } as const;

function armScope(tags?: Record<string, string>): ObservationScope {
  return { ...DEV_SCOPE, target: 'local', azure: { subscriptionId: SUBSCRIPTION, resourceGroup: RESOURCE_GROUP, ...(tags ? { tags } : {}) } };
}

const live = () => ({ signal: new AbortController().signal });

describe('ARM observer: mapping a listed resource', () => {
  it('when a resource carries the urn tag, then its urn is the tag, its type the ARM type, and location, sku, kind and tags are its properties', () => {
    const functionApp = ARM_PAGE_1.value[1]!;
    expect(armResourceToObserved(functionApp)).toEqual({
      urn: 'urn:pulumi:dev::rch-app::azure-native:web:WebApp::functions',
      type: 'Microsoft.Web/sites',
      id: `${RG_ID}/Microsoft.Web/sites/func-rch-dev`,
      // Not identity, name, createdTime, changedTime or provisioningState: they are not in the mapped set.
      properties: {
        location: 'westeurope',
        kind: 'functionapp,linux',
        tags: { 'runtime-cloud-environment': 'dev', 'runtime-cloud-urn': 'urn:pulumi:dev::rch-app::azure-native:web:WebApp::functions' },
      },
    });
    expect(armResourceToObserved(ARM_PAGE_1.value[0]!).properties.sku).toEqual({ name: 'Y1', tier: 'Dynamic', size: 'Y1', family: 'Y', capacity: 0 });
  });

  it('when a resource has no urn tag, then its urn is arm: and its id lower-cased, and an absent tags member stays absent', () => {
    const alertRule = ARM_PAGE_2.value[0]!;
    const observed = armResourceToObserved(alertRule);
    expect(observed.urn).toBe(`arm:${RG_ID.toLowerCase()}/microsoft.alertsmanagement/smartdetectoralertrules/failure anomalies - appi-rch-dev`);
    expect(observed.id).toBe(alertRule.id);
    expect(observed.type).toBe('microsoft.alertsmanagement/smartDetectorAlertRules');
    expect(observed.properties).toEqual({ location: 'global' });
  });

  it('when the SDK gives dates and undefined members, then properties hold JSON only: ISO strings, undefined dropped', () => {
    const resource = {
      id: `${RG_ID}/Microsoft.Web/sites/x`,
      type: 'Microsoft.Web/sites',
      location: 'westeurope',
      kind: undefined,
      properties: { enabled: true, lastModifiedTimeUtc: new Date('2026-03-02T16:40:11.008Z'), hostNames: ['x.azurewebsites.net'], outboundVnetRouting: undefined },
    };
    expect(armResourceToObserved(resource).properties).toEqual({
      location: 'westeurope',
      properties: { enabled: true, lastModifiedTimeUtc: '2026-03-02T16:40:11.008Z', hostNames: ['x.azurewebsites.net'] },
    });
  });

  it('when the urn tag name is cased differently, then it is still the urn (ARM tag names are case-insensitive)', () => {
    expect(armResourceToObserved({ id: '/s/x', type: 'T/x', tags: { 'Runtime-Cloud-Urn': 'urn:pulumi:dev::p::t::x' } }).urn).toBe('urn:pulumi:dev::p::t::x');
  });

  it('when tags are required, then a resource needs every one with its exact value, the names compared case-insensitively', () => {
    const tags = { 'runtime-cloud-environment': 'dev', team: 'platform' };
    expect(resourceCarriesTags({ tags: { 'Runtime-Cloud-Environment': 'dev', TEAM: 'platform', other: 'x' } }, tags)).toBe(true);
    expect(resourceCarriesTags({ tags: { 'runtime-cloud-environment': 'dev' } }, tags)).toBe(false);
    expect(resourceCarriesTags({ tags: { 'runtime-cloud-environment': 'Dev', team: 'platform' } }, tags)).toBe(false);
    expect(resourceCarriesTags({}, tags)).toBe(false);
    expect(resourceCarriesTags({}, {})).toBe(true);
  });
});

/** An ARM transport that answers from recorded responses and records what was asked. */
function recordedArm(answer: (url: URL, request: PipelineRequest) => PipelineResponse | Promise<PipelineResponse>) {
  const requests: URL[] = [];
  const httpClient: HttpClient = {
    async sendRequest(request) {
      const url = new URL(request.url);
      requests.push(url);
      return answer(url, request);
    },
  };
  return { httpClient, requests };
}

function respond(request: PipelineRequest, status: number, body: unknown, headers: Record<string, string> = { 'content-type': 'application/json; charset=utf-8' }): PipelineResponse {
  return { request, status, headers: createHttpHeaders(headers), bodyAsText: JSON.stringify(body) };
}

/** Page 1 for the first request, page 2 for the nextLink (it carries a $skiptoken), or `page2` when given. */
function pages(page2?: (request: PipelineRequest) => PipelineResponse) {
  return (url: URL, request: PipelineRequest) =>
    url.searchParams.has('$skiptoken') ? (page2 ?? ((r) => respond(r, 200, ARM_PAGE_2)))(request) : respond(request, 200, ARM_PAGE_1);
}

function armObserver(transport: HttpClient, credential = { getToken: async () => ({ token: 'recorded', expiresOnTimestamp: Date.now() + 3_600_000 }) }): Observer {
  // No retries: a recorded 429 or 503 is answered as the last attempt would be.
  return createArmObserver({ client: (subscriptionId) => new ResourceManagementClient(credential, subscriptionId, { httpClient: transport, retryOptions: { maxRetries: 0 } }) });
}

describe('ARM observer: listing a resource group (the SDK on recorded responses)', () => {
  it('when the listing has two pages, then both are read, the second by its nextLink, with createdTime, changedTime and provisioningState expanded', async () => {
    const { httpClient, requests } = recordedArm(pages());
    const observed = await armObserver(httpClient).observe(armScope(), live());

    expect(observed.map((r) => r.id.split('/').pop())).toEqual([
      'asp-rch-dev',
      'func-rch-dev',
      'strchdev01',
      'appi-rch-dev',
      'Failure Anomalies - appi-rch-dev',
      'sb-rch-dev',
      'id-rch-staging',
    ]);
    expect(observed).toEqual([...ARM_PAGE_1.value, ...ARM_PAGE_2.value].map(armResourceToObserved));
    expect(requests).toHaveLength(2);
    expect(requests[0]!.pathname).toBe(`/subscriptions/${SUBSCRIPTION}/resourceGroups/${RESOURCE_GROUP}/resources`);
    expect(requests[0]!.searchParams.get('$expand')).toBe('createdTime,changedTime,provisioningState');
    expect(requests[0]!.searchParams.has('$filter')).toBe(false);
    expect(requests[1]!.href).toBe(ARM_PAGE_1.nextLink);
  });

  it('when the scope names tags, then only resources carrying all of them are observed, on every page', async () => {
    const { httpClient } = recordedArm(pages());
    const observed = await armObserver(httpClient).observe(armScope({ 'runtime-cloud-environment': 'dev' }), live());
    // Not the untagged alert rule, nor the identity tagged for staging; the Service Bus namespace's tag name is cased differently.
    expect(observed.map((r) => r.urn)).toEqual([
      'urn:pulumi:dev::rch-app::azure-native:web:AppServicePlan::plan',
      'urn:pulumi:dev::rch-app::azure-native:web:WebApp::functions',
      'urn:pulumi:dev::rch-app::azure-native:storage:StorageAccount::state',
      `arm:${RG_ID.toLowerCase()}/microsoft.insights/components/appi-rch-dev`,
      'urn:pulumi:dev::rch-app::azure-native:servicebus:Namespace::bus',
    ]);
  });

  for (const status of ['401', '403', '404', '429', '500', '503']) {
    it(`when ARM answers ${status}, then INVENTORY.TARGET_UNREACHABLE (unavailable) with the status and ARM's error code`, async () => {
      const recorded = ARM_ERRORS[status]!;
      const { httpClient } = recordedArm((_url, request) => respond(request, Number(status), recorded.body, recorded.headers));
      const error = await refusal(armObserver(httpClient).observe(armScope(), live()));
      expect(error).toMatchObject({
        code: 'INVENTORY.TARGET_UNREACHABLE',
        kind: 'unavailable',
        details: {
          observer: 'azure-resource-manager',
          environmentId: 'env-dev',
          subscriptionId: SUBSCRIPTION,
          resourceGroup: RESOURCE_GROUP,
          status: Number(status),
          code: (recorded.body as { error: { code: string } }).error.code,
        },
      });
      expect(error.message).toContain(RESOURCE_GROUP);
    });
  }

  it('when the second page fails, then the observation fails: the first page is never returned alone', async () => {
    const { httpClient, requests } = recordedArm(pages((request) => respond(request, 503, ARM_ERRORS['503']!.body, ARM_ERRORS['503']!.headers)));
    expect(await refusal(armObserver(httpClient).observe(armScope(), live()))).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', details: { status: 503 } });
    expect(requests).toHaveLength(2);
  });

  it('when the network fails, then INVENTORY.TARGET_UNREACHABLE with the pipeline error code and no status', async () => {
    const { httpClient } = recordedArm((_url, request) => {
      // What the SDK's own HTTP client throws when the connection is refused.
      throw new RestError('connect ECONNREFUSED 20.38.149.132:443', { code: RestError.REQUEST_SEND_ERROR, request });
    });
    const error = await refusal(armObserver(httpClient).observe(armScope(), live()));
    expect(error).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', kind: 'unavailable', details: { code: 'REQUEST_SEND_ERROR' } });
    expect(error.details).not.toHaveProperty('status');
  });

  it('when no credential can sign in, then INVENTORY.TARGET_UNREACHABLE, and nothing is sent', async () => {
    const { httpClient, requests } = recordedArm(pages());
    const unavailable = Object.assign(new Error('DefaultAzureCredential failed to retrieve a token from the included credentials.'), { name: 'CredentialUnavailableError' });
    const observer = armObserver(httpClient, { getToken: () => Promise.reject(unavailable) });
    expect(await refusal(observer.observe(armScope(), live()))).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', details: { error: 'CredentialUnavailableError' } });
    expect(requests).toEqual([]);
  });

  it('when the signal aborts during a request, then the request is cancelled and the observation fails with INVENTORY.OBSERVE_TIMEOUT', async () => {
    const controller = new AbortController();
    let cancelled = false;
    const { httpClient } = recordedArm(
      (_url, request) =>
        new Promise<PipelineResponse>((_resolve, reject) => {
          request.abortSignal?.addEventListener('abort', () => {
            cancelled = true;
            reject(new Error('The operation was aborted.'));
          });
          controller.abort();
        }),
    );
    expect(await refusal(armObserver(httpClient).observe(armScope(), { signal: controller.signal }))).toMatchObject({
      code: 'INVENTORY.OBSERVE_TIMEOUT',
      kind: 'unavailable',
      details: { observer: 'azure-resource-manager', resourceGroup: RESOURCE_GROUP },
    });
    expect(cancelled).toBe(true);
  });

  it('when the signal has already aborted, then INVENTORY.OBSERVE_TIMEOUT and nothing is sent', async () => {
    const { httpClient, requests } = recordedArm(pages());
    expect(await refusal(armObserver(httpClient).observe(armScope(), { signal: AbortSignal.abort() }))).toMatchObject({ code: 'INVENTORY.OBSERVE_TIMEOUT' });
    expect(requests).toEqual([]);
  });

  it('when the scope names no resource group, then a validation error, not an empty observation', async () => {
    const { httpClient } = recordedArm(pages());
    expect(await refusal(armObserver(httpClient).observe({ ...DEV_SCOPE, target: 'local' }, live()))).toMatchObject({
      code: 'INVENTORY.SCOPE_INCOMPLETE',
      kind: 'validation',
    });
  });

  it('when one subscription is observed twice, then its client is made once', async () => {
    const { httpClient } = recordedArm(pages());
    const made: string[] = [];
    const observer = createArmObserver({
      client: (subscriptionId) => {
        made.push(subscriptionId);
        return new ResourceManagementClient({ getToken: async () => ({ token: 't', expiresOnTimestamp: Date.now() + 3_600_000 }) }, subscriptionId, { httpClient });
      },
    });
    await observer.observe(armScope(), live());
    await observer.observe(armScope(), live());
    expect(made).toEqual([SUBSCRIPTION]);
  });
});

describe('observer adapters: start-up cost', () => {
  it('when the adapter modules are loaded, then neither SDK is: a host observing the local cloud never pays for them', () => {
    // A fresh process, because this one has loaded both SDKs for the tests above.
    const adapters = ['arm-observer.adapter', 'kubernetes-observer.adapter', 'local-cloud-observer.adapter'].map((name) => join(__dirname, '../../shared/inventory', `${name}.ts`));
    const script = `
      for (const adapter of ${JSON.stringify(adapters)}) require(adapter);
      // A dot stands for either path separator.
      const sdks = () => Object.keys(require.cache).filter((k) => /node_modules.(@azure.(arm-resources|identity)|@kubernetes.client-node)./.test(k)).length;
      const before = sdks();
      require('@azure/arm-resources');
      console.log(JSON.stringify({ before, after: sdks() }));`;
    const output = execFileSync(process.execPath, ['--import', 'tsx', '-e', script], { cwd: join(__dirname, '../..'), encoding: 'utf8' });
    const { before, after } = JSON.parse(output) as { before: number; after: number };
    expect(before).toBe(0);
    // The check sees an SDK once something loads it.
    expect(after).toBeGreaterThan(0);
  });
});

describe("ARM observer: each target read with its own observer identity (@azure/identity against an App Service identity endpoint)", () => {
  /** The App Service managed identity protocol (2019-08-01): one token per client id, recorded with who asked. */
  let endpoint: Server;
  const asked: { clientId: string | null; header: string | undefined }[] = [];
  const saved = { endpoint: process.env.IDENTITY_ENDPOINT, header: process.env.IDENTITY_HEADER };
  beforeAll(async () => {
    endpoint = createServer((request: IncomingMessage, response: ServerResponse) => {
      const url = new URL(request.url ?? '/', 'http://localhost');
      const clientId = url.searchParams.get('client_id');
      asked.push({ clientId, header: request.headers['x-identity-header'] as string | undefined });
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ access_token: `token-of-${clientId ?? 'system'}`, expires_on: String(Math.floor(Date.now() / 1000) + 3600), resource: url.searchParams.get('resource'), token_type: 'Bearer', client_id: clientId }));
    });
    await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve));
    process.env.IDENTITY_ENDPOINT = `http://127.0.0.1:${(endpoint.address() as AddressInfo).port}/msi/token`;
    process.env.IDENTITY_HEADER = 'identity-header-secret';
  });
  afterAll(async () => {
    if (saved.endpoint === undefined) delete process.env.IDENTITY_ENDPOINT;
    else process.env.IDENTITY_ENDPOINT = saved.endpoint;
    if (saved.header === undefined) delete process.env.IDENTITY_HEADER;
    else process.env.IDENTITY_HEADER = saved.header;
    await new Promise((resolve) => endpoint.close(resolve));
  });

  it("when two targets' environments are scanned, then each listing is signed with a token of that target's observer identity", async () => {
    // Arrange
    const { httpClient, requests } = recordedArm(pages());
    const signedWith: string[] = [];
    const credentials = new Map();
    const observer = createArmObserver({
      client: async (subscriptionId, observerClientId) =>
        new ResourceManagementClient(await observerCredential(credentials, observerClientId), subscriptionId, {
          httpClient: { sendRequest: (request) => (signedWith.push(request.headers.get('authorization') ?? ''), httpClient.sendRequest(request)) },
          retryOptions: { maxRetries: 0 },
        }),
    });

    // Act
    await observer.observe({ ...armScope(), observerClientId: 'observer-of-prod-we' }, live());
    await observer.observe({ ...armScope(), observerClientId: 'observer-of-prod-ne' }, live());

    // Assert
    expect(asked.map((a) => a.clientId)).toEqual(['observer-of-prod-we', 'observer-of-prod-ne']);
    expect(asked.every((a) => a.header === 'identity-header-secret')).toBe(true);
    expect(signedWith).toEqual(['Bearer token-of-observer-of-prod-we', 'Bearer token-of-observer-of-prod-we', 'Bearer token-of-observer-of-prod-ne', 'Bearer token-of-observer-of-prod-ne']);
    expect(requests).toHaveLength(4);
  });
});
