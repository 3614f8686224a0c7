import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ResourceManagementClient } from '@azure/arm-resources';
import { RestError, type HttpClient, type PipelineResponse } from '@azure/core-rest-pipeline';
import type { TokenCredential } from '@azure/identity';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createArmObserver, observerCredential, resourceCarriesTags } from '../../shared/inventory/arm-observer.adapter';
import { apiVersionOfToken, newestApiVersion, normalArmId, observedAsDesired, parseArmId } from '../../shared/inventory/arm-resource';
import { diffResources, type DriftReport, type Resources } from '../../shared/inventory/drift';
import { desiredResources, desiredStateOf, desiredToCompare, observedForInventory } from '../../shared/inventory/environment';
import type { ObservationScope, ObservedResource, Observer } from '../../shared/inventory/observer';
import {
  armObserver,
  bodyOf,
  groupOf,
  inputsOf,
  listingOf,
  planDeclared,
  present,
  publishedArm,
  recordedListing,
  stackResources,
  TOKEN,
  urnOf,
  webAppDeclared,
  webGroup,
  type Declared,
  type JsonObject,
} from '../support/published-arm';
import { refusal } from '../support/refusal';

/**
 * The ARM observer (issue 18, item 5) against what Microsoft and Pulumi published (tests/support/published-arm.ts:
 * the REST API's examples, the Azure SDK recordings of live listings, Pulumi's recorded azure-native stacks), the
 * real SDK running with only its HTTP transport replaced. Each observation is diffed as a scan diffs it.
 */

// ---- the desired side, as provisioning hands it to inventory ---------------------------------------------------

/** The desired resources of a `SpecificationApplied` (run-events.ts shape: id and properties per resource), as inventory reads it. */
function desiredOf(declared: readonly Declared[]): Resources {
  const read = desiredStateOf({
    runId: 'run-1',
    tenantId: 'tenant-a',
    environment: { id: 'env-dev', name: 'development', tier: 'development' },
    release: { name: 'app', version: '1.0.0' },
    project: 'app',
    stack: 'dev',
    resources: declared.map((r) => ({ urn: urnOf(r), type: r.type, name: r.name, op: 'same', ...(r.id ? { id: r.id } : {}), properties: r.inputs })),
  });
  if (!('ok' in read)) throw new Error(JSON.stringify(read.problems));
  return read.ok.resources;
}

const BASE = { tenant: 'tenant-a', environmentId: 'env-dev', stack: { tenant: 'tenant-a', project: 'app', stack: 'dev' }, target: 'azure-a' } as const;

function scopeOf(group: { subscriptionId: string; resourceGroup: string }, desired: Resources, extra: Partial<ObservationScope> = {}): ObservationScope {
  return { ...BASE, azure: { subscriptionId: group.subscriptionId, resourceGroup: group.resourceGroup }, desired: desiredResources(desired), ...extra };
}

/** An observation and its drift, composed as a scan composes them (scan.service.ts). */
async function observeAndDiff(observer: Observer, scope: ObservationScope, desired: Resources): Promise<{ observed: ObservedResource[]; report: DriftReport }> {
  const observed = await observer.observe(scope, { signal: new AbortController().signal });
  const compared = desiredToCompare(desired, observed, (r) => observer.reaches!(scope, r));
  return { observed, report: diffResources(compared, observedForInventory(desired, observed), [], new Date('2026-06-01T00:00:00Z')) };
}

const findingsOf = (report: DriftReport) => report.findings.map((f) => ({ kind: f.kind, urn: f.urn, type: f.type, ...('path' in f ? { path: f.path, desired: f.desired, observed: f.observed } : {}) }));

