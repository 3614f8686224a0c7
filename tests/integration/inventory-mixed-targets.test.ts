import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKubernetesObserver, kubernetesClusters } from '../../shared/inventory/kubernetes-observer.adapter';
import { URN_ANNOTATION } from '../../shared/inventory/observer';
import { observationScopeOn, observersByTarget } from '../../shared/inventory/target-observers';
import { parseConfig } from '../../shared/platform/config/config';
import { targetOfEnvironment } from '../../shared/platform/config/targets';
import { DIALECTS, skipDialect } from '../support/databases';
import { specificationApplied, urnOf, type TestResource } from '../support/inventory';
import { inventoryOnDialect } from '../support/inventory-harness';
import { apiServer, ca, FILES, listOf, present as kubernetesPresent, served, type ApiServer } from '../support/kubernetes-api';
import { armObserver, planDeclared, present as armPresent, publishedArm, recordedListing, webAppDeclared, webGroup, type Declared } from '../support/published-arm';
import { selfSignedCertificate } from '../support/self-signed-certificate';

/*
 * One installation with an Azure subscription target and an AKS target: one scan pass (the timer's `scanDue`) reads
 * each environment with the observer its target's kind calls for, as the host composes them (`observersByTarget`,
 * `observationScopeOn`): the Azure environments through ARM as Microsoft published it (tests/support/published-arm.ts),
 * the AKS ones through the Kubernetes API of the target's kubeconfig (an HTTPS API server serving an object a real
 * API server returned). Two tenants use the same environment ids, stacks and resource names on both targets, each in
 * its own resource group and namespace.
 */

const present = armPresent && kubernetesPresent;
const DEPLOYMENT = 'kubernetes:apps/v1:Deployment';
/** The image of kubectl's recorded Deployment (the fixture), which both tenants' manifests ask for. */
const RECORDED_IMAGE = 'gcr.io/kakaraparthy-devel/nginx:latest';

const root = mkdtempSync(join(tmpdir(), 'rch-mixed-targets-'));
const kubeconfig = join(root, 'aks-we.kubeconfig');
const config = parseConfig({
  RuntimeCloud__Targets: JSON.stringify([
    { id: 'azure-we', kind: 'azure-subscription', name: 'Azure West Europe', backend: { url: 'azblob://state-{tenant}?storage_account=stwe' }, environments: [{ environment: 'env-web' }] },
    { id: 'aks-we', kind: 'aks-cluster', name: 'AKS West Europe', backend: { url: 'azblob://state-{tenant}?storage_account=stwe' }, kubernetes: { kubeconfig: { path: kubeconfig } }, environments: [{ environment: 'env-apps' }] },
  ]),
});

/** contoso's group holds Microsoft's web app and plan; fabrikam's, in another subscription, is empty (a recorded listing). */
const groups = () => {
  const contoso = webGroup();
  const empty = recordedListing('pythonListing');
  const fabrikam = { subscriptionId: empty.subscriptionId, resourceGroup: contoso.resourceGroup, listing: empty.body };
  return { contoso, fabrikam, arm: publishedArm([contoso, fabrikam], ['webApp', 'plan']) };
};
let published: ReturnType<typeof groups> | undefined;
const arm = () => (published ??= groups());

/** Each tenant's environments' own scopes, as `RuntimeCloud__Inventory__Scopes` gives them. */
const scopes = () =>
  parseConfig({
    RuntimeCloud__Inventory__Scopes: JSON.stringify({
      'contoso/env-web': { azure: { subscriptionId: arm().contoso.subscriptionId, resourceGroup: arm().contoso.resourceGroup } },
      'fabrikam/env-web': { azure: { subscriptionId: arm().fabrikam.subscriptionId, resourceGroup: arm().fabrikam.resourceGroup } },
      'contoso/env-apps': { kubernetes: { namespaces: ['contoso'] } },
      'fabrikam/env-apps': { kubernetes: { namespaces: ['fabrikam'] } },
    }),
  }).inventory.scopes;

