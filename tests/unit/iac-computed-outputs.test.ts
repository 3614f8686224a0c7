import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { computedOutputNames, withComputedOutputs, type OutputContext } from '../../local/engine/computed-outputs';
import { computed, type JsonObject, type JsonValue } from '../../shared/platform/iac/iac-values';
import type { Plan, StackState, StateResource } from '../../shared/platform/iac/plan';
import { planStack } from '../../local/engine/planner';
import { loadProgram, type LoadedProgram } from '../../local/engine/pulumi-yaml';
import { resourceUrn } from '../../shared/platform/iac/stack-ref';
import { bodyOf, FILES, present, SHARED } from '../support/published-arm';
import { thrown } from '../support/refusal';

/**
 * The outputs the local engine computes for the providers' resources (computed-outputs.ts), held against what the
 * providers published: Pulumi's recorded azure-native stack exports (their `inputs` carry the names azure-native
 * chose; their `outputs` the ids and types it read back), ARM's own GET examples, and the Kubernetes API's answers
 * (the published fixtures: docs/testing.md, "Published fixtures"). Plan and apply of such programs on the local cloud: tests/integration/local-iac-computed-outputs.test.ts.
 */

const context = (urn: string, config: Record<string, JsonValue> = {}, tenant = 'tenant-a'): OutputContext => ({
  tenant,
  urn,
  name: urn.split('::').pop() ?? '',
  config: new Map(Object.entries(config)),
});

interface ExportedResource {
  readonly urn: string;
  readonly type: string;
  readonly id?: string;
  readonly inputs?: JsonObject;
  readonly outputs?: JsonObject;
}
const exported = (file: string): ExportedResource[] =>
  (JSON.parse(readFileSync(join(SHARED, file), 'utf8')) as { deployment: { resources: ExportedResource[] } }).deployment.resources;

describe.skipIf(!present)('azure-native outputs against Pulumi\'s recorded stacks and ARM\'s examples', () => {
  const recorded = [...exported(FILES.webStack), ...exported(FILES.storageStack)].filter((r) => computedOutputNames(r.type).length > 0);

  it('when a recorded resource\'s inputs are given, then the id, name and type are the ones azure-native read back, for every modelled type recorded', () => {
    expect(new Set(recorded.map((r) => r.type))).toEqual(
      new Set(['azure-native:resources:ResourceGroup', 'azure-native:storage:StorageAccount', 'azure-native:storage:BlobContainer', 'azure-native:storage:Blob', 'azure-native:web:AppServicePlan', 'azure-native:web:WebApp']),
    );
    for (const r of recorded) {
      const subscriptionId = /^\/subscriptions\/([^/]+)\//.exec(r.id ?? '')?.[1] ?? '';
      const outputs = withComputedOutputs(r.type, { ...r.inputs, id: 'local-id' }, context(r.urn, { 'azure-native:subscriptionId': subscriptionId }));
      const published = r.outputs ?? {};
      // The Blob's state keeps its ARM id as the resource id, not among its outputs.
      expect({ id: outputs.id, name: outputs.name, type: outputs.type }, r.urn).toEqual({ id: published.id ?? r.id, name: published.name, type: published.type });
    }
  });

  it('when the program gives no name, then the name is the program\'s name and eight hex digits, as azure-native auto-named rg, store and servicePlan', () => {
    const autonamed = recorded.filter((r) => ['rg', 'store', 'servicePlan', 'app'].includes(r.urn.split('::').pop() ?? ''));
    expect(autonamed).toHaveLength(5);
    for (const r of autonamed) {
      const name = r.urn.split('::').pop() ?? '';
      const shape = new RegExp(`^${name}[0-9a-f]{8}$`);
      expect(r.outputs?.name, r.urn).toMatch(shape);
      const ours = withComputedOutputs(r.type, { location: 'westus2', id: 'local-id' }, context(r.urn));
      expect(ours.name).toMatch(shape);
      expect(ours.name).not.toBe(r.outputs?.name);
    }
  });

  it('when ARM\'s GET examples are the peers, then the endpoints a name implies are the published ones', () => {
    const storage = bodyOf('storage') as unknown as { name: string; id: string; properties: { primaryEndpoints: JsonObject } };
    const group = /resourceGroups\/([^/]+)/.exec(storage.id)?.[1] ?? '';
    const ours = withComputedOutputs('azure-native:storage:StorageAccount', { accountName: storage.name, resourceGroupName: group, id: 'x' }, context('urn:pulumi:dev::p::azure-native:storage:StorageAccount::sa', { 'azure-native:subscriptionId': '{subscription-id}' }));
    expect(ours.id).toBe(storage.id);
    const { microsoftEndpoints: _m, internetEndpoints: _i, ...primary } = storage.properties.primaryEndpoints;
    expect(ours.primaryEndpoints).toEqual(primary);

    const site = bodyOf('webApp') as unknown as { name: string; properties: { defaultHostName: string } };
    expect(withComputedOutputs('azure-native:web:WebApp', { name: site.name, resourceGroupName: 'g' }, context('urn:pulumi:dev::p::azure-native:web:WebApp::app')).defaultHostName).toBe(site.properties.defaultHostName);
    const server = bodyOf('sqlServer') as unknown as { name: string; properties: { fullyQualifiedDomainName: string } };
    expect(withComputedOutputs('azure-native:sql:Server', { serverName: server.name, resourceGroupName: 'g' }, context('urn:pulumi:dev::p::azure-native:sql:Server::sql')).fullyQualifiedDomainName).toBe(server.properties.fullyQualifiedDomainName);
    const insights = bodyOf('insights') as unknown as { properties: { InstrumentationKey: string; ConnectionString: string } };
    const component = withComputedOutputs('azure-native:insights:Component', { resourceGroupName: 'g' }, context('urn:pulumi:dev::p::azure-native:insights:Component::ai'));
    expect(component.instrumentationKey as string).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(component.connectionString).toBe(insights.properties.ConnectionString.replace(insights.properties.InstrumentationKey, component.instrumentationKey as string));
  });
});