describe.skipIf(!present)('ARM observer against the published examples: what the program sets, matched by ARM id', () => {
  it('when nothing the program sets has changed, then no drift, though the GETs hold many read-only and server-defaulted properties', async () => {
    // Arrange
    const desired = desiredOf([webAppDeclared(), planDeclared()]);
    const arm = publishedArm([webGroup()], ['webApp', 'plan']);

    // Act
    const { observed, report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(webGroup(), desired), desired);

    // Assert
    expect(report.findings).toEqual([]);
    const site = observed.find((r) => r.urn === urnOf({ name: 'site', type: 'azure-native:web:WebApp' }))!;
    expect(site).toMatchObject({ type: 'azure-native:web:WebApp', id: bodyOf('webApp').id });
    // Only what the program sets, in its terms: no outboundIpAddresses, hostNames, usageState, siteConfig defaults...
    expect(Object.keys(site.properties).sort()).toEqual(['clientAffinityEnabled', 'httpsOnly', 'kind', 'location', 'serverFarmId', 'siteConfig']);
    expect(Object.keys(site.properties.siteConfig as JsonObject).sort()).toEqual(['alwaysOn', 'ftpsState', 'http20Enabled', 'minTlsVersion', 'virtualApplications']);
    // The inputs that are part of the id, and the engine's own, are not compared.
    expect(site.uncompared).toEqual([['__createBeforeDelete'], ['name'], ['resourceGroupName']]);
    // The listing, the provider once for both types, each resource by its id with the version the provider registers.
    const { subscriptionId, resourceGroup } = webGroup();
    expect(arm.asked.map((a) => `${a.method} ${a.path} ${a.apiVersion}`)).toEqual([
      `GET /subscriptions/${subscriptionId}/resourceGroups/${resourceGroup}/resources 2025-04-01`,
      `GET /subscriptions/${subscriptionId}/providers/Microsoft.Web 2025-04-01`,
      `GET ${bodyOf('webApp').id} 2024-04-01`,
      `GET ${bodyOf('plan').id} 2024-04-01`,
    ]);
  });

  it('when a property the program sets differs in Azure, then that property drifts, with both values', async () => {
    // Arrange: the program wants HTTPS only and always-on; the site has neither.
    const desired = desiredOf([webAppDeclared({ httpsOnly: true, siteConfig: { alwaysOn: true, minTlsVersion: '1.2' } }), planDeclared()]);
    const arm = publishedArm([webGroup()], ['webApp', 'plan']);

    // Act
    const { report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(webGroup(), desired), desired);

    // Assert
    const urn = urnOf({ name: 'site', type: 'azure-native:web:WebApp' });
    expect(findingsOf(report)).toEqual([
      { kind: 'modified', urn, type: 'azure-native:web:WebApp', path: ['httpsOnly'], desired: true, observed: false },
      { kind: 'modified', urn, type: 'azure-native:web:WebApp', path: ['siteConfig', 'alwaysOn'], desired: true, observed: false },
    ]);
  });

  it("when a recorded storage account's inputs meet an account of another kind and sku, then kind and sku.name drift, and what ARM names otherwise or does not return is listed as not compared", async () => {
    // Arrange: the StorageAccount inputs of Pulumi's recorded stack (StorageV2, Standard_LRS, public blob access),
    // pointed at Microsoft's example account (Storage, Standard_GRS), plus the Entra-only setting infra/ sets.
    const account = bodyOf('storage');
    const group = groupOf(account.id);
    const declared: Declared = {
      name: 'state',
      type: 'azure-native:storage:StorageAccount',
      id: account.id,
      inputs: { ...inputsOf('storageStack', 'azure-native:storage:StorageAccount'), accountName: account.name, resourceGroupName: group.resourceGroup, location: account.location, enableHttpsTrafficOnly: true },
    };
    const desired = desiredOf([declared]);
    const arm = publishedArm([{ ...group, listing: listingOf('storage') }], ['storage']);

    // Act
    const { observed, report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(group, desired), desired);

    // Assert
    const urn = urnOf(declared);
    expect(findingsOf(report)).toEqual([
      { kind: 'modified', urn, type: declared.type, path: ['kind'], desired: 'StorageV2', observed: 'Storage' },
      { kind: 'modified', urn, type: declared.type, path: ['sku', 'name'], desired: 'Standard_LRS', observed: 'Standard_GRS' },
    ]);
    // ARM's `supportsHttpsTrafficOnly` is azure-native's `enableHttpsTrafficOnly`; the example has no allowBlobPublicAccess.
    expect(observed[0]!.uncompared).toEqual([['__createBeforeDelete'], ['accountName'], ['allowBlobPublicAccess'], ['resourceGroupName'], ['enableHttpsTrafficOnly']]);
  });

  it('when the group holds a resource no desired resource has, then it is unmanaged, with the type its id names (the Go SDK recording of a live listing)', async () => {
    // Arrange
    const listing = recordedListing('goListing');
    const arm = publishedArm([{ ...listing, listing: listing.body }], []);
    const desired = desiredOf([]);

    // Act
    const { observed, report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(listing, desired), desired);

    // Assert
    const listedId = (listing.body as { value: { id: string }[] }).value[0]!.id;
    expect(observed).toEqual([{ urn: `arm:${listedId.toLowerCase()}`, type: 'Microsoft.Compute/availabilitySets', id: listedId, properties: { location: 'westus', sku: { name: 'Classic' } } }]);
    expect(findingsOf(report)).toEqual([{ kind: 'unmanaged', urn: `arm:${listedId.toLowerCase()}`, type: 'Microsoft.Compute/availabilitySets' }]);
    // Nothing desired: nothing read by id, no provider asked.
    expect(arm.asked).toHaveLength(1);
  });

  it('when a desired resource is not in its group, then it is missing (the Python SDK recording of an empty group, and ARM answering 404 for its id)', async () => {
    // Arrange: the recorded web app's inputs and id, as if it had been made in the recorded empty group.
    const listing = recordedListing('pythonListing');
    const id = `/subscriptions/${listing.subscriptionId}/resourceGroups/${listing.resourceGroup}/providers/Microsoft.Web/sites/appcf05634f`;
    const desired = desiredOf([{ name: 'app', type: 'azure-native:web:WebApp', id, inputs: inputsOf('webStack', 'azure-native:web:WebApp') }]);
    const arm = publishedArm([{ ...listing, listing: listing.body }], ['webApp']);

    // Act
    const { observed, report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(listing, desired), desired);

    // Assert
    expect(observed).toEqual([]);
    expect(findingsOf(report)).toEqual([{ kind: 'missing', urn: urnOf({ name: 'app', type: 'azure-native:web:WebApp' }), type: 'azure-native:web:WebApp' }]);
    expect(arm.asked.at(-1)).toEqual({ method: 'GET', path: id, apiVersion: '2024-04-01' });
  });

  it("when ARM spells a type or a group differently from the stack state (Service Bus `Namespaces`, an identity's `resourcegroups`), then they are still the same resources and nothing drifts", async () => {
    // Arrange: the desired ids as azure-native spells its paths, each in the other casing from ARM's.
    const bus = bodyOf('serviceBus');
    const identity = bodyOf('identity');
    const busGroup = groupOf(bus.id);
    const identityGroup = groupOf(identity.id);
    const busDesired = desiredOf([
      {
        name: 'bus',
        type: 'azure-native:servicebus:Namespace',
        id: bus.id.replace('/resourceGroups/', '/resourcegroups/').replace('/namespaces/', '/Namespaces/'),
        inputs: { namespaceName: bus.name, resourceGroupName: busGroup.resourceGroup, location: 'southcentralus', sku: { name: 'Standard', tier: 'Standard' }, tags: { tag1: 'value1', tag2: 'value2' }, minimumTlsVersion: '1.2', disableLocalAuth: false },
      },
    ]);
    const identityDesired = desiredOf([
      {
        name: 'observer',
        type: 'azure-native:managedidentity:UserAssignedIdentity',
        id: identity.id.replace('/resourcegroups/', '/resourceGroups/'),
        inputs: { resourceName: identity.name, resourceGroupName: identityGroup.resourceGroup, location: 'eastus', tags: { key1: 'value1', key2: 'value2' } },
      },
    ]);
    const arm = publishedArm(
      [
        { ...busGroup, listing: listingOf('serviceBus') },
        { ...identityGroup, listing: listingOf('identity') },
      ],
      ['serviceBus', 'identity'],
    );
    const observer = armObserver(arm.httpClient);

    // Act
    const onBus = await observeAndDiff(observer, scopeOf(busGroup, busDesired), busDesired);
    const onIdentity = await observeAndDiff(observer, scopeOf(identityGroup, identityDesired), identityDesired);
    const busUnmanaged = await observeAndDiff(observer, scopeOf(busGroup, desiredOf([])), desiredOf([]));

    // Assert
    expect(onBus.report.findings).toEqual([]);
    expect(onIdentity.report.findings).toEqual([]);
    // Unmanaged, its type is what the id says, not the `Microsoft.ServiceBus/Namespaces` of the answer.
    expect(findingsOf(busUnmanaged.report)).toEqual([{ kind: 'unmanaged', urn: `arm:${bus.id.toLowerCase()}`, type: 'Microsoft.ServiceBus/namespaces' }]);
  });

  it('when Insights answers `"tags": ""`, then it holds no tags: empty desired tags are in sync, a desired tag drifts as absent', async () => {
    // Arrange
    const component = bodyOf('insights');
    const group = groupOf(component.id);
    const declared = (tags: JsonObject): Declared => ({
      name: 'appi',
      type: 'azure-native:insights:Component',
      id: component.id,
      inputs: {
        resourceName: component.name,
        resourceGroupName: group.resourceGroup,
        kind: 'web',
        applicationType: 'web',
        location: 'southcentralus',
        tags,
        // ARM answers `WorkspaceResourceId` with a lower-case `microsoft.operationalinsights` in its value.
        workspaceResourceId: `/subscriptions/subid/resourceGroups/${group.resourceGroup}/providers/Microsoft.OperationalInsights/workspaces/my-workspace`,
      },
    });
    const arm = publishedArm([{ ...group, listing: listingOf('insights') }], ['insights']);
    const observer = armObserver(arm.httpClient);
    const untagged = desiredOf([declared({})]);
    const tagged = desiredOf([declared({ env: 'prod' })]);

    // Act
    const inSync = await observeAndDiff(observer, scopeOf(group, untagged), untagged);
    const drifted = await observeAndDiff(observer, scopeOf(group, tagged), tagged);

    // Assert
    expect(inSync.report.findings).toEqual([]);
    expect(inSync.observed[0]!.properties).toMatchObject({ tags: {}, workspaceResourceId: untagged[urnOf(declared({}))]!.properties.workspaceResourceId });
    // ARM's `Application_Type` is azure-native's `applicationType`: not compared.
    expect(inSync.observed[0]!.uncompared).toContainEqual(['applicationType']);
    expect(findingsOf(drifted.report)).toEqual([{ kind: 'modified', urn: urnOf(declared({})), type: 'azure-native:insights:Component', path: ['tags', 'env'], desired: 'prod', observed: undefined }]);
  });

  it('when a child resource is desired (a SQL database), then it is read with its type (`servers/databases`), and its server in another group is not this scope\'s', async () => {
    // Arrange
    const database = bodyOf('database');
    const server = bodyOf('sqlServer');
    const group = groupOf(database.id);
    const desired = desiredOf([
      {
        name: 'db',
        type: 'azure-native:sql:Database',
        id: database.id,
        inputs: { databaseName: 'testdb', serverName: 'testsvr', resourceGroupName: group.resourceGroup, location: 'southeastasia', sku: { name: 'BC_Gen5', tier: 'BusinessCritical', capacity: 2 }, collation: 'SQL_Latin1_General_CP1_CI_AS', zoneRedundant: false },
      },
      { name: 'server', type: 'azure-native:sql:Server', id: server.id, inputs: { serverName: server.name, location: 'japaneast' } },
    ]);
    const arm = publishedArm([{ ...group, listing: listingOf('database') }], ['database', 'sqlServer']);
    const observer = armObserver(arm.httpClient);
    const scope = scopeOf(group, desired);

    // Act
    const { observed, report } = await observeAndDiff(observer, scope, desired);

    // Assert: in sync; the server neither missing nor read.
    expect(report.findings).toEqual([]);
    expect(observed.map((r) => r.type)).toEqual(['azure-native:sql:Database']);
    expect(desiredResources(desired).map((r) => [r.type, observer.reaches!(scope, r)])).toEqual([
      ['azure-native:sql:Database', true],
      ['azure-native:sql:Server', false],
    ]);
    expect(arm.asked.map((a) => a.path)).not.toContain(server.id);
    expect(arm.asked.find((a) => a.path === database.id)?.apiVersion).toBe('2023-08-01');
  });

  it('when the program sets a write-only secret (a SQL administrator password the pulumi runner gives as `[secret]`), then ARM not returning it is no drift', async () => {
    // Arrange
    const server = bodyOf('sqlServer');
    const group = groupOf(server.id);
    const declared: Declared = {
      name: 'sql',
      type: 'azure-native:sql:Server',
      id: server.id,
      inputs: { serverName: server.name, resourceGroupName: group.resourceGroup, location: 'japaneast', administratorLogin: 'dummylogin', administratorLoginPassword: '[secret]', version: '12.0', tags: { tagKey1: 'TagValue1' } },
    };
    const desired = desiredOf([declared]);
    const arm = publishedArm([{ ...group, listing: listingOf('sqlServer') }], ['sqlServer']);

    // Act
    const { observed, report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(group, desired), desired);

    // Assert
    expect(report.findings).toEqual([]);
    expect(observed[0]!.uncompared).toEqual([['serverName'], ['resourceGroupName'], ['administratorLoginPassword']]);
    expect(observed[0]!.properties).toEqual({ location: 'japaneast', administratorLogin: 'dummylogin', version: '12.0', tags: { tagKey1: 'TagValue1' } });
  });

  it('when the token is versioned, then the resource is read with its version and no provider is asked', async () => {
    // Arrange
    const desired = desiredOf([webAppDeclared({}, 'azure-native:web/v20240401:WebApp')]);
    const arm = publishedArm([webGroup()], ['webApp', 'plan']);

    // Act
    const { report } = await observeAndDiff(armObserver(arm.httpClient), scopeOf(webGroup(), desired), desired);

    // Assert: the plan is listed and no one desires it.
    expect(findingsOf(report).map((f) => f.kind)).toEqual(['unmanaged']);
    expect(arm.asked.map((a) => a.path)).not.toContain(`/subscriptions/${webGroup().subscriptionId}/providers/Microsoft.Web`);
    expect(arm.asked.at(-1)).toMatchObject({ path: bodyOf('webApp').id, apiVersion: '2024-04-01' });
  });

  it('when two tenants use the same names in their own targets, then each observation reads its own subscription only and never sees the other', async () => {
    // Arrange: tenant-a's web app and plan are Microsoft's examples; tenant-b has the same group, names and urns in
    // another subscription, whose group is empty (the Python recording's answer).
    const a = webGroup();
    const b = { subscriptionId: recordedListing('pythonListing').subscriptionId, resourceGroup: a.resourceGroup, listing: recordedListing('pythonListing').body };
    const inB = (d: Declared): Declared => ({ ...d, id: d.id!.replace(a.subscriptionId, b.subscriptionId) });
    const desiredA = desiredOf([webAppDeclared(), planDeclared()]);
    const desiredB = desiredOf([inB(webAppDeclared()), inB(planDeclared())]);
    const arm = publishedArm([a, b], ['webApp', 'plan']);
    const made: string[] = [];
    const observer = createArmObserver({
      client: (subscriptionId, observerClientId) => {
        made.push(`${observerClientId}/${subscriptionId}`);
        return new ResourceManagementClient(TOKEN, subscriptionId, { httpClient: arm.httpClient, retryOptions: { maxRetries: 0 } });
      },
    });
    const scopeA = scopeOf(a, desiredA, { observerClientId: 'observer-a' });
    const scopeB = scopeOf(b, desiredB, { tenant: 'tenant-b', stack: { tenant: 'tenant-b', project: 'app', stack: 'dev' }, target: 'azure-b', observerClientId: 'observer-b' });

    // Act
    const onA = await observeAndDiff(observer, scopeA, desiredA);
    const askedByA = arm.asked.splice(0);
    const onB = await observeAndDiff(observer, scopeB, desiredB);

    // Assert
    expect(onA.report.findings).toEqual([]);
    expect(onA.observed.map((r) => r.id)).toEqual([bodyOf('webApp').id, bodyOf('plan').id]);
    expect(findingsOf(onB.report).map((f) => f.kind)).toEqual(['missing', 'missing']);
    expect(onB.observed).toEqual([]);
    expect(askedByA.every((r) => r.path.startsWith(`/subscriptions/${a.subscriptionId}/`))).toBe(true);
    expect(arm.asked.every((r) => r.path.startsWith(`/subscriptions/${b.subscriptionId}/`))).toBe(true);
    expect(made).toEqual([`observer-a/${a.subscriptionId}`, `observer-b/${b.subscriptionId}`]);
  });

  it("when the recorded stack's resources are desired, then the observer reaches those in its group by their ARM ids, and not the stack or its provider", () => {
    // Arrange: every resource of Pulumi's recorded web app stack, as SpecificationApplied carries it.
    const resources = stackResources('webStack');
    const desired = desiredOf(resources.map((r) => ({ name: r.urn.split('::').pop()!, type: r.type, ...(r.id ? { id: r.id } : {}), inputs: r.inputs ?? {} })));
    const group = groupOf(resources.find((r) => r.type === 'azure-native:resources:ResourceGroup')!.id!);
    const scope = scopeOf(group, desired);
    const observer = createArmObserver({ client: () => Promise.reject(new Error('nothing is read')) });

    // Act
    const reached = desiredResources(desired).filter((r) => observer.reaches!(scope, r));

    // Assert: the id inventory keeps is the one the stack state records, which is its outputs' id where it has one.
    for (const r of resources.filter((x) => x.outputs?.id !== undefined)) expect(desired[urnOf({ name: r.urn.split('::').pop()!, type: r.type })]!.id).toBe(r.outputs!.id);
    expect(reached.map((r) => r.type)).toEqual(resources.filter((r) => r.type.startsWith('azure-native:')).map((r) => r.type));
    expect(reached.map((r) => r.type)).not.toContain('pulumi:providers:azure-native');
  });
});