/** kubectl's recorded Deployment with the urn annotation our program puts on it; in fabrikam's namespace someone changed its image. */
function servedNginx(image: string): string {
  const object = JSON.parse(served.json(FILES.nginx)) as { metadata: { name: string; annotations?: Record<string, string> }; spec: { template: { spec: { containers: { image: string }[] } } } };
  object.metadata.annotations = { ...object.metadata.annotations, [URN_ANNOTATION]: urnOf('apps', { name: 'nginx', type: DEPLOYMENT }) };
  object.spec.template.spec.containers[0]!.image = image;
  return JSON.stringify(object);
}
const nginxManifest: TestResource = {
  name: 'nginx',
  type: DEPLOYMENT,
  properties: {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'nginx', labels: { app: 'nginx' } },
    spec: { replicas: 3, selector: { matchLabels: { app: 'nginx' } }, template: { metadata: { labels: { app: 'nginx' } }, spec: { containers: [{ name: 'nginx', image: RECORDED_IMAGE }] } } },
  },
};
const asResource = (declared: Declared, subscriptionId?: string): TestResource => ({
  name: declared.name,
  type: declared.type,
  id: subscriptionId ? declared.id!.replace(arm().contoso.subscriptionId, subscriptionId) : declared.id!,
  properties: declared.inputs,
});

let cluster: ApiServer;
beforeAll(async () => {
  if (!present) return;
  const certificate = selfSignedCertificate();
  cluster = await apiServer(
    (path) =>
      ({
        '/apis/apps/v1/namespaces/contoso/deployments': listOf('Deployment', [servedNginx(RECORDED_IMAGE)]),
        '/apis/apps/v1/namespaces/fabrikam/deployments': listOf('Deployment', [servedNginx('nginx:1.27')]),
      })[path],
    certificate,
  );
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'aks-we', cluster: { server: cluster.url, 'certificate-authority-data': ca(certificate) } }],
      users: [{ name: 'reader', user: { token: 'token-of-the-aks-reader' } }],
      contexts: [{ name: 'reader', context: { cluster: 'aks-we', user: 'reader' } }],
      'current-context': 'reader',
    }),
  );
});
afterAll(async () => {
  await cluster?.close();
  rmSync(root, { recursive: true, force: true });
});

