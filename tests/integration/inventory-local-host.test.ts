import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestHost, type TestHost } from '../support/local-host';
import { expectProblem } from '../support/problems';
import { storedBytes } from '../support/stored-bytes';
import { aStackPromotion, EXAMPLE_PROJECT, EXAMPLE_SECRETS, EXAMPLE_TENANT, provisioningExample, writeExampleReferences, sendToPromotions, type ProvisioningExample } from '../support/provisioning';

/**
 * Inventory and drift end to end on a local host started in this process: a development promotion is applied,
 * `SpecificationApplied` reaches inventory through the outbox relay and the topic subscription, and the drift of the
 * local cloud is produced with the local-only out-of-band endpoints, as the walk-through does (docs/walkthrough.md,
 * "Drift on the local host").
 */

const admin = { roles: ['PlatformAdmin'] };
const operator = { tenant: 'demo-team', roles: ['Operator'], subject: 'operator-1' };
const ENVIRONMENT = 'env-inventory-1';
const STACK = 'development-1';

interface EnvironmentBody {
  id: string;
  desiredRelease: { runId: string };
  lastRun?: { id: string; state: string };
  drift: { status: string; stale: boolean; reason?: string; lastObservedAt?: string; staleSince?: string };
}
interface ProposalBody {
  id: string;
  status: string;
  runId?: string;
  findings: { urn: string; severity: string; findings: { kind: string; path?: string[] }[] }[];
  plan: { steps: { urn: string; op: string; paths?: string[] }[] };
}
interface DriftBody {
  environment: EnvironmentBody;
  findings: { urn: string; findings: { kind: string }[] }[];
  ignored: { kind: string; path?: string[]; ignoredBy: string[] }[];
  scans: { outcome: string; reason?: string; trigger: string }[];
}

