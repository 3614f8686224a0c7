import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  createKubernetesObserver,
  kubernetesObjectToObserved,
  type KubernetesKind,
  type KubernetesObject,
  type KubernetesSdk,
} from '../../shared/inventory/kubernetes-observer.adapter';
import type { ObservationScope } from '../../shared/inventory/observer';
import { refusal } from '../support/refusal';

/**
 * The Kubernetes observer on RECORDED responses: a cluster cannot be reached from a test run. The SDK itself runs
 * (paging, deserialization, its errors); only the transport is replaced: a local HTTP server plays the Kubernetes
 * API from tests/fixtures/kubernetes. The ARM observer has its own file (inventory-arm-observer.test.ts), on
 * Microsoft's published responses.
 */

const FIXTURES = join(__dirname, '..', 'fixtures');
function fixture<T = unknown>(path: string): T {
  return JSON.parse(readFileSync(join(FIXTURES, path), 'utf8')) as T;
}

/** The tenant, environment and stack every scope of these tests names. */
const DEV_SCOPE = { tenant: 'tenant-a', environmentId: 'env-dev', stack: { tenant: 'tenant-a', project: 'app', stack: 'dev' } } as const;

const live = () => ({ signal: new AbortController().signal });

interface KubernetesListFixture {
  readonly items: KubernetesObject[];
  readonly metadata: { readonly continue?: string };
}

const NAMESPACE = 'rch-dev';
const DEPLOYMENTS_1 = fixture<KubernetesListFixture>('kubernetes/deployments.page-1.json');
const DEPLOYMENTS_2 = fixture<KubernetesListFixture>('kubernetes/deployments.page-2.json');
const STATEFULSETS = fixture<KubernetesListFixture>('kubernetes/statefulsets.json');
const DAEMONSETS = fixture<KubernetesListFixture>('kubernetes/daemonsets.json');
const SERVICES = fixture<KubernetesListFixture>('kubernetes/services.json');
const FORBIDDEN = fixture('kubernetes/status-403-forbidden.json');

describe('Kubernetes observer: mapping a listed object', () => {
  it('when a Deployment carries the urn annotation, then its urn is the annotation and its properties are metadata (name, namespace, labels) and the spec', () => {
    const api = DEPLOYMENTS_1.items[0]!;
    const observed = kubernetesObjectToObserved('Deployment', api);
    expect(observed.urn).toBe('urn:pulumi:dev::rch-k8s::kubernetes:apps/v1:Deployment::api');
    expect(observed.type).toBe('kubernetes:apps/v1:Deployment');
    expect(observed.id).toBe('rch-dev/api');
    expect(observed.properties).toEqual({
      metadata: { name: 'api', namespace: NAMESPACE, labels: { 'app.kubernetes.io/name': 'rch-api', 'app.kubernetes.io/part-of': 'rch', 'app.kubernetes.io/managed-by': 'pulumi' } },
      spec: {
        replicas: 2,
        selector: { matchLabels: { 'app.kubernetes.io/name': 'rch-api' } },
        template: {
          // The server's `creationTimestamp: null` is gone; the labels stay.
          metadata: { labels: { 'app.kubernetes.io/name': 'rch-api', 'app.kubernetes.io/part-of': 'rch' } },
          spec: {
            containers: [
              {
                name: 'rch-api',
                image: 'crrchdev.azurecr.io/rch/api:1.14.2',
                ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
                env: [{ name: 'ASPNETCORE_URLS', value: 'http://+:8080' }],
                resources: { limits: { cpu: '250m', memory: '256Mi' }, requests: { cpu: '250m', memory: '256Mi' } },
                terminationMessagePath: '/dev/termination-log',
                terminationMessagePolicy: 'File',
                imagePullPolicy: 'IfNotPresent',
              },
            ],
            restartPolicy: 'Always',
            terminationGracePeriodSeconds: 30,
            dnsPolicy: 'ClusterFirst',
            securityContext: {},
            schedulerName: 'default-scheduler',
          },
        },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: '25%', maxSurge: '25%' } },
        revisionHistoryLimit: 10,
        progressDeadlineSeconds: 600,
      },
    });
  });

  it('when an object has no urn annotation, then its urn is k8s:<namespace>/<kind>/<name>', () => {
    expect(kubernetesObjectToObserved('Deployment', DEPLOYMENTS_2.items[0]!).urn).toBe('k8s:rch-dev/Deployment/debug-shell');
    expect(kubernetesObjectToObserved('Service', SERVICES.items[1]!)).toMatchObject({ urn: 'k8s:rch-dev/Service/redis', type: 'kubernetes:core/v1:Service', id: 'rch-dev/redis' });
  });

  it('when a StatefulSet embeds volume claim templates, then their status and the server metadata are dropped, and no status or bookkeeping is left anywhere', () => {
    const observed = kubernetesObjectToObserved('StatefulSet', STATEFULSETS.items[0]!);
    const spec = observed.properties.spec as { volumeClaimTemplates: unknown[]; serviceName: string };
    expect(spec.serviceName).toBe('redis');
    expect(spec.volumeClaimTemplates).toEqual([
      {
        kind: 'PersistentVolumeClaim',
        apiVersion: 'v1',
        metadata: { name: 'data' },
        spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } }, storageClassName: 'managed-csi', volumeMode: 'Filesystem' },
      },
    ]);
    const text = JSON.stringify(observed.properties);
    for (const noise of ['"status"', 'managedFields', 'resourceVersion', '"uid"', 'creationTimestamp', '"generation"', 'annotations']) expect(text).not.toContain(noise);
  });

  it('when an item lacks its namespace, then the listed namespace is used', () => {
    expect(kubernetesObjectToObserved('Service', { metadata: { name: 'x' }, spec: {} }, 'ns-1')).toMatchObject({ id: 'ns-1/x', urn: 'k8s:ns-1/Service/x' });
  });
});

