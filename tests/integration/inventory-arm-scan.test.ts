import { describe, expect, it } from 'vitest';
import type { ObservationScope } from '../../shared/inventory/observer';
import { DIALECTS, skipDialect } from '../support/databases';
import { inventoryOnDialect } from '../support/inventory-harness';
import { armObserver, bodyOf, planDeclared, present, publishedArm, recordedListing, urnOf, webAppDeclared, webGroup, type Declared } from '../support/published-arm';

/**
 * Drift scans of an Azure target end to end (issue 18, item 5): the desired state arrives as provisioning publishes
 * it (`SpecificationApplied`, each resource with the ARM id its stack state gives it and its inputs), is recorded by
 * inventory, and a scan observes the target through the ARM observer, against ARM as Microsoft published it
 * (tests/support/published-arm.ts), stores what it saw in Table storage and records the drift, on SQLite and PostgreSQL.
 */
const ALL = { kind: 'all' } as const;
const SITE = urnOf({ name: 'site', type: 'azure-native:web:WebApp' });
const PLAN = urnOf({ name: 'plan', type: 'azure-native:web:AppServicePlan' });

/** The `data` of a `SpecificationApplied` (run-events.ts `specificationAppliedOf`) of stack `dev` of project `app`. */
function specificationApplied(runId: string, tenant: string, resources: readonly Declared[]) {
  return {
    runId,
    trigger: 'promotion',
    promotionId: `promotion-${runId}`,
    tenantId: tenant,
    environment: { id: 'env-web', name: 'development', tier: 'development' },
    release: { name: 'web', version: '1.0.0' },
    project: 'app',
    stack: 'dev',
    qualifiedStack: `${tenant}/app/dev`,
    desiredState: { repository: 'https://git.example.test/web.git', commit: 'a'.repeat(40), path: 'infra' },
    planDigest: `sha256:${'0'.repeat(64)}`,
    resources: [
      // The stack itself and its default provider come with every Pulumi apply: no ARM resources, not this observer's.
      { urn: 'urn:pulumi:dev::app::pulumi:pulumi:Stack::app-dev', type: 'pulumi:pulumi:Stack', name: 'app-dev', op: 'same', properties: {} },
      { urn: 'urn:pulumi:dev::app::pulumi:providers:azure-native::default', type: 'pulumi:providers:azure-native', name: 'default', op: 'same', id: '0f2a1c0b-e1b2-47ce-a082-e725693d7d43', properties: {} },
      ...resources.map((r) => ({ urn: urnOf(r), type: r.type, name: r.name, op: 'same', ...(r.id ? { id: r.id } : {}), properties: r.inputs })),
    ],
    outputs: {},
  };
}

/** tenant-a's target holds Microsoft's web app and plan; tenant-b's is another subscription with an empty group of the same name. */
function publishedTargets() {
  const a = webGroup();
  const empty = recordedListing('pythonListing');
  const b = { subscriptionId: empty.subscriptionId, resourceGroup: a.resourceGroup, listing: empty.body };
  return { a, b, arm: publishedArm([a, b], ['webApp', 'plan']) };
}
let published: ReturnType<typeof publishedTargets> | undefined;
const targets = () => (published ??= publishedTargets());

describe.skipIf(!present).each(DIALECTS)('drift scans of an Azure resource group on %s', (dialect) => {
  // The published ARM is read when a test asks for it: a describe body runs even when its tests are skipped.
  const arm = armObserver({ sendRequest: (request) => targets().arm.httpClient.sendRequest(request) });
  const harness = inventoryOnDialect(dialect, {
    observers: new Map([['azure-tenant-a', arm], ['azure-tenant-b', arm]]),
    scopeOf: (environment): ObservationScope => {
      const { subscriptionId, resourceGroup } = environment.tenant === 'tenant-a' ? targets().a : targets().b;
      return { tenant: environment.tenant, environmentId: environment.id, stack: environment.stack, target: `azure-${environment.tenant}`, azure: { subscriptionId, resourceGroup } };
    },
  });
  const record = (runId: string, tenant: string, resources: readonly Declared[]) =>
    harness.inventory.recordSpecification({ id: `event-${runId}`, time: harness.clock.now().toISOString(), data: specificationApplied(runId, tenant, resources) });

  it.skipIf(skipDialect(dialect))(
    'when an applied web app and plan are scanned, then they are in sync, the inventory holds what the program sets; when the program then wants HTTPS only, the scan finds that one drift',
    async () => {
      // Arrange
      await record('run-1', 'tenant-a', [webAppDeclared(), planDeclared()]);

      // Act
      const first = await harness.inventory.scan({ tenant: 'tenant-a', id: 'env-web' }, { kind: 'manual', by: 'test' });

      // Assert
      expect(first).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync', resources: 2, findings: 0 });
      const { items } = await harness.inventory.inventory({ kind: 'one', tenant: 'tenant-a' } as const, 'env-web', { limit: 10 });
      const site = items.find((r) => r.urn === SITE)!;
      expect(site).toMatchObject({ type: 'azure-native:web:WebApp', id: bodyOf('webApp').id });
      expect(Object.keys(site.properties ?? {}).sort()).toEqual(['clientAffinityEnabled', 'httpsOnly', 'kind', 'location', 'serverFarmId', 'siteConfig']);

      // Act: a newer desired state.
      harness.clock.advance(60_000);
      await record('run-2', 'tenant-a', [webAppDeclared({ httpsOnly: true }), planDeclared()]);
      const second = await harness.inventory.scan({ tenant: 'tenant-a', id: 'env-web' }, { kind: 'manual', by: 'test' });

      // Assert
      expect(second).toMatchObject({ outcome: 'completed', driftStatus: 'drifted', findings: 1 });
      const drift = await harness.inventory.drift(ALL, 'env-web');
      expect(drift.findings.flatMap((g) => g.findings)).toEqual([{ kind: 'modified', severity: 'medium', urn: SITE, type: 'azure-native:web:WebApp', path: ['httpsOnly'], desired: true, observed: false }]);
      expect(drift.findings.map((g) => g.urn)).not.toContain(PLAN);
    },
  );

  it.skipIf(skipDialect(dialect))("when another tenant has the same environment, names and urns on its own target, then its scan sees its own empty group: both resources missing, tenant-a's untouched", async () => {
    // Arrange
    const { a, b } = targets();
    const inB = (d: Declared): Declared => ({ ...d, id: d.id!.replace(a.subscriptionId, b.subscriptionId) });
    await record('run-b', 'tenant-b', [inB(webAppDeclared()), inB(planDeclared())]);
    const before = await harness.inventory.drift({ kind: 'one', tenant: 'tenant-a' } as const, 'env-web');

    // Act
    const scanned = await harness.inventory.scan({ tenant: 'tenant-b', id: 'env-web' }, { kind: 'manual', by: 'test' });

    // Assert
    expect(scanned).toMatchObject({ outcome: 'completed', driftStatus: 'drifted', resources: 0 });
    const drift = await harness.inventory.drift({ kind: 'one', tenant: 'tenant-b' } as const, 'env-web');
    expect(drift.findings.flatMap((g) => g.findings).map((f) => [f.kind, f.urn])).toEqual([
      ['missing', PLAN],
      ['missing', SITE],
    ]);
    expect((await harness.inventory.drift({ kind: 'one', tenant: 'tenant-a' } as const, 'env-web')).fingerprint).toBe(before.fingerprint);
  });
});
