import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { ControlPlaneService, Tier as ControlPlaneTier } from '../../contracts/gen/connectsoft/controlplane/v1/control_plane_pb';
import { DeliveryService, Outcome } from '../../contracts/gen/connectsoft/delivery/v1/delivery_pb';
import { GovernanceService, Tier as GovernanceTier, type PolicyAnswer as WirePolicyAnswer } from '../../contracts/gen/connectsoft/governance/v1/governance_pb';
import { KnowledgeService, ReceiptKind } from '../../contracts/gen/connectsoft/knowledge/v1/knowledge_pb';
import type { PeerSetting } from '../platform/config/config';
import { peerTransport, type PeerTokens } from '../platform/contracts/peer-transport';
import type { JsonValue } from '../platform/iac/iac-values';
import {
  ExternalErrors,
  serviceUnavailable,
  unwiredExternalServices,
  type ConfigPlatform,
  type ControlPlaneApi,
  type DeliveryHost,
  type ExternalServices,
  type GovernanceHost,
  type KnowledgeHost,
  type LastKnownConfig,
  type PolicyAnswer,
} from './external-services.client';
import type { EnvironmentTier } from './promotion';
import { problemError } from '../platform/errors/catalogue';
import { ProvisioningErrors } from './errors';

/**
 * The external services over their contracts (contracts/): the GovernanceHost, ControlPlaneApi, KnowledgeHost and DeliveryHost as
 * gRPC peers (ConnectRPC, peer-transport.ts), the Config Platform over HTTP (contracts/configplatform/openapi.json).
 * The same clients reach Azure's services and the local host's stand-ins. A service without an endpoint fails every
 * call as one that does not answer. Fail-fast services throw `serviceUnavailable` with their code for anything but
 * the answers their contract gives meaning to (NOT_FOUND of a check, a reference, an environment).
 */
export interface PeerServicesOptions {
  readonly governance: PeerSetting;
  readonly controlPlane: PeerSetting;
  readonly knowledge: PeerSetting;
  readonly configPlatform: PeerSetting;
  readonly delivery: PeerSetting;
  readonly tokens: PeerTokens;
  readonly deadlineMs: number;
  /** Where the last values the Config Platform gave are kept, for when it does not answer. */
  readonly lastKnownConfig: LastKnownConfig;
}

const GOVERNANCE = { code: ExternalErrors.governanceUnavailable, service: 'the GovernanceHost' };
const CONTROL_PLANE = { code: ExternalErrors.controlPlaneUnavailable, service: 'the ControlPlaneApi' };
const KNOWLEDGE = { code: ExternalErrors.knowledgeUnavailable, service: 'the KnowledgeHost' };
const DELIVERY = { code: ExternalErrors.deliveryUnavailable, service: 'the DeliveryHost' };

export function createPeerExternalServices(options: PeerServicesOptions): ExternalServices {
  const unwired = unwiredExternalServices();
  const transport = (peer: PeerSetting) => peerTransport({ url: peer.endpoint, audience: peer.audience, tokens: options.tokens, deadlineMs: options.deadlineMs });
  return {
    governance: options.governance.endpoint ? governanceClient(transport(options.governance)) : unwired.governance,
    controlPlane: options.controlPlane.endpoint ? controlPlaneClient(transport(options.controlPlane)) : unwired.controlPlane,
    knowledge: options.knowledge.endpoint ? knowledgeClient(transport(options.knowledge)) : unwired.knowledge,
    configPlatform: options.configPlatform.endpoint ? configPlatformClient(options.configPlatform, options.tokens, options.deadlineMs) : unwired.configPlatform,
    lastKnownConfig: options.lastKnownConfig,
    delivery: options.delivery.endpoint ? deliveryClient(transport(options.delivery)) : unwired.delivery,
  };
}

/** A call of a fail-fast service: its contract's NOT_FOUND becomes `notFound()` when given; anything else, unavailable. */
async function call<T>(peer: { code: string; service: string }, run: () => Promise<T>, notFound?: (error: ConnectError) => T | Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (thrown) {
    const error = ConnectError.from(thrown);
    if (notFound && error.code === Code.NotFound) return notFound(error);
    throw serviceUnavailable(peer.code, peer.service, new Error(`${Code[error.code]}: ${error.rawMessage}`));
  }
}