/** A stand-in for the Kubernetes API server that answers list requests from the recorded responses. */
interface PlayedRequest {
  readonly path: string;
  readonly limit: string | null;
  readonly continue: string | null;
}

describe('Kubernetes observer: listing namespaces (the SDK against a server playing recorded responses)', () => {
  let server: Server;
  let port: number;
  let requests: PlayedRequest[];
  /** Overrides the answer for a path (without query); undefined answers from the fixtures. */
  let override: (req: IncomingMessage, res: ServerResponse, path: string) => boolean;

  const LISTS: Record<string, KubernetesListFixture | undefined> = {
    [`/apis/apps/v1/namespaces/${NAMESPACE}/statefulsets`]: STATEFULSETS,
    [`/apis/apps/v1/namespaces/${NAMESPACE}/daemonsets`]: DAEMONSETS,
    [`/api/v1/namespaces/${NAMESPACE}/services`]: SERVICES,
  };

  beforeAll(async () => {
    server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://localhost');
      requests.push({ path: url.pathname, limit: url.searchParams.get('limit'), continue: url.searchParams.get('continue') });
      if (override(req, res, url.pathname)) return;
      let body: unknown;
      if (url.pathname === `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`) {
        body = url.searchParams.get('continue') === DEPLOYMENTS_1.metadata.continue ? DEPLOYMENTS_2 : DEPLOYMENTS_1;
      } else {
        // Another namespace: nothing of that kind there.
        body = LISTS[url.pathname] ?? { kind: 'List', apiVersion: 'v1', metadata: { resourceVersion: '918273' }, items: [] };
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  beforeEach(() => {
    requests = [];
    override = () => false;
  });

  const kubeConfigFor = (serverPort: number) => (sdk: KubernetesSdk) => {
    const config = new sdk.KubeConfig();
    config.loadFromOptions({
      clusters: [{ name: 'recorded', server: `http://127.0.0.1:${serverPort}`, skipTLSVerify: true }],
      users: [{ name: 'observer', token: 'recorded' }],
      contexts: [{ name: 'recorded', cluster: 'recorded', user: 'observer' }],
      currentContext: 'recorded',
    });
    return config;
  };
  const scope = (namespaces: string[] = [NAMESPACE]): ObservationScope => ({ ...DEV_SCOPE, target: 'local', kubernetes: { namespaces } });

  it('when a namespace is observed, then its Deployments (both pages), StatefulSets, DaemonSets and Services are mapped as the recorded items are', async () => {
    const observed = await createKubernetesObserver({ kubeConfig: kubeConfigFor(port), pageSize: 2 }).observe(scope(), live());

    const expected = (kind: KubernetesKind, list: KubernetesListFixture) => list.items.map((item) => kubernetesObjectToObserved(kind, item));
    // The SDK's typed objects map exactly as the API server's JSON does.
    expect(observed).toEqual([
      ...expected('Deployment', DEPLOYMENTS_1),
      ...expected('Deployment', DEPLOYMENTS_2),
      ...expected('StatefulSet', STATEFULSETS),
      ...expected('Service', SERVICES),
    ]);
    expect(observed.map((r) => r.id)).toEqual(['rch-dev/api', 'rch-dev/worker', 'rch-dev/debug-shell', 'rch-dev/redis', 'rch-dev/api', 'rch-dev/redis']);
    const deployments = requests.filter((r) => r.path.endsWith('/deployments'));
    expect(deployments).toEqual([
      { path: `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`, limit: '2', continue: null },
      { path: `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`, limit: '2', continue: DEPLOYMENTS_1.metadata.continue },
    ]);
  });

  it('when two namespaces are observed, then every kind is listed in each', async () => {
    await createKubernetesObserver({ kubeConfig: kubeConfigFor(port) }).observe(scope([NAMESPACE, 'rch-dev-jobs']), live());
    expect(requests.map((r) => r.path).sort()).toEqual(
      [NAMESPACE, 'rch-dev-jobs']
        .flatMap((ns) => [`/apis/apps/v1/namespaces/${ns}/deployments`, `/apis/apps/v1/namespaces/${ns}/statefulsets`, `/apis/apps/v1/namespaces/${ns}/daemonsets`, `/api/v1/namespaces/${ns}/services`])
        .concat(`/apis/apps/v1/namespaces/${NAMESPACE}/deployments`)
        .sort(),
    );
  });

  it('when the API server refuses a list (403), then INVENTORY.TARGET_UNREACHABLE with the status and the reason', async () => {
    override = (_req, res, path) => {
      if (!path.endsWith('/statefulsets')) return false;
      res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify(FORBIDDEN));
      return true;
    };
    expect(await refusal(createKubernetesObserver({ kubeConfig: kubeConfigFor(port) }).observe(scope(), live()))).toMatchObject({
      code: 'INVENTORY.TARGET_UNREACHABLE',
      kind: 'unavailable',
      details: { observer: 'kubernetes', environmentId: 'env-dev', namespaces: [NAMESPACE], status: 403, reason: 'Forbidden' },
    });
  });

  it('when a continued page has expired (410), then the observation fails: the first page is never returned alone', async () => {
    override = (_req, res, path) => {
      if (!path.endsWith('/deployments') || requests.filter((r) => r.path.endsWith('/deployments')).length < 2) return false;
      res.writeHead(410, { 'content-type': 'application/json' }).end(
        JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'The provided continue parameter is too old to display a consistent list result.', reason: 'Expired', code: 410 }),
      );
      return true;
    };
    expect(await refusal(createKubernetesObserver({ kubeConfig: kubeConfigFor(port), pageSize: 2 }).observe(scope(), live()))).toMatchObject({
      code: 'INVENTORY.TARGET_UNREACHABLE',
      details: { status: 410, reason: 'Expired' },
    });
  });

  it('when the API server cannot be reached, then INVENTORY.TARGET_UNREACHABLE with the system error code', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));

    expect(await refusal(createKubernetesObserver({ kubeConfig: kubeConfigFor(closedPort) }).observe(scope(), live()))).toMatchObject({
      code: 'INVENTORY.TARGET_UNREACHABLE',
      kind: 'unavailable',
      details: { code: 'ECONNREFUSED' },
    });
  });

  it('when the signal aborts while requests are pending, then they are cancelled and the observation fails with INVENTORY.OBSERVE_TIMEOUT', async () => {
    const controller = new AbortController();
    const closedByClient: string[] = [];
    override = (req, _res, path) => {
      // Never answers; the client closing the connection shows the request was cancelled.
      req.socket.once('close', () => closedByClient.push(path));
      if (requests.length === 4) controller.abort();
      return true;
    };
    const error = await refusal(createKubernetesObserver({ kubeConfig: kubeConfigFor(port) }).observe(scope(), { signal: controller.signal }));
    expect(error).toMatchObject({ code: 'INVENTORY.OBSERVE_TIMEOUT', kind: 'unavailable', details: { observer: 'kubernetes', namespaces: [NAMESPACE] } });
    await expect.poll(() => closedByClient.length).toBe(4);
  });

  it('when the scope names no namespaces, then a validation error, and nothing is sent', async () => {
    expect(await refusal(createKubernetesObserver({ kubeConfig: kubeConfigFor(port) }).observe({ ...DEV_SCOPE, target: 'local' }, live()))).toMatchObject({
      code: 'INVENTORY.SCOPE_INCOMPLETE',
      kind: 'validation',
    });
    expect(requests).toEqual([]);
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
