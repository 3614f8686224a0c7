import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AccessToken, TokenCredential } from '@azure/identity';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { diffResources, type DriftFinding, type JsonValue, type Resources } from '../../shared/inventory/drift';
import { observedForInventory } from '../../shared/inventory/environment';
import { diffManifest, kubernetesListKeys, manifestComparison } from '../../shared/inventory/kubernetes-fields';
import {
  AKS_TOKEN_SCOPE,
  createKubernetesObserver,
  KUBERNETES_TYPES,
  kubernetesClusters,
  kubernetesObjectToObserved,
  type KubernetesCluster,
  type KubernetesKind,
  type KubernetesObject,
} from '../../shared/inventory/kubernetes-observer.adapter';
import { URN_ANNOTATION, type ObservationScope, type ObservedResource } from '../../shared/inventory/observer';
import { ConfigError, parseConfig } from '../../shared/platform/config/config';
import { apiServer, ca, FILES, lastApplied, listOf, present, served, status, text, type ApiServer, type Manifest } from '../support/kubernetes-api';
import { refusal } from '../support/refusal';
import { selfSignedCertificate, type TestCertificate } from '../support/self-signed-certificate';

/**
 * The Kubernetes observer and its comparison, on objects real API servers returned, as published upstream (the
 * kubectl edit recordings, gitops-engine's server-side diff test data, the API reference's examples; see
 * docs/testing.md, "Published fixtures"). They are read from there at test time and served by a local HTTPS
 * server, so the real `@kubernetes/client-node` parses them. The desired manifests are ours: where a fixture carries
 * the manifest that was applied to make it (its `last-applied-configuration`, the reference example's request),
 * that manifest is the desired state; the others are written here.
 */

const NOW = new Date('2026-03-01T00:00:00Z');
const TLS = selfSignedCertificate();
const live = () => ({ signal: new AbortController().signal });
const aToken: TokenCredential = { getToken: async (): Promise<AccessToken> => ({ token: 'observer-token', expiresOnTimestamp: Date.now() + 3_600_000 }) };

function scopeOf(namespaces: readonly string[], target = 'aks-test', tenant = 'contoso', environmentId = 'env-dev'): ObservationScope {
  return { tenant, environmentId, stack: { tenant, project: 'app', stack: 'dev' }, target, kubernetes: { namespaces } };
}

/** The fixture objects by the list request that returns them, in the namespaces they were captured in. */
function fixtureLists(path: string, query: URLSearchParams): string | undefined {
  switch (path) {
    case '/apis/apps/v1/namespaces/default/deployments':
      // Two pages: the first continues into the API reference's list example (a real list answer, as it is).
      return query.get('continue') === 'page-2' ? served.response(FILES.deploymentList) : listOf('Deployment', [served.json(FILES.manualApply)], 'page-2');
    case '/apis/apps/v1/namespaces/edit-test/deployments':
      return listOf('Deployment', [served.json(FILES.nginx)]);
    case '/apis/apps/v1/namespaces/default/statefulsets':
      return listOf('StatefulSet', [served.yaml(FILES.redis)]);
    case '/apis/apps/v1/namespaces/default/daemonsets':
      return listOf('DaemonSet', [served.response(FILES.daemonSet)]);
    case '/api/v1/namespaces/default/services':
      return listOf('Service', [served.yaml(FILES.multiProtocol), served.json(FILES.kubernetesService)]);
    case '/api/v1/namespaces/httpbin/services':
      return listOf('Service', [served.json(FILES.httpbin)]);
    case '/api/v1/namespaces/myproject/services':
      return listOf('Service', [served.json(FILES.svc1)]);
    case '/api/v1/namespaces/edit-test/services':
      // A real ServiceList, as it is: its items carry no kind or apiVersion.
      return served.json(FILES.serviceList);
    default:
      return undefined;
  }
}

const NAMESPACES = ['default', 'edit-test', 'httpbin', 'myproject'];

