import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JsonValue } from '../../shared/inventory/drift';
import { createKubernetesObserver, kubernetesClusters } from '../../shared/inventory/kubernetes-observer.adapter';
import { URN_ANNOTATION, type Observer } from '../../shared/inventory/observer';
import { parseConfig } from '../../shared/platform/config/config';
import type { ProvisioningTarget } from '../../shared/platform/config/setting-schemas';
import { targetOfEnvironment } from '../../shared/platform/config/targets';
import { DIALECTS, skipDialect } from '../support/databases';
import { specificationApplied, urnOf } from '../support/inventory';
import { inventoryOnDialect } from '../support/inventory-harness';
import { apiServer, ca, FILES, listOf, present, served, type ApiServer } from '../support/kubernetes-api';
import { selfSignedCertificate } from '../support/self-signed-certificate';

/*
 * Drift scans of environments on AKS targets, through the inventory service: the desired state of a
 * `SpecificationApplied`, the real Kubernetes observer reading each environment's own target (an HTTPS API server
 * serving objects real API servers returned, the published fixtures (docs/testing.md, "Published fixtures"), with
 * @azure/identity getting each target's observer token from an App Service identity endpoint), the comparison of what
 * the manifests set. Two tenants use the same environment id and stack name, each on its own target.
 */

const TYPE = 'kubernetes:apps/v1:Deployment';
const STACK = 'prod';
const ENVIRONMENT = 'env-prod';
const BACKEND = { url: 'azblob://state-{tenant}?storage_account=stprod' };

/** A served object with the urn annotation our IaC program puts on what it deploys (the fixtures carry none). */
function annotated(object: { metadata: { name: string; annotations?: Record<string, string> } }): string {
  object.metadata.annotations = { ...object.metadata.annotations, [URN_ANNOTATION]: urnOf(STACK, { name: object.metadata.name, type: TYPE }) };
  return JSON.stringify(object);
}
type Served = Parameters<typeof annotated>[0];

/** contoso's Deployment (kubectl's recording of a 2021 API server), as its manifest sets it. */
const nginx = (image: string): Record<string, JsonValue> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'nginx', namespace: 'edit-test', labels: { app: 'nginx' } },
  spec: { replicas: 3, selector: { matchLabels: { app: 'nginx' } }, template: { metadata: { labels: { app: 'nginx' } }, spec: { containers: [{ name: 'nginx', image }] } } },
});
/** fabrikam's two Deployments (the API reference's list example), as their manifests set them. */
const fabrikamDeployments: { name: string; properties: Record<string, JsonValue> }[] = [
  {
    name: 'deployment-example',
    properties: {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'deployment-example', labels: { app: 'nginx' } },
      spec: { replicas: 3, selector: { matchLabels: { app: 'nginx' } }, template: { metadata: { labels: { app: 'nginx' } }, spec: { containers: [{ name: 'nginx', image: 'nginx:1.14', ports: [{ containerPort: 80 }] }] } } },
    },
  },
  {
    name: 'docs',
    properties: {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'docs', labels: { run: 'docs' } },
      spec: { selector: { matchLabels: { run: 'docs' } }, template: { metadata: { labels: { run: 'docs' } }, spec: { containers: [{ name: 'docs', image: 'pwittrock/api-docs:v9' }] } } },
    },
  },
];

let identity: Server;
const saved = { endpoint: process.env.IDENTITY_ENDPOINT, header: process.env.IDENTITY_HEADER };
const certificates = { contoso: selfSignedCertificate(), fabrikam: selfSignedCertificate() };
let contosoCluster: ApiServer;
let fabrikamCluster: ApiServer;
let targets: ProvisioningTarget[];