describe('computed outputs: one value per tenant and resource', () => {
  const urn = 'urn:pulumi:dev::shop::azure-native:resources:ResourceGroup::rg';

  it('when the same resource is computed twice, then the outputs are equal; another tenant with the same names gets its own name, subscription and id', () => {
    const a = withComputedOutputs('azure-native:resources:ResourceGroup', { location: 'westeurope' }, context(urn));
    expect(withComputedOutputs('azure-native:resources:ResourceGroup', { location: 'westeurope' }, context(urn))).toEqual(a);
    const b = withComputedOutputs('azure-native:resources:ResourceGroup', { location: 'westeurope' }, context(urn, {}, 'tenant-b'));
    expect(b.name).not.toBe(a.name);
    const subscription = (o: JsonObject) => (o.id as string).split('/')[2];
    expect(subscription(b)).not.toBe(subscription(a));
    expect(a.id).toBe(`/subscriptions/${subscription(a)}/resourceGroups/${a.name as string}`);
  });

  it('when a name the output is made of is not known yet, then the output is computed, and the rest are known', () => {
    const sa = withComputedOutputs('azure-native:storage:StorageAccount', { resourceGroupName: computed('${rg.name}'), accountName: 'shopdata' }, context('urn:pulumi:dev::shop::azure-native:storage:StorageAccount::sa'));
    expect(sa.id).toEqual(computed('${sa.id}'));
    expect(sa.name).toBe('shopdata');
    expect(sa.primaryEndpoints).toMatchObject({ web: 'https://shopdata.web.core.windows.net/' });
  });

  it('when a Kubernetes object has no name, then metadata.name is auto-named as pulumi-kubernetes names it, in namespace default, with the autonamed annotation; a Namespace has no namespace', () => {
    const deployment = withComputedOutputs('kubernetes:apps/v1:Deployment', { metadata: { labels: { app: 'web' } }, spec: {} }, context('urn:pulumi:dev::shop::kubernetes:apps/v1:Deployment::web'));
    expect(deployment).toMatchObject({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { labels: { app: 'web' }, namespace: 'default', annotations: { 'pulumi.com/autonamed': 'true' } } });
    expect((deployment.metadata as JsonObject).name).toMatch(/^web-[0-9a-f]{8}$/);
    const ns = withComputedOutputs('kubernetes:core/v1:Namespace', {}, context('urn:pulumi:dev::shop::kubernetes:core/v1:Namespace::apps'));
    expect(ns).toMatchObject({ apiVersion: 'v1', kind: 'Namespace' });
    expect(ns.metadata).not.toHaveProperty('namespace');
    const named = withComputedOutputs('kubernetes:core/v1:Service', { metadata: { name: 'api', namespace: 'shop' } }, context('urn:pulumi:dev::shop::kubernetes:core/v1:Service::svc'));
    expect(named.metadata).toMatchObject({ name: 'api', namespace: 'shop' });
    expect(named.metadata).not.toHaveProperty('annotations');
  });

  it('when the Kubernetes API\'s published objects are the peers, then apiVersion and kind are theirs', () => {
    const read = (file: string) => JSON.parse(readFileSync(join(SHARED, 'kubernetes', file), 'utf8')) as { apiVersion: string; kind: string; metadata: JsonObject };
    for (const file of ['kubectl-edit.deployment-get.testcase-edit-subresource-status.0.response.json', 'kubectl-edit.service-get.testcase-apply-edit-last-applied.0.response.json']) {
      const object = read(file);
      const [group, version] = object.apiVersion.includes('/') ? object.apiVersion.split('/') : ['core', object.apiVersion];
      const ours = withComputedOutputs(`kubernetes:${group}/${version}:${object.kind}`, { metadata: { name: object.metadata.name ?? null, namespace: object.metadata.namespace ?? null } }, context(`urn:pulumi:dev::p::kubernetes:${group}/${version}:${object.kind}::x`));
      expect({ apiVersion: ours.apiVersion, kind: ours.kind, name: (ours.metadata as JsonObject).name, namespace: (ours.metadata as JsonObject).namespace }).toEqual({
        apiVersion: object.apiVersion,
        kind: object.kind,
        name: object.metadata.name,
        namespace: object.metadata.namespace,
      });
    }
  });
});

