import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttp2Server, type Http2Server } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { Code, ConnectError, type ConnectRouter, type Interceptor } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { createLocalJWKSet, jwtVerify, type JSONWebKeySet } from 'jose';
import { ControlPlaneService, Tier as ControlPlaneTier } from '../../contracts/gen/connectsoft/controlplane/v1/control_plane_pb';
import { DeliveryService, Outcome, type ReportOutcomeRequest } from '../../contracts/gen/connectsoft/delivery/v1/delivery_pb';
import { GovernanceService, Tier as GovernanceTier, type PolicyAnswer as WirePolicyAnswer } from '../../contracts/gen/connectsoft/governance/v1/governance_pb';
import { KnowledgeService, ReceiptKind } from '../../contracts/gen/connectsoft/knowledge/v1/knowledge_pb';
import { Health, HealthCheckResponse_ServingStatus } from '../../contracts/gen/grpc/health/v1/health_pb';
import { AppError, ensureError } from '../../shared/platform/errors/app-error';
import type { JsonValue } from '../../shared/platform/iac/iac-values';
import type { PolicyAnswer, ReceiptKind as RunReceiptKind } from '../../shared/provisioning/external-services.client';
import type { LocalExternalServices, LocalServiceName } from './local-external-services.adapter';
import type { EnvironmentTier } from '../../shared/provisioning/promotion';

/**
 * The local host's stand-ins for the external services, as real servers on loopback speaking the contracts in
 * contracts/: the GovernanceHost, ControlPlaneApi, KnowledgeHost and DeliveryHost as gRPC servers (ConnectRPC over HTTP/2, with the
 * gRPC health protocol), the Config Platform as an HTTP server. The host reaches them through the same clients as
 * Azure's services (peer-external-services.adapter.ts). Each checks the caller's bearer token (the local issuer's,
 * for its own audience), and answers from the local implementations (local-external-services.adapter.ts), bound
 * once the host's store is open; until then, and while switched unreachable, they answer UNAVAILABLE, to the health
 * protocol too (the Config Platform's `GET /health` 503): a peer that does not answer is not SERVING either.
 */
export const STAND_IN_NAMES = ['governance', 'controlPlane', 'knowledge', 'configPlatform', 'delivery'] as const;
export type StandInName = (typeof STAND_IN_NAMES)[number];

/** The outage switch (local-external-services.adapter.ts) each stand-in answers by. */
const SWITCHES: Record<StandInName, LocalServiceName> = {
  governance: 'governance',
  controlPlane: 'control-plane',
  knowledge: 'knowledge',
  configPlatform: 'config-platform',
  delivery: 'delivery',
};

export interface StandInOptions {
  readonly issuer: string;
  readonly jwks: JSONWebKeySet;
  /** The token audience each stand-in accepts. */
  readonly audiences: Readonly<Record<StandInName, string>>;
}

export interface StandIns {
  /** Each stand-in's base URL (`http://127.0.0.1:<port>`). */
  readonly endpoints: Readonly<Record<StandInName, string>>;
  /** The implementations the stand-ins answer from. */
  bind(services: LocalExternalServices): void;
  /** Stops one stand-in (its port stops answering), as a service that went down. */
  stop(name: StandInName): Promise<void>;
  close(): Promise<void>;
}

/** Verified tokens a stand-in remembers (by audience and token) before it forgets them all. */
const VERIFIED_TOKENS = 1000;