describe.skipIf(!present).each(DIALECTS)('one scan pass over an Azure and an AKS target on %s', (dialect) => {
  const harness = inventoryOnDialect(dialect, {
    // The first observation loads both SDKs: on a busy machine that takes seconds, which is not what is tested here.
    observeTimeoutMs: 60_000,
    observers: observersByTarget(config.targets, {
      'local-cloud': () => {
        throw new Error('no target of this installation is a local cloud');
      },
      'azure-resource-manager': () => armObserver({ sendRequest: (request) => arm().arm.httpClient.sendRequest(request) }),
      kubernetes: () => createKubernetesObserver({ clusters: kubernetesClusters(config.targets) }),
    }),
    scopeOf: (environment) => observationScopeOn(targetOfEnvironment(config.targets, { tenant: environment.tenant, environment: environment.id, tier: environment.tier }), environment, scopes()),
  });
  let events = 0;
  const record = (tenant: string, id: string, stack: string, resources: readonly TestResource[]) =>
    harness.inventory.recordSpecification({ id: `event-${dialect}-${++events}`, time: harness.clock.now().toISOString(), data: specificationApplied({ id, tenant, stack, runId: `run-${tenant}-${id}` }, resources) });
  const findingsOf = async (tenant: string, id: string) =>
    (await harness.inventory.drift({ kind: 'one', tenant }, id)).findings.flatMap((g) => g.findings.map((f) => (f.kind === 'modified' ? `${f.kind} ${f.path.join('.')} ${JSON.stringify(f.observed)}` : `${f.kind} ${f.type}`)));

  it.skipIf(skipDialect(dialect))(
    "when both tenants' Azure and AKS environments are due, then one pass reads each through its target's observer, in the tenant's own group and namespace",
    async () => {
      // Arrange
      const { fabrikam } = arm();
      await record('contoso', 'env-web', 'web', [asResource(webAppDeclared()), asResource(planDeclared())]);
      await record('fabrikam', 'env-web', 'web', [asResource(webAppDeclared(), fabrikam.subscriptionId), asResource(planDeclared(), fabrikam.subscriptionId)]);
      await record('contoso', 'env-apps', 'apps', [nginxManifest]);
      await record('fabrikam', 'env-apps', 'apps', [nginxManifest]);
      arm().arm.asked.length = 0;
      cluster.requests.length = 0;

      // Act
      const records = await harness.inventory.scanDue();

      // Assert
      const outcome = (tenant: string, id: string) => records.find((r) => r.tenantId === tenant && r.environmentId === id);
      expect(records.map((r) => `${r.tenantId}/${r.environmentId} ${r.outcome} ${r.reason ?? ''}`.trim()).sort()).toEqual(['contoso/env-apps completed', 'contoso/env-web completed', 'fabrikam/env-apps completed', 'fabrikam/env-web completed']);
      expect(outcome('contoso', 'env-web')).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync', resources: 2 });
      expect(outcome('fabrikam', 'env-web')).toMatchObject({ outcome: 'completed', driftStatus: 'drifted', resources: 0 });
      expect(outcome('contoso', 'env-apps')).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync', resources: 1 });
      expect(outcome('fabrikam', 'env-apps')).toMatchObject({ outcome: 'completed', driftStatus: 'drifted', resources: 1 });
      expect(await findingsOf('fabrikam', 'env-web')).toEqual(['missing azure-native:web:AppServicePlan', 'missing azure-native:web:WebApp']);
      expect(await findingsOf('fabrikam', 'env-apps')).toEqual(['modified spec.template.spec.containers.0.image "nginx:1.27"']);
      expect(await findingsOf('contoso', 'env-apps')).toEqual([]);
      // ARM was asked about the two groups only; the cluster about the two namespaces only, with the target's own credential.
      expect(new Set(arm().arm.asked.filter((a) => a.path.endsWith('/resources')).map((a) => a.path))).toEqual(
        new Set([arm().contoso, fabrikam].map((g) => `/subscriptions/${g.subscriptionId}/resourceGroups/${g.resourceGroup}/resources`)),
      );
      expect(new Set(cluster.requests.map((r) => /\/namespaces\/([^/]+)\//.exec(r.path)?.[1]))).toEqual(new Set(['contoso', 'fabrikam']));
      expect(new Set(cluster.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer token-of-the-aks-reader']));
    },
  );
});

describe('a scan of an environment whose target no observer reads', () => {
  const harness = inventoryOnDialect('sqlite', { observers: new Map() });

  it('when the environment is scanned, then the scan fails naming the target and the environment is stale', async () => {
    // Arrange: bound to a target this installation no longer has.
    await harness.inventory.recordSpecification({ id: 'event-gone', time: harness.clock.now().toISOString(), data: specificationApplied({ id: 'env-old', tenant: 'contoso', stack: 'old' }, [nginxManifest]) });

    // Act
    const scanned = await harness.inventory.scan({ tenant: 'contoso', id: 'env-old' }, { kind: 'manual', by: 'operator-1' });

    // Assert
    expect(scanned).toMatchObject({ outcome: 'failed', reason: 'INVENTORY.TARGET_NOT_OBSERVED: no observer reads target local of environment env-old: it is not among RuntimeCloud__Targets' });
    expect((await harness.inventory.getEnvironment({ kind: 'one', tenant: 'contoso' }, 'env-old')).drift).toMatchObject({ status: 'unknown', stale: true });
  });
});
