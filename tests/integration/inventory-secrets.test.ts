import type { EngineEvent, OpType, OutputMap, StepEventMetadata, StepEventStateMetadata } from '@pulumi/pulumi/automation';
import { describe, expect, it } from 'vitest';
import { appendToOutbox } from '../../shared/platform/bus/outbox';
import { applyResultFromUp } from '../../shared/platform/iac/pulumi-apply-mapping';
import { parseUpdatePlan, planFromPreview } from '../../shared/platform/iac/pulumi-plan-mapping';
import { PULUMI_SECRET_SIG, PULUMI_SIG_KEY } from '../../shared/platform/iac/pulumi-mapping';
import { randomIds } from '../../shared/platform/time/clock';
import type { Run } from '../../shared/provisioning/run';
import { specificationAppliedOf } from '../../shared/provisioning/run-events';
import { DIALECTS, skipDialect } from '../support/databases';
import { inventoryOnDialect } from '../support/inventory-harness';
import { storedBytes } from '../support/stored-bytes';

/*
 * Issue 16, rule 6: secrets never leave the apply, whichever runner marked them. The `pulumi` runner cannot run
 * here (no CLI), so its apply result is made by the real mapping (pulumi-mapping.ts) from a recorded engine event
 * sequence in the shapes of `@pulumi/pulumi/automation`'s typed events, as tests/unit/iac-pulumi-mapping.test.ts
 * feeds them: a database whose password is a secret, with secrets nested in an object, in an array, wrapping a whole
 * object, and inside an object stack output that the Automation API's output map does not flag. That result becomes
 * `SpecificationApplied` exactly as provisioning builds it (run-events.ts `specificationAppliedOf`), goes through
 * the outbox and is recorded by inventory; the local cloud (standing in for the target) holds the real values, as
 * Pulumi would have put them there; a scan observes them. Then every stored byte (every SQL table but the local
 * cloud's resources, every Table storage entity), every served byte (the service's views) and every published byte
 * (the outbox) is searched for each value. The local engine's references are covered end to end on the local host
 * (inventory-local-host.test.ts).
 */

const SECRETS = {
  password: 'pulumi-db-password-4c1e9a',
  admin: 'pulumi-admin-password-8d2f07',
  key: 'pulumi-api-key-77b3c5',
  connection: 'pulumi-conn-password-19ae62',
  /** Set in the target out of band, after the apply: a rotated secret is as secret as the applied one. */
  rotated: 'pulumi-rotated-password-5e0c4b',
  /** A property of a resource no desired state holds. */
  unmanaged: 'stray-resource-token-3a91d8',
} as const;

const ALL = { kind: 'all' } as const;
const PROJECT = 'shop';
const STACK_TYPE = 'pulumi:pulumi:Stack';
const NET = 'local:network:VirtualNetwork';
const DB = 'local:sql:Database';
/** How engine events carry a secret: the signature object with its ciphertext blinded. */
const BLINDED = { [PULUMI_SIG_KEY]: PULUMI_SECRET_SIG, ciphertext: '[secret]' };