describe.skipIf(!present)('ARM observer against the published examples: a complete answer or none', () => {
  const listing = () => recordedListing('goListing');
  const scope = (): ObservationScope => scopeOf(listing(), desiredOf([]));

  for (const status of [401, 403, 404, 429, 500, 503]) {
    it(`when ARM answers the listing ${status}, then INVENTORY.TARGET_UNREACHABLE (unavailable) with the status`, async () => {
      const { subscriptionId, resourceGroup } = listing();
      const arm = publishedArm([], [], { [`/subscriptions/${subscriptionId}/resourceGroups/${resourceGroup}/resources`]: status });
      const error = await refusal(armObserver(arm.httpClient).observe(scope(), { signal: new AbortController().signal }));
      expect(error).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', kind: 'unavailable', details: { observer: 'azure-resource-manager', environmentId: 'env-dev', subscriptionId, resourceGroup, status } });
      expect(error.message).toContain(resourceGroup);
    });
  }

  it('when one desired resource cannot be read (403), then the observation fails naming it: the others are never returned alone', async () => {
    // Arrange
    const desired = desiredOf([webAppDeclared(), planDeclared()]);
    const arm = publishedArm([webGroup()], ['webApp', 'plan'], { [bodyOf('plan').id]: 403 });

    // Act
    const error = await refusal(armObserver(arm.httpClient).observe(scopeOf(webGroup(), desired), { signal: new AbortController().signal }));

    // Assert
    expect(error).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', details: { status: 403, path: bodyOf('plan').id } });
  });

  it("when a desired type's provider registers no api-version for it, then the observation fails naming the type", async () => {
    // Arrange: Microsoft.Web registers the examples' types only; a function app's slot is none of them.
    const desired = desiredOf([{ name: 'slot', type: 'azure-native:web:WebAppSlot', id: `${bodyOf('webApp').id}/slots/staging`, inputs: {} }]);
    const arm = publishedArm([webGroup()], ['webApp']);

    // Act
    const error = await refusal(armObserver(arm.httpClient).observe(scopeOf(webGroup(), desired), { signal: new AbortController().signal }));

    // Assert
    expect(error).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', kind: 'unavailable', details: { resourceType: 'Microsoft.Web/sites/slots' } });
  });

  it('when the network fails, then INVENTORY.TARGET_UNREACHABLE with the pipeline error code and no status', async () => {
    const httpClient: HttpClient = {
      sendRequest: (request) => Promise.reject(new RestError('connect ECONNREFUSED 20.38.149.132:443', { code: RestError.REQUEST_SEND_ERROR, request })),
    };
    const error = await refusal(armObserver(httpClient).observe(scope(), { signal: new AbortController().signal }));
    expect(error).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', kind: 'unavailable', details: { code: 'REQUEST_SEND_ERROR' } });
    expect(error.details).not.toHaveProperty('status');
  });

  it('when no credential can sign in, then INVENTORY.TARGET_UNREACHABLE, and nothing is sent', async () => {
    const arm = publishedArm([{ ...listing(), listing: listing().body }], []);
    const unavailable = Object.assign(new Error('DefaultAzureCredential failed to retrieve a token from the included credentials.'), { name: 'CredentialUnavailableError' });
    const observer = armObserver(arm.httpClient, { getToken: () => Promise.reject(unavailable) });
    expect(await refusal(observer.observe(scope(), { signal: new AbortController().signal }))).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', details: { error: 'CredentialUnavailableError' } });
    expect(arm.asked).toEqual([]);
  });

  it('when the signal aborts during a request, then the request is cancelled and the observation fails with INVENTORY.OBSERVE_TIMEOUT', async () => {
    const controller = new AbortController();
    let cancelled = false;
    const httpClient: HttpClient = {
      sendRequest: (request) =>
        new Promise<PipelineResponse>((_resolve, reject) => {
          request.abortSignal?.addEventListener('abort', () => {
            cancelled = true;
            reject(new Error('The operation was aborted.'));
          });
          controller.abort();
        }),
    };
    expect(await refusal(armObserver(httpClient).observe(scope(), { signal: controller.signal }))).toMatchObject({
      code: 'INVENTORY.OBSERVE_TIMEOUT',
      kind: 'unavailable',
      details: { observer: 'azure-resource-manager', resourceGroup: listing().resourceGroup },
    });
    expect(cancelled).toBe(true);
  });

  it('when the signal has already aborted, then INVENTORY.OBSERVE_TIMEOUT and nothing is sent', async () => {
    const arm = publishedArm([{ ...listing(), listing: listing().body }], []);
    expect(await refusal(armObserver(arm.httpClient).observe(scope(), { signal: AbortSignal.abort() }))).toMatchObject({ code: 'INVENTORY.OBSERVE_TIMEOUT' });
    expect(arm.asked).toEqual([]);
  });

  it('when the scope names no resource group, then a validation error, not an empty observation', async () => {
    const arm = publishedArm([], []);
    expect(await refusal(armObserver(arm.httpClient).observe(BASE, { signal: new AbortController().signal }))).toMatchObject({ code: 'INVENTORY.SCOPE_INCOMPLETE', kind: 'validation' });
  });

  it('when the scope names tags, then only listed resources carrying all of them are unmanaged ones', async () => {
    const arm = publishedArm([{ ...groupOf(bodyOf('serviceBus').id), listing: listingOf('serviceBus') }], []);
    const observe = (tags: Record<string, string>) =>
      armObserver(arm.httpClient).observe({ ...BASE, azure: { ...groupOf(bodyOf('serviceBus').id), tags } }, { signal: new AbortController().signal });
    expect(await observe({ TAG1: 'value1' })).toHaveLength(1);
    expect(await observe({ tag1: 'value2' })).toEqual([]);
  });
});

