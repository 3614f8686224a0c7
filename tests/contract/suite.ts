import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Code, ConnectError, createClient, type Transport } from '@connectrpc/connect';
import { createGrpcTransport } from '@connectrpc/connect-node';
import { ControlPlaneService } from '../../contracts/gen/connectsoft/controlplane/v1/control_plane_pb';
import { DeliveryService, Outcome } from '../../contracts/gen/connectsoft/delivery/v1/delivery_pb';
import { GovernanceService, Tier } from '../../contracts/gen/connectsoft/governance/v1/governance_pb';
import { KnowledgeService, ReceiptKind } from '../../contracts/gen/connectsoft/knowledge/v1/knowledge_pb';
import { Health, HealthCheckResponse_ServingStatus } from '../../contracts/gen/grpc/health/v1/health_pb';
import { peerTransport, type PeerTokens } from '../../shared/platform/contracts/peer-transport';

/**
 * The contract suite of the external services this host calls (contracts/README.md): what any implementation of
 * each contract must answer, whatever data it holds. It runs in `npm test` against the local host's stand-ins
 * (tests/contract/stand-ins.test.ts) and against any endpoint by URL (`npm run contract -- --governance https://…`),
 * so the sibling services' teams can run it against theirs. Every case makes real calls; none depends on data the
 * peer must already hold: its tenant, run and references are made up per run of the suite.
 */
export interface Peer {
  readonly url: string;
  readonly audience: string;
}

export interface ContractCase {
  readonly service: 'governance' | 'control-plane' | 'knowledge' | 'config-platform' | 'delivery';
  readonly name: string;
  run(): Promise<void>;
}

export interface SuitePeers {
  readonly governance?: Peer;
  readonly controlPlane?: Peer;
  readonly knowledge?: Peer;
  readonly configPlatform?: Peer;
  readonly delivery?: Peer;
}

