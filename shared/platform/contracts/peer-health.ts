import { createClient } from '@connectrpc/connect';
import { ControlPlaneService } from '../../../contracts/gen/connectsoft/controlplane/v1/control_plane_pb';
import { DeliveryService } from '../../../contracts/gen/connectsoft/delivery/v1/delivery_pb';
import { GovernanceService } from '../../../contracts/gen/connectsoft/governance/v1/governance_pb';
import { KnowledgeService } from '../../../contracts/gen/connectsoft/knowledge/v1/knowledge_pb';
import { Health, HealthCheckResponse_ServingStatus } from '../../../contracts/gen/grpc/health/v1/health_pb';
import type { Config, PeerSetting } from '../config/config';
import type { HealthCheck } from '../health/health';
import { peerTransport, type PeerTokens } from './peer-transport';

/**
 * One health check per external service, each a real call: the gRPC health protocol's Check for the peer's own
 * service (GovernanceHost, ControlPlaneApi, KnowledgeHost, DeliveryHost: fail-fast, so critical), `GET /health` of the Config
 * Platform (degrade, so never critical). A service without an endpoint fails its check: nothing is assumed up.
 */
export function peerHealthChecks(peers: Config['peers'], tokens: PeerTokens): HealthCheck[] {
  return [
    grpcHealthCheck('governance-host', 'RuntimeCloud__Governance__Endpoint', peers.governance, GovernanceService.typeName, tokens, peers.deadlineMs),
    grpcHealthCheck('control-plane-api', 'RuntimeCloud__ControlPlane__Endpoint', peers.controlPlane, ControlPlaneService.typeName, tokens, peers.deadlineMs),
    grpcHealthCheck('knowledge-host', 'RuntimeCloud__Knowledge__Endpoint', peers.knowledge, KnowledgeService.typeName, tokens, peers.deadlineMs),
    grpcHealthCheck('delivery-host', 'RuntimeCloud__Delivery__Endpoint', peers.delivery, DeliveryService.typeName, tokens, peers.deadlineMs),
    configPlatformCheck(peers.configPlatform, tokens, peers.deadlineMs),
  ];
}

function grpcHealthCheck(name: string, setting: string, peer: PeerSetting, service: string, tokens: PeerTokens, deadlineMs: number): HealthCheck {
  let client: ReturnType<typeof createClient<typeof Health>> | undefined;
  return {
    name,
    critical: true,
    async run() {
      if (!peer.endpoint) throw new Error(`not configured: ${setting} is empty`);
      // One attempt: health reports what the peer says now.
      client ??= createClient(Health, peerTransport({ url: peer.endpoint, audience: peer.audience, tokens, deadlineMs, attempts: 1 }));
      const { status } = await client.check({ service });
      if (status !== HealthCheckResponse_ServingStatus.SERVING) throw new Error(`${service} answered ${HealthCheckResponse_ServingStatus[status]}`);
      return { details: { endpoint: peer.endpoint, service, status: 'SERVING' } };
    },
  };
}

function configPlatformCheck(peer: PeerSetting, tokens: PeerTokens, deadlineMs: number): HealthCheck {
  return {
    name: 'config-platform',
    critical: false,
    async run() {
      if (!peer.endpoint) return { status: 'degraded', error: 'not configured: RuntimeCloud__ConfigPlatform__Endpoint is empty' };
      const details = { endpoint: peer.endpoint };
      try {
        const response = await fetch(`${peer.endpoint.replace(/\/+$/, '')}/health`, { headers: { authorization: `Bearer ${await tokens(peer.audience)}` }, signal: AbortSignal.timeout(deadlineMs) });
        await response.body?.cancel();
        return response.status === 200 ? { details: { ...details, status: 200 } } : { status: 'degraded', error: `GET /health answered ${response.status}`, details };
      } catch (error) {
        return { status: 'degraded', error: error instanceof Error ? error.message : String(error), details };
      }
    },
  };
}