const TIERS: Record<EnvironmentTier, GovernanceTier> = { development: GovernanceTier.DEVELOPMENT, staging: GovernanceTier.STAGING, production: GovernanceTier.PRODUCTION };

function governanceClient(transport: ReturnType<typeof peerTransport>): GovernanceHost {
  const client = createClient(GovernanceService, transport);
  return {
    decide: (input) =>
      call(GOVERNANCE, async () =>
        policyAnswer(
          (
            await client.decidePlan({
              runId: input.runId,
              tenant: input.tenant,
              environment: { id: input.environment.id, name: input.environment.name, tier: TIERS[input.environment.tier] },
              stack: input.stack,
              planDigest: input.planDigest,
              steps: input.steps.map((s) => ({ urn: s.urn, type: s.type, op: s.op })),
            })
          ).answer,
        ),
      ),
    policyCheck: (checkId) =>
      call(
        GOVERNANCE,
        async () => policyAnswer((await client.getPolicyCheck({ checkId })).answer),
        () => {
          throw problemError(ProvisioningErrors.policyCheckUnknown, `the GovernanceHost has no policy check ${checkId}`, { checkId });
        },
      ),
    resolveSecret: (reference, scope) =>
      call(
        GOVERNANCE,
        async () => parseValue((await client.resolveSecret({ tenant: scope.tenant, reference, runId: scope.runId ?? '' })).valueJson),
        (error) => {
          throw problemError(ProvisioningErrors.referenceUnresolved, `the GovernanceHost has no secret ${reference} for tenant ${scope.tenant}: ${error.rawMessage}`);
        },
      ),
    recordEvidence: (evidence) =>
      call(GOVERNANCE, async () => {
        const { evidenceId } = await client.recordEvidence({
          runId: evidence.runId,
          tenant: evidence.tenant,
          environment: evidence.environment,
          stack: evidence.stack,
          planDigest: evidence.planDigest,
          approvedBy: evidence.approvedBy ?? '',
          result: evidence.result,
          errorCode: evidence.errorCode ?? '',
          applyReceiptArtifact: evidence.applyReceiptArtifact,
          at: evidence.at,
        });
        return required(evidenceId, 'evidence_id');
      }),
  };
}

/** The port's answer from the contract's; an answer without a decision is the peer's fault. */
function policyAnswer(answer: WirePolicyAnswer | undefined): PolicyAnswer {
  switch (answer?.answer.case) {
    case 'allow':
      return { decision: 'allow', policies: [...answer.answer.value.policies] };
    case 'deny':
      return { decision: 'deny', policy: answer.answer.value.policy, reason: answer.answer.value.reason };
    case 'pending':
      return { decision: 'pending', checkId: required(answer.answer.value.checkId, 'check_id') };
    default:
      throw new ConnectError('the answer carries no decision', Code.Internal);
  }
}

const TIER_NAMES: Partial<Record<ControlPlaneTier, EnvironmentTier>> = {
  [ControlPlaneTier.DEVELOPMENT]: 'development',
  [ControlPlaneTier.STAGING]: 'staging',
  [ControlPlaneTier.PRODUCTION]: 'production',
};

function controlPlaneClient(transport: ReturnType<typeof peerTransport>): ControlPlaneApi {
  const client = createClient(ControlPlaneService, transport);
  return {
    environment: (tenant, environmentId) =>
      call(
        CONTROL_PLANE,
        async () => {
          const found = (await client.getEnvironment({ tenant, environmentId })).environment;
          if (!found) throw new ConnectError('the answer carries no environment', Code.Internal);
          const tier = TIER_NAMES[found.tier];
          return {
            id: required(found.id, 'id'),
            ...(found.name ? { name: found.name } : {}),
            ...(tier ? { tier } : {}),
            ...(found.approversSet ? { approvers: [...found.approvers] } : {}),
            ...(found.target ? { target: found.target } : {}),
          };
        },
        () => undefined,
      ),
    editions: () => call(CONTROL_PLANE, async () => (await client.listEditions({})).editions.map((e) => ({ id: e.id, name: e.name }))),
  };
}