describe('ARM resources: ids, types, api-versions and tags', () => {
  it('when a type is read from an id, then it is the last provider namespace with its type segments, child and extension types included', () => {
    expect(parseArmId('/subscriptions/s/resourceGroups/rg/providers/Microsoft.Sql/servers/a/databases/b')?.type).toBe('Microsoft.Sql/servers/databases');
    expect(parseArmId('/subscriptions/s/resourcegroups/rg')?.type).toBe('Microsoft.Resources/resourceGroups');
    expect(parseArmId('/subscriptions/s/resourceGroups/rg/providers/Microsoft.Web/sites/a/providers/Microsoft.Authorization/roleAssignments/x')?.type).toBe('Microsoft.Authorization/roleAssignments');
    // As a Go SDK recording's PUT spells it.
    expect(parseArmId('/subscriptions/s/resourcegroups/rg/providers/Microsoft.Compute//availabilitySets/a')?.type).toBe('Microsoft.Compute/availabilitySets');
    for (const notAnId of ['0f2a1c0b-e1b2-47ce-a082-e725693d7d43', '/subscriptions/s/resourceGroups/rg/providers/Microsoft.Web/sites', '']) expect(parseArmId(notAnId)).toBeUndefined();
    expect(normalArmId('/subscriptions/S/resourceGroups/RG/providers/Microsoft.Web//sites/A/')).toBe(normalArmId('/subscriptions/s/resourcegroups/rg/providers/microsoft.web/sites/a'));
  });

  it.skipIf(!present)('when the published examples are read, then the type from each id is the type the answer gives, but for its casing', () => {
    for (const name of ['webApp', 'plan', 'storage', 'serviceBus', 'identity', 'insights', 'sqlServer', 'database'] as const) {
      const body = bodyOf(name);
      expect(parseArmId(body.id)?.type.toLowerCase(), name).toBe(body.type.toLowerCase());
    }
    expect(parseArmId(bodyOf('serviceBus').id)?.type).toBe('Microsoft.ServiceBus/namespaces');
  });

  it('when an api-version is chosen, then it is the token\'s, else the newest stable one, else the newest preview', () => {
    expect(apiVersionOfToken('azure-native:web/v20240401:WebApp')).toBe('2024-04-01');
    expect(apiVersionOfToken('azure-native:storage/v20230501preview:StorageAccount')).toBe('2023-05-01-preview');
    expect(apiVersionOfToken('azure-native:web:WebApp')).toBeUndefined();
    expect(newestApiVersion(['2023-12-01', '2024-11-01-preview', '2024-04-01', '2022-09-01'])).toBe('2024-04-01');
    expect(newestApiVersion(['2024-01-01-preview', '2024-05-01-preview'])).toBe('2024-05-01-preview');
    expect(newestApiVersion([])).toBeUndefined();
  });

  it('when tags are required, then a resource needs every one with its exact value, the names compared case-insensitively', () => {
    const tags = { 'runtime-cloud-environment': 'dev', team: 'platform' };
    expect(resourceCarriesTags({ tags: { 'Runtime-Cloud-Environment': 'dev', TEAM: 'platform', other: 'x' } }, tags)).toBe(true);
    expect(resourceCarriesTags({ tags: { 'runtime-cloud-environment': 'dev' } }, tags)).toBe(false);
    expect(resourceCarriesTags({ tags: { 'runtime-cloud-environment': 'Dev', team: 'platform' } }, tags)).toBe(false);
    expect(resourceCarriesTags({ tags: '' }, tags)).toBe(false);
    expect(resourceCarriesTags({}, {})).toBe(true);
  });

  it.skipIf(!present)("when arrays are compared, then each element by the desired one at its index, and a different length is drift (the example site's defaultDocuments)", () => {
    const site = bodyOf('webApp');
    const documents = ((site.properties as JsonObject).siteConfig as JsonObject).defaultDocuments as readonly string[];
    const same = observedAsDesired({ siteConfig: { defaultDocuments: [...documents] } }, site);
    const shorter = observedAsDesired({ siteConfig: { defaultDocuments: documents.slice(0, 2) } }, site);
    expect(same.properties).toEqual({ siteConfig: { defaultDocuments: documents } });
    const urn = 'u:site';
    const diff = (desired: JsonObject, observed: JsonObject) => diffResources({ [urn]: { type: 't', properties: desired } }, { [urn]: { type: 't', properties: observed } }, [], new Date());
    expect(diff({ siteConfig: { defaultDocuments: [...documents] } }, same.properties).findings).toEqual([]);
    expect(diff({ siteConfig: { defaultDocuments: documents.slice(0, 2) } }, shorter.properties).findings.map((f) => 'path' in f && f.path.join('.'))).toEqual(
      documents.slice(2).map((_, i) => `siteConfig.defaultDocuments.${i + 2}`),
    );
  });
});