describe.skipIf(!present)('Kubernetes observer: objects from real API servers, through the SDK', () => {
  let server: ApiServer;
  beforeAll(async () => {
    server = await apiServer(fixtureLists, TLS);
  });
  afterAll(() => server.close());
  beforeEach(() => {
    server.requests.length = 0;
    server.override = () => false;
  });
  const observer = (pageSize?: number) =>
    createKubernetesObserver({ clusters: new Map([['aks-test', { auth: 'entra', server: server.url, certificateAuthorityData: ca(TLS) }]]), credential: () => aToken, ...(pageSize ? { pageSize } : {}) });

  it('when namespaces are observed, then every object is mapped with its kind, API version, labels and annotations, and none of the server\'s bookkeeping', async () => {
    const observed = await observer().observe(scopeOf(NAMESPACES), live());

    expect(observed.map((r) => `${r.type} ${r.id} ${r.urn}`).sort()).toEqual(
      [
        'kubernetes:apps/v1:Deployment default/manual-apply-test-deployment k8s:default/Deployment/manual-apply-test-deployment',
        'kubernetes:apps/v1:Deployment default/docs k8s:default/Deployment/docs',
        'kubernetes:apps/v1:Deployment default/deployment-example k8s:default/Deployment/deployment-example',
        'kubernetes:apps/v1:Deployment edit-test/nginx k8s:edit-test/Deployment/nginx',
        'kubernetes:apps/v1:StatefulSet default/redis-master k8s:default/StatefulSet/redis-master',
        'kubernetes:apps/v1:DaemonSet default/daemonset-example k8s:default/DaemonSet/daemonset-example',
        'kubernetes:core/v1:Service default/multiple-protocol-port-svc k8s:default/Service/multiple-protocol-port-svc',
        'kubernetes:core/v1:Service default/kubernetes k8s:default/Service/kubernetes',
        'kubernetes:core/v1:Service httpbin/httpbin-svc k8s:httpbin/Service/httpbin-svc',
        'kubernetes:core/v1:Service myproject/svc1 k8s:myproject/Service/svc1',
        'kubernetes:core/v1:Service edit-test/svc1 k8s:edit-test/Service/svc1',
      ].sort(),
    );
    // The ServiceList's items carry no kind or apiVersion; the observed resource does, as a manifest does.
    const listed = observed.find((r) => r.id === 'edit-test/svc1')!;
    expect(listed.properties).toMatchObject({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc1', namespace: 'edit-test', labels: { app: 'svc1' } } });
    // The webhook's label stays (it is there); the last-applied copy of a manifest does not, the revision does.
    const manualApply = observed.find((r) => r.id === 'default/manual-apply-test-deployment')!;
    expect(manualApply.properties.metadata).toEqual({
      name: 'manual-apply-test-deployment',
      namespace: 'default',
      labels: { app: 'manual-apply-app', 'applications.argoproj.io/app-name': 'manual-apply-app', 'mutation-test': 'FROM-MUTATION-WEBHOOK' },
      annotations: { 'deployment.kubernetes.io/revision': '4' },
    });
    const redis = observed.find((r) => r.id === 'default/redis-master')!;
    expect((redis.properties.spec as { volumeClaimTemplates: JsonValue[] }).volumeClaimTemplates).toEqual([
      {
        kind: 'PersistentVolumeClaim',
        apiVersion: 'v1',
        metadata: { labels: { app: 'redis', chart: 'redis-3.6.5', component: 'master', heritage: 'Tiller', release: 'redis' }, name: 'redis-data' },
        spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '8Gi' } } },
      },
    ]);
    const everything = JSON.stringify(observed);
    for (const noise of ['managedFields', 'resourceVersion', '"uid"', 'creationTimestamp', '"generation"', 'selfLink', 'last-applied-configuration', '"status"', 'loadBalancer']) {
      expect(everything).not.toContain(noise);
    }
  });

  it('when a namespace has more than a page, then the continue token is followed and both pages are returned', async () => {
    const observed = await observer(1).observe(scopeOf(['default']), live());

    const deployments = server.requests.filter((r) => r.path.endsWith('/deployments'));
    expect(deployments.map((r) => [r.query.get('limit'), r.query.get('continue')])).toEqual([
      ['1', null],
      ['1', 'page-2'],
    ]);
    expect(observed.filter((r) => r.type === KUBERNETES_TYPES.Deployment).map((r) => r.id)).toEqual(['default/manual-apply-test-deployment', 'default/docs', 'default/deployment-example']);
  });

  it('when two namespaces are observed, then every kind is listed in each, signed with the target\'s token', async () => {
    await observer().observe(scopeOf(['default', 'edit-test']), live());
    const kinds = ['apis/apps/v1/namespaces/{ns}/deployments', 'apis/apps/v1/namespaces/{ns}/statefulsets', 'apis/apps/v1/namespaces/{ns}/daemonsets', 'api/v1/namespaces/{ns}/services'];
    const expected = ['default', 'edit-test'].flatMap((ns) => kinds.map((k) => `/${k.replace('{ns}', ns)}`)).concat('/apis/apps/v1/namespaces/default/deployments');
    expect(server.requests.map((r) => r.path).sort()).toEqual(expected.sort());
    expect(new Set(server.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer observer-token']));
  });

  it('when an object carries the urn annotation, then its urn is the annotation', () => {
    const nginx = JSON.parse(served.json(FILES.nginx)) as KubernetesObject;
    const annotated = { ...nginx, metadata: { ...nginx.metadata, annotations: { ...nginx.metadata?.annotations, [URN_ANNOTATION]: 'urn:pulumi:dev::app::kubernetes:apps/v1:Deployment::nginx' } } };
    expect(kubernetesObjectToObserved('Deployment', annotated).urn).toBe('urn:pulumi:dev::app::kubernetes:apps/v1:Deployment::nginx');
    const { namespace: _namespace, ...withoutNamespace } = nginx.metadata!;
    expect(kubernetesObjectToObserved('Deployment', { ...nginx, metadata: withoutNamespace }, 'listed-ns')).toMatchObject({ id: 'listed-ns/nginx', urn: 'k8s:listed-ns/Deployment/nginx' });
  });

  it('when the API server refuses a list (403), then INVENTORY.TARGET_UNREACHABLE with the status and the reason', async () => {
    server.override = (_req, res, path) => {
      if (!path.endsWith('/statefulsets')) return false;
      res.writeHead(403, { 'content-type': 'application/json' }).end(status(403, 'Forbidden', 'statefulsets.apps is forbidden'));
      return true;
    };
    expect(await refusal(observer().observe(scopeOf(['default']), live()))).toMatchObject({
      code: 'INVENTORY.TARGET_UNREACHABLE',
      kind: 'unavailable',
      details: { observer: 'kubernetes', environmentId: 'env-dev', target: 'aks-test', namespaces: ['default'], status: 403, reason: 'Forbidden' },
    });
  });

  it('when a continued page has expired (410), then the observation fails: the first page is never returned alone', async () => {
    server.override = (_req, res, path) => {
      if (!path.endsWith('/deployments') || server.requests.filter((r) => r.path.endsWith('/deployments')).length < 2) return false;
      res.writeHead(410, { 'content-type': 'application/json' }).end(status(410, 'Expired', 'The provided continue parameter is too old to display a consistent list result.'));
      return true;
    };
    expect(await refusal(observer(1).observe(scopeOf(['default']), live()))).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', details: { status: 410, reason: 'Expired' } });
  });

  it('when the signal aborts while requests are pending, then they are cancelled and the observation fails with INVENTORY.OBSERVE_TIMEOUT', async () => {
    const controller = new AbortController();
    const closedByClient: string[] = [];
    server.override = (req, _res, path) => {
      // Never answers; the client closing the connection shows the request was cancelled.
      req.socket.once('close', () => closedByClient.push(path));
      if (server.requests.length === 4) controller.abort();
      return true;
    };
    const error = await refusal(observer().observe(scopeOf(['default']), { signal: controller.signal }));
    expect(error).toMatchObject({ code: 'INVENTORY.OBSERVE_TIMEOUT', kind: 'unavailable', details: { observer: 'kubernetes', namespaces: ['default'] } });
    await expect.poll(() => closedByClient.length).toBe(4);
  });

  it('when no Entra token can be had for the target, then INVENTORY.TARGET_UNREACHABLE naming the target, and nothing is sent', async () => {
    const { CredentialUnavailableError } = await import('@azure/identity');
    const failing = (token: () => Promise<AccessToken | null>) =>
      createKubernetesObserver({ clusters: new Map([['aks-test', { auth: 'entra', server: server.url, certificateAuthorityData: ca(TLS) }]]), credential: () => ({ getToken: token }) });
    expect(await refusal(failing(() => Promise.reject(new CredentialUnavailableError('ManagedIdentityCredential: no managed identity endpoint'))).observe(scopeOf(['default']), live()))).toMatchObject({
      code: 'INVENTORY.TARGET_UNREACHABLE',
      kind: 'unavailable',
      message: expect.stringContaining('no managed identity endpoint'),
      details: { target: 'aks-test', environmentId: 'env-dev' },
    });
    expect(await refusal(failing(async () => null).observe(scopeOf(['default']), live()))).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', kind: 'unavailable' });
    expect(server.requests).toEqual([]);
  });

  it('when the scope names no namespaces, then a validation error, and nothing is sent', async () => {
    const { kubernetes: _kubernetes, ...noNamespaces } = scopeOf(['default']);
    expect(await refusal(observer().observe(noNamespaces, live()))).toMatchObject({ code: 'INVENTORY.SCOPE_INCOMPLETE', kind: 'validation' });
    expect(server.requests).toEqual([]);
  });
});

describe.skipIf(!present)('Kubernetes drift: what the manifest sets, as server-side apply compares it', () => {
  let server: ApiServer;
  let observed: ObservedResource[];
  beforeAll(async () => {
    server = await apiServer(fixtureLists, TLS);
    const observer = createKubernetesObserver({ clusters: new Map([['aks-test', { auth: 'entra', server: server.url, certificateAuthorityData: ca(TLS) }]]), credential: () => aToken });
    observed = await observer.observe(scopeOf(NAMESPACES), live());
  });
  afterAll(() => server.close());

  /** The drift of one observed object from a desired manifest, as a scan finds it; `whole` compares every property both ways. */
  function driftOf(kind: KubernetesKind, id: string, manifest: Manifest) {
    const resource = observed.filter((r) => r.type === KUBERNETES_TYPES[kind] && r.id === id);
    expect(resource).toHaveLength(1);
    const desired: Resources = { [resource[0]!.urn]: { type: KUBERNETES_TYPES[kind], properties: manifest } };
    const inventory = observedForInventory(desired, resource);
    const shown = (findings: readonly DriftFinding[]) => findings.map((f) => (f.kind === 'modified' ? { path: f.path.join('.'), desired: f.desired, observed: f.observed } : { kind: f.kind }));
    return {
      findings: shown(diffResources(desired, inventory, [], NOW, manifestComparison).findings),
      whole: shown(diffResources(desired, inventory, [], NOW).findings).map((f) => ('path' in f ? f.path : f.kind)),
      inventory,
    };
  }

  const nginx = (image = 'gcr.io/kakaraparthy-devel/nginx:latest', replicas = 3): Manifest => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'nginx', namespace: 'edit-test', labels: { app: 'nginx' } },
    spec: { replicas, selector: { matchLabels: { app: 'nginx' } }, template: { metadata: { labels: { app: 'nginx' } }, spec: { containers: [{ name: 'nginx', image }] } } },
  });

  it("when a Deployment's manifest sets a part of what the server holds, then the server's defaults are no drift (compared whole, they all would be)", () => {
    const { findings, whole } = driftOf('Deployment', 'edit-test/nginx', nginx());
    expect(findings).toEqual([]);
    expect(whole).toEqual(
      expect.arrayContaining([
        'spec.progressDeadlineSeconds',
        'spec.revisionHistoryLimit',
        'spec.strategy',
        'spec.template.spec.dnsPolicy',
        'spec.template.spec.schedulerName',
        'spec.template.spec.containers.0.imagePullPolicy',
        'spec.template.spec.containers.0.terminationMessagePath',
      ]),
    );
  });

  it("when a field the manifest sets differs (the image, the replicas), then that is drift, with the desired and the observed value", () => {
    expect(driftOf('Deployment', 'edit-test/nginx', nginx('nginx:1.27')).findings).toEqual([
      { path: 'spec.template.spec.containers.0.image', desired: 'nginx:1.27', observed: 'gcr.io/kakaraparthy-devel/nginx:latest' },
    ]);
    expect(driftOf('Deployment', 'edit-test/nginx', nginx(undefined, 2)).findings).toEqual([{ path: 'spec.replicas', desired: 2, observed: 3 }]);
  });

  describe('a Deployment with several field managers (gitops-engine, with managedFields)', () => {
    const applied = () => lastApplied(served.json(FILES.manualApply));
    type Container = { name: string; ports?: Manifest[]; resources?: Manifest; [key: string]: JsonValue | undefined };
    const withContainers = (change: (containers: Container[]) => Container[]): Manifest => {
      const manifest = applied() as { spec: { template: { spec: { containers: Container[] } } } };
      manifest.spec.template.spec.containers = change(manifest.spec.template.spec.containers);
      return manifest as unknown as Manifest;
    };

    it("when the manifest kubectl applied is desired, in another container order, then other managers' port and resources, the webhook's label and the defaults are no drift", () => {
      // The premise: the live object holds what other managers added (argocd-controller's port 40, a webhook's label).
      const seen = observed.find((r) => r.id === 'default/manual-apply-test-deployment')!;
      expect(JSON.stringify(seen.properties)).toContain('"containerPort":40');
      expect(JSON.stringify(seen.properties)).toContain('FROM-MUTATION-WEBHOOK');

      const { findings, whole } = driftOf('Deployment', 'default/manual-apply-test-deployment', withContainers((containers) => [...containers].reverse()));
      expect(findings).toEqual([]);
      expect(whole.length).toBeGreaterThan(10);
    });

    it('when a port the manifest sets is not there (another number, or another protocol than the TCP a port without one is), then that port is drift', () => {
      const port = (ports: Manifest[]) => withContainers((containers) => containers.map((c) => (c.name === 'main-container' ? { ...c, ports } : c)));
      expect(driftOf('Deployment', 'default/manual-apply-test-deployment', port([{ containerPort: 8080, name: 'http' }])).findings).toEqual([
        { path: 'spec.template.spec.containers.0.ports.0', desired: { containerPort: 8080, name: 'http' } },
      ]);
      expect(driftOf('Deployment', 'default/manual-apply-test-deployment', port([{ containerPort: 80, name: 'http', protocol: 'UDP' }])).findings).toEqual([
        { path: 'spec.template.spec.containers.0.ports.0', desired: { containerPort: 80, name: 'http', protocol: 'UDP' } },
      ]);
      expect(driftOf('Deployment', 'default/manual-apply-test-deployment', port([{ containerPort: 80, name: 'web' }])).findings).toEqual([
        { path: 'spec.template.spec.containers.0.ports.0.name', desired: 'web', observed: 'http' },
      ]);
    });

    it('when a container the manifest sets is not there, then that container is drift, one finding', () => {
      const { findings } = driftOf('Deployment', 'default/manual-apply-test-deployment', withContainers((containers) => [...containers, { name: 'sidecar', image: 'envoy:1.31' }]));
      expect(findings).toEqual([{ path: 'spec.template.spec.containers.2', desired: { name: 'sidecar', image: 'envoy:1.31' } }]);
    });

    it('when a memory limit is written in other units for the same amount, then it is no drift; another amount is', () => {
      const memory = (value: string) =>
        withContainers((containers) => containers.map((c) => (c.name === 'main-container' ? { ...c, resources: { limits: { memory: value } } } : c)));
      expect(driftOf('Deployment', 'default/manual-apply-test-deployment', memory('102400Ki')).findings).toEqual([]);
      expect(driftOf('Deployment', 'default/manual-apply-test-deployment', memory('104857600')).findings).toEqual([]);
      expect(driftOf('Deployment', 'default/manual-apply-test-deployment', memory('100M')).findings).toEqual([
        { path: 'spec.template.spec.containers.0.resources.limits.memory', desired: '100M', observed: '100Mi' },
      ]);
    });
  });

  describe('a StatefulSet (gitops-engine health data)', () => {
    // It was applied as apps/v1beta2; the same object read as apps/v1 is what a Pulumi apps/v1 StatefulSet declares.
    const applied = () => ({ ...lastApplied(served.yaml(FILES.redis)), apiVersion: 'apps/v1' }) as unknown as { spec: { template: { spec: { containers: Manifest[] } }; volumeClaimTemplates: Manifest[] } };
    const asManifest = (value: object) => value as Manifest;

    it("when its applied manifest is desired, then the server's additions to the volume claim templates (an atomic list) and to the pod are no drift", () => {
      const { findings, whole } = driftOf('StatefulSet', 'default/redis-master', asManifest(applied()));
      expect(findings).toEqual([]);
      expect(whole).toEqual(expect.arrayContaining(['spec.podManagementPolicy', 'spec.volumeClaimTemplates.0.kind', 'spec.volumeClaimTemplates.0.apiVersion']));
    });

    it('when a volume claim template differs, or there is another one, then the atomic list is drift: at the field, or the whole list', () => {
      const storage = (value: string) => {
        const manifest = applied();
        manifest.spec.volumeClaimTemplates = manifest.spec.volumeClaimTemplates.map((t) => ({ ...t, spec: { ...(t.spec as object), resources: { requests: { storage: value } } } }));
        return asManifest(manifest);
      };
      expect(driftOf('StatefulSet', 'default/redis-master', storage('16Gi')).findings).toEqual([
        { path: 'spec.volumeClaimTemplates.0.spec.resources.requests.storage', desired: '16Gi', observed: '8Gi' },
      ]);
      expect(driftOf('StatefulSet', 'default/redis-master', storage('8192Mi')).findings).toEqual([]);

      const two = applied();
      two.spec.volumeClaimTemplates = [...two.spec.volumeClaimTemplates, { metadata: { name: 'redis-logs' }, spec: { accessModes: ['ReadWriteOnce'] } }];
      const { findings } = driftOf('StatefulSet', 'default/redis-master', asManifest(two));
      expect(findings).toEqual([{ path: 'spec.volumeClaimTemplates', desired: two.spec.volumeClaimTemplates, observed: expect.any(Array) }]);
    });

    it('when a desired env value is a secret reference and the env list is in another order than the live one, then the live value stays hidden and is not drift', () => {
      const manifest = applied();
      const [container] = manifest.spec.template.spec.containers;
      const env = (container!.env as Manifest[]).map((e) => (e.name === 'REDIS_DISABLE_COMMANDS' ? { name: 'REDIS_DISABLE_COMMANDS', value: { secretRef: 'broker://redis/disable-commands' } } : e)).reverse();
      manifest.spec.template.spec.containers = [{ ...container!, env }];

      const { findings, inventory } = driftOf('StatefulSet', 'default/redis-master', asManifest(manifest));
      expect(findings).toEqual([]);
      expect(JSON.stringify(inventory)).not.toContain('FLUSHDB,FLUSHALL');
      expect(JSON.stringify(inventory)).toContain('"value":{"secretRef":"broker://redis/disable-commands"}');
    });
  });

  it('when the DaemonSet of the API reference is desired as its create request wrote it, then its response is no drift; another image is', () => {
    const request = () => parseYaml((parseYaml(text(FILES.daemonSet)) as { request: string }).request) as { spec: { template: { spec: { containers: Manifest[] } } } };
    expect(driftOf('DaemonSet', 'default/daemonset-example', request() as unknown as Manifest).findings).toEqual([]);

    const changed = request();
    changed.spec.template.spec.containers = [{ ...changed.spec.template.spec.containers[0]!, image: 'ubuntu:noble' }];
    expect(driftOf('DaemonSet', 'default/daemonset-example', changed as unknown as Manifest).findings).toEqual([
      { path: 'spec.template.spec.containers.0.image', desired: 'ubuntu:noble', observed: 'ubuntu:trusty' },
    ]);
  });

  describe('Services', () => {
    const httpbin = (targetPort: number): Manifest => ({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'httpbin-svc', namespace: 'httpbin' },
      // The fields argocd-controller applied (its managedFields), in another port order than the live one.
      spec: { ports: [{ name: 'test', port: 333 }, { name: 'http-port', port: 7777, targetPort }], selector: { app: 'httpbin' } },
    });

    it("when a Service's manifest sets its ports and selector, then the cluster IPs, the IP families, the session affinity and the defaulted target port are no drift; a changed target port is", () => {
      expect(driftOf('Service', 'httpbin/httpbin-svc', httpbin(80)).findings).toEqual([]);
      expect(driftOf('Service', 'httpbin/httpbin-svc', httpbin(8080)).findings).toEqual([{ path: 'spec.ports.1.targetPort', desired: 8080, observed: 80 }]);
    });

    it('when the manifests kubectl applied are desired, then the live Services are no drift, and ports are told apart by protocol', () => {
      const multi = lastApplied(served.yaml(FILES.multiProtocol));
      expect(driftOf('Service', 'default/multiple-protocol-port-svc', multi).findings).toEqual([]);
      const { metadata, spec } = lastApplied(served.json(FILES.svc1)) as { metadata: { name: string; namespace: string; labels: Manifest }; spec: Manifest };
      const svc1 = { apiVersion: 'v1', kind: 'Service', metadata: { name: metadata.name, namespace: metadata.namespace, labels: metadata.labels }, spec };
      expect(driftOf('Service', 'myproject/svc1', svc1).findings).toEqual([]);

      // The live 1986 port is UDP; a port without a protocol is the TCP one, which is not there.
      const tcp = multi as { spec: { ports: { protocol?: string }[] } };
      const { protocol: _protocol, ...rtmpkTcp } = tcp.spec.ports[0]!;
      const asTcp = { ...multi, spec: { ...tcp.spec, ports: [rtmpkTcp, ...tcp.spec.ports.slice(1)] } } as Manifest;
      expect(driftOf('Service', 'default/multiple-protocol-port-svc', asTcp).findings).toEqual([{ path: 'spec.ports.0', desired: rtmpkTcp }]);
    });

    it("when a listed Service (a ServiceList's item, with no kind) is desired with its kind and API version, then it is no drift", () => {
      const svc1 = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc1', labels: { app: 'svc1' } }, spec: { ports: [{ name: '80', port: 82, targetPort: 81 }] } };
      expect(driftOf('Service', 'edit-test/svc1', svc1).findings).toEqual([]);
      expect(driftOf('Service', 'edit-test/svc1', { ...svc1, kind: 'Endpoints' }).findings).toEqual([{ path: 'kind', desired: 'Endpoints', observed: 'Service' }]);
    });
  });
});