export async function startStandIns(options: StandInOptions): Promise<StandIns> {
  let bound: LocalExternalServices | undefined;
  const services = (): LocalExternalServices => {
    if (!bound) throw new ConnectError('the stand-in is starting', Code.Unavailable);
    return bound;
  };
  const keys = createLocalJWKSet(options.jwks);
  // A token that verified for an audience stays valid until its `exp`: the host presents the same token for every call
  // until it renews it, and verifying its signature each time was most of what a stand-in call cost.
  const verified = new Map<string, number>();
  const verify = async (authorization: string | null | undefined, audience: string): Promise<void> => {
    const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
    if (!token) throw new ConnectError('a bearer token is required', Code.Unauthenticated);
    const known = verified.get(`${audience} ${token}`);
    if (known !== undefined && known > Date.now()) return;
    try {
      const { payload } = await jwtVerify(token, keys, { issuer: options.issuer, audience, algorithms: ['ES256'] });
      if (verified.size >= VERIFIED_TOKENS) verified.clear();
      if (typeof payload.exp === 'number') verified.set(`${audience} ${token}`, payload.exp * 1000);
    } catch (thrown) {
      throw new ConnectError(`the token is not valid for ${audience}: ${ensureError(thrown).message}`, Code.Unauthenticated);
    }
  };
  /** Throws UNAVAILABLE unless the stand-in is bound and its switch says reachable: what its health protocol answers. */
  const serving = (name: StandInName) => async (): Promise<void> => {
    if (!(await services().isReachable(SWITCHES[name]))) throw new ConnectError(`${SWITCHES[name]} is switched unreachable on this host`, Code.Unavailable);
  };
  const servers: Record<StandInName, Server | Http2Server> = {
    governance: grpcServer(GovernanceService.typeName, options.audiences.governance, verify, serving('governance'), (router) => router.service(GovernanceService, governance(services))),
    controlPlane: grpcServer(ControlPlaneService.typeName, options.audiences.controlPlane, verify, serving('controlPlane'), (router) => router.service(ControlPlaneService, controlPlane(services))),
    knowledge: grpcServer(KnowledgeService.typeName, options.audiences.knowledge, verify, serving('knowledge'), (router) => router.service(KnowledgeService, knowledge(services))),
    configPlatform: configPlatformServer(options.audiences.configPlatform, verify, serving('configPlatform'), services),
    delivery: grpcServer(DeliveryService.typeName, options.audiences.delivery, verify, serving('delivery'), (router) => router.service(DeliveryService, delivery(services))),
  };
  const endpoints = {} as Record<StandInName, string>;
  for (const name of STAND_IN_NAMES) endpoints[name] = await listen(servers[name]);
  // A stopped stand-in drops its clients' connections at once, as a service that went down does.
  const sockets = new Map<StandInName, Set<Socket>>();
  for (const name of STAND_IN_NAMES) {
    const open = new Set<Socket>();
    sockets.set(name, open);
    servers[name].on('connection', (socket: Socket) => {
      open.add(socket);
      socket.once('close', () => open.delete(socket));
    });
  }
  const stopped = new Set<StandInName>();
  const stop = async (name: StandInName) => {
    if (stopped.has(name)) return;
    stopped.add(name);
    const closed = new Promise<void>((resolve) => servers[name].close(() => resolve()));
    for (const socket of sockets.get(name) ?? []) socket.destroy();
    await closed;
  };
  return {
    endpoints,
    bind: (local) => void (bound = local),
    stop,
    close: async () => void (await Promise.all(STAND_IN_NAMES.map(stop))),
  };
}

type Verify = (authorization: string | null | undefined, audience: string) => Promise<void>;

type Serving = () => Promise<void>;

/** A gRPC server (h2c on loopback) for one service and the health protocol; every call of the service needs a token. */
function grpcServer(serviceName: string, audience: string, verify: Verify, serving: Serving, routes: (router: ConnectRouter) => void): Http2Server {
  const authenticated: Interceptor = (next) => async (request) => {
    if (request.service.typeName !== Health.typeName) await verify(request.header.get('authorization'), audience);
    return next(request);
  };
  const handler = connectNodeAdapter({
    grpc: true,
    connect: false,
    grpcWeb: false,
    interceptors: [authenticated],
    routes(router) {
      routes(router);
      router.service(Health, {
        check: async (request) => {
          if (request.service !== '' && request.service !== serviceName) throw new ConnectError(`this server serves ${serviceName}`, Code.NotFound);
          await serving();
          return { status: HealthCheckResponse_ServingStatus.SERVING };
        },
      });
    },
  });
  return createHttp2Server(handler);
}

/** The local implementation's error as the contract says it: not-found, unavailable, else an internal fault. */
function asConnectError(thrown: unknown): ConnectError {
  if (thrown instanceof ConnectError) return thrown;
  const error = ensureError(thrown);
  if (error instanceof AppError) {
    if (error.kind === 'not-found') return new ConnectError(error.message, Code.NotFound);
    if (error.kind === 'unavailable') return new ConnectError(error.message, Code.Unavailable);
    if (error.kind === 'validation') return new ConnectError(error.message, Code.InvalidArgument);
  }
  return new ConnectError(error.message, Code.Internal);
}

async function answering<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (thrown) {
    throw asConnectError(thrown);
  }
}

const TIER_NAMES: Partial<Record<GovernanceTier, EnvironmentTier>> = {
  [GovernanceTier.DEVELOPMENT]: 'development',
  [GovernanceTier.STAGING]: 'staging',
  [GovernanceTier.PRODUCTION]: 'production',
};