function knowledgeClient(transport: ReturnType<typeof peerTransport>): KnowledgeHost {
  const client = createClient(KnowledgeService, transport);
  return {
    putReceipt: (receipt) =>
      call(KNOWLEDGE, async () => {
        const kind = receipt.kind === 'plan-receipt' ? ReceiptKind.PLAN : ReceiptKind.APPLY;
        const { artifactId } = await client.putReceipt({ runId: receipt.runId, tenant: receipt.tenant, kind, contentJson: JSON.stringify(receipt.content) });
        return required(artifactId, 'artifact_id');
      }),
  };
}

function deliveryClient(transport: ReturnType<typeof peerTransport>): DeliveryHost {
  const client = createClient(DeliveryService, transport);
  return {
    resolveRelease: (tenant, release) =>
      call(
        DELIVERY,
        async () => {
          const found = (await client.resolveRelease({ tenant, name: release.name, version: release.version })).release;
          if (!found) throw new ConnectError('the answer carries no release', Code.Internal);
          const pinned = found.desiredState;
          return {
            name: required(found.name, 'name'),
            version: required(found.version, 'version'),
            ...(pinned ? { desiredState: { repository: required(pinned.repository, 'repository'), commit: required(pinned.commit, 'commit'), path: required(pinned.path, 'path') } } : {}),
          };
        },
        () => undefined,
      ),
    reportOutcome: (report) =>
      call(DELIVERY, async () => {
        const { reportId } = await client.reportOutcome({
          tenant: report.tenant,
          runId: report.runId,
          promotionId: report.promotionId,
          releaseName: report.release.name,
          releaseVersion: report.release.version,
          environmentId: report.environmentId,
          outcome: report.outcome === 'applied' ? Outcome.APPLIED : Outcome.FAILED,
          state: report.state,
          code: report.code ?? '',
          reason: report.reason ?? '',
          receipts: report.receipts.map((r) => ({ kind: r.kind, digest: r.digest })),
          finishedAt: report.finishedAt,
        });
        return required(reportId, 'report_id');
      }),
  };
}

/**
 * The Config Platform's reference resolution (contracts/configplatform/openapi.json): `GET
 * /v1/tenants/{tenant}/references/{reference}`. A 404 problem says the reference is unknown; anything else that is
 * not a 200 is a platform that did not answer, which the caller degrades over (its last known value).
 */
function configPlatformClient(peer: PeerSetting, tokens: PeerTokens, deadlineMs: number): ConfigPlatform {
  const base = peer.endpoint.replace(/\/+$/, '');
  return {
    async resolve(reference, scope) {
      const url = `${base}/v1/tenants/${encodeURIComponent(scope.tenant)}/references/${encodeURIComponent(reference)}`;
      const response = await fetch(url, { headers: { authorization: `Bearer ${await tokens(peer.audience)}`, accept: 'application/json' }, signal: AbortSignal.timeout(deadlineMs) });
      const text = await response.text();
      if (response.status === 404) throw problemError(ProvisioningErrors.referenceUnresolved, `the Config Platform has no ${reference} for tenant ${scope.tenant}`);
      if (response.status !== 200) throw problemError(ProvisioningErrors.configUnavailable, `the Config Platform answered ${response.status}: ${text.slice(0, 300)}`);
      const body = JSON.parse(text) as { value?: JsonValue };
      if (!('value' in body)) throw problemError(ProvisioningErrors.configUnavailable, 'the Config Platform answered without a value');
      return body.value as JsonValue;
    },
  };
}

/** A malformed answer is the peer's fault, reported as its own (the call then fails as unavailable). */
function parseValue(json: string): JsonValue {
  try {
    return JSON.parse(json) as JsonValue;
  } catch {
    throw new ConnectError('the value is not JSON', Code.Internal);
  }
}

function required(value: string, field: string): string {
  if (!value) throw new ConnectError(`the answer has no ${field}`, Code.Internal);
  return value;
}