export function contractCases(peers: SuitePeers, tokens: PeerTokens): ContractCase[] {
  const tenant = `contract-${randomUUID().slice(0, 8)}`;
  const transport = (peer: Peer) => peerTransport({ url: peer.url, audience: peer.audience, tokens, deadlineMs: 10_000, attempts: 1 });
  // The same peer without a token: every call of the service must be refused.
  const anonymous = (peer: Peer) => createGrpcTransport({ baseUrl: peer.url, defaultTimeoutMs: 10_000 });
  const cases: ContractCase[] = [];
  const add = (service: ContractCase['service'], name: string, run: () => Promise<void>) => cases.push({ service, name, run });

  if (peers.governance) {
    const peer = peers.governance;
    const client = createClient(GovernanceService, transport(peer));
    add('governance', 'answers the gRPC health protocol SERVING for connectsoft.governance.v1.GovernanceService', () => serving(transport(peer), GovernanceService.typeName));
    add('governance', 'refuses a call without a bearer token with UNAUTHENTICATED', () =>
      expectCode(Code.Unauthenticated, () => createClient(GovernanceService, anonymous(peer)).getPolicyCheck({ checkId: `chk-${randomUUID()}` })),
    );
    add('governance', 'decides a plan with no steps: allow, deny with policy and reason, or pending with a check id', async () => {
      const { answer } = await client.decidePlan({ runId: `run-${randomUUID()}`, tenant, environment: { id: 'env-contract', name: 'contract', tier: Tier.DEVELOPMENT }, stack: 'contract', planDigest: `sha256:${'0'.repeat(64)}`, steps: [] });
      assert.ok(answer, 'the answer carries a PolicyAnswer');
      switch (answer.answer.case) {
        case 'allow':
          assert.ok(Array.isArray(answer.answer.value.policies));
          break;
        case 'deny':
          assert.ok(answer.answer.value.policy && answer.answer.value.reason, 'a deny names its policy and reason');
          break;
        case 'pending':
          assert.ok(answer.answer.value.checkId, 'a pending answer names its check');
          break;
        default:
          assert.fail('the answer carries no decision');
      }
    });
    add('governance', 'answers NOT_FOUND for a policy check it does not know', () => expectCode(Code.NotFound, () => client.getPolicyCheck({ checkId: `chk-${randomUUID()}` })));
    add('governance', 'answers NOT_FOUND for a secret reference the tenant does not have', () =>
      expectCode(Code.NotFound, () => client.resolveSecret({ tenant, reference: `contract/${randomUUID()}`, runId: `run-${randomUUID()}` })),
    );
    add('governance', 'records the evidence of one run and plan digest once: a repeat answers the same id', async () => {
      const evidence = { runId: `run-${randomUUID()}`, tenant, environment: 'env-contract', stack: 'contract', planDigest: `sha256:${'1'.repeat(64)}`, approvedBy: '', result: 'applied', errorCode: '', applyReceiptArtifact: 'art-contract', at: new Date().toISOString() };
      const first = await client.recordEvidence(evidence);
      const again = await client.recordEvidence(evidence);
      assert.ok(first.evidenceId, 'an evidence id');
      assert.equal(again.evidenceId, first.evidenceId);
    });
  }

  if (peers.controlPlane) {
    const peer = peers.controlPlane;
    const client = createClient(ControlPlaneService, transport(peer));
    add('control-plane', 'answers the gRPC health protocol SERVING for connectsoft.controlplane.v1.ControlPlaneService', () => serving(transport(peer), ControlPlaneService.typeName));
    add('control-plane', 'refuses a call without a bearer token with UNAUTHENTICATED', () => expectCode(Code.Unauthenticated, () => createClient(ControlPlaneService, anonymous(peer)).listEditions({})));
    add('control-plane', 'answers the environment asked for (its own id), or NOT_FOUND', async () => {
      const environmentId = `env-${randomUUID()}`;
      try {
        const { environment } = await client.getEnvironment({ tenant, environmentId });
        assert.equal(environment?.id, environmentId);
        if (!environment.approversSet) assert.deepEqual(environment.approvers, [], 'approvers only with approvers_set');
      } catch (thrown) {
        assert.equal(ConnectError.from(thrown).code, Code.NotFound, `GetEnvironment failed: ${ConnectError.from(thrown).message}`);
      }
    });
    add('control-plane', 'lists editions, each with an id and a name', async () => {
      const { editions } = await client.listEditions({});
      for (const edition of editions) assert.ok(edition.id && edition.name, `edition ${JSON.stringify(edition)}`);
    });
  }

  if (peers.knowledge) {
    const peer = peers.knowledge;
    const client = createClient(KnowledgeService, transport(peer));
    add('knowledge', 'answers the gRPC health protocol SERVING for connectsoft.knowledge.v1.KnowledgeService', () => serving(transport(peer), KnowledgeService.typeName));
    add('knowledge', 'refuses a call without a bearer token with UNAUTHENTICATED', () =>
      expectCode(Code.Unauthenticated, () => createClient(KnowledgeService, anonymous(peer)).putReceipt({ runId: 'run-x', tenant, kind: ReceiptKind.PLAN, contentJson: '{}' })),
    );
    add('knowledge', 'stores a receipt once: the same receipt answers the same artifact id, another receipt another id', async () => {
      const runId = `run-${randomUUID()}`;
      const first = await client.putReceipt({ runId, tenant, kind: ReceiptKind.PLAN, contentJson: JSON.stringify({ runId, n: 1 }) });
      const again = await client.putReceipt({ runId, tenant, kind: ReceiptKind.PLAN, contentJson: JSON.stringify({ runId, n: 1 }) });
      const other = await client.putReceipt({ runId, tenant, kind: ReceiptKind.APPLY, contentJson: JSON.stringify({ runId, n: 2 }) });
      assert.ok(first.artifactId);
      assert.equal(again.artifactId, first.artifactId);
      assert.notEqual(other.artifactId, first.artifactId);
    });
    add('knowledge', 'refuses a receipt of no kind with INVALID_ARGUMENT', () =>
      expectCode(Code.InvalidArgument, () => client.putReceipt({ runId: `run-${randomUUID()}`, tenant, kind: ReceiptKind.UNSPECIFIED, contentJson: '{}' })),
    );
  }

  if (peers.delivery) {
    const peer = peers.delivery;
    const client = createClient(DeliveryService, transport(peer));
    const report = (runId: string) => ({
      tenant,
      runId,
      promotionId: `prm-${randomUUID()}`,
      releaseName: 'contract-app',
      releaseVersion: '1.0.0',
      environmentId: 'env-contract',
      outcome: Outcome.FAILED,
      state: 'rejected',
      code: 'PROVISIONING.RELEASE_MISMATCH',
      reason: 'the contract suite made it up',
      receipts: [{ kind: 'plan-receipt', digest: `sha256:${'2'.repeat(64)}` }],
      finishedAt: new Date().toISOString(),
    });
    add('delivery', 'answers the gRPC health protocol SERVING for connectsoft.delivery.v1.DeliveryService', () => serving(transport(peer), DeliveryService.typeName));
    add('delivery', 'refuses a call without a bearer token with UNAUTHENTICATED', () =>
      expectCode(Code.Unauthenticated, () => createClient(DeliveryService, anonymous(peer)).resolveRelease({ tenant, name: 'contract-app', version: '1.0.0' })),
    );
    add('delivery', 'answers the release asked for (its own name and version, a full desired state when it pins one), or NOT_FOUND', async () => {
      const version = `0.0.0-${randomUUID()}`;
      try {
        const { release } = await client.resolveRelease({ tenant, name: 'contract-app', version });
        assert.equal(release?.name, 'contract-app');
        assert.equal(release.version, version);
        const pinned = release.desiredState;
        if (pinned) assert.ok(pinned.repository && pinned.commit && pinned.path, 'a pinned desired state names repository, commit and path');
      } catch (thrown) {
        assert.equal(ConnectError.from(thrown).code, Code.NotFound, `ResolveRelease failed: ${ConnectError.from(thrown).message}`);
      }
    });
    add('delivery', 'takes a run\'s report once: a repeat answers the same report id, another run\'s report another id', async () => {
      const runId = `run-${randomUUID()}`;
      const first = await client.reportOutcome(report(runId));
      const again = await client.reportOutcome({ ...report(runId), reason: 'sent again' });
      const other = await client.reportOutcome(report(`run-${randomUUID()}`));
      assert.ok(first.reportId, 'a report id');
      assert.equal(again.reportId, first.reportId);
      assert.notEqual(other.reportId, first.reportId);
    });
    add('delivery', 'refuses a report of no outcome with INVALID_ARGUMENT', () => expectCode(Code.InvalidArgument, () => client.reportOutcome({ ...report(`run-${randomUUID()}`), outcome: Outcome.UNSPECIFIED })));
  }

  if (peers.configPlatform) {
    const peer = peers.configPlatform;
    const base = peer.url.replace(/\/+$/, '');
    const get = async (path: string, token?: string) => fetch(`${base}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {}, signal: AbortSignal.timeout(10_000) });
    const reference = `/v1/tenants/${encodeURIComponent(tenant)}/references/${encodeURIComponent(`contract/${randomUUID()}`)}`;
    add('config-platform', 'answers GET /health with 200', async () => assert.equal((await get('/health', await tokens(peer.audience))).status, 200));
    add('config-platform', 'refuses a reference read without a bearer token with 401 problem+json', async () => {
      const response = await get(reference);
      assert.equal(response.status, 401);
      assert.match(response.headers.get('content-type') ?? '', /^application\/problem\+json/);
    });
    add('config-platform', 'answers 404 problem+json for a reference the tenant does not have', async () => {
      const response = await get(reference, await tokens(peer.audience));
      assert.equal(response.status, 404);
      assert.match(response.headers.get('content-type') ?? '', /^application\/problem\+json/);
      const problem = (await response.json()) as { status?: unknown; title?: unknown };
      assert.equal(problem.status, 404);
      assert.equal(typeof problem.title, 'string');
    });
  }
  return cases;
}

async function serving(transport: Transport, service: string): Promise<void> {
  const { status } = await createClient(Health, transport).check({ service });
  assert.equal(HealthCheckResponse_ServingStatus[status], 'SERVING');
}

async function expectCode(code: Code, call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch (thrown) {
    const error = ConnectError.from(thrown);
    assert.equal(Code[error.code], Code[code], error.message);
    return;
  }
  assert.fail(`expected ${Code[code]}, the call succeeded`);
}