describe('inventory on the local host', () => {
  let host: TestHost;
  let example: ProvisioningExample;
  let root: string;

  beforeAll(async () => {
    root = fs.mkdtempSync(join(tmpdir(), 'rch-inventory-host-'));
    host = await startTestHost();
    example = await provisioningExample(root, host.stateDir, 1);
    writeExampleReferences(host.stateDir);
  });
  afterAll(async () => {
    await host?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  const call = async <T>(path: string, init: { method?: string; body?: unknown; claims?: object } = {}, status = 200): Promise<T> => {
    const response = await host.fetch(path, {
      method: init.method ?? 'GET',
      claims: init.claims ?? operator,
      ...(init.body !== undefined ? { body: JSON.stringify(init.body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await response.text();
    expect(response.status, `${init.method ?? 'GET'} ${path}: ${text}`).toBe(status);
    return (text ? JSON.parse(text) : undefined) as T;
  };
  const eventually = <T>(probe: () => Promise<T | undefined>, timeout = 20_000): Promise<T> =>
    vi.waitFor(
      async () => {
        const value = await probe();
        if (value === undefined) throw new Error('not yet');
        return value;
      },
      { timeout, interval: 100 },
    );
  const environment = () => call<EnvironmentBody>(`/runtime-cloud/environments/${ENVIRONMENT}`);
  const statusBecomes = (status: string) =>
    eventually(async () => {
      const response = await host.fetch(`/runtime-cloud/environments/${ENVIRONMENT}`, { claims: operator });
      if (response.status !== 200) return undefined;
      const body = (await response.json()) as EnvironmentBody;
      return body.drift.status === status ? body : undefined;
    });
  const scan = () => call<{ outcome: string; driftStatus?: string; reason?: string }>(`/runtime-cloud/environments/${ENVIRONMENT}/scan`, { method: 'POST' });
  const openProposals = () => call<{ items: ProposalBody[] }>(`/runtime-cloud/proposals?status=open&environment=${ENVIRONMENT}`).then((p) => p.items);
  const cloudResources = () => call<{ items: { urn: string; type: string; properties: Record<string, unknown> }[] }>(`/runtime-cloud/local/cloud/resources?stack=${STACK}&tenant=${EXAMPLE_TENANT}`, { claims: admin }).then((r) => r.items);
  const patchCloud = (urn: string, patch: unknown) => call(`/runtime-cloud/local/cloud/resources/${encodeURIComponent(urn)}`, { method: 'PATCH', body: patch, claims: admin });

  it('when a promotion is applied, then the environment is in sync with its inventory observed, and tampering, reconciling, an outage and an unmanaged resource show as they should', async () => {
    // Apply → in sync: inventory learns the desired state from SpecificationApplied and scans at once.
    const promotion = aStackPromotion(example.repository, 'development', { stack: STACK, environmentId: ENVIRONMENT });
    await sendToPromotions(host, promotion, `inventory-${promotion.promotionId}`);
    // Two events: SpecificationApplied (the desired state, then a scan) and ProvisioningApplied (the run's end), which
    // the subscription may deliver in either order; both must show, or the wait fails the test.
    await eventually(async () => {
      const body = await statusBecomes('in-sync');
      return body.lastRun?.state === 'applied' ? body : undefined;
    });
    const inventory = await call<{ items: { urn: string; type: string; properties?: Record<string, unknown> }[] }>(`/runtime-cloud/environments/${ENVIRONMENT}/inventory`);
    expect(inventory.items.map((r) => r.type).sort()).toEqual(['local:compute:Service', 'local:network:Endpoint', 'local:storage:Bucket']);
    for (const secret of Object.values(EXAMPLE_SECRETS)) expect(JSON.stringify(inventory)).not.toContain(secret);

    // A tampered property → drifted with one proposal; a rescan keeps that one.
    const bucket = (await cloudResources()).find((r) => r.type === 'local:storage:Bucket')!;
    await patchCloud(bucket.urn, { versioning: false });
    expect(await scan()).toMatchObject({ outcome: 'completed', driftStatus: 'drifted' });
    const [proposal] = await openProposals();
    expect(proposal).toMatchObject({ status: 'open', plan: { steps: [{ urn: bucket.urn, op: 'update', paths: ['versioning'] }] } });
    await scan();
    expect((await openProposals()).map((p) => p.id)).toEqual([proposal!.id]);

    // Accept → a reconciliation run → applied → in sync, the proposal resolved, the bucket restored.
    const accepted = await call<ProposalBody>(`/runtime-cloud/proposals/${proposal!.id}/accept`, { method: 'POST' });
    expect(accepted).toMatchObject({ status: 'accepted', runId: expect.any(String) });
    const run = await eventually(async () => {
      const body = await call<{ state: string; reason?: string; trigger?: string }>(`/runtime-cloud/runs/${accepted.runId}`);
      return ['applied', 'failed'].includes(body.state) ? body : undefined;
    });
    expect(run.state).toBe('applied');
    await eventually(async () => ((await call<ProposalBody>(`/runtime-cloud/proposals/${proposal!.id}`)).status === 'resolved' ? true : undefined));
    expect((await environment()).drift.status).toBe('in-sync');
    expect((await cloudResources()).find((r) => r.urn === bucket.urn)!.properties.versioning).toBe(true);

    // Outage → unknown and stale with its times; back → in sync.
    const lastObservedAt = (await environment()).drift.lastObservedAt;
    await call('/runtime-cloud/local/cloud/outage', { method: 'POST', body: { unreachable: true }, claims: admin });
    try {
      expect(await scan()).toMatchObject({ outcome: 'failed' });
      const stale = (await environment()).drift;
      expect(stale).toMatchObject({ status: 'unknown', stale: true, lastObservedAt, staleSince: expect.any(String) });
    } finally {
      await call('/runtime-cloud/local/cloud/outage', { method: 'POST', body: { unreachable: false }, claims: admin });
    }
    expect(await scan()).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    expect((await environment()).drift).toMatchObject({ status: 'in-sync', stale: false });

    // An unmanaged resource is found; an ignore rule on it is recorded and its finding listed as ignored, not hidden.
    // Another tenant's resource in a stack of the same project and stack names is not this environment's at all.
    const extra = await call<{ urn: string }>('/runtime-cloud/local/cloud/resources', {
      method: 'POST',
      body: { tenant: EXAMPLE_TENANT, project: EXAMPLE_PROJECT, stack: STACK, type: 'local:compute:Service', name: 'debug-shell', properties: { name: 'debug-shell' } },
      claims: admin,
    }, 201);
    await call('/runtime-cloud/local/cloud/resources', {
      method: 'POST',
      body: { tenant: 'other-team', project: EXAMPLE_PROJECT, stack: STACK, type: 'local:compute:Service', name: 'not-theirs', properties: { name: 'not-theirs' } },
      claims: admin,
    }, 201);
    expect(await scan()).toMatchObject({ driftStatus: 'drifted' });
    const drift = await call<DriftBody>(`/runtime-cloud/environments/${ENVIRONMENT}/drift`);
    expect(drift.findings).toEqual([expect.objectContaining({ urn: extra.urn, findings: [expect.objectContaining({ kind: 'unmanaged' })] })]);
    const rule = await call<{ id: string }>(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, {
      method: 'POST',
      body: { scope: { urn: extra.urn }, path: '*', reason: 'a debugging shell for incident 42', owner: 'sre', expiresAt: new Date(Date.now() + 86_400_000).toISOString(), holdsOnApply: false },
    }, 201);
    expect(await scan()).toMatchObject({ driftStatus: 'in-sync' });
    const silenced = await call<DriftBody>(`/runtime-cloud/environments/${ENVIRONMENT}/drift`);
    expect(silenced.ignored).toEqual([expect.objectContaining({ kind: 'unmanaged', ignoredBy: [rule.id] })]);
    expect(silenced.scans.map((s) => s.outcome).slice(0, 3)).toEqual(['completed', 'completed', 'completed']);
    expect(silenced.scans.some((s) => s.outcome === 'failed' && s.reason?.includes('INVENTORY.TARGET_UNREACHABLE'))).toBe(true);

    // The project's own ignoreChanges (the service's replicas): changed out of band, listed as ignored by it.
    const service = (await cloudResources()).find((r) => r.type === 'local:compute:Service' && r.urn !== extra.urn)!;
    await patchCloud(service.urn, { replicas: 7 });
    expect(await scan()).toMatchObject({ driftStatus: 'in-sync' });
    const scaled = await call<DriftBody>(`/runtime-cloud/environments/${ENVIRONMENT}/drift`);
    expect(scaled.ignored).toContainEqual(expect.objectContaining({ kind: 'modified', path: ['replicas'], ignoredBy: [`project:${service.urn}:replicas`] }));

    // Both events of the drift went out through the outbox.
    const published = await eventually(async () => {
      const page = await call<{ items: { body: { type: string; data: Record<string, unknown> } }[] }>('/runtime-cloud/local/topics/runtime-cloud-events/messages?limit=1000', { claims: admin });
      const types = page.items.filter((m) => m.body.data.environmentId === ENVIRONMENT).map((m) => m.body.type);
      return types.includes('ReconciliationProposed') && types.includes('RuntimeDriftDetected') ? page.items : undefined;
    });
    expect(published.filter((m) => m.body.type === 'ReconciliationProposed' && m.body.data.proposalId === proposal!.id)).toHaveLength(1);

    // After all of it, the value behind the development stack's secret reference is in no byte the host stored
    // (SQL, Table storage), serves or published: only in the target.
    const served = JSON.stringify([
      await environment(),
      await call(`/runtime-cloud/environments/${ENVIRONMENT}/inventory`),
      await call(`/runtime-cloud/environments/${ENVIRONMENT}/drift`),
      await call(`/runtime-cloud/proposals?environment=${ENVIRONMENT}`),
      await call(`/runtime-cloud/proposals/${proposal!.id}`),
    ]);
    const stored = await storedBytes(host.host.deps.sql, host.host.config.tables.connection, { exceptTables: ['local_cloud_resources'] });
    for (const [where, bytes] of Object.entries({ served, sql: stored.sql, tables: stored.tables, published: JSON.stringify(published) })) {
      expect(bytes, where).not.toContain(EXAMPLE_SECRETS.development);
    }
    expect(stored.tables).toContain(bucket.urn);
    expect(JSON.stringify(await cloudResources())).toContain(EXAMPLE_SECRETS.development);
  }, 60_000);

  it('when a caller lacks the scope or reads another tenant, then it is refused', async () => {
    await call(`/runtime-cloud/environments/${ENVIRONMENT}/scan`, { method: 'POST', claims: { tenant: 'demo-team', roles: ['Observer'] } }, 403);
    await call(`/runtime-cloud/environments/${ENVIRONMENT}`, { claims: { tenant: 'other-team', roles: ['Operator'] } }, 404);
    await call(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, { method: 'POST', body: { scope: { type: 'x' }, path: 'a..b', reason: 'r', owner: 'o', expiresAt: '2030-01-01T00:00:00Z', holdsOnApply: false } }, 400);
    const hugeIndex = await host.fetch(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, {
      method: 'POST',
      claims: operator,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ scope: { type: 'local:compute:Service' }, path: 'items.999999999.x', reason: 'r', owner: 'o', expiresAt: '2030-01-01T00:00:00Z', holdsOnApply: true }),
    });
    expect(await expectProblem(hugeIndex, 400, 'INVENTORY.INVALID_IGNORE_RULE')).toMatchObject({ problems: ['path may name array indexes up to 10000 only, not 999999999'] });
    await call('/runtime-cloud/proposals?status=nonsense', {}, 400);
    await call('/runtime-cloud/environments?cursor=nonsense', {}, 400);
  });

  it('when an ignore rule is posted twice with one Idempotency-Key, then one rule is recorded and the second answer is 200 with it', async () => {
    const body = { scope: { type: 'local:network:Endpoint' }, path: 'tags.*', reason: 'tags are set by the cost tool', owner: 'finops', expiresAt: '2030-01-01T00:00:00Z', holdsOnApply: false };
    const post = () => host.fetch(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules`, { method: 'POST', claims: operator, headers: { 'content-type': 'application/json', 'idempotency-key': 'finops-tags' }, body: JSON.stringify(body) });
    const first = await post();
    const second = await post();
    expect([first.status, second.status]).toEqual([201, 200]);
    const rule = (await first.json()) as { id: string };
    expect(((await second.json()) as { id: string }).id).toBe(rule.id);
    const page = await call<{ items: { id: string }[]; nextCursor?: string }>(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules?limit=1`);
    expect(page.items).toHaveLength(1);
    const rest = await call<{ items: { id: string }[]; nextCursor?: string }>(`/runtime-cloud/environments/${ENVIRONMENT}/ignore-rules?limit=10&cursor=${page.nextCursor ?? ''}`);
    expect([...page.items, ...rest.items].filter((r) => r.id === rule.id)).toHaveLength(1);
  });
});