describe('Kubernetes comparison: resource quantities', () => {
  const containers = (cpu: JsonValue, memory: JsonValue) => ({ spec: { template: { spec: { containers: [{ name: 'app', resources: { requests: { cpu, memory } } }] } } } });
  const diff = (desired: ReturnType<typeof containers>, observed: ReturnType<typeof containers>) => diffManifest(desired, observed, kubernetesListKeys('kubernetes:apps/v1:Deployment')!);

  it('when a quantity is written in other units for the same amount, then it is equal; another amount, or a quantity anywhere else, is compared as written', () => {
    // The API stores a quantity in its canonical form: `0.5` cpu is read back as `500m`, `1.5Gi` as `1536Mi`.
    expect(diff(containers('0.5', '1.5Gi'), containers('500m', '1536Mi'))).toEqual([]);
    expect(diff(containers(2, '1e3'), containers('2', '1k'))).toEqual([]);
    expect(diff(containers('250m', '1Gi'), containers('500m', '1G')).map((d) => d.path.join('.'))).toEqual([
      'spec.template.spec.containers.0.resources.requests.cpu',
      'spec.template.spec.containers.0.resources.requests.memory',
    ]);
    // Outside a resource list a value is compared exactly as it was written.
    expect(diffManifest({ spec: { replicas: '1' } }, { spec: { replicas: '1.0' } }, () => undefined)).toEqual([{ path: ['spec', 'replicas'], desired: '1', observed: '1.0' }]);
  });
});