describe.skipIf(!present)('ARM observer: each target read with its own observer identity (@azure/identity against an App Service identity endpoint)', () => {
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
    const listing = recordedListing('goListing');
    const arm = publishedArm([{ ...listing, listing: listing.body }], []);
    const signedWith: string[] = [];
    const credentials = new Map<string, TokenCredential>();
    const observer = createArmObserver({
      client: async (subscriptionId, observerClientId) =>
        new ResourceManagementClient(await observerCredential(credentials, observerClientId), subscriptionId, {
          httpClient: { sendRequest: (request) => (signedWith.push(request.headers.get('authorization') ?? ''), arm.httpClient.sendRequest(request)) },
          retryOptions: { maxRetries: 0 },
        }),
    });
    const scope = scopeOf(listing, desiredOf([]));

    // Act
    await observer.observe({ ...scope, observerClientId: 'observer-of-prod-we' }, { signal: new AbortController().signal });
    await observer.observe({ ...scope, observerClientId: 'observer-of-prod-ne' }, { signal: new AbortController().signal });

    // Assert
    expect(asked.map((a) => a.clientId)).toEqual(['observer-of-prod-we', 'observer-of-prod-ne']);
    expect(asked.every((a) => a.header === 'identity-header-secret')).toBe(true);
    expect(signedWith).toEqual(['Bearer token-of-observer-of-prod-we', 'Bearer token-of-observer-of-prod-ne']);
  });
});