/** A first preview and its up, of a stack holding a network and a database, recorded as `onEvent` receives them. */
function recording(stack: string) {
  const urn = (type: string, name: string) => `urn:pulumi:${stack}::${PROJECT}::${type}::${name}`;
  const stackUrn = urn(STACK_TYPE, `${PROJECT}-${stack}`);
  const netUrn = urn(NET, 'net');
  const dbUrn = urn(DB, 'db');
  let sequence = 0;
  const event = (body: Omit<EngineEvent, 'sequence' | 'timestamp'>): EngineEvent => ({ sequence: sequence++, timestamp: 1767225600 + sequence, ...body });
  const state = (u: string, type: string, extra: Partial<StepEventStateMetadata> = {}): StepEventStateMetadata => ({ urn: u, type, custom: true, id: '', parent: stackUrn, inputs: {}, outputs: {}, provider: '', ...extra });
  const metadata = (op: OpType, u: string, type: string, extra: Partial<StepEventMetadata> = {}): StepEventMetadata => ({ op, urn: u, type, provider: '', ...extra });
  const netInputs = { cidr: '10.0.0.0/16', tags: { env: 'dev' } };
  const dbInputs = { sku: 'basic', password: BLINDED, admin: { user: 'sa', password: BLINDED }, keys: [BLINDED, 'public-key'], connection: BLINDED };
  const stackOutputs = { database: { host: 'db-1', password: BLINDED } };

  const events = (planning: boolean) => {
    sequence = 0;
    const id = (value: string) => (planning ? '' : value);
    const stackStep = metadata('create', stackUrn, STACK_TYPE, { new: state(stackUrn, STACK_TYPE, { custom: false, parent: '' }) });
    const net = metadata('create', netUrn, NET, { new: state(netUrn, NET, { inputs: netInputs }) });
    const db = metadata('create', dbUrn, DB, { new: state(dbUrn, DB, { inputs: dbInputs }) });
    const outputs = { ...stackStep, new: { ...stackStep.new!, outputs: stackOutputs } };
    return [
      event({ resourcePreEvent: { metadata: stackStep, planning } }),
      event({ resourcePreEvent: { metadata: net, planning } }),
      event({ resOutputsEvent: { metadata: { ...net, new: { ...net.new!, id: id('net-1') } }, planning } }),
      event({ resourcePreEvent: { metadata: db, planning } }),
      event({ resOutputsEvent: { metadata: { ...db, new: { ...db.new!, id: id('db-1') } }, planning } }),
      event({ resOutputsEvent: { metadata: outputs, planning } }),
      event({ summaryEvent: { maybeCorrupt: false, durationSeconds: 1, resourceChanges: { create: 3 }, policyPacks: {} } }),
    ];
  };
  const updatePlan = parseUpdatePlan({
    manifest: { time: '2026-01-01T00:00:00Z', magic: 'm', version: 'v3.248.0' },
    config: { 'shop:dbPassword': { secure: 'v1:cipher' } },
    resourcePlans: {
      [stackUrn]: { goal: { type: STACK_TYPE, name: `${PROJECT}-${stack}`, custom: false, protect: false }, steps: ['create'] },
      [netUrn]: { goal: { type: NET, name: 'net', custom: true, protect: false, parent: stackUrn }, steps: ['create'] },
      [dbUrn]: { goal: { type: DB, name: 'db', custom: true, protect: false, parent: stackUrn, dependencies: [netUrn] }, steps: ['create'] },
    },
  });
  // What the Automation API reads with --show-secrets: the object output is not flagged, its password in plaintext.
  const upOutputs: OutputMap = { database: { value: { host: 'db-1', password: SECRETS.password }, secret: false } };
  // What Pulumi put in the target: every secret resolved.
  const inTarget = {
    net: { urn: netUrn, type: NET, properties: netInputs },
    db: {
      urn: dbUrn,
      type: DB,
      properties: { sku: 'basic', password: SECRETS.password, admin: { user: 'sa', password: SECRETS.admin }, keys: [SECRETS.key, 'public-key'], connection: { host: 'db-1', password: SECRETS.connection } },
    },
  };
  return { events, updatePlan, upOutputs, inTarget, urns: { stack: stackUrn, net: netUrn, db: dbUrn }, unmanagedUrn: urn('local:compute:Service', 'debug-shell') };
}

function aRun(environmentId: string, stack: string, at: Date): Run {
  return {
    id: `run-${environmentId}`,
    seq: 1,
    promotionId: `promotion-${environmentId}`,
    tenant: 'tenant-a',
    environment: { id: environmentId, name: 'development', tier: 'development' },
    release: { name: 'shop', version: '1.0.0' },
    project: PROJECT,
    stack,
    desiredState: { repository: 'https://git.example.com/shop.git', commit: 'a'.repeat(40), path: 'shop' },
    requestedBy: 'delivery-host',
    reason: 'promotion',
    state: 'applied',
    createdAt: at,
    updatedAt: at,
    finishedAt: at,
  };
}