describe('RuntimeCloud__Targets: each target names its own cluster and credential', () => {
  const BACKEND = { url: 'azblob://state-{tenant}?storage_account=stprod' };
  const targets = (list: object[]) => parseConfig({ RuntimeCloud__Targets: JSON.stringify(list) }).targets;
  const problemsOf = (list: object[]) => {
    try {
      targets(list);
    } catch (error) {
      return (error as ConfigError).problems.map((p) => `${p.field}: ${p.message}`);
    }
    return [];
  };

  it('when targets name their clusters, then each gets its own: an AKS API server with its CA and observer identity, or its own kubeconfig', () => {
    const clusters = kubernetesClusters(
      targets([
        { id: 'aks-we', kind: 'aks-cluster', name: 'AKS WE', backend: BACKEND, observerClientId: 'observer-we', kubernetes: { server: 'https://aks-we.hcp.westeurope.azmk8s.io:443', certificateAuthorityData: 'LS0tLS1CRUdJTg==' } },
        { id: 'aks-ne', kind: 'aks-cluster', name: 'AKS NE', backend: BACKEND, endpoint: 'https://aks-ne.hcp.northeurope.azmk8s.io:443' },
        { id: 'dc', kind: 'on-prem', name: 'DC', backend: BACKEND, kubernetes: { kubeconfig: { path: '/mnt/secrets/dc.kubeconfig', context: 'reader' } } },
        { id: 'dc-2', kind: 'on-prem', name: 'DC 2', backend: BACKEND, endpoint: 'https://dc-2.example.test' },
        { id: 'aks-bare', kind: 'aks-cluster', name: 'AKS', backend: BACKEND },
      ]),
    );
    expect(Object.fromEntries(clusters)).toEqual({
      'aks-we': { auth: 'entra', server: 'https://aks-we.hcp.westeurope.azmk8s.io:443', certificateAuthorityData: 'LS0tLS1CRUdJTg==', observerClientId: 'observer-we' },
      'aks-ne': { auth: 'entra', server: 'https://aks-ne.hcp.northeurope.azmk8s.io:443' },
      dc: { auth: 'kubeconfig', path: '/mnt/secrets/dc.kubeconfig', context: 'reader' },
    } satisfies Record<string, KubernetesCluster>);
  });

  it('when cluster settings do not fit the target, then they are refused naming the field', () => {
    const aks = { id: 'k', kind: 'aks-cluster', name: 'K', backend: BACKEND };
    expect(problemsOf([{ id: 's', kind: 'azure-subscription', name: 'S', backend: BACKEND, kubernetes: { kubeconfig: { path: '/k' } } }])).toEqual([
      expect.stringMatching(/^RuntimeCloud__Targets\.0\.kubernetes: applies to aks-cluster and on-prem targets only/),
    ]);
    expect(problemsOf([{ id: 'dc', kind: 'on-prem', name: 'DC', backend: BACKEND, kubernetes: { server: 'https://dc.example.test' } }])).toEqual([
      expect.stringMatching(/^RuntimeCloud__Targets\.0\.kubernetes: server and certificateAuthorityData are for an aks-cluster target/),
    ]);
    expect(problemsOf([{ ...aks, kubernetes: { server: 'https://k.example.test', kubeconfig: { path: '/k' } } }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.kubernetes: /)]);
    expect(problemsOf([{ ...aks, kubernetes: { certificateAuthorityData: 'not base64!' } }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.kubernetes\.certificateAuthorityData: /)]);
    expect(problemsOf([{ ...aks, kubernetes: { kubeconfigPath: '/k' } }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.kubernetes: /)]);
    // An API server is spoken to over TLS only: a bearer token never goes out in plain HTTP.
    expect(problemsOf([{ ...aks, kubernetes: { server: 'http://k.example.test' } }])).toEqual([expect.stringMatching(/^RuntimeCloud__Targets\.0\.kubernetes\.server: /)]);
  });
});

