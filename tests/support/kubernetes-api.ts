import { existsSync, readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { JsonValue } from '../../shared/inventory/drift';
import type { KubernetesObject } from '../../shared/inventory/kubernetes-observer.adapter';
import type { TestCertificate } from './self-signed-certificate';

/**
 * Objects real Kubernetes API servers returned, as published upstream (docs/testing.md, "Published fixtures"),
 * read from the team's fixtures beside the repository at test time, and a stand-in API server that serves them, so
 * the real `@kubernetes/client-node` parses them.
 */

export const FIXTURES = join(__dirname, '..', '..', '..', 'shared', 'fixtures', 'kubernetes');
export const FILES = {
  nginx: 'kubectl-edit.deployment-get.testcase-edit-subresource-status.0.response.json',
  manualApply: 'gitops-engine.deployment.ssd-deploy-with-manual-apply-predicted-live.json',
  deploymentList: 'reference-docs.deployment-list.yaml',
  redis: 'gitops-engine.statefulset.health-statefulset.yaml',
  daemonSet: 'reference-docs.daemonset-create.yaml',
  httpbin: 'gitops-engine.service.ssd-service-predicted-live.json',
  multiProtocol: 'gitops-engine.service.smd-service-live.yaml',
  svc1: 'kubectl-edit.service-get.testcase-apply-edit-last-applied.0.response.json',
  kubernetesService: 'kubectl-edit.service-get-kubernetes.testcase-repeat-error.0.response.json',
  serviceList: 'kubectl-edit.servicelist.testcase-list-errors.1.response.json',
} as const;
export const present = existsSync(FIXTURES) && Object.values(FILES).every((file) => existsSync(join(FIXTURES, file)));
if (!present) console.warn(`skipped: the published Kubernetes API objects are not at ${FIXTURES} (the published fixtures: docs/testing.md)`);

export const text = (file: string) => readFileSync(join(FIXTURES, file), 'utf8');
/** The JSON the API server sent: a JSON file as it is; a gitops-engine YAML capture as JSON; a reference example's `response` as it is. */
export const served = {
  json: (file: string) => text(file),
  yaml: (file: string) => JSON.stringify(parseYaml(text(file))),
  response: (file: string) => (parseYaml(text(file)) as { response: string }).response,
};
/** The manifest that was applied to make a live object: its `kubectl.kubernetes.io/last-applied-configuration`. */
export const lastApplied = (body: string): Manifest => JSON.parse((JSON.parse(body) as KubernetesObject).metadata!.annotations!['kubectl.kubernetes.io/last-applied-configuration']!) as Manifest;

export type Manifest = { readonly [key: string]: JsonValue };

/**
 * A list answer around objects as the API server returned them: only the envelope (the API's list shape, with the
 * continue token of a paged list) is written here; each item is a fixture's own JSON text.
 */
export function listOf(kind: string, items: readonly string[], next?: string): string {
  const apiVersion = kind === 'Service' ? 'v1' : 'apps/v1';
  return `{"kind":"${kind}List","apiVersion":"${apiVersion}","metadata":{"resourceVersion":"4711"${next ? `,"continue":"${next}"` : ''}},"items":[${items.join(',')}]}`;
}

/** A `metav1.Status` as the API server answers an error; no recorded one is among the fixtures, so it is written here. */
export function status(code: number, reason: string, message: string): string {
  return JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
}

export interface SeenRequest {
  readonly path: string;
  readonly query: URLSearchParams;
  readonly authorization: string | undefined;
}

/**
 * A stand-in for one cluster's API server, over HTTPS with its own certificate (the SDK refuses plain HTTP unless TLS
 * verification is skipped): answers list requests by path, records every request.
 */
export interface ApiServer {
  readonly url: string;
  readonly requests: SeenRequest[];
  /** Answers a request itself when it returns true. */
  override: (req: IncomingMessage, res: ServerResponse, path: string) => boolean;
  close(): Promise<void>;
}

export async function apiServer(lists: (path: string, query: URLSearchParams) => string | undefined, tls: TestCertificate): Promise<ApiServer> {
  const requests: SeenRequest[] = [];
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    requests.push({ path: url.pathname, query: url.searchParams, authorization: req.headers.authorization });
    if (api.override(req, res, url.pathname)) return;
    const kind = url.pathname.endsWith('/services') ? 'Service' : 'Deployment';
    res.writeHead(200, { 'content-type': 'application/json' }).end(lists(url.pathname, url.searchParams) ?? listOf(kind, []));
  };
  const server = createServer({ key: tls.key, cert: tls.cert }, handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const api: ApiServer = {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    override: () => false,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  return api;
}

/** A cluster's CA as a kubeconfig's `certificate-authority-data` carries it. */
export const ca = (certificate: TestCertificate) => Buffer.from(certificate.cert).toString('base64');