describe.each(DIALECTS)('secrets marked by the pulumi runner, through a scan, on %s', (dialect) => {
  const harness = inventoryOnDialect(dialect);

  it.skipIf(skipDialect(dialect))('when a pulumi apply marked secrets and the target holds their values, then no stored, served or published byte holds one', async () => {
    const { server, database, clock, inventory, cloud } = harness;
    // Arrange: the apply, through the mapping, as the pulumi runner makes it.
    const environmentId = `env-pulumi-${dialect}`;
    const environment = { tenant: 'tenant-a', id: environmentId };
    const stack = `shop-${dialect}`;
    const stackRef = { tenant: 'tenant-a', project: PROJECT, stack };
    const recorded = recording(stack);
    const plan = planFromPreview({ stack, project: PROJECT, baseSerial: 0, events: recorded.events(true), updatePlan: recorded.updatePlan, changeSummary: { create: 3 }, references: [{ secretRef: 'broker://shop/db' }] });
    const result = applyResultFromUp({
      plan,
      approvedDigest: plan.digest,
      events: recorded.events(false),
      result: { outputs: recorded.upOutputs },
      serial: 1,
      secrets: [SECRETS.password, SECRETS.admin, SECRETS.key, SECRETS.connection],
      startedAt: clock.now().toISOString(),
      finishedAt: clock.now().toISOString(),
    });
    expect(result.status).toBe('applied');
    for (const r of Object.values(recorded.inTarget)) await cloud.create('local', { scope: 'tenant-a', ...r });

    // Act: SpecificationApplied as provisioning publishes it, recorded by inventory; the target changed out of band
    // (a sku, the secret rotated) and holds a resource nobody declared; a scan.
    const [published] = await appendToOutbox(database.store.db, [specificationAppliedOf(aRun(environmentId, stack, clock.now()), 'https://git.example.com/shop.git', result)], clock, randomIds);
    expect(await inventory.recordSpecification({ id: published!.id, time: published!.time, data: published!.data })).toEqual({ outcome: 'recorded', environment });
    const db = (await cloud.listStack('local', stackRef)).find((r) => r.urn === recorded.urns.db)!;
    await cloud.update('local', db.id, { ...recorded.inTarget.db.properties, sku: 'premium', password: SECRETS.rotated });
    await cloud.create('local', { scope: 'tenant-a', urn: recorded.unmanagedUrn, type: 'local:compute:Service', properties: { name: 'debug-shell', token: SECRETS.unmanaged } });
    const scan = await inventory.scan(environment, { kind: 'manual', by: 'operator-1' });

    // Assert: no byte of what inventory stored, serves or published holds a value.
    expect(scan).toMatchObject({ outcome: 'completed', driftStatus: 'drifted' });
    const view = await inventory.inventory(ALL, environmentId, { limit: 1000 });
    const drift = await inventory.drift(ALL, environmentId);
    const proposals = await inventory.listProposals(ALL, { limit: 100, environment: environmentId });
    expect(proposals.items).toHaveLength(1);
    const served = JSON.stringify([
      view,
      drift,
      proposals,
      await inventory.getProposal(ALL, proposals.items[0]!.id),
      await inventory.getEnvironment(ALL, environmentId),
      await inventory.listEnvironments(ALL, { limit: 100 }),
    ]);
    const stored = await storedBytes(database.store, server.connectionString, { exceptTables: ['local_cloud_resources'] });
    const outbox = await database.store.db.selectFrom('outbox').select(['payload']).execute();
    const types = outbox.map((row) => (JSON.parse(String(row.payload)) as { type: string }).type);
    expect(types).toEqual(expect.arrayContaining(['SpecificationApplied', 'RuntimeDriftDetected', 'ReconciliationProposed']));
    expect(stored.tables).toContain(recorded.urns.db);
    for (const [name, value] of Object.entries(SECRETS)) {
      expect(served, `served: ${name}`).not.toContain(value);
      expect(stored.sql, `SQL store: ${name}`).not.toContain(value);
      expect(stored.tables, `Table storage: ${name}`).not.toContain(value);
      expect(JSON.stringify(outbox), `published: ${name}`).not.toContain(value);
    }

    // What the scan shows instead: the drift it can see, and the marker at every secret path.
    const findings = drift.findings.flatMap((g) => g.findings.map((f) => (f.kind === 'modified' ? `${f.kind} ${f.urn} ${f.path.join('.')}` : `${f.kind} ${f.urn}`)));
    expect(findings).toEqual([`missing ${recorded.urns.stack}`, `modified ${recorded.urns.db} sku`, `unmanaged ${recorded.unmanagedUrn}`]);
    expect(view.items.find((r) => r.urn === recorded.urns.db)?.properties).toEqual({
      sku: 'premium',
      password: '[secret]',
      admin: { user: 'sa', password: '[secret]' },
      keys: ['[secret]', 'public-key'],
      connection: '[secret]',
    });
    expect(view.items.find((r) => r.urn === recorded.unmanagedUrn)?.properties).toEqual({});
    // The search could have found them: the target holds each one.
    const target = JSON.stringify(await cloud.listStack('local', stackRef));
    for (const value of [SECRETS.rotated, SECRETS.admin, SECRETS.key, SECRETS.connection, SECRETS.unmanaged]) expect(target).toContain(value);
  });
});