describe.skipIf(!present)("Kubernetes observer: each target read with its own credential (@azure/identity against an App Service identity endpoint, HTTPS API servers with their own CA)", () => {
  /** The App Service managed identity protocol (2019-08-01): one token per client id, recorded with the resource asked for. */
  let identity: Server;
  const asked: { clientId: string | null; resource: string | null }[] = [];
  const saved = { endpoint: process.env.IDENTITY_ENDPOINT, header: process.env.IDENTITY_HEADER, kubeconfig: process.env.KUBECONFIG };
  const certificates = { a: selfSignedCertificate(), b: selfSignedCertificate() };
  let clusterA: ApiServer;
  let clusterB: ApiServer;
  let directory: string;

  beforeAll(async () => {
    identity = createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://localhost');
      const clientId = url.searchParams.get('client_id');
      asked.push({ clientId, resource: url.searchParams.get('resource') });
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ access_token: `token-of-${clientId ?? 'system'}`, expires_on: String(Math.floor(Date.now() / 1000) + 3600), resource: url.searchParams.get('resource'), token_type: 'Bearer', client_id: clientId }));
    });
    await new Promise<void>((resolve) => identity.listen(0, '127.0.0.1', resolve));
    process.env.IDENTITY_ENDPOINT = `http://127.0.0.1:${(identity.address() as AddressInfo).port}/msi/token`;
    process.env.IDENTITY_HEADER = 'identity-header-secret';
    // Two clusters whose namespaces have the same names: contoso's Deployment is in one, fabrikam's StatefulSet in the other.
    clusterA = await apiServer((path) => (path === '/apis/apps/v1/namespaces/default/deployments' ? listOf('Deployment', [served.json(FILES.manualApply)]) : undefined), certificates.a);
    clusterB = await apiServer((path) => (path === '/apis/apps/v1/namespaces/default/statefulsets' ? listOf('StatefulSet', [served.yaml(FILES.redis)]) : undefined), certificates.b);
    directory = mkdtempSync(join(tmpdir(), 'rch-kubeconfig-'));
  });
  afterAll(async () => {
    for (const [key, value] of [['IDENTITY_ENDPOINT', saved.endpoint], ['IDENTITY_HEADER', saved.header], ['KUBECONFIG', saved.kubeconfig]] as const) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    await Promise.all([clusterA.close(), clusterB.close(), new Promise((resolve) => identity.close(resolve))]);
    rmSync(directory, { recursive: true, force: true });
  });
  beforeEach(() => {
    asked.length = 0;
    clusterA.requests.length = 0;
    clusterB.requests.length = 0;
  });

  const BACKEND = { url: 'azblob://state-{tenant}?storage_account=stprod' };
  const aksTarget = (id: string, server: ApiServer, observerClientId: string, certificate?: TestCertificate) => ({
    id,
    kind: 'aks-cluster',
    name: id,
    backend: BACKEND,
    observerClientId,
    kubernetes: { server: server.url, ...(certificate ? { certificateAuthorityData: ca(certificate) } : {}) },
  });
  const observerFor = (targetList: object[]) => createKubernetesObserver({ clusters: kubernetesClusters(parseConfig({ RuntimeCloud__Targets: JSON.stringify(targetList) }).targets) });

  it('when two tenants with the same environment and namespace names live on two AKS targets, then each is read in its own cluster with its own observer identity, and sees only its own objects', async () => {
    // Arrange
    const observer = observerFor([aksTarget('aks-contoso', clusterA, 'observer-contoso', certificates.a), aksTarget('aks-fabrikam', clusterB, 'observer-fabrikam', certificates.b)]);

    // Act
    const contoso = await observer.observe(scopeOf(['default'], 'aks-contoso', 'contoso', 'env-prod'), live());
    const fabrikam = await observer.observe(scopeOf(['default'], 'aks-fabrikam', 'fabrikam', 'env-prod'), live());

    // Assert
    expect(contoso.map((r) => r.id)).toEqual(['default/manual-apply-test-deployment']);
    expect(fabrikam.map((r) => r.id)).toEqual(['default/redis-master']);
    expect(asked).toEqual([
      { clientId: 'observer-contoso', resource: AKS_TOKEN_SCOPE.replace('/.default', '') },
      { clientId: 'observer-fabrikam', resource: '6dae42f8-4368-4678-94ff-3960e28e3630' },
    ]);
    expect(clusterA.requests).toHaveLength(4);
    expect(clusterB.requests).toHaveLength(4);
    expect(new Set(clusterA.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer token-of-observer-contoso']));
    expect(new Set(clusterB.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer token-of-observer-fabrikam']));
  });

  it("when a target's CA is another cluster's, then its API server is not trusted: the observation fails and no token is sent", async () => {
    const observer = observerFor([aksTarget('aks-contoso', clusterA, 'observer-contoso', certificates.b)]);
    expect(await refusal(observer.observe(scopeOf(['default'], 'aks-contoso'), live()))).toMatchObject({ code: 'INVENTORY.TARGET_UNREACHABLE', details: { target: 'aks-contoso' } });
    expect(clusterA.requests).toEqual([]);
  });

  it("when a target names its own kubeconfig and context, then that context's cluster and user are used for it, and an environment on a target without a cluster is not read through any kubeconfig", async () => {
    // Arrange: a kubeconfig for the on-prem target (reader context on cluster A), and KUBECONFIG of the host naming cluster B.
    const kubeconfig = (name: string, contexts: { name: string; server: ApiServer; certificate: TestCertificate; token: string }[], current: string) => {
      const path = join(directory, name);
      writeFileSync(
        path,
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Config',
          clusters: contexts.map((c) => ({ name: c.name, cluster: { server: c.server.url, 'certificate-authority-data': ca(c.certificate) } })),
          users: contexts.map((c) => ({ name: c.name, user: { token: c.token } })),
          contexts: contexts.map((c) => ({ name: c.name, context: { cluster: c.name, user: c.name } })),
          'current-context': current,
        }),
      );
      return path;
    };
    const dc = kubeconfig('dc.kubeconfig', [{ name: 'admin', server: clusterB, certificate: certificates.b, token: 'admin-token' }, { name: 'reader', server: clusterA, certificate: certificates.a, token: 'reader-token' }], 'admin');
    process.env.KUBECONFIG = kubeconfig('host.kubeconfig', [{ name: 'host', server: clusterB, certificate: certificates.b, token: 'host-token' }], 'host');
    const observer = observerFor([
      { id: 'dc', kind: 'on-prem', name: 'DC', backend: BACKEND, kubernetes: { kubeconfig: { path: dc, context: 'reader' } } },
      { id: 'dc-2', kind: 'on-prem', name: 'DC 2', backend: BACKEND, endpoint: clusterB.url },
    ]);

    const noSuchContext = observerFor([{ id: 'dc', kind: 'on-prem', name: 'DC', backend: BACKEND, kubernetes: { kubeconfig: { path: dc, context: 'writer' } } }]);

    // Act
    const observed = await observer.observe(scopeOf(['default'], 'dc'), live());
    const elsewhere = await refusal(observer.observe(scopeOf(['default'], 'dc-2', 'fabrikam'), live()));
    const otherContext = await refusal(noSuchContext.observe(scopeOf(['default'], 'dc'), live()));

    // Assert
    expect(observed.map((r) => r.id)).toEqual(['default/manual-apply-test-deployment']);
    expect(new Set(clusterA.requests.map((r) => r.authorization))).toEqual(new Set(['Bearer reader-token']));
    expect(elsewhere).toMatchObject({ code: 'INVENTORY.SCOPE_INCOMPLETE', details: { target: 'dc-2' } });
    expect(otherContext).toMatchObject({ code: 'INVENTORY.SCOPE_INCOMPLETE', message: expect.stringContaining('has no context writer') });
    expect(clusterB.requests).toEqual([]);
    expect(asked).toEqual([]);
  });
});