function wireAnswer(answer: PolicyAnswer): WirePolicyAnswer {
  switch (answer.decision) {
    case 'allow':
      return { answer: { case: 'allow', value: { policies: [...answer.policies] } } } as WirePolicyAnswer;
    case 'deny':
      return { answer: { case: 'deny', value: { policy: answer.policy, reason: answer.reason } } } as WirePolicyAnswer;
    case 'pending':
      return { answer: { case: 'pending', value: { checkId: answer.checkId } } } as WirePolicyAnswer;
  }
}

function governance(services: () => LocalExternalServices) {
  return {
    decidePlan: (request: { runId: string; tenant: string; environment?: { id: string; name: string; tier: GovernanceTier }; stack: string; planDigest: string; steps: { urn: string; type: string; op: string }[] }) =>
      answering(async () => {
        const environment = request.environment;
        const tier = environment ? TIER_NAMES[environment.tier] : undefined;
        if (!request.runId || !request.tenant || !environment || !tier || !request.planDigest) throw new ConnectError('run_id, tenant, environment (with its tier) and plan_digest are required', Code.InvalidArgument);
        const answer = await services().governance.decide({
          runId: request.runId,
          tenant: request.tenant,
          environment: { id: environment.id, name: environment.name, tier },
          stack: request.stack,
          planDigest: request.planDigest,
          steps: request.steps.map((s) => ({ urn: s.urn, type: s.type, op: s.op })),
        });
        return { answer: wireAnswer(answer) };
      }),
    getPolicyCheck: (request: { checkId: string }) => answering(async () => ({ answer: wireAnswer(await services().governance.policyCheck(request.checkId)) })),
    resolveSecret: (request: { tenant: string; reference: string; runId: string }) =>
      answering(async () => {
        if (!request.tenant || !request.reference) throw new ConnectError('tenant and reference are required', Code.InvalidArgument);
        const value = await services().governance.resolveSecret(request.reference, { tenant: request.tenant, ...(request.runId ? { runId: request.runId } : {}) });
        return { valueJson: JSON.stringify(value) };
      }),
    recordEvidence: (request: { runId: string; tenant: string; environment: string; stack: string; planDigest: string; approvedBy: string; result: string; errorCode: string; applyReceiptArtifact: string; at: string }) =>
      answering(async () => {
        if (request.result !== 'applied' && request.result !== 'failed') throw new ConnectError('result is applied or failed', Code.InvalidArgument);
        const evidenceId = await services().governance.recordEvidence({
          runId: request.runId,
          tenant: request.tenant,
          environment: request.environment,
          stack: request.stack,
          planDigest: request.planDigest,
          ...(request.approvedBy ? { approvedBy: request.approvedBy } : {}),
          result: request.result,
          ...(request.errorCode ? { errorCode: request.errorCode } : {}),
          applyReceiptArtifact: request.applyReceiptArtifact,
          at: request.at,
        });
        return { evidenceId };
      }),
  };
}

const CONTROL_PLANE_TIERS: Record<EnvironmentTier, ControlPlaneTier> = { development: ControlPlaneTier.DEVELOPMENT, staging: ControlPlaneTier.STAGING, production: ControlPlaneTier.PRODUCTION };

function controlPlane(services: () => LocalExternalServices) {
  return {
    getEnvironment: (request: { tenant: string; environmentId: string }) =>
      answering(async () => {
        const found = await services().controlPlane.environment(request.tenant, request.environmentId);
        if (!found) throw new ConnectError(`tenant ${request.tenant} has no environment ${request.environmentId}`, Code.NotFound);
        return {
          environment: {
            id: found.id,
            name: found.name ?? '',
            tier: found.tier ? CONTROL_PLANE_TIERS[found.tier] : ControlPlaneTier.UNSPECIFIED,
            approvers: [...(found.approvers ?? [])],
            approversSet: found.approvers !== undefined,
            target: found.target ?? '',
          },
        };
      }),
    listEditions: () => answering(async () => ({ editions: (await services().controlPlane.editions()).map((e) => ({ id: e.id, name: e.name })) })),
  };
}

function knowledge(services: () => LocalExternalServices) {
  return {
    putReceipt: (request: { runId: string; tenant: string; kind: ReceiptKind; contentJson: string }) =>
      answering(async () => {
        const kind = request.kind === ReceiptKind.PLAN ? 'plan-receipt' : request.kind === ReceiptKind.APPLY ? 'apply-receipt' : undefined;
        if (!kind || !request.runId) throw new ConnectError('run_id and a receipt kind are required', Code.InvalidArgument);
        let content: unknown;
        try {
          content = JSON.parse(request.contentJson);
        } catch {
          throw new ConnectError('content_json is not JSON', Code.InvalidArgument);
        }
        return { artifactId: await services().knowledge.putReceipt({ runId: request.runId, tenant: request.tenant, kind, content }) };
      }),
  };
}