beforeAll(async () => {
  if (!present) return;
  identity = createServer((request, response) => {
    const clientId = new URL(request.url ?? '/', 'http://localhost').searchParams.get('client_id');
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ access_token: `token-of-${clientId ?? 'system'}`, expires_on: String(Math.floor(Date.now() / 1000) + 3600), token_type: 'Bearer', client_id: clientId }));
  });
  await new Promise<void>((resolve) => identity.listen(0, '127.0.0.1', resolve));
  process.env.IDENTITY_ENDPOINT = `http://127.0.0.1:${(identity.address() as AddressInfo).port}/msi/token`;
  process.env.IDENTITY_HEADER = 'identity-header-secret';
  // The same namespace name in both clusters.
  const deployments = (items: () => string[]) => (path: string) => (path === '/apis/apps/v1/namespaces/apps/deployments' ? listOf('Deployment', items()) : undefined);
  contosoCluster = await apiServer(deployments(() => [annotated(JSON.parse(served.json(FILES.nginx)) as Served)]), certificates.contoso);
  fabrikamCluster = await apiServer(deployments(() => (JSON.parse(served.response(FILES.deploymentList)) as { items: Served[] }).items.map(annotated)), certificates.fabrikam);
  const aks = (tenant: 'contoso' | 'fabrikam', cluster: ApiServer) => ({
    id: `aks-${tenant}`,
    kind: 'aks-cluster',
    name: `AKS of ${tenant}`,
    backend: BACKEND,
    observerClientId: `observer-${tenant}`,
    environments: [{ tenant }],
    kubernetes: { server: cluster.url, certificateAuthorityData: ca(certificates[tenant]) },
  });
  targets = [...parseConfig({ RuntimeCloud__Targets: JSON.stringify([aks('contoso', contosoCluster), aks('fabrikam', fabrikamCluster)]) }).targets];
});
afterAll(async () => {
  if (!present) return;
  if (saved.endpoint === undefined) delete process.env.IDENTITY_ENDPOINT;
  else process.env.IDENTITY_ENDPOINT = saved.endpoint;
  if (saved.header === undefined) delete process.env.IDENTITY_HEADER;
  else process.env.IDENTITY_HEADER = saved.header;
  await Promise.all([contosoCluster.close(), fabrikamCluster.close(), new Promise((resolve) => identity.close(resolve))]);
});

describe.skipIf(!present).each(DIALECTS)('drift scans of two tenants on their own AKS targets, on %s', (dialect) => {
  let observer: Observer | undefined;
  // Made on first use: the clusters' addresses are known once their servers listen.
  const kubernetes: Observer = { name: 'kubernetes', observe: (scope, options) => (observer ??= createKubernetesObserver({ clusters: kubernetesClusters(targets) })).observe(scope, options) };
  const harness = inventoryOnDialect(dialect, {
    observers: new Map([['aks-contoso', kubernetes], ['aks-fabrikam', kubernetes]]),
    // As the host finds an environment's target (deps.ts): the first target whose rule matches it.
    scopeOf: (environment) => ({
      tenant: environment.tenant,
      environmentId: environment.id,
      stack: environment.stack,
      target: targetOfEnvironment(targets, { tenant: environment.tenant, environment: environment.id, tier: environment.tier }).id,
      kubernetes: { namespaces: ['apps'] },
    }),
  });
  let events = 0;
  const record = async (tenant: string, resources: { name: string; properties: Record<string, JsonValue> }[], runId: string) => {
    const data = specificationApplied({ id: ENVIRONMENT, tenant, stack: STACK, runId }, resources.map((r) => ({ ...r, type: TYPE })));
    harness.clock.advance(1000);
    return harness.inventory.recordSpecification({ id: `event-${dialect}-${++events}`, time: harness.clock.now().toISOString(), data });
  };
  const scan = (tenant: string) => harness.inventory.scan({ tenant, id: ENVIRONMENT }, { kind: 'manual', by: 'operator-1' });
  const findingsOf = async (tenant: string) =>
    (await harness.inventory.drift({ kind: 'one', tenant }, ENVIRONMENT)).findings.flatMap((g) => g.findings.map((f) => (f.kind === 'modified' ? `${f.kind} ${f.path.join('.')} ${JSON.stringify(f.desired)} ${JSON.stringify(f.observed)}` : `${f.kind} ${f.urn}`)));

  it.skipIf(skipDialect(dialect))("when each tenant's manifests are applied, then each environment is in sync in its own cluster, read with its own identity; a changed image drifts only its own", async () => {
    // Arrange
    contosoCluster.requests.length = 0;
    fabrikamCluster.requests.length = 0;
    await record('contoso', [{ name: 'nginx', properties: nginx('gcr.io/kakaraparthy-devel/nginx:latest') }], 'run-contoso-1');
    await record('fabrikam', fabrikamDeployments, 'run-fabrikam-1');

    // Act
    const contoso = await scan('contoso');
    const fabrikam = await scan('fabrikam');

    // Assert: the servers' defaults are no drift of the manifests.
    expect(contoso).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync', resources: 1 });
    expect(fabrikam).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync', resources: 2 });
    expect(new Set(contosoCluster.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer token-of-observer-contoso']));
    expect(new Set(fabrikamCluster.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer token-of-observer-fabrikam']));

    // Act: contoso's next release changes the image; nothing changed in the cluster.
    await record('contoso', [{ name: 'nginx', properties: nginx('nginx:1.27') }], 'run-contoso-2');
    expect(await scan('contoso')).toMatchObject({ outcome: 'completed', driftStatus: 'drifted', findings: 1 });
    expect(await findingsOf('contoso')).toEqual(['modified spec.template.spec.containers.0.image "nginx:1.27" "gcr.io/kakaraparthy-devel/nginx:latest"']);
    expect(await scan('fabrikam')).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    expect(await findingsOf('fabrikam')).toEqual([]);
  });
});