describe('computed outputs in plans', () => {
  const STACK = 'dev';
  const program = (resources: string, organization = 'tenant-a'): LoadedProgram =>
    loadProgram({ 'Pulumi.yaml': `name: shop\nruntime: yaml\nconfig:\n  azure-native:location: westeurope\nresources:\n${resources}` }, STACK, {}, { organization });
  const plan = (p: LoadedProgram, state?: StackState): Plan => planStack({ stack: STACK, program: p, state });
  const AZURE = `  rg:\n    type: azure-native:resources:ResourceGroup\n  sa:\n    type: azure-native:storage:StorageAccount\n    properties:\n      resourceGroupName: \${rg.name}\n      kind: StorageV2\n      rgId: \${rg.id}\n`;

  it('when a program reads a group\'s name, then the plan knows it (auto-named), and the id of what is created stays unknown until the apply', () => {
    const planned = plan(program(AZURE));
    const inputs = planned.steps[1]?.inputs ?? {};
    expect(inputs.resourceGroupName).toMatch(/^rg[0-9a-f]{8}$/);
    expect(inputs.rgId).toEqual(computed('${rg.id}'));
    // Another tenant, the same program: another name.
    expect(plan(program(AZURE, 'tenant-b')).steps[1]?.inputs?.resourceGroupName).not.toBe(inputs.resourceGroupName);
  });

  it('when the resources exist, then a re-plan is all same, and a kept resource shows the id the state has', () => {
    const first = plan(program(AZURE));
    const name = first.steps[1]?.inputs?.resourceGroupName as string;
    const rgId = `/subscriptions/s/resourceGroups/${name}`;
    const resource = (step: Plan['steps'][number], id: string, inputs: JsonObject): StateResource => ({ urn: step.urn, name: step.name, type: step.type, id: `${step.name}-local`, inputs, outputs: { ...inputs, id, name: step.name === 'rg' ? name : 'sa' }, protect: false, dependencies: step.dependencies });
    const [rg, sa] = first.steps as [Plan['steps'][number], Plan['steps'][number]];
    const state: StackState = { stack: STACK, project: 'shop', serial: 1, resources: [resource(rg, rgId, {}), resource(sa, 'sa-arm', { ...sa.inputs, rgId })] };
    const again = plan(program(AZURE), state);
    expect(again.steps.map((s) => s.op)).toEqual(['same', 'same']);
  });

  it('when a program reads an output the emulation does not compute, then the plan fails naming the resource, the output and the type', () => {
    const service = `  svc:\n    type: kubernetes:core/v1:Service\n  site:\n    type: local:web:Site\n    properties:\n      ip: \${svc.status.loadBalancer.ingress[0].ip}\n`;
    const error = thrown(() => plan(program(service)));
    expect(error).toMatchObject({ code: 'IAC.UNKNOWN_OUTPUT', details: { resource: 'svc', output: 'status.loadBalancer.ingress[0].ip', type: 'kubernetes:core/v1:Service' } });
    expect(error.message).toMatch(/computes apiVersion, kind, metadata of kubernetes:core\/v1:Service besides its inputs, and does not emulate status/);
    const unmodelled = `  vault:\n    type: azure-native:keyvault:Secret\n  site:\n    type: local:web:Site\n    properties:\n      uri: \${vault.properties.secretUri}\n`;
    expect(thrown(() => plan(program(unmodelled)))).toMatchObject({ code: 'IAC.UNKNOWN_OUTPUT', details: { resource: 'vault', output: 'properties.secretUri', type: 'azure-native:keyvault:Secret' } });
  });

  it('when a resource\'s urn names it, then its auto-name is drawn from it: the same program in another stack gets another name', () => {
    const other = loadProgram({ 'Pulumi.yaml': `name: shop\nruntime: yaml\nresources:\n${AZURE}` }, 'prod', {}, { organization: 'tenant-a' });
    const inProd = planStack({ stack: 'prod', program: other, state: undefined }).steps[1]?.inputs?.resourceGroupName;
    expect(inProd).not.toBe(plan(program(AZURE)).steps[1]?.inputs?.resourceGroupName);
    expect(resourceUrn('prod', 'shop', 'azure-native:resources:ResourceGroup', 'rg')).toContain('prod');
  });
});