const RECEIPT_KINDS: readonly string[] = ['plan-receipt', 'apply-receipt'] satisfies readonly RunReceiptKind[];

function delivery(services: () => LocalExternalServices) {
  return {
    resolveRelease: (request: { tenant: string; name: string; version: string }) =>
      answering(async () => {
        if (!request.tenant || !request.name || !request.version) throw new ConnectError('tenant, name and version are required', Code.InvalidArgument);
        const release = await services().delivery.resolveRelease(request.tenant, { name: request.name, version: request.version });
        if (!release) throw new ConnectError(`tenant ${request.tenant} has no release ${request.name} ${request.version}`, Code.NotFound);
        return { release: { name: release.name, version: release.version, ...(release.desiredState ? { desiredState: { ...release.desiredState } } : {}) } };
      }),
    reportOutcome: (request: ReportOutcomeRequest) =>
      answering(async () => {
        const outcome = request.outcome === Outcome.APPLIED ? 'applied' : request.outcome === Outcome.FAILED ? 'failed' : undefined;
        if (!outcome || !request.tenant || !request.runId || !request.state || !request.finishedAt) throw new ConnectError('tenant, run_id, an outcome, state and finished_at are required', Code.InvalidArgument);
        const unknownKind = request.receipts.find((r) => !RECEIPT_KINDS.includes(r.kind) || !r.digest);
        if (unknownKind) throw new ConnectError(`a receipt is plan-receipt or apply-receipt, with a digest: ${unknownKind.kind}`, Code.InvalidArgument);
        const reportId = await services().delivery.reportOutcome({
          tenant: request.tenant,
          runId: request.runId,
          promotionId: request.promotionId,
          release: { name: request.releaseName, version: request.releaseVersion },
          environmentId: request.environmentId,
          outcome,
          state: request.state,
          ...(request.code ? { code: request.code } : {}),
          ...(request.reason ? { reason: request.reason } : {}),
          receipts: request.receipts.map((r) => ({ kind: r.kind as RunReceiptKind, digest: r.digest })),
          finishedAt: request.finishedAt,
        });
        return { reportId };
      }),
  };
}

/**
 * The Config Platform (contracts/configplatform/openapi.json): `GET /v1/tenants/{tenant}/references/{reference}`
 * answers the value, a problem+json 404 for an unknown reference, 401 without a valid token, 503 while unreachable;
 * `GET /health` answers 200, and 503 while unreachable.
 */
function configPlatformServer(audience: string, verify: Verify, serving: Serving, services: () => LocalExternalServices): Server {
  return createHttpServer((request, response) => {
    const send = (status: number, body: object, type = 'application/json') => {
      response.writeHead(status, { 'content-type': type });
      response.end(JSON.stringify(body));
    };
    const problem = (status: number, code: string, detail: string) => send(status, { type: 'about:blank', title: code, status, code, detail }, 'application/problem+json');
    void (async () => {
      const path = new URL(request.url ?? '/', 'http://stand-in').pathname;
      if (request.method === 'GET' && path === '/health') {
        return serving().then(
          () => send(200, { status: 'healthy' }),
          (thrown: unknown) => problem(503, 'CONFIG.UNAVAILABLE', ensureError(thrown).message),
        );
      }
      const match = /^\/v1\/tenants\/([^/]+)\/references\/([^/]+)$/.exec(path);
      if (request.method !== 'GET' || !match) return problem(404, 'CONFIG.ROUTE_NOT_FOUND', `${request.method ?? ''} ${path}`);
      try {
        await verify(request.headers.authorization, audience);
      } catch (thrown) {
        return problem(401, 'CONFIG.UNAUTHENTICATED', ensureError(thrown).message);
      }
      const tenant = decodeURIComponent(match[1] ?? '');
      const reference = decodeURIComponent(match[2] ?? '');
      try {
        const value: JsonValue = await services().configPlatform.resolve(reference, { tenant });
        return send(200, { reference, value });
      } catch (thrown) {
        const error = asConnectError(thrown);
        if (error.code === Code.NotFound) return problem(404, 'CONFIG.REFERENCE_UNKNOWN', error.rawMessage);
        if (error.code === Code.Unavailable) return problem(503, 'CONFIG.UNAVAILABLE', error.rawMessage);
        return problem(500, 'CONFIG.INTERNAL', error.rawMessage);
      }
    })().catch(() => problem(500, 'CONFIG.INTERNAL', 'the stand-in failed'));
  });
}

async function listen(server: Server | Http2Server): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}
